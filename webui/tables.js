// tables.js - the figures, the heap registry and the large cache.
//
// Everything is built with DOM calls and textContent: thread names and every
// other string come from the process and are shown as text, never parsed
// as HTML.
//
// The heap registry has a slot per heap ever made (as many as threads were
// alive at once) and the fallback heap, last.  One row per slot
// that is live, abandoned or the fallback ("shared"); runs of free slots
// collapse into one row.  A row's data-slot and data-state carry the slot
// and its state (the browser test compares them with /heaps).  Clicking a
// row opens its per-size-class figures; it stays open across polls.  The
// ring columns come from /rings: pending / capacity is the ring's pressure
// (a full ring sends frees to the overflow list: lossless, slower).

import {bytes, count, percent, rate, el} from './format.js';

// ---- figures at the top -------------------------------------------------

const GUARD_KINDS = [
  ['guard_invalid_free', 'invalid free'],
  ['guard_interior_free', 'interior free'],
  ['guard_double_free', 'double free'],
  ['guard_overflow', 'overflow'],
  ['guard_use_after_free', 'use after free'],
];

export function guardTotal(st) {
  return GUARD_KINDS.reduce((n, [k]) => n + (st[k] || 0), 0);
}

export function guardText(st) {
  return GUARD_KINDS.filter(([k]) => st[k] > 0).map(([k, name]) => name + ' ' + count(st[k])).join(', ');
}

function setTile(root, key, value, sub, alarm) {
  const tile = root.querySelector('[data-tile="' + key + '"]');
  if (!tile) return;
  tile.querySelector('.value').textContent = value;
  tile.querySelector('.sub').textContent = sub || '';
  tile.classList.toggle('alarm', !!alarm);
}

export function renderTiles(root, st, rates, heaps, rings) {
  setTile(root, 'blocks', bytes(st.bytes_in_blocks), count(st.bytes_in_blocks) + ' B');
  setTile(root, 'committed', bytes(st.bytes_committed), 'reserved ' + bytes(st.bytes_reserved));
  setTile(root, 'rss', st.rss_bytes === null ? 'n/a' : bytes(st.rss_bytes), st.rss_bytes === null ? st.rss_bytes_reason : 'whole process');
  setTile(root, 'segments', count(st.segments), 'peak ' + count(st.segments_peak));
  setTile(root, 'heaps', count(heaps.live), count(heaps.abandoned) + ' abandoned');
  setTile(root, 'allocs', rate(rates.values[0]), count(st.allocs) + ' in all');
  setTile(root, 'frees', rate(rates.values[1]), count(st.frees) + ' in all');
  setTile(root, 'remote', rate(rates.values[2]), count(st.remote_frees) + ' in all');
  setTile(root, 'rings', count(rings.pending) + ' pending', count(rings.overflowed) + ' overflowed');
  const g = guardTotal(st);
  setTile(root, 'guard', count(g), g ? guardText(st) : 'none detected', g > 0);
  setTile(root, 'enomem', count(st.enomem), st.enomem ? 'allocations refused' : 'none', st.enomem > 0);
}

// ---- large cache and decommit --------------------------------------------

export function renderCache(dl, st, rates) {
  const rows = [
    ['large cache', bytes(st.large_cache_bytes) + ' in ' + count(st.large_cache_spans) + ' spans'],
    ['cache hit rate', st.large_cache_hit_rate === null ? 'n/a (no lookup yet)' : percent(st.large_cache_hit_rate) +
        ' (' + count(st.large_cache_hits) + ' hits, ' + count(st.large_cache_misses) + ' misses)'],
    ['memory limit', st.memory_limit ? bytes(st.memory_limit) + ' (headroom ' + bytes(st.memory_headroom) + ')' : 'none'],
    ['limit purges', count(st.memory_limit_purges) + (st.memory_limit_refusals ? ', ' + count(st.memory_limit_refusals) + ' allocations refused' : '')],
    ['decommitted', bytes(st.bytes_decommitted_total) + ' in all'],
    ['shed on growth', bytes(st.bytes_shed_on_growth) + ' in all'],
    ['empty pages kept for reuse', st.bytes_waiting === undefined ? 'n/a' : bytes(st.bytes_waiting) +
        (st.cache_max_purges ? ' (' + count(st.cache_max_purges) + ' purges past threads.cache_max, ' + bytes(st.bytes_cache_max_purged) + ')' : '')],
    ['kept for exited threads', st.bytes_exited_waiting === undefined ? 'n/a' : bytes(st.bytes_exited_waiting)],
    ['freed by other threads, not yet taken back', st.bytes_remote_pending === undefined ? 'n/a' : bytes(st.bytes_remote_pending)],
    ['decommit rate', rates.decommit === null ? 'n/a' : bytes(rates.decommit) + '/s'],
    ['OS mappings', count(st.os_maps) + ' in all'],
    ['reserved', bytes(st.bytes_reserved)],
    ['metadata', bytes(st.bytes_metadata)],
    ['fallback heap', count(st.fallback_allocs) + ' allocations'],
    ['ring overflows', count(st.ring_overflows) + ' of ' + count(st.ring_pushes) + ' ring pushes'],
  ];
  dl.replaceChildren();
  rows.forEach(([k, v]) => dl.append(el('dt', k), el('dd', v)));
}

// ---- heap registry --------------------------------------------------------

function ringCell(ring) {
  const td = el('td', null, 'ring');
  if (!ring) {
    td.textContent = '-';
    return td;
  }
  const p = ring.capacity ? ring.pending / ring.capacity : 0;
  const bar = el('span', null, 'bar' + (p > 0.5 ? ' hot' : ''));
  const fill = el('span', null, 'bar-fill');
  fill.style.width = Math.min(100, Math.round(p * 100)) + '%';
  bar.append(fill);
  td.append(el('span', count(ring.pending) + ' / ' + count(ring.capacity) + ' '), bar);
  return td;
}

function heapRow(h, ring, expanded) {
  const tr = el('tr', null, 'heap state-' + h.state + (expanded ? ' open' : ''));
  tr.dataset.slot = h.fallback ? 'fallback' : h.slot;
  tr.dataset.state = h.state;
  const tid = h.thread ? h.thread.tid : '-';
  const name = h.thread ? (h.thread.name === null ? '?' : h.thread.name) : '-';
  const overflow = ring ? count(ring.overflowed) + (ring.overflow_waiting ? ' (waiting)' : '') : '-';
  // "small": its requests up to 512 B take power-of-two classes (threads.small_from)
  tr.append(el('td', h.fallback ? 'fallback' : h.slot), el('td', h.state + (h.small ? ', small' : '')),
      el('td', tid), el('td', name),
      el('td', bytes(h.bytes_in_blocks), 'num'), el('td', count(h.blocks), 'num'), el('td', count(h.pages), 'num'),
      el('td', count(h.segments), 'num'), el('td', count(h.allocs), 'num'), el('td', count(h.frees), 'num'),
      el('td', count(h.remote_frees), 'num'), ringCell(ring), el('td', ring ? count(ring.pushed) : '-', 'num'),
      el('td', ring ? count(ring.drained) : '-', 'num'), el('td', overflow, ring && ring.overflowed ? 'num warn' : 'num'));
  return tr;
}

function classesRow(h) {
  const tr = el('tr', null, 'classes');
  const td = el('td');
  td.colSpan = 15;
  if (!h.classes.length) {
    td.textContent = 'no page of a size class in this heap';
  } else {
    const t = el('table', null, 'inner');
    const head = el('tr');
    ['class', 'block', 'pages', 'blocks used', 'capacity', 'fill', 'bytes in blocks'].forEach((c) => head.append(el('th', c)));
    t.append(head);
    h.classes.forEach((c) => t.append(rowOf([c.class, bytes(c.block_size), count(c.pages), count(c.blocks_used),
      count(c.blocks_capacity), percent(c.blocks_capacity ? c.blocks_used / c.blocks_capacity : 0), bytes(c.bytes_in_blocks)])));
    td.append(t);
  }
  tr.append(td);
  return tr;
}

function rowOf(cells) {
  const tr = el('tr');
  cells.forEach((c) => tr.append(el('td', c)));
  return tr;
}

function freeRun(first, last, usedBefore) {
  const tr = el('tr', null, 'free-run');
  const td = el('td', (first === last ? 'slot ' + first : 'slots ' + first + '\u2013' + last) + ': free (' +
      count(last - first + 1) + (usedBefore ? ', ' + usedBefore + ' used by threads that have exited' : '') + ')');
  td.colSpan = 15;
  tr.append(td);
  return tr;
}

export function renderHeaps(tbody, heaps, rings, expanded) {
  const ringOf = new Map(rings.rings.map((r) => [r.slot, r]));
  const rows = [];
  let run = null;
  const flush = () => {
    if (run) rows.push(freeRun(run.first, run.last, run.used));
    run = null;
  };
  heaps.heaps.forEach((h) => {
    if (h.state === 'free') {
      if (!run) run = {first: h.slot, last: h.slot, used: 0};
      run.last = h.slot;
      run.used += h.ever_used ? 1 : 0;
      return;
    }
    flush();
    rows.push(heapRow(h, ringOf.get(h.slot), expanded.has(h.slot)));
    if (expanded.has(h.slot)) rows.push(classesRow(h));
  });
  flush();
  tbody.replaceChildren(...rows);
}

export function heapNames(heaps) {
  const m = new Map();
  heaps.heaps.forEach((h) => {
    if (h.thread) m.set(h.slot, h.thread.tid + ' ' + (h.thread.name || '?'));
  });
  return m;
}
