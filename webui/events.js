// events.js - the event log: what happened in the process, from the start
// of the run, and what happened to this page.
//
// The process records its own events (/events, docs/introspection.md): the
// server starting, knobs set at run time (old and new value, and where the
// old one came from), the first ENOMEM and every 1000th, guard detections
// (kind and address), ring overflow bursts, trims, heap-profile marks and
// phase boundaries.  They are listed with the process's times, newest
// first, and marked on the charts.  The page adds its own: the process
// stopping or coming back, a refusal, counters starting again.  Without
// /events (an older sefer) the page also says what it saw change between
// two polls (guard detections, ENOMEM, ring overflows), as it did before.
//
// Each item's data-kind is its kind (the browser test reads it), data-seq
// the process's event number.  Strings from the process are text, never
// HTML.

import {bytes, count, clock, duration, el} from './format.js';

const MAX_ITEMS = 1500; // more than the process keeps (1024)

const GUARD_TEXT = {
  invalid_free: 'free of a pointer sefer does not own',
  interior_free: 'free of a pointer inside a block',
  double_free: 'double free',
  overflow: 'write past the end of a block (canary overwritten)',
  use_after_free: 'write into a freed block',
};

// A knob value of an event, in the knob's terms (as /config's).
function knobText(type, v) {
  if (type === 'duration') return duration(v);
  if (type === 'size') return v === 'auto' ? 'auto' : bytes(v);
  return String(v);
}

// What the process's event e says, in a line.
export function eventText(e) {
  switch (e.kind) {
    case 'server_start': return 'Introspection server started on port ' + e.port + ' (pid ' + e.pid + ').';
    case 'knob': return e.name + ': ' + knobText(e.type, e.old) + ' \u2192 ' + knobText(e.type, e.new) + ' (' + e.source + '; was ' + e.old_source + ')';
    case 'enomem': return 'ENOMEM #' + count(e.count) + ': an allocation of ' + bytes(e.size) + ' was refused' + (e.count > 1 ? ' (one event per 1000)' : '') + '.';
    case 'guard': return 'Guard: ' + (GUARD_TEXT[e.guard] || e.guard) + ' at ' + e.address + ' (#' + count(e.count) + ' of this kind).';
    case 'ring_overflow': return 'Ring overflow: heap ' + e.heap + '\u2019s ring (' + count(e.capacity) + ') was full; ' + count(e.overflowed) + ' of its remote frees took the overflow list so far.';
    case 'trim': return 'Trim: ' + bytes(e.bytes_released) + ' released.';
    case 'profile_mark': return 'Heap profile mark: ' + e.name + '.';
    case 'phase_begin': return 'Phase ' + e.name + ' began.';
    case 'phase_end': return 'Phase ' + e.name + ' ended.';
    case 'memory_pressure': return 'Memory pressure: ' + bytes(e.committed) + ' committed of a ' + bytes(e.limit) + ' limit; idle pages and cached spans purged (' + bytes(e.bytes_released) + ' at once, other threads’ on their next page).';
    default: return e.kind;
  }
}

// The label of its mark on the charts.
export function eventLabel(e) {
  switch (e.kind) {
    case 'server_start': return 'server';
    case 'knob': return e.name;
    case 'enomem': return 'ENOMEM';
    case 'guard': return e.guard;
    case 'ring_overflow': return 'ring overflow';
    case 'profile_mark': return e.name;
    case 'phase_begin': return e.name + ' \u25b8';
    case 'phase_end': return '\u25c2 ' + e.name;
    case 'memory_pressure': return 'memory limit';
    default: return e.kind;
  }
}

export class Events {
  constructor(list, note) {
    this.list = list;
    this.note = note;
  }

  // One of the page's own events (no process event number).
  add(kind, text, when = Date.now()) {
    this.insert(this.item(kind, text, when), when);
  }

  // The process's events, in order of their numbers.
  addFromProcess(events) {
    events.forEach((e) => {
      const li = this.item(e.kind, eventText(e), e.t);
      li.dataset.seq = e.seq;
      this.insert(li, e.t);
    });
  }

  // The process's events are read again from the start (a new process).
  clearProcess() {
    this.list.querySelectorAll('li[data-seq]').forEach((li) => li.remove());
  }

  // What the process said about the events it kept.
  setCounts(info) {
    let text = count(info.recorded) + ' events recorded by the process since it started';
    if (info.dropped > 0) text += '; the oldest ' + count(info.dropped) + ' are no longer kept (it keeps ' + count(info.capacity) + ')';
    this.note.textContent = text + '.';
  }

  item(kind, text, when) {
    const li = el('li', null, 'event ' + kind);
    li.dataset.kind = kind;
    li.dataset.t = when;
    li.append(el('time', clock(when)), ' ', el('span', text));
    return li;
  }

  // Newest first, by time.
  insert(li, when) {
    let at = this.list.firstChild;
    while (at && Number(at.dataset.t) > when) at = at.nextSibling;
    this.list.insertBefore(li, at);
    while (this.list.children.length > MAX_ITEMS) this.list.lastChild.remove();
  }
}
