// segmap.js - the segment map: one cell per segment, on a <canvas>.
//
// /segments is read in pages of PAGE segments (limit/offset) one after the
// other: a "sweep".  Segments are listed in id order, and one may be
// created or released between two pages, so a sweep keys them by id (a
// segment seen twice counts once) and keeps the server's last `total`
// beside its own count; with up to PAGE segments the sweep is one request
// and the two agree exactly.  The canvas's data-cells, data-total and
// data-sweeps attributes say what is drawn (the browser test reads them).
//
// A cell's colour is how full the segment is: bytes in blocks over its size
// (or over its committed bytes, or its kind: the "colour by" choice).  A
// corner triangle marks medium, large and huge segments; small ones are
// plain.  Hovering a cell shows the segment and its pages beside the map; a
// click pins it (the detail then follows that segment id across sweeps,
// and says when it has been released).
//
// Smooth with 10,000 segments: the cells are drawn into an offscreen canvas
// once per sweep (or resize, or change of colouring), with colours from a
// precomputed table; a frame (at most one per animation frame) copies that
// image and outlines the hovered and pinned cells.

import {bytes, count, percent, el} from './format.js';

const PAGE = 1000;
const RAMP = ['#f7fbff', '#c6dbef', '#6baed6', '#2171b5', '#08306b']; // empty -> full
const KIND = {small: null, medium: '#0d9488', large: '#ea580c', huge: '#c026d3'};
const KIND_FILL = {small: '#60a5fa', medium: '#0d9488', large: '#ea580c', huge: '#c026d3', unknown: '#9ca3af'};
const MAX_HEIGHT = 480;

function mix(a, b, f) {
  const p = (h) => [1, 3, 5].map((i) => parseInt(h.slice(i, i + 2), 16));
  const [x, y] = [p(a), p(b)];
  return 'rgb(' + x.map((v, i) => Math.round(v + (y[i] - v) * f)).join(',') + ')';
}

// Colour of a fullness 0..1 along RAMP.
function rampAt(f) {
  const x = f * (RAMP.length - 1);
  const i = Math.min(RAMP.length - 2, Math.floor(x));
  return mix(RAMP[i], RAMP[i + 1], x - i);
}
const RAMP_STEPS = 100;
const RAMP_TABLE = Array.from({length: RAMP_STEPS + 1}, (_, i) => rampAt(i / RAMP_STEPS));

export function rampColour(f) {
  return RAMP_TABLE[Math.round(Math.min(1, Math.max(0, f || 0)) * RAMP_STEPS)];
}

// Reads every page of /segments; resolves to {segments, total} or a refusal.
export async function sweep(get) {
  const byId = new Map();
  let total = 0;
  for (let offset = 0; ; offset += PAGE) {
    const r = await get('/segments?limit=' + PAGE + '&offset=' + offset + '&pretty=0');
    if (!r.ok) return r;
    total = r.json.total;
    r.json.segments.forEach((s) => byId.set(s.id, s));
    if (r.json.returned < PAGE || offset + PAGE >= total) break;
  }
  const segments = Array.from(byId.values()).sort((a, b) => a.id - b.id);
  return {ok: true, segments, total};
}

export class SegMap {
  constructor(canvas, detail, legend, colourBy) {
    this.canvas = canvas;
    this.detail = detail;
    this.colourBy = colourBy;
    this.segments = [];
    this.total = 0;
    this.sweeps = 0;
    this.cell = 16;
    this.cols = 1;
    this.hover = -1;
    this.pinned = null; // segment id
    this.heapNames = new Map(); // slot -> "tid name"
    this.frame = 0;
    this.base = document.createElement('canvas'); // the cells, drawn once per change
    this.dirty = true;
    this.drawLegend(legend);
    canvas.addEventListener('mousemove', (e) => this.onMove(e));
    canvas.addEventListener('mouseleave', () => this.setHover(-1));
    canvas.addEventListener('click', (e) => this.onClick(e));
    colourBy.addEventListener('change', () => this.invalidate());
    new ResizeObserver(() => this.invalidate()).observe(canvas.parentElement);
  }

  set(segments, total) {
    this.segments = segments;
    this.total = total;
    this.sweeps++;
    this.canvas.dataset.cells = segments.length;
    this.canvas.dataset.total = total;
    this.canvas.dataset.sweeps = this.sweeps;
    this.invalidate();
    this.showDetail();
  }

  invalidate() {
    this.dirty = true;
    this.request();
  }

  // ---- layout and drawing ----

  layout() {
    const width = Math.max(200, this.canvas.parentElement.clientWidth - 2);
    const n = Math.max(1, this.segments.length);
    let cell = 18;
    while (cell > 3 && Math.ceil(n / Math.floor(width / cell)) * cell > MAX_HEIGHT) cell--;
    this.cell = cell;
    this.cols = Math.max(1, Math.floor(width / cell));
    const rows = Math.ceil(this.segments.length / this.cols);
    return {width: this.cols * cell, height: Math.max(cell, rows * cell)};
  }

  request() {
    if (!this.frame) this.frame = requestAnimationFrame(() => this.draw());
  }

  fill(s) {
    const by = this.colourBy.value;
    if (by === 'kind') return KIND_FILL[s.kind] || KIND_FILL.unknown;
    const of = by === 'committed' ? s.committed : s.size;
    return rampColour(of > 0 ? s.used_bytes / of : 0);
  }

  // One frame: the cells' image, then the outlines.
  draw() {
    this.frame = 0;
    const {width, height} = this.layout();
    const dpr = window.devicePixelRatio || 1;
    const c = this.canvas;
    if (c.width !== width * dpr || c.height !== height * dpr) {
      c.width = this.base.width = width * dpr;
      c.height = this.base.height = height * dpr;
      c.style.width = width + 'px';
      c.style.height = height + 'px';
      this.dirty = true;
    }
    const size = this.cell - (this.cell >= 6 ? 1 : 0);
    if (this.dirty) this.drawCells(width, height, dpr, size);
    const ctx = c.getContext('2d');
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.clearRect(0, 0, c.width, c.height);
    ctx.drawImage(this.base, 0, 0);
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    this.outline(ctx, this.hover, '#111827', size);
    this.outline(ctx, this.indexOf(this.pinned), '#dc2626', size);
  }

  drawCells(width, height, dpr, size) {
    this.dirty = false;
    const ctx = this.base.getContext('2d');
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, height);
    this.segments.forEach((s, i) => this.drawCell(ctx, s, i, size));
  }

  drawCell(ctx, s, i, size) {
    const x = (i % this.cols) * this.cell;
    const y = Math.floor(i / this.cols) * this.cell;
    ctx.fillStyle = this.fill(s);
    ctx.fillRect(x, y, size, size);
    const mark = KIND[s.kind];
    if (mark && this.colourBy.value !== 'kind' && size >= 4) {
      const t = Math.max(3, Math.round(size / 2));
      ctx.fillStyle = mark;
      ctx.beginPath();
      ctx.moveTo(x, y);
      ctx.lineTo(x + t, y);
      ctx.lineTo(x, y + t);
      ctx.fill();
    }
  }

  outline(ctx, i, colour, size) {
    if (i < 0 || i >= this.segments.length) return;
    ctx.strokeStyle = colour;
    ctx.lineWidth = 2;
    ctx.strokeRect((i % this.cols) * this.cell + 1, Math.floor(i / this.cols) * this.cell + 1, size - 2 > 0 ? size - 2 : 1, size - 2 > 0 ? size - 2 : 1);
  }

  drawLegend(legend) {
    legend.replaceChildren();
    const ramp = el('span', null, 'ramp');
    [0, 0.25, 0.5, 0.75, 1].forEach((f) => {
      const sw = el('span', null, 'swatch ramp-' + Math.round(f * 4));
      ramp.append(sw);
    });
    legend.append(el('span', 'empty'), ramp, el('span', 'full'));
    Object.entries(KIND).forEach(([k, c]) => {
      legend.append(el('span', null, 'kind-mark kind-' + k), el('span', k + (c ? '' : ' (plain)')));
    });
  }

  // ---- hover, click, detail ----

  indexAt(e) {
    const r = this.canvas.getBoundingClientRect();
    const col = Math.floor((e.clientX - r.left) / this.cell);
    const row = Math.floor((e.clientY - r.top) / this.cell);
    const i = row * this.cols + col;
    return col >= 0 && col < this.cols && i >= 0 && i < this.segments.length ? i : -1;
  }

  indexOf(id) {
    if (id === null) return -1;
    return this.segments.findIndex((s) => s.id === id);
  }

  onMove(e) {
    this.setHover(this.indexAt(e));
  }

  setHover(i) {
    if (i === this.hover) return;
    this.hover = i;
    this.request();
    this.showDetail();
  }

  onClick(e) {
    const i = this.indexAt(e);
    const id = i >= 0 ? this.segments[i].id : null;
    this.pinned = id === this.pinned ? null : id;
    this.request();
    this.showDetail();
  }

  showDetail() {
    const pinnedAt = this.indexOf(this.pinned);
    const i = this.hover >= 0 ? this.hover : pinnedAt;
    this.detail.replaceChildren();
    if (i < 0 && this.pinned !== null) {
      this.detail.append(el('p', 'Segment ' + this.pinned + ' has been released (it is in no later sweep).', 'note'));
      return;
    }
    if (i < 0) {
      this.detail.append(el('p', 'Hover over a cell for its segment and pages; click to pin it.', 'note'));
      return;
    }
    this.detail.append(...segmentDetail(this.segments[i], this.heapNames, i === pinnedAt));
  }
}

function row(dl, k, v) {
  dl.append(el('dt', k), el('dd', v));
}

function segmentDetail(s, heapNames, pinned) {
  const h = el('h3', 'Segment ' + s.id + ' \u00b7 ' + s.kind + (pinned ? ' (pinned)' : ''));
  const dl = el('dl', null, 'kv');
  row(dl, 'base', s.base);
  row(dl, 'size', bytes(s.size));
  row(dl, 'committed', bytes(s.committed) + ' (' + percent(s.committed / s.size) + ' of size)');
  row(dl, 'in blocks', bytes(s.used_bytes) + ' (' + percent(s.used_bytes / s.size) + ' of size, ' +
      percent(s.committed ? s.used_bytes / s.committed : 0) + ' of committed)');
  row(dl, 'blocks', count(s.blocks_used) + ' of ' + count(s.blocks_total));
  const owner = s.owner_heap === null ? 'none (a span)' : 'heap ' + s.owner_heap + (heapNames.has(s.owner_heap) ? ' \u00b7 ' + heapNames.get(s.owner_heap) : '');
  row(dl, 'owner', owner);
  row(dl, 'pages', s.pages_in_use + ' in use of ' + s.page_count);
  return [h, dl, pagesTable(s)];
}

function pagesTable(s) {
  const t = el('table', null, 'pages');
  const head = el('tr');
  ['page', 'class', 'block', 'used / capacity', 'carved', ''].forEach((c) => head.append(el('th', c)));
  t.append(el('thead'));
  t.tHead.append(head);
  const body = el('tbody');
  (s.pages || []).forEach((p) => {
    const tr = el('tr');
    const fill = p.capacity ? p.used / p.capacity : 0;
    const bar = el('span', null, 'bar');
    const inner = el('span', null, 'bar-fill');
    inner.style.width = Math.round(fill * 100) + '%';
    bar.append(inner);
    const usedCell = el('td', count(p.used) + ' / ' + count(p.capacity) + ' ');
    usedCell.append(bar);
    tr.append(el('td', p.index), el('td', p.class === null ? 'span' : p.class), el('td', bytes(p.block_size)), usedCell,
        el('td', count(p.carved)), el('td', p.full ? 'full list' : ''));
    body.append(tr);
  });
  t.append(body);
  return t;
}
