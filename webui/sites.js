// sites.js - the Sites view: which code holds the memory (the heap
// profile: /profile/sites, /profile/stacks, POST /profile/mark;
// docs/introspection.md, docs/dashboard.md).
//
// Read every SITES_MS (5 s: the server records each site's history every
// 5 s, and naming frames costs the server more than a /stats), in a loop of
// its own that app.js stops and starts with the rest of the page (paused,
// tab hidden).  One round reads the top sites by live bytes, the stacks
// for the flame graph (flame.js) and, once a mark is set, the sites that
// grew most since it; only a round that read them all is drawn.
//
// The table: one row per site (a call stack), its innermost meaningful
// function (the first named frame that is not an allocation wrapper), its
// module, estimated live bytes and blocks, the samples behind them, the
// growth since the mark, and a sparkline of its live bytes over the
// server's history (the past 5 minutes, so a page opened late shows them
// too).  A click on a row shows its whole stack below the table (it stays
// shown across rounds).  "Set mark" sends POST /profile/mark with the
// token the page holds (the same as for knobs and Trim).  With profiling
// off (profile.sample_bytes = 0) the view says so and offers the knob.
//
// Everything from the process is shown as text (textContent, SVG
// attributes), never parsed as HTML.

import {Flame} from './flame.js';
import {bytes, count, clock, ago, el} from './format.js';

export const SITES_MS = 5000;
const TOP = 20; // rows in the table
const GROWTH_TOP = 50; // sites read by growth since the mark
const SVG = 'http://www.w3.org/2000/svg';

// Functions that only pass an allocation on: the meaningful frame is the
// one that called them.
const WRAPPERS = /^(operator new|operator new\[\]|__libc_|_?_?strn?dup$|x(m|c|re)alloc$|g_malloc|g_realloc|g_try_malloc|g_slice_alloc|PyMem_|PyObject_Malloc|_PyObject_|_PyMem_|__gnu_cxx::new_allocator|std::allocator|std::__new_allocator)/;

function frameName(f) {
  if (f.function) return f.function;
  if (f.module) return f.module.replace(/.*\//, '') + '+' + f.offset;
  return f.address;
}

// The function a reader would look at: the first named frame that is not
// an allocation wrapper (else the first named, else the first at all).
export function meaningfulFrame(frames) {
  return frames.find((f) => f.function && !WRAPPERS.test(f.function)) || frames.find((f) => f.function) || frames[0] || null;
}

function baseName(path) {
  return path ? path.replace(/.*\//, '') : 'n/a';
}

function signedBytes(n) {
  if (n === null || n === undefined) return 'n/a';
  return (n > 0 ? '+' : n < 0 ? '\u2212' : '\u00b1') + bytes(Math.abs(n));
}

// A sparkline of a site's history (live bytes, oldest first; null where
// the site was not among the server's top sites): an SVG polyline per run
// of known points, scaled from 0 to the largest point.
export function sparkline(history, ages) {
  const w = 120, h = 24, pad = 2;
  const svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute('width', w);
  svg.setAttribute('height', h);
  svg.setAttribute('viewBox', '0 0 ' + w + ' ' + h);
  svg.setAttribute('class', 'spark');
  svg.dataset.points = String(history.length);
  const known = history.filter((v) => v !== null);
  const max = Math.max(1, ...known);
  const n = history.length;
  const x = (i) => (n <= 1 ? w - pad : pad + (i * (w - 2 * pad)) / (n - 1));
  const y = (v) => h - pad - (v / max) * (h - 2 * pad);
  let run = [];
  const flush = () => {
    if (run.length === 1) { // a lone point: a dot
      const c = document.createElementNS(SVG, 'circle');
      c.setAttribute('cx', run[0][0]);
      c.setAttribute('cy', run[0][1]);
      c.setAttribute('r', 1.5);
      svg.append(c);
    } else if (run.length > 1) {
      const p = document.createElementNS(SVG, 'polyline');
      p.setAttribute('points', run.map(([a, b]) => a.toFixed(1) + ',' + b.toFixed(1)).join(' '));
      svg.append(p);
    }
    run = [];
  };
  history.forEach((v, i) => {
    if (v === null) flush();
    else run.push([x(i), y(v)]);
  });
  flush();
  const title = document.createElementNS(SVG, 'title');
  const span = ages && ages.length ? ' over the past ' + Math.round(ages[0] / 1000) + ' s' : '';
  title.textContent = known.length ? 'live bytes' + span + ': ' + bytes(Math.min(...known)) + ' to ' + bytes(max) +
      ', now ' + bytes(history[n - 1]) : 'no history yet';
  svg.append(title);
  return svg;
}

export class SitesView {
  // els: the elements of the Sites card (index.html); api: poll.js;
  // setKnob(name, value): app.js's POST /config (a promise of the reply).
  constructor(els, api, setKnob) {
    this.els = els;
    this.api = api;
    this.setKnob = setKnob;
    this.flame = new Flame(els.flame, els.flameNote);
    this.timer = 0;
    this.busy = false;
    this.running = false;
    this.selected = null; // the site whose stack is shown
    this.selectedSite = null; // its last figures
    this.order = 'live'; // or 'growth'
    this.markName = null; // the name of the last mark this page set
    this.writable = false; // the process has a token and the page holds one
    this.processHasToken = false; // (known from the first poll of /config)
    this.last = null; // the last round drawn: {live, growth, stacks, when}
    this.error = null;
    this.rounds = 0;
    els.body.addEventListener('click', (e) => {
      const tr = e.target.closest('tr.site');
      if (!tr) return;
      const id = Number(tr.dataset.site);
      this.selected = this.selected === id ? null : id;
      this.render();
    });
    els.order.addEventListener('change', () => {
      this.order = els.order.value;
      this.render();
    });
    els.markForm.addEventListener('submit', (e) => {
      e.preventDefault();
      this.mark();
    });
    els.onForm.addEventListener('submit', (e) => {
      e.preventDefault();
      this.turnOn();
    });
  }

  start() {
    if (this.running) return;
    this.running = true;
    this.round();
  }

  stop() {
    this.running = false;
    clearTimeout(this.timer);
    this.timer = 0;
  }

  // Now, not at the next tick (after a mark or a knob change).
  soon() {
    if (!this.running) return;
    clearTimeout(this.timer);
    this.timer = 0;
    this.round();
  }

  // app.js, each poll: may the page write (a token on both sides)?
  setWritable(processHasToken, pageHasToken) {
    this.writable = processHasToken && pageHasToken;
    this.processHasToken = processHasToken;
    this.renderControls();
  }

  async round() {
    if (!this.running || this.busy) return;
    this.busy = true;
    const t = 15000;
    const [live, stacks] = await Promise.all([
      this.api.get('/profile/sites?pretty=0&limit=' + TOP, t),
      this.api.get('/profile/stacks?pretty=0', t)]);
    let growth = null;
    if (live.ok && live.json.mark.set) growth = await this.api.get('/profile/sites?pretty=0&since=mark&limit=' + GROWTH_TOP, t);
    this.busy = false;
    if (!this.running) return; // stopped while the round was out: dropped
    const bad = [live, stacks, growth].find((r) => r && !r.ok);
    if (bad) {
      this.error = bad;
    } else {
      this.error = null;
      this.last = {live: live.json, stacks: stacks.json, growth: growth ? growth.json : null, when: Date.now()};
      this.rounds++;
    }
    this.render();
    this.timer = setTimeout(() => this.round(), SITES_MS);
  }

  render() {
    const e = this.els;
    e.card.classList.toggle('stale', !!this.error);
    e.card.dataset.rounds = String(this.rounds);
    if (this.error) {
      const r = this.error;
      e.error.hidden = false;
      e.error.textContent = 'The heap profile could not be read' + (r.kind === 'network' ? ': ' + r.error :
        ': ' + r.status + ' ' + r.error + (r.reason ? ': ' + r.reason : '')) +
          (this.last ? '. The figures are from ' + clock(this.last.when) + '.' : '.');
    } else {
      e.error.hidden = true;
    }
    if (!this.last) return;
    const {live, growth, stacks} = this.last;
    e.card.dataset.rate = String(live.rate);
    e.off.hidden = live.rate !== 0;
    this.renderSummary(live);
    this.renderControls();
    const rows = this.order === 'growth' && growth ? growth.sites.slice(0, TOP) : live.sites;
    this.renderTable(rows, live, growth);
    this.renderStack(rows.concat(growth ? growth.sites : []));
    this.flame.update(stacks);
  }

  renderSummary(live) {
    const t = live.totals;
    const parts = [];
    if (live.rate) parts.push('one sample per ' + bytes(live.rate) + ' allocated on average');
    else parts.push('profiling is off' + (t.samples ? ' (the figures are from when it was on)' : ''));
    parts.push(count(t.samples) + ' samples (' + count(t.live_samples) + ' live, ' + count(t.dropped) + ' dropped)');
    parts.push(count(t.sites) + ' sites');
    parts.push('estimated live ' + bytes(t.estimated_live_bytes) + ', exact bytes in blocks ' + bytes(t.bytes_in_blocks));
    parts.push('the profile takes ' + bytes(t.profile_bytes));
    this.els.summary.textContent = parts.join(' \u00b7 ');
    this.els.summary.classList.toggle('warn', t.dropped > 0);
  }

  renderControls() {
    const e = this.els;
    const live = this.last && this.last.live;
    const markSet = !!(live && live.mark.set);
    e.markButton.disabled = !this.writable;
    e.markNameInput.disabled = !this.writable;
    e.onButton.disabled = !this.writable;
    e.onValue.disabled = !this.writable;
    e.order.querySelector('option[value="growth"]').disabled = !markSet;
    if (!markSet && this.order === 'growth') this.order = e.order.value = 'live';
    let text;
    if (markSet) {
      const name = this.markName && this.markName.marks === live.mark.marks ? '\u201c' + this.markName.name + '\u201d' : 'mark ' + live.mark.marks;
      text = 'Growth is since ' + name + ', set ' + ago(Date.now() - live.mark.age_ms) + '.';
    } else {
      text = 'No mark yet: set one after warm-up; the growth column then shows what each site added since.';
    }
    if (!this.writable) {
      text += this.processHasToken ? ' Enter the token (top right) to set a mark.' :
        ' Setting a mark needs a token: start the process with SEFER_INTROSPECT_TOKEN=...';
    }
    e.markState.textContent = text;
    e.table.classList.toggle('no-mark', !markSet);
  }

  renderTable(rows, live, growth) {
    const byId = new Map(growth ? growth.sites.map((s) => [s.id, s]) : []);
    const trs = rows.map((s, i) => {
      const f = meaningfulFrame(s.frames) || {};
      const tr = el('tr', null, 'site' + (this.selected === s.id ? ' open' : ''));
      tr.dataset.site = s.id;
      tr.dataset.function = f.function || '';
      const fn = el('td', null, 'fn');
      fn.append(el('code', f.function ? f.function : frameName(f)));
      if (f.file) fn.append(el('div', baseName(f.file) + (f.line ? ':' + f.line : ''), 'dim small'));
      const mod = el('td', baseName(f.module), 'module');
      mod.title = f.module || '';
      const g = byId.get(s.id);
      const gv = g ? g.growth_bytes : s.growth_bytes;
      const gcell = el('td', gv === undefined ? '\u2014' : signedBytes(gv), 'num growth' + (gv > 0 ? ' up' : ''));
      if (gv === undefined) gcell.title = 'not among the ' + GROWTH_TOP + ' sites that grew most since the mark';
      const spark = el('td', null, 'spark-cell');
      spark.append(sparkline(s.history, live.history_ages_ms));
      tr.append(el('td', i + 1, 'num dim'), fn, mod, el('td', bytes(s.live_bytes), 'num'),
          el('td', count(s.live_objects), 'num'), el('td', count(s.live_samples) + ' / ' + count(s.samples), 'num'),
          gcell, spark);
      return tr;
    });
    if (!trs.length) {
      const tr = el('tr', null, 'empty');
      const td = el('td', live.rate ? 'No sampled block is live yet.' : 'No site recorded.', 'dim');
      td.colSpan = 8;
      tr.append(td);
      trs.push(tr);
    }
    this.els.body.replaceChildren(...trs);
  }

  renderStack(sites) {
    const box = this.els.stack;
    const s = sites.find((x) => x.id === this.selected);
    if (this.selected === null) {
      box.hidden = true;
      box.replaceChildren();
      this.selectedSite = null;
      return;
    }
    const gone = !s;
    const site = s || this.selectedSite;
    if (!site) {
      this.selected = null;
      box.hidden = true;
      return;
    }
    this.selectedSite = site;
    box.hidden = false;
    box.dataset.site = site.id;
    const f = meaningfulFrame(site.frames) || {};
    const head = el('h3', 'Site ' + site.id + ': ' + (f.function || frameName(f)) + (gone ? ' (no longer among the top sites)' : ''));
    const sub = el('p', 'live ' + bytes(site.live_bytes) + ' in ~' + count(site.live_objects) + ' blocks (' +
        count(site.live_samples) + ' live samples of ' + count(site.samples) + '); allocated ' + bytes(site.allocated_bytes) +
        ' in ~' + count(site.allocated_objects) + ' blocks since start. Innermost frame first; click the row again to close.', 'dim small');
    const t = el('table', null, 'grid frames');
    const hr = el('tr');
    ['#', 'function', 'module', 'file:line', 'address', 'offset'].forEach((c) => hr.append(el('th', c)));
    const thead = el('thead');
    thead.append(hr);
    const tbody = el('tbody');
    site.frames.forEach((fr, i) => {
      const tr = el('tr', null, 'frame');
      const fn = el('td');
      fn.append(el('code', fr.function || '?'));
      const mod = el('td', baseName(fr.module));
      mod.title = fr.module || '';
      tr.append(el('td', i, 'num dim'), fn, mod, el('td', fr.file ? fr.file + (fr.line ? ':' + fr.line : '') : 'n/a', fr.file ? '' : 'dim'),
          el('td', fr.address, 'mono'), el('td', fr.offset || 'n/a', 'mono'));
      tbody.append(tr);
    });
    t.append(thead, tbody);
    box.replaceChildren(head, sub, t);
  }

  async mark() {
    const e = this.els;
    const name = e.markNameInput.value.trim();
    e.markButton.disabled = true;
    this.show(e.markResult, null, 'marking...');
    const r = await this.api.request('/profile/mark' + (name ? '?name=' + encodeURIComponent(name) : ''), {method: 'POST', timeoutMs: 10000});
    e.markButton.disabled = !this.writable;
    if (r.ok) {
      this.markName = {name: r.json.name, marks: r.json.marks};
      e.markNameInput.value = '';
      this.show(e.markResult, true, 'marked \u201c' + r.json.name + '\u201d: ' + count(r.json.sites) + ' sites, ' +
          bytes(r.json.estimated_live_bytes) + ' estimated live');
      this.soon();
    } else {
      this.show(e.markResult, false, r.kind === 'network' ? 'no answer: ' + r.error : r.status + ' ' + r.error + ': ' + r.reason);
    }
    e.markResult.dataset.status = String(r.status);
  }

  async turnOn() {
    const e = this.els;
    const value = e.onValue.value.trim() || '512KiB';
    this.show(e.onResult, null, 'setting...');
    const r = await this.setKnob('profile.sample_bytes', value);
    if (r.ok) {
      this.show(e.onResult, true, 'profile.sample_bytes set to ' + bytes(r.json.value));
      this.soon();
    } else {
      this.show(e.onResult, false, r.kind === 'network' ? 'no answer: ' + r.error : r.status + ' ' + r.error + ': ' + r.reason);
    }
  }

  show(result, ok, text) {
    result.textContent = text;
    result.className = 'result' + (ok === true ? ' ok' : ok === false ? ' refused' : '');
  }
}
