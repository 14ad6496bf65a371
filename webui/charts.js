// charts.js - the session's time series, drawn with uPlot.
//
// Two charts share one time axis: memory (bytes in blocks, committed, RSS,
// large cache bytes) and operations per second (allocations, frees, remote
// frees).  The server gives counters, not rates: a rate is the difference
// of two polls over the time between them, computed here.  A counter that
// goes down means the counters started again (a new process on the same
// port): that interval gets no rate and a "restart" mark.  `frees` is
// derived on the server (allocations minus live blocks) and may dip by a
// few between two reads; a negative difference of one series is left out
// of that series only.
//
// Marks are vertical lines: a knob that changed between two polls (from
// /config), a restart, the process going away.  When polls stop (paused,
// hidden tab, process gone), a null point breaks the lines, so a gap is
// never drawn as data.
//
// The number of points is on each chart's element as data-points (the
// browser test reads it); past MAX_POINTS the older half is thinned.

import {bytes, short} from './format.js';

const MAX_POINTS = 20000;
const HEIGHT = 220;

const MEM_SERIES = [
  {key: 'bytes_in_blocks', label: 'bytes in blocks', stroke: '#2563eb'},
  {key: 'bytes_committed', label: 'committed', stroke: '#16a34a'},
  {key: 'rss_bytes', label: 'RSS (process)', stroke: '#9333ea'},
  {key: 'large_cache_bytes', label: 'large cache', stroke: '#ea580c'},
];
const OPS_SERIES = [
  {key: 'allocs', label: 'allocations/s', stroke: '#2563eb'},
  {key: 'frees', label: 'frees/s', stroke: '#16a34a', dash: [6, 4]}, // dashed: it often covers allocations
  {key: 'remote_frees', label: 'remote frees/s', stroke: '#dc2626'},
];
const TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 28800, 86400, 172800, 604800];
const MARK_COLOURS = {knob: '#d97706', restart: '#dc2626', gone: '#6b7280'};

export class Timeline {
  constructor() {
    this.t = [];
    this.mem = MEM_SERIES.map(() => []);
    this.ops = OPS_SERIES.map(() => []);
    this.prev = null; // {t, counters} of the last poll
    this.broken = false; // polls stopped since the last point
    this.marks = []; // {t, kind, label}
  }

  // Rates between the previous poll and this one; null where not known.
  rates(t, st) {
    const p = this.prev;
    const out = {reset: false, values: OPS_SERIES.map(() => null), decommit: null};
    if (p === null || t <= p.t) return out;
    if (st.allocs < p.st.allocs) {
      out.reset = true;
      return out;
    }
    const dt = t - p.t;
    out.values = OPS_SERIES.map((s) => {
      const d = st[s.key] - p.st[s.key];
      return d >= 0 ? d / dt : null;
    });
    const dd = st.bytes_decommitted_total - p.st.bytes_decommitted_total;
    out.decommit = dd >= 0 ? dd / dt : null;
    return out;
  }

  // Adds a poll's /stats taken at t (seconds); returns the rates.
  add(t, st) {
    const r = this.rates(t, st);
    if (r.reset) this.mark(t, 'restart', 'counters restarted');
    if (this.broken && this.t.length) this.push(t - 0.001, MEM_SERIES.map(() => null), r.values.map(() => null));
    this.broken = false;
    this.push(t, MEM_SERIES.map((s) => (st[s.key] === undefined ? null : st[s.key])), r.values);
    this.prev = {t, st};
    return r;
  }

  push(t, mem, ops) {
    this.t.push(t);
    mem.forEach((v, i) => this.mem[i].push(v));
    ops.forEach((v, i) => this.ops[i].push(v));
    if (this.t.length > MAX_POINTS) this.thin();
  }

  // Every other point of the older half goes.
  thin() {
    const half = this.t.length >> 1;
    const keep = (a) => a.filter((_, i) => i >= half || i % 2 === 0);
    this.t = keep(this.t);
    this.mem = this.mem.map(keep);
    this.ops = this.ops.map(keep);
  }

  // Polls stopped (paused, hidden, gone): the next point starts a new line.
  gap() {
    this.broken = true;
  }

  mark(t, kind, label) {
    this.marks.push({t, kind, label});
  }
}

// A uPlot plugin drawing the marks as dashed vertical lines with a label.
function marksPlugin(timeline) {
  const draw = (u) => {
    const {ctx} = u;
    const {left, top, width, height} = u.bbox;
    const dpr = window.devicePixelRatio || 1;
    ctx.save();
    ctx.lineWidth = dpr;
    ctx.setLineDash([4 * dpr, 3 * dpr]);
    ctx.font = 10 * dpr + 'px system-ui, sans-serif';
    timeline.marks.forEach((m, i) => {
      const x = Math.round(u.valToPos(m.t, 'x', true));
      if (x < left || x > left + width) return;
      ctx.strokeStyle = ctx.fillStyle = MARK_COLOURS[m.kind] || '#6b7280';
      ctx.beginPath();
      ctx.moveTo(x, top);
      ctx.lineTo(x, top + height);
      ctx.stroke();
      const w = ctx.measureText(m.label).width; // to the left of the line near the right edge
      const tx = x + 3 * dpr + w > left + width ? x - 3 * dpr - w : x + 3 * dpr;
      ctx.fillText(m.label, tx, top + (11 + 11 * (i % 4)) * dpr);
    });
    ctx.restore();
  };
  return {hooks: {draw: [draw]}};
}

function options(series, fmt, timeline, width) {
  return {
    width,
    height: HEIGHT,
    plugins: [marksPlugin(timeline)],
    scales: {x: {time: true}, y: {range: (u, min, max) => [0, max > 0 ? max * 1.08 : 1]}},
    series: [{label: 'time'}].concat(
      series.map((s) => ({label: s.label, stroke: s.stroke, dash: s.dash, width: 1.5, value: (u, v) => (v === null ? '-' : fmt(v))})),
    ),
    // whole seconds and up on the time axis (uPlot would tick at 0.5 s on a short session)
    axes: [{space: 70, incrs: TIME_STEPS}, {size: 72, values: (u, vals) => vals.map(fmt)}],
    legend: {live: true},
    cursor: {drag: {x: false, y: false}},
  };
}

export class Charts {
  constructor(memEl, opsEl, timeline) {
    this.timeline = timeline;
    this.els = [memEl, opsEl];
    const w = (e) => Math.max(300, e.clientWidth);
    this.mem = new window.uPlot(options(MEM_SERIES, bytes, timeline, w(memEl)), this.data().mem, memEl);
    this.ops = new window.uPlot(options(OPS_SERIES, (v) => short(v) + '/s', timeline, w(opsEl)), this.data().ops, opsEl);
    const ro = new ResizeObserver(() => {
      this.mem.setSize({width: w(memEl), height: HEIGHT});
      this.ops.setSize({width: w(opsEl), height: HEIGHT});
    });
    this.els.forEach((e) => ro.observe(e));
  }

  data() {
    const tl = this.timeline;
    return {mem: [tl.t].concat(tl.mem), ops: [tl.t].concat(tl.ops)};
  }

  update() {
    const d = this.data();
    this.mem.setData(d.mem);
    this.ops.setData(d.ops);
    const n = this.timeline.t.length;
    const marks = this.timeline.marks.length;
    this.els.forEach((e) => {
      e.dataset.points = n;
      e.dataset.marks = marks;
    });
  }

  // Redraw without new data (a mark was added).
  redraw() {
    this.mem.redraw(false);
    this.ops.redraw(false);
    this.els.forEach((e) => (e.dataset.marks = this.timeline.marks.length));
  }
}

export {MEM_SERIES, OPS_SERIES};
