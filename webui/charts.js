// charts.js - the timeline's series (timeline.js) drawn with uPlot.
//
// Two charts share one time axis: memory (bytes in blocks, committed, RSS,
// large cache bytes) and operations per second (allocations, frees, remote
// frees).  Points older than an hour come from the process's coarser tiers:
// a memory series draws the minute's (or ten minutes') range, minimum to
// maximum, as a pale band behind its line, so a spike between two points
// still shows.
//
// The time range (the "show" list above the charts): the last 5 minutes,
// the last hour, or the whole run.  uPlot scales the y axis to what is in
// range.
//
// Marks are dashed vertical lines with a label, on both charts: the
// process's events (from /events) and the page's own (restart, gone).
// Phases (from /phases) are pale green spans with their name, on both
// charts; one still open runs to the right edge.
//
// The number of points is on each chart's element as data-points, of marks
// as data-marks, and the phases drawn as data-spans (name,name,...; the
// browser test reads them).

import {bytes, short} from './format.js';
import {MEM_SERIES, OPS_SERIES} from './timeline.js';

const HEIGHT = 220;
const TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 28800, 86400, 172800, 604800];
const MARK_COLOURS = {
  knob: '#d97706', restart: '#dc2626', gone: '#6b7280', enomem: '#dc2626', guard: '#b91c1c',
  ring_overflow: '#ca8a04', trim: '#0891b2', server_start: '#4b5563', profile_mark: '#7c3aed',
  phase_begin: '#059669', phase_end: '#059669', memory_pressure: '#dc2626',
};
export const RANGES = [
  {value: '300', label: 'last 5 min'},
  {value: '3600', label: 'last hour'},
  {value: '0', label: 'whole run'},
];

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

// A uPlot plugin drawing the phases as pale spans with their name on top.
function spansPlugin(timeline) {
  const draw = (u) => {
    const {ctx} = u;
    const {left, top, width, height} = u.bbox;
    const dpr = window.devicePixelRatio || 1;
    ctx.save();
    ctx.beginPath();
    ctx.rect(left, top, width, height);
    ctx.clip();
    ctx.font = 10 * dpr + 'px system-ui, sans-serif';
    timeline.spans.forEach((s) => {
      const x0 = Math.max(left, u.valToPos(s.from, 'x', true));
      const x1 = s.to === null ? left + width : Math.min(left + width, u.valToPos(s.to, 'x', true));
      if (x1 <= x0) return;
      ctx.globalAlpha = 0.10 + 0.05 * Math.min(3, (s.depth || 1) - 1);
      ctx.fillStyle = '#059669';
      ctx.fillRect(x0, top, x1 - x0, height);
      ctx.globalAlpha = 1;
      ctx.fillText(s.name, x0 + 3 * dpr, top + height - 4 * dpr);
    });
    ctx.restore();
  };
  return {hooks: {draw: [draw]}};
}

// A uPlot plugin drawing each coarse point's min..max of a memory series as
// a pale bar over the time its bucket covers (behind the lines).
function rangesPlugin(timeline) {
  const draw = (u) => {
    const {ctx} = u;
    const {left, top, width, height} = u.bbox;
    const {min, max} = u.scales.x;
    ctx.save();
    ctx.beginPath();
    ctx.rect(left, top, width, height);
    ctx.clip();
    ctx.globalAlpha = 0.18;
    MEM_SERIES.forEach((s, k) => {
      if (!u.series[k + 1].show) return;
      ctx.fillStyle = s.stroke;
      for (let i = 0; i < timeline.t.length; i++) {
        const lo = timeline.lo[k][i], hi = timeline.hi[k][i];
        if (lo === null || hi === null || timeline.t[i] < min || timeline.t[i] - timeline.step[i] > max) continue;
        const x1 = u.valToPos(timeline.t[i], 'x', true), x0 = u.valToPos(timeline.t[i] - timeline.step[i], 'x', true);
        const y0 = u.valToPos(hi, 'y', true), y1 = u.valToPos(lo, 'y', true);
        ctx.fillRect(x0, y0, Math.max(1, x1 - x0), Math.max(1, y1 - y0));
      }
    });
    ctx.restore();
  };
  return {hooks: {drawAxes: [draw]}};
}

function options(series, fmt, plugins, width) {
  return {
    width,
    height: HEIGHT,
    plugins,
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
    this.range = 0; // seconds shown; 0: the whole run
    const w = (e) => Math.max(300, e.clientWidth);
    const d = this.data();
    this.mem = new window.uPlot(options(MEM_SERIES, bytes, [spansPlugin(timeline), marksPlugin(timeline), rangesPlugin(timeline)], w(memEl)), d.mem, memEl);
    this.ops = new window.uPlot(options(OPS_SERIES, (v) => short(v) + '/s', [spansPlugin(timeline), marksPlugin(timeline)], w(opsEl)), d.ops, opsEl);
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

  // The x range shown: the last `range` seconds, or everything.
  xRange() {
    const t = this.timeline.t;
    if (!t.length) return null;
    // the page's own marks (the process going away) may come after the last point
    const max = this.timeline.marks.reduce((m, k) => (k.t > m && k.t < m + 60 ? k.t : m), t[t.length - 1]);
    const min = this.range > 0 ? max - this.range : t[0];
    return {min: Math.min(min, max - 1), max};
  }

  setRange(seconds) {
    this.range = seconds;
    this.update();
  }

  update() {
    const d = this.data();
    const x = this.xRange();
    [[this.mem, d.mem], [this.ops, d.ops]].forEach(([u, data]) => {
      u.batch(() => {
        u.setData(data, x === null);
        if (x) u.setScale('x', x);
      });
    });
    const n = this.timeline.t.length;
    const marks = this.timeline.marks.length;
    this.els.forEach((e) => {
      e.dataset.points = n;
      e.dataset.marks = marks;
      e.dataset.range = this.range;
    });
    this.labelSpans();
  }

  labelSpans() {
    const names = this.timeline.spans.map((s) => s.name + (s.to === null ? ' (open)' : '')).join(',');
    this.els.forEach((e) => (e.dataset.spans = names));
  }

  // Redraw without new data (a mark or a phase was added).
  redraw() {
    this.mem.redraw(false);
    this.ops.redraw(false);
    this.els.forEach((e) => (e.dataset.marks = this.timeline.marks.length));
    this.labelSpans();
  }
}
