// poll.js - talking to the introspection server that serves this page.
//
// Every request goes to the page's own origin (the Content-Security-Policy
// allows nothing else).  A reply is one of three things, and the dashboard
// treats them differently:
//   {ok: true, json}                       the figures
//   {ok: false, kind: 'http', status, ...}  the server answered and refused
//                                          (401 wrong token, 400, 503 ...):
//                                          its reason is shown as it is
//   {ok: false, kind: 'network', ...}      nobody answered in time: the
//                                          process has gone away (or hangs)
// The token, when the user gives one, is kept in sessionStorage only (gone
// when the tab closes) and sent as "Authorization: Bearer" with every
// request: writes need it, and so do reads on a non-loopback listener.

const TOKEN_KEY = 'sefer.token';

export function token() {
  try {
    return sessionStorage.getItem(TOKEN_KEY) || '';
  } catch (e) {
    return '';
  }
}

export function setToken(t) {
  try {
    if (t) sessionStorage.setItem(TOKEN_KEY, t);
    else sessionStorage.removeItem(TOKEN_KEY);
  } catch (e) {
    // storage refused (private mode): the token lasts until a reload
  }
}

// The server's error object: {"error": ..., "reason": ..., "status": N}.
function refusal(status, text) {
  let body = null;
  try {
    body = JSON.parse(text);
  } catch (e) {
    body = null;
  }
  const error = body && body.error ? body.error : 'HTTP ' + status;
  const reason = body && body.reason ? body.reason : text.slice(0, 200);
  return {ok: false, kind: 'http', status, error, reason, body};
}

function parsed(status, reply) {
  try {
    return {ok: true, status, json: JSON.parse(reply), text: reply};
  } catch (e) {
    return {ok: false, kind: 'http', status, error: 'bad reply', reason: 'the reply is not JSON', body: null};
  }
}

export async function request(path, {method = 'GET', body, timeoutMs = 5000, text = false} = {}) {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), timeoutMs);
  const headers = {};
  const t = token();
  if (t) headers.Authorization = 'Bearer ' + t;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  try {
    const r = await fetch(path, {method, headers, body, signal: ctl.signal, cache: 'no-store'});
    const reply = await r.text();
    if (!r.ok) return refusal(r.status, reply);
    if (text) return {ok: true, status: r.status, json: null, text: reply};
    return parsed(r.status, reply);
  } catch (e) {
    const why = e.name === 'AbortError' ? 'no answer within ' + timeoutMs / 1000 + ' s' : 'connection failed';
    return {ok: false, kind: 'network', status: 0, error: why, reason: String(e.message || e)};
  } finally {
    clearTimeout(timer);
  }
}

export function get(path, timeoutMs) {
  return request(path, {timeoutMs});
}

export function post(path, obj, timeoutMs) {
  return request(path, {method: 'POST', body: JSON.stringify(obj), timeoutMs});
}
