// app.js - the dashboard: polling, its state, and who draws what.
//
// Every `interval` (1 s by default, chosen at the top right) one poll reads
// /stats, /rings, /heaps and /config together; only when all four answered
// are the figures and tables updated, so what is shown is always one poll's.
// The same poll reads what the process recorded since the last one
// (feed.js: /history and /events), which the charts and the event log draw
// from: the whole run from the first poll on, whenever the page was opened.
// The segment map has its own loop (segmap.js: a sweep of /segments pages),
// which waits at least twice its last sweep's duration between sweeps, so a
// process with 10,000 segments is not read faster than it can answer.
// The Sites view (sites.js: the heap profile) reads every 5 s in a loop of
// its own, stopped and started with the polls.
//
// What the page says about itself (body's data-state, the status line and
// a banner) is one of:
//   connecting  before the first answer
//   live        the last poll answered
//   paused      paused by the user
//   hidden      the tab is hidden: no polls until it is shown again
//   gone        the process does not answer (connection refused, time-out)
//   refused     the server answered a poll with an error (401, 503, ...)
// In every state but live the figures are greyed and the time of the last
// good poll is shown: nothing stale is ever shown as live.  Polling goes on
// while gone or refused, so a process that comes back (or a new one on the
// same port) is picked up; its counters starting again are marked.

import * as api from './poll.js';
import {Timeline, PollRates} from './timeline.js';
import {Charts, RANGES} from './charts.js';
import {Feed} from './feed.js';
import {Events} from './events.js';
import {SegMap, sweep} from './segmap.js';
import {renderTiles, renderCache, renderHeaps, heapNames, guardTotal, guardText} from './tables.js';
import {ConfigView} from './config.js';
import {SitesView} from './sites.js';
import {clock, ago, count, bytes, knobValue} from './format.js';

const $ = (id) => document.getElementById(id);
const ENDPOINTS = ['/stats', '/rings', '/heaps', '/config'];
// The heap registry is read a page at a time (a server with 10,000 threads
// has 10,001 heaps): /heaps and /rings get the same window.
const HEAP_PAGE = 200;

const S = {
  conn: 'connecting', // connecting | live | gone | refused
  stopped: null, // null | 'paused' | 'hidden'
  interval: 1000,
  timer: 0,
  busy: false,
  lastGood: 0,
  failingSince: 0,
  failure: null, // the refusal or network error of the last poll
  lastRefusal: null, // the last refusal logged (one event per distinct refusal)
  last: null, // the last good poll: {stats, rings, heaps, config}
  expanded: new Set(),
  heapOffset: 0, // the first heap of the page shown
  seg: {timer: 0, busy: false, when: 0, took: 0, error: null},
  seen: null, // alarm counters of the last good poll
};

let timeline, pollRates, charts, feed, segmap, events, configView, sites;

// ---- state and the status line ---------------------------------------------

function mode() {
  return S.stopped || S.conn;
}

function failureText(f) {
  if (!f) return '';
  if (f.kind === 'network') return f.error;
  return f.path + ': ' + f.status + ' ' + f.error + (f.reason ? ': ' + f.reason : '');
}

function statusText(now) {
  const asOf = S.lastGood ? 'figures as of ' + clock(S.lastGood) + ' (' + ago(S.lastGood, now) + ')' : 'no figures yet';
  switch (mode()) {
    case 'live': return 'live \u00b7 polled ' + clock(S.lastGood) + ' \u00b7 every ' + S.interval / 1000 + ' s';
    case 'paused': return 'paused \u00b7 ' + asOf;
    case 'hidden': return 'paused while the tab is hidden \u00b7 ' + asOf;
    case 'gone': return 'NOT ANSWERING since ' + clock(S.failingSince) + ' \u00b7 ' + asOf + ' \u00b7 still trying';
    case 'refused': return 'REFUSED: ' + failureText(S.failure) + ' \u00b7 ' + asOf;
    default: return 'connecting to ' + location.host + ' ...';
  }
}

function bannerText() {
  const last = S.lastGood ? 'The figures below are from the last good poll at ' + clock(S.lastGood) + ' (' + ago(S.lastGood) + '): they are not live.' : 'Nothing has been read from it yet.';
  if (S.conn === 'gone') return 'The process is not answering (' + S.failure.error + '): it has exited, or hangs. ' + last;
  if (S.conn === 'refused') {
    const hint = S.failure.status === 401 && !api.token() ? ' Enter the token (top right).' : '';
    return 'The server refused ' + failureText(S.failure) + '.' + hint + ' ' + last;
  }
  return '';
}

function renderStatus() {
  const m = mode();
  document.body.dataset.state = m;
  $('status').textContent = statusText(Date.now());
  $('status').className = 'status status-' + m;
  const b = $('banner-conn');
  const text = m === 'gone' || m === 'refused' ? bannerText() : '';
  b.hidden = text === '';
  b.textContent = text;
  $('pause').textContent = S.stopped === 'paused' ? 'Resume' : 'Pause';
}

function setConn(conn, failure) {
  const was = S.conn;
  S.conn = conn;
  S.failure = failure || null;
  if (conn === 'gone' && was !== 'gone') {
    S.failingSince = Date.now();
    timeline.gap();
    timeline.mark(Date.now() / 1000, 'gone', 'not answering');
    charts.redraw();
    events.add('gone', 'The process stopped answering: ' + failure.error + '.');
  } else if (conn === 'refused' && (was !== 'refused' || failureText(failure) !== failureText(S.lastRefusal))) {
    events.add('refused', 'Refused: ' + failureText(failure) + '.');
  } else if (conn === 'live' && (was === 'gone' || was === 'refused')) {
    events.add('back', 'Answering again.');
  }
  if (conn === 'refused') S.lastRefusal = failure;
  renderStatus();
}

// ---- the poll ----------------------------------------------------------------

function schedule(ms) {
  clearTimeout(S.timer);
  S.timer = S.stopped ? 0 : setTimeout(poll, ms);
}

// The query of a core endpoint: the heap page's window for /heaps and /rings.
function query(path) {
  if (path !== '/heaps' && path !== '/rings') return '?pretty=0';
  return '?pretty=0&offset=' + S.heapOffset + '&limit=' + HEAP_PAGE;
}

// "heaps 201-400 of 10,001" and the buttons around it.
function renderHeapPager(heaps) {
  const total = heaps.total, first = heaps.returned ? heaps.offset + 1 : 0;
  $('heaps-range').textContent = 'heaps ' + count(first) + '\u2013' + count(heaps.offset + heaps.returned) +
      ' of ' + count(total) + ' (' + count(heaps.live) + ' live, ' + count(heaps.abandoned) + ' abandoned)';
  $('heaps-prev').disabled = heaps.offset === 0;
  $('heaps-next').disabled = heaps.offset + heaps.returned >= total;
  $('heaps-pager').dataset.offset = heaps.offset;
  $('heaps-pager').dataset.total = total;
}

function heapPage(delta) {
  const total = S.last ? S.last.heaps.total : 0;
  S.heapOffset = Math.max(0, Math.min(S.heapOffset + delta * HEAP_PAGE, Math.max(0, total - 1)));
  S.expanded.clear();
  schedule(0);
}

async function poll() {
  if (S.stopped || S.busy) return;
  S.busy = true;
  const started = Date.now();
  const timeout = Math.max(5000, 3 * S.interval);
  const extra = feed.requests();
  const replies = await Promise.all(ENDPOINTS.map((p) => api.get(p + query(p), timeout))
      .concat(extra.map((x) => api.get(x.path, Math.max(timeout, 20000)))));
  S.busy = false;
  if (S.stopped) return; // paused while the poll was out: its figures are dropped
  const core = replies.slice(0, ENDPOINTS.length);
  const bad = core.findIndex((r) => !r.ok);
  if (bad < 0) good(core.map((r) => r.json), extra, replies.slice(ENDPOINTS.length));
  else setConn(core[bad].kind === 'network' ? 'gone' : 'refused', {...core[bad], path: ENDPOINTS[bad]});
  schedule(Math.max(0, S.interval - (Date.now() - started)));
}

function good([stats, rings, heaps, config], extra, extraReplies) {
  const now = Date.now();
  const rates = pollRates.add(now / 1000, stats);
  if (rates.reset) events.add('restart', 'The counters started again: a new process answers on this port.');
  extra.forEach((x, i) => feed.take(x.what, extraReplies[i]));
  if (!feed.historyOn()) timeline.addPoll(now / 1000, stats); // no record in the process: the page's own
  renderHistoryNote();
  const changed = configView.update(config, api.token() !== '');
  if (!feed.eventsOn()) knobChanges(changed, now); // else the process's events say it
  renderTiles($('tiles'), stats, rates, heaps, rings);
  renderCache($('cache'), stats, rates);
  if (heaps.offset >= heaps.total && heaps.total > 0) S.heapOffset = 0; /* the registry is smaller now: next poll */
  renderHeaps($('heaps-body'), heaps, rings, S.expanded);
  renderHeapPager(heaps);
  $('heaps-spans').textContent = 'Large and huge blocks belong to no heap: ' + count(heaps.spans.segments) + ' span segments, ' + bytes(heaps.spans.bytes_in_blocks) + ' in blocks.';
  segmap.heapNames = heapNames(heaps);
  alarms(stats, config);
  charts.update();
  S.last = {stats, rings, heaps, config};
  S.lastGood = now;
  setConn('live');
  renderTrim(config);
  sites.setWritable(tokenSet(config), api.token() !== '');
  if (!S.seg.timer && !S.seg.busy) segLoop();
}

function renderHistoryNote() {
  const h = feed.info;
  let text;
  if (feed.historyOn() && h) {
    text = 'The process\u2019s own record: ' + count(h.samples) + ' samples, one every ' + (h.interval_ms / 1000) + ' s since ' +
        clock(h.first_ms) + ' (' + bytes(h.memory_bytes) + ' kept in the process). Older than an hour: a point a minute, ' +
        'then every 10 minutes, with its minimum to maximum as a pale band.';
  } else if (feed.history === false) {
    text = 'This process keeps no history (introspect.history = false, or an older sefer): the charts show this page\u2019s own polls, since it opened.';
  } else {
    text = '';
  }
  $('history-note').textContent = text;
}

function knobChanges(changed, now) {
  changed.forEach(({knob, old}) => {
    const text = knob.name + ': ' + knobValue(old) + ' \u2192 ' + knobValue(knob) + ' (' + knob.source + ')';
    timeline.mark(now / 1000, 'knob', knob.name);
    events.add('knob', text, now);
  });
}

// ---- alarms: guard detections, ENOMEM, ring overflows -------------------------

function knob(config, name) {
  const k = config.knobs.find((x) => x.name === name);
  return k ? k.value : null;
}

function banner(id, show, text) {
  const b = $(id);
  b.hidden = !show;
  if (show) b.textContent = text;
}

// A badge in the top bar, seen wherever the page is scrolled to.
function badge(id, n, what) {
  const b = $(id);
  b.hidden = !(n > 0);
  b.textContent = '\u26a0 ' + count(n) + what;
}

function alarms(st, config) {
  const now = {guard: guardTotal(st), enomem: st.enomem, overflows: st.ring_overflows};
  const seen = feed.eventsOn() ? null : S.seen; // with /events, the process's own events say it
  if (seen && now.guard > seen.guard) events.add('guard', 'Guard detections: +' + count(now.guard - seen.guard) + ' (' + guardText(st) + ').');
  if (seen && now.enomem > seen.enomem) events.add('enomem', 'ENOMEM: +' + count(now.enomem - seen.enomem) + ' allocations refused.');
  if (seen && now.overflows > seen.overflows) events.add('ring', 'Ring overflows: +' + count(now.overflows - seen.overflows) + '.');
  S.seen = now;
  badge('badge-guard', now.guard, ' guard detection' + (now.guard === 1 ? '' : 's'));
  badge('badge-enomem', now.enomem, ' ENOMEM');
  banner('banner-guard', now.guard > 0, 'Guard detections: ' + count(now.guard) + ' (' + guardText(st) + '). Each was written to the process\u2019s stderr with its address; guard.on_error = ' + knob(config, 'guard.on_error') + '.');
  banner('banner-enomem', now.enomem > 0, 'ENOMEM: ' + count(now.enomem) + ' allocations returned NULL: segments.max (' + count(knob(config, 'segments.max')) + ') was reached' + (st.memory_limit_refusals ? ', memory.limit was reached (' + count(st.memory_limit_refusals) + ' refusals, memory.limit_action = fail)' : '') + ' or the OS refused memory.');
  banner('banner-ring', now.overflows > 0, 'Remote-free rings overflowed ' + count(now.overflows) + ' times: those frees took the overflow list (lossless, slower); a larger rings.capacity avoids it.');
}

// ---- the segment map's loop ---------------------------------------------------

async function segLoop() {
  S.seg.timer = 0;
  if (S.stopped || S.seg.busy) return;
  S.seg.busy = true;
  const started = Date.now();
  const r = await sweep((path) => api.get(path, Math.max(10000, 3 * S.interval)));
  S.seg.busy = false;
  S.seg.took = Date.now() - started;
  if (r.ok && !S.stopped) {
    S.seg.when = Date.now();
    S.seg.error = null;
    segmap.set(r.segments, r.total);
  } else if (!r.ok) {
    S.seg.error = r;
  }
  renderSegSummary();
  if (!S.stopped) S.seg.timer = setTimeout(segLoop, Math.max(S.interval, 2 * S.seg.took));
}

function renderSegSummary() {
  const m = segmap;
  let text = count(m.segments.length) + ' cells (the server listed ' + count(m.total) + ') \u00b7 map as of ' + clock(S.seg.when);
  if (S.seg.error) text += ' \u00b7 the last sweep failed: ' + S.seg.error.error;
  $('seg-summary').textContent = text;
  $('segments-card').classList.toggle('stale', !!S.seg.error);
}

// ---- controls -------------------------------------------------------------------

function stop(why) {
  S.stopped = why;
  clearTimeout(S.timer);
  clearTimeout(S.seg.timer);
  S.seg.timer = 0;
  sites.stop();
  timeline.gap();
  renderStatus();
}

function resume() {
  S.stopped = null;
  renderStatus();
  poll();
  sites.start();
}

function onVisibility() {
  if (document.hidden && !S.stopped) stop('hidden');
  else if (!document.hidden && S.stopped === 'hidden') resume();
}

// sessionStorage, which a browser may refuse (then nothing is remembered).
function stored(key, value) {
  try {
    if (value === undefined) return sessionStorage.getItem(key);
    sessionStorage.setItem(key, value);
  } catch (e) {
    return null;
  }
  return value;
}

function setupControls() {
  const sel = $('interval');
  const saved = Number(stored('sefer.interval'));
  if (saved) sel.value = String(saved);
  S.interval = Number(sel.value) || 1000;
  sel.addEventListener('change', () => {
    S.interval = Number(sel.value);
    stored('sefer.interval', String(S.interval));
    renderStatus();
    if (!S.stopped) schedule(0);
  });
  $('pause').addEventListener('click', () => (S.stopped === 'paused' ? resume() : stop('paused')));
  const range = $('range');
  RANGES.forEach((r) => range.append(new Option(r.label, r.value)));
  range.value = stored('sefer.range') || '0';
  charts.setRange(Number(range.value));
  range.addEventListener('change', () => {
    stored('sefer.range', range.value);
    charts.setRange(Number(range.value));
  });
  document.addEventListener('visibilitychange', onVisibility);
  $('token-form').addEventListener('submit', (e) => {
    e.preventDefault();
    api.setToken($('token').value.trim());
    $('token').value = '';
    tokenChanged();
  });
  $('token-forget').addEventListener('click', () => {
    api.setToken('');
    tokenChanged();
  });
  $('heaps-prev').addEventListener('click', () => heapPage(-1));
  $('heaps-next').addEventListener('click', () => heapPage(1));
  $('heaps-body').addEventListener('click', (e) => {
    const tr = e.target.closest('tr.heap');
    if (!tr) return;
    const slot = Number(tr.dataset.slot);
    if (!S.expanded.delete(slot)) S.expanded.add(slot);
    if (S.last) renderHeaps($('heaps-body'), S.last.heaps, S.last.rings, S.expanded);
  });
  $('trim').addEventListener('click', trim);
  setInterval(renderStatus, 1000);
}

function tokenChanged() {
  const has = api.token() !== '';
  $('token-state').textContent = has ? 'token in use (this tab only)' : 'no token';
  $('token-forget').hidden = !has;
  if (!S.stopped) schedule(0);
}

// Whether the process has a token (writes are possible at all).
function tokenSet(config) {
  const k = config.knobs.find((x) => x.name === 'introspect.token');
  return !!(k && k.set);
}

function renderTrim(config) {
  $('trim').disabled = !(tokenSet(config) && api.token());
}

async function trim() {
  const out = $('trim-result');
  out.textContent = 'trimming...';
  const r = await api.request('/trim', {method: 'POST', timeoutMs: 30000});
  out.textContent = r.ok ? 'released ' + bytes(r.json.bytes_released) : 'refused: ' + r.status + ' ' + r.error + ': ' + r.reason;
  out.className = 'result ' + (r.ok ? 'ok' : 'refused');
}

async function version() {
  const r = await api.request('/metrics', {text: true});
  const m = r.ok ? /sefer_info\{version="([^"]+)"\}/.exec(r.text) : null;
  if (m) $('version').textContent = m[1];
}

function main() {
  timeline = new Timeline();
  pollRates = new PollRates();
  events = new Events($('events'), $('events-note'));
  feed = new Feed(timeline, events);
  if (typeof window.uPlot !== 'function') {
    banner('banner-conn', true, 'The chart library did not load: the charts are missing (figures and tables still work).');
    window.uPlot = function () {
      return {setData() {}, setSize() {}, redraw() {}};
    };
  }
  charts = new Charts($('chart-mem'), $('chart-ops'), timeline);
  segmap = new SegMap($('segmap'), $('seg-detail'), $('seg-legend'), $('colour-by'));
  const setKnob = (name, value) => api.post('/config', {name, value}, 10000).then((r) => {
    if (r.ok) schedule(0);
    return r;
  });
  configView = new ConfigView($('config-body'), $('config-note'), setKnob);
  sites = new SitesView({
    card: $('sites-card'), off: $('sites-off'), error: $('sites-error'), summary: $('sites-summary'),
    table: $('sites-table'), body: $('sites-body'), stack: $('site-stack'), order: $('sites-order'),
    markForm: $('mark-form'), markNameInput: $('mark-name'), markButton: $('mark'), markResult: $('mark-result'),
    markState: $('mark-state'), onForm: $('sites-on'), onValue: $('sites-on-value'), onButton: $('sites-on-button'),
    onResult: $('sites-on-result'), flame: $('flame'), flameNote: $('flame-note'),
  }, api, setKnob);
  // for the browser's console, and the browser test: the views' state (read only)
  window.sefer = {timeline, charts, feed, segmap, events, configView, sites, state: S};
  setupControls();
  tokenChanged();
  renderStatus();
  version();
  if (document.hidden) stop('hidden');
  else {
    poll();
    sites.start();
  }
}

main();
