// format.js - how figures are written on the dashboard.
//
// Sizes in IEC units (KiB, MiB: what the allocator counts in), counts with
// thin-space thousands separators, rates per second, wall-clock times.  A
// figure that the server could not give (null) is written "n/a", never 0.

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];

export function bytes(n) {
  if (n === null || n === undefined || Number.isNaN(n)) return 'n/a';
  let v = Math.abs(n);
  let u = 0;
  while (v >= 1024 && u < UNITS.length - 1) {
    v /= 1024;
    u++;
  }
  const digits = u === 0 ? 0 : v < 10 ? 2 : v < 100 ? 1 : 0;
  return (n < 0 ? '-' : '') + v.toFixed(digits) + ' ' + UNITS[u];
}

export function count(n) {
  if (n === null || n === undefined || Number.isNaN(n)) return 'n/a';
  return Math.round(n).toString().replace(/\B(?=(\d{3})+(?!\d))/g, '\u2009');
}

// 1234567 -> "1.23 M"; for chart axes and rates.
export function short(n) {
  if (n === null || n === undefined || Number.isNaN(n)) return 'n/a';
  const a = Math.abs(n);
  if (a >= 1e9) return (n / 1e9).toFixed(a >= 1e10 ? 1 : 2) + ' G';
  if (a >= 1e6) return (n / 1e6).toFixed(a >= 1e7 ? 1 : 2) + ' M';
  if (a >= 1e4) return (n / 1e3).toFixed(a >= 1e5 ? 0 : 1) + ' k';
  return a >= 100 || a === Math.round(a) ? Math.round(n).toString() : n.toFixed(1);
}

export function rate(n) {
  return n === null || n === undefined ? 'n/a' : short(n) + '/s';
}

export function percent(x) {
  if (x === null || x === undefined || Number.isNaN(x)) return 'n/a';
  return (100 * x).toFixed(x < 0.1 ? 1 : 0) + ' %';
}

export function clock(ms) {
  if (!ms) return 'never';
  const d = new Date(ms);
  return [d.getHours(), d.getMinutes(), d.getSeconds()].map((v) => String(v).padStart(2, '0')).join(':');
}

export function ago(ms, now = Date.now()) {
  if (!ms) return 'never';
  const s = Math.max(0, Math.round((now - ms) / 1000));
  if (s < 90) return s + ' s ago';
  if (s < 5400) return Math.round(s / 60) + ' min ago';
  return (s / 3600).toFixed(1) + ' h ago';
}

export function duration(ms) {
  if (ms === null || ms === undefined) return 'n/a';
  if (ms === 0) return '0';
  if (ms % 3600000 === 0) return ms / 3600000 + ' h';
  if (ms % 60000 === 0) return ms / 60000 + ' min';
  if (ms % 1000 === 0) return ms / 1000 + ' s';
  return ms + ' ms';
}

// A knob's value as /config gives it, in the knob's own terms.
export function knobValue(k, v = k.value) {
  if (k.redacted) return k.set ? '(set, not shown)' : '(not set)';
  if (v === null || v === undefined) return 'n/a';
  if (k.type === 'size') return bytes(v) + (v >= 1024 ? ' (' + count(v) + ')' : '');
  if (k.type === 'duration') return duration(v);
  if (k.type === 'string') return v === '' ? '(empty)' : String(v);
  return String(v);
}

// A DOM element with text (never HTML: names come from the process).
export function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}
