// timeline.js - the series the charts draw, and the marks on them.
//
// The process keeps its own record (/history: every figure, sampled by the
// server's thread every introspect.history_interval; docs/introspection.md),
// so the page loads the whole run when it opens and then appends what was
// sampled since its last read: a page opened hours into a soak shows all of
// it, and a tab that slept gets the missed samples when it wakes.  A reply
// is in parts, coarsest (oldest) first: raw samples for the last hour, then
// one point a minute (with the minimum and maximum of the minute), then one
// every 10 minutes.  A coarse point's line value is its last sample; its
// min..max is kept beside it and drawn as a band, so a spike inside a
// minute still shows.
//
// Rates come from the counters: the difference between two points over the
// time between them (for coarse points, the average over the bucket).  A
// counter that goes down means the counters started again (a new process
// on the same port): that interval has no rate.
//
// A process without /history (introspect.history = false, or an older
// sefer) falls back to the page's own polls (addPoll), as before: then the
// series start when the page opened, and a gap breaks the lines wherever
// polls stopped.
//
// Marks are vertical lines: the process's events (/events: knob changes,
// ENOMEM, guard detections, ring overflows, trims, the server starting),
// and the page's own (a restart, the process going away).

export const MEM_SERIES = [
  {key: 'bytes_in_blocks', label: 'bytes in blocks', stroke: '#2563eb'},
  {key: 'bytes_committed', label: 'committed', stroke: '#16a34a'},
  {key: 'rss_bytes', label: 'RSS (process)', stroke: '#9333ea'},
  {key: 'large_cache_bytes', label: 'large cache', stroke: '#ea580c'},
];
export const OPS_SERIES = [
  {key: 'allocs', label: 'allocations/s', stroke: '#2563eb'},
  {key: 'frees', label: 'frees/s', stroke: '#16a34a', dash: [6, 4]}, // dashed: it often covers allocations
  {key: 'remote_frees', label: 'remote frees/s', stroke: '#dc2626'},
];
// What the page asks /history for.
export const HISTORY_FIELDS = MEM_SERIES.concat(OPS_SERIES).map((s) => s.key);

// Past this many points the polled series thin their older half; a history
// that grows past it is read again from the server, which keeps the older
// part at a coarser step.
export const MAX_POINTS = 20000;

export class Timeline {
  constructor() {
    this.reset();
    this.marks = []; // {t (s), kind, label}
    this.spans = []; // the process's phases (/phases): {from, to (s; null: still open), name}
  }

  // The phases from a /phases reply: those that ended (the process keeps
  // the last 64) and those still open, outermost first.
  setSpans(ph) {
    this.spans = ph.ended.map((p) => ({from: p.start_ms / 1000, to: p.end_ms / 1000, name: p.name, depth: p.depth}))
        .concat(ph.open.map((p) => ({from: p.start_ms / 1000, to: null, name: p.name, depth: p.depth})));
  }

  reset() {
    this.t = []; // seconds
    this.mem = MEM_SERIES.map(() => []);
    this.lo = MEM_SERIES.map(() => []); // a coarse point's minimum (null for a sample)
    this.hi = MEM_SERIES.map(() => []); // and maximum
    this.step = []; // seconds a point covers
    this.ops = OPS_SERIES.map(() => []);
    this.prev = null; // {t, st}: counters of the last point
    this.broken = false; // polls stopped since the last point (polled series only)
    this.source = null; // 'history' | 'polls'
    this.lastMs = 0; // the last history point's time (ms)
  }

  // ---- points ----

  // Rates between the previous point and one at t (s) with counters st.
  ratesTo(t, st) {
    const p = this.prev;
    if (p === null || t <= p.t || st.allocs < p.st.allocs) return {reset: p !== null && st.allocs < p.st.allocs, values: OPS_SERIES.map(() => null)};
    const dt = t - p.t;
    return {reset: false, values: OPS_SERIES.map((s) => {
      const d = st[s.key] - p.st[s.key];
      return d >= 0 ? d / dt : null;
    })};
  }

  push(t, mem, lo, hi, ops, step) {
    this.t.push(t);
    mem.forEach((v, i) => this.mem[i].push(v));
    lo.forEach((v, i) => this.lo[i].push(v));
    hi.forEach((v, i) => this.hi[i].push(v));
    ops.forEach((v, i) => this.ops[i].push(v));
    this.step.push(step);
  }

  // Every other point of the older half goes (polled series only: a history
  // is read again instead).
  thin() {
    const half = this.t.length >> 1;
    const keep = (a) => a.filter((_, i) => i >= half || i % 2 === 0);
    this.t = keep(this.t);
    this.step = keep(this.step);
    ['mem', 'lo', 'hi', 'ops'].forEach((k) => (this[k] = this[k].map(keep)));
  }

  // ---- from /history ----

  // A /history reply's parts, after whatever is there (a reply read from
  // the start replaces everything: clear first).  Points at or before the
  // last one are skipped.  Returns the number of points added.
  addHistory(h) {
    this.source = 'history';
    let added = 0;
    const nulls = MEM_SERIES.map(() => null);
    h.parts.forEach((part) => {
      const coarse = !!part.min;
      const col = (which, key) => (part[which] && part[which][key]) || [];
      const last = HISTORY_FIELDS.map((k) => col('last', k));
      const min = MEM_SERIES.map((s) => col('min', s.key));
      const max = MEM_SERIES.map((s) => col('max', s.key));
      part.t.forEach((ms, i) => {
        if (ms <= this.lastMs) return;
        const t = ms / 1000;
        const st = {};
        HISTORY_FIELDS.forEach((k, f) => (st[k] = last[f][i] === undefined ? null : last[f][i]));
        const r = this.ratesTo(t, st);
        if (r.reset) this.mark(t, 'restart', 'counters restarted');
        const mem = MEM_SERIES.map((s) => st[s.key]);
        this.push(t, mem, coarse ? min.map((c) => c[i]) : nulls, coarse ? max.map((c) => c[i]) : nulls, r.values, part.step_ms / 1000);
        this.prev = {t, st};
        this.lastMs = ms;
        added++;
      });
    });
    return added;
  }

  // ---- from the page's polls (no /history) ----

  addPoll(t, st) {
    this.source = 'polls';
    const r = this.ratesTo(t, st);
    if (r.reset) this.mark(t, 'restart', 'counters restarted');
    const nulls = MEM_SERIES.map(() => null);
    if (this.broken && this.t.length) this.push(t - 0.001, nulls, nulls, nulls, r.values.map(() => null), 0);
    this.broken = false;
    this.push(t, MEM_SERIES.map((s) => (st[s.key] === undefined ? null : st[s.key])), nulls, nulls, r.values, 0);
    this.prev = {t, st};
    if (this.t.length > MAX_POINTS) this.thin();
  }

  // Polls stopped (paused, hidden, gone): with polled series, the next point
  // starts a new line.  A history has no gaps to show.
  gap() {
    if (this.source !== 'history') this.broken = true;
  }

  // fromProcess: a mark of one of the process's events (/events)
  mark(t, kind, label, fromProcess = false) {
    this.marks.push({t, kind, label, fromProcess});
  }

  // Marks of the process's events go when the events are read again.
  clearMarks(fromProcess) {
    this.marks = this.marks.filter((m) => !!m.fromProcess !== fromProcess);
  }
}

// Rates between two polls of /stats, for the tiles (whatever the charts
// draw from).
export class PollRates {
  constructor() {
    this.prev = null;
  }

  // {reset, values: [allocs/s, frees/s, remote frees/s], decommit: bytes/s}
  add(t, st) {
    const p = this.prev;
    this.prev = {t, st};
    const out = {reset: false, values: OPS_SERIES.map(() => null), decommit: null};
    if (p === null || t <= p.t) return out;
    if (st.allocs < p.st.allocs) return {...out, reset: true};
    const dt = t - p.t;
    out.values = OPS_SERIES.map((s) => {
      const d = st[s.key] - p.st[s.key];
      return d >= 0 ? d / dt : null;
    });
    const dd = st.bytes_decommitted_total - p.st.bytes_decommitted_total;
    out.decommit = dd >= 0 ? dd / dt : null;
    return out;
  }
}
