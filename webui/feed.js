// feed.js - the process's own record: /history and /events, read in full
// when the page opens, then only what is new, with each poll.
//
// /history?since=T gives the samples taken after the last one the page has
// (T is that sample's time + 1 ms), so a page that was hidden, asleep or
// cut off gets every sample it missed on its next poll: no gap.  A reply
// whose first sample differs from the one seen before comes from another
// process (a restarted soak on the same port): the charts start again from
// its record, with a "restart" mark.  When the page has appended so many
// samples that its series grow past MAX_POINTS (a page open for more than a
// day), it reads the whole history again, which the process keeps coarser
// where it is old.
//
// /events?after=N gives the events after number N; an answer that has
// recorded fewer than N comes from another process, whose events are then
// read from the start.
//
// Either endpoint answering 404 means this process has none (history off,
// or an older sefer): the page then draws its own polls and says what it
// saw change, as before (app.js asks historyOn() and eventsOn()).
//
// /phases gives the phases the process measured (sefer_phase_begin/end):
// the charts draw them as spans.

import {HISTORY_FIELDS, MAX_POINTS} from './timeline.js';
import {eventLabel} from './events.js';

export class Feed {
  constructor(timeline, events) {
    this.timeline = timeline;
    this.events = events;
    this.history = null; // null: not known yet; false: none; true: read
    this.firstMs = 0; // first sample of the process whose history is drawn
    this.reload = false; // read the whole history on the next poll
    this.eventsState = null; // as history
    this.after = 0; // the process's events up to this number are shown
    this.info = null; // the last /history reply's description (without its parts)
    this.phases = null; // as history
  }

  historyOn() {
    return this.history === true;
  }

  eventsOn() {
    return this.eventsState === true;
  }

  // The requests this poll makes besides the four of app.js.
  requests() {
    const out = [];
    if (this.history !== false) {
      const since = this.reload ? 0 : this.timeline.lastMs + 1;
      out.push({what: 'history', path: '/history?fields=' + HISTORY_FIELDS.join(',') + '&since=' + since});
    }
    if (this.eventsState !== false) out.push({what: 'events', path: '/events?pretty=0&after=' + this.after});
    if (this.phases !== false) out.push({what: 'phases', path: '/phases?pretty=0'});
    return out;
  }

  // A reply to one of them; returns whether the charts have something new.
  take(what, r) {
    if (!r.ok) {
      if (r.kind === 'http' && r.status === 404) { // this process has none
        if (what === 'history') this.history = false;
        else if (what === 'phases') this.phases = false;
        else this.eventsState = false;
      }
      return false;
    }
    if (what === 'phases') return this.takePhases(r.json);
    return what === 'history' ? this.takeHistory(r.json) : this.takeEvents(r.json);
  }

  takeHistory(h) {
    const tl = this.timeline;
    const other = this.firstMs !== 0 && h.first_ms !== this.firstMs;
    if (other || this.reload) {
      tl.reset();
      if (other) tl.mark(h.first_ms / 1000, 'restart', 'another process');
    }
    this.reload = false;
    this.firstMs = h.first_ms;
    this.history = true;
    const {parts, ...info} = h;
    this.info = info;
    const added = tl.addHistory(h);
    if (tl.t.length > MAX_POINTS) this.reload = true;
    return added > 0 || other;
  }

  takePhases(ph) {
    this.phases = true;
    const before = JSON.stringify(this.timeline.spans);
    this.timeline.setSpans(ph);
    return JSON.stringify(this.timeline.spans) !== before;
  }

  takeEvents(ev) {
    this.eventsState = true;
    if (ev.recorded < this.after) { // another process: read its events from the start
      this.after = 0;
      this.events.clearProcess();
      this.timeline.clearMarks(true);
      return true;
    }
    this.events.addFromProcess(ev.events);
    // a phase's begin and end are its span's edges (from /phases), not marks
    const spanned = (e) => this.phases !== false && (e.kind === 'phase_begin' || e.kind === 'phase_end');
    ev.events.filter((e) => !spanned(e)).forEach((e) => this.timeline.mark(e.t / 1000, e.kind, eventLabel(e), true));
    this.after = ev.complete_upto;
    this.events.setCounts(ev);
    return ev.events.length > 0;
  }
}
