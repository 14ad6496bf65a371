#!/usr/bin/env node
// dashboard-draw.mjs - how long the dashboard takes to draw what is big:
// the segment map of 10,000 cells (a full redraw after a sweep, and a hover
// frame) and a synthetic week of history (taking it in, and drawing the
// charts).  These were time limits in the browser test
// (tests/browser/dashboard.mjs: redraw < 500 ms, hover < 50 ms, a week
// < 1000 ms each), where a loaded machine decided the verdict; here they
// are figures, and nothing passes or fails on them.
//
//   node bench/dashboard-draw.mjs [--build DIR] [--rounds N]
//
// Serves the page from tests/browser/segments_host (10,000 large spans)
// under `DIR/sefer run` (DIR: build), in Debian's chromium (SEFER_CHROMIUM,
// default /usr/bin/chromium) driven by tests/browser/node_modules'
// playwright-core (scripts/setup.sh installs both).  Each of N rounds
// (default 7) times, in this order, 5 full redraws of the map, 20 hover
// frames, the week taken in and drawn, and a control: a fixed loop of
// arithmetic in the same page, which no change to the dashboard moves (if
// its spread is wide, the machine was busy).  Prints each round, then the
// median and the range of each figure over the rounds, in milliseconds,
// and one JSON line.

import {spawn} from 'node:child_process';
import path from 'node:path';
import {fileURLToPath} from 'node:url';

const ROOT = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 && i + 1 < args.length ? args[i + 1] : dflt;
};
const BUILD = path.resolve(opt('--build', path.join(ROOT, 'build')));
const ROUNDS = Number(opt('--rounds', '7'));
const CHROMIUM = process.env.SEFER_CHROMIUM || '/usr/bin/chromium';

function fail(msg) {
  console.error('dashboard-draw: ' + msg);
  process.exit(1);
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

// The host: 10,000 segments under sefer run; resolves to its URL once ready.
function startHost() {
  const host = spawn(path.join(BUILD, 'sefer'), ['run', '--listen', '127.0.0.1:0', '--',
    path.join(BUILD, 'tests', 'browser', 'segments_host'), '10000', '200000'], {stdio: ['pipe', 'pipe', 'pipe']});
  let out = '', err = '';
  host.stdout.on('data', (d) => (out += d));
  host.stderr.on('data', (d) => (err += d));
  return new Promise((resolve, reject) => {
    const look = () => {
      const m = /sefer: introspection: (http:\/\/\S+)/.exec(err);
      if (m && /^ready$/m.test(out)) resolve({host, url: m[1]});
    };
    host.stdout.on('data', look);
    host.stderr.on('data', look);
    host.on('exit', (code) => reject(new Error('the host exited (' + code + '): ' + err.slice(-500))));
  });
}

// One round in the page: every figure in ms.
function round() {
  const m = window.sefer.segmap;
  let t0 = performance.now();
  for (let i = 0; i < 5; i++) {
    m.dirty = true; // as after a sweep
    m.draw();
  }
  const redraw = (performance.now() - t0) / 5;
  t0 = performance.now();
  for (let i = 0; i < 20; i++) {
    m.hover = i * 400; // as the mouse moves
    m.draw();
  }
  const hover = (performance.now() - t0) / 20;
  // the shape the process keeps at 1 s: a week of 10-minute points, a day
  // of minutes, an hour of seconds, each with the memory fields
  const now = Date.now();
  const part = (n, step, coarse, end) => {
    const t = Array.from({length: n}, (_, i) => end - (n - 1 - i) * step);
    const col = (f) => t.map((x, i) => Math.round(50e6 + 40e6 * Math.sin(i / 50) + f));
    const gauges = ['bytes_in_blocks', 'bytes_committed', 'rss_bytes', 'large_cache_bytes'];
    const counters = ['allocs', 'frees', 'remote_frees'];
    const obj = (f) => Object.fromEntries(gauges.map((k, j) => [k, col(f + j * 1e7)])
        .concat(counters.map((k, j) => [k, t.map((x) => x * (10 - j))])));
    const p = {tier: coarse, step_ms: step, t, last: obj(0)};
    if (coarse) {
      p.min = obj(-5e6);
      p.max = obj(5e6);
    }
    return p;
  };
  const h = {parts: [part(1008 - 144, 600000, 2, now - 86400000 - 600000), part(1440 - 60, 60000, 1, now - 3600000 - 60000),
    part(3600, 1000, 0, now)], first_ms: now - 7 * 86400000};
  const tl = window.sefer.timeline;
  tl.reset();
  t0 = performance.now();
  tl.addHistory(h);
  const weekIn = performance.now() - t0;
  t0 = performance.now();
  window.sefer.charts.update();
  const weekDraw = performance.now() - t0;
  t0 = performance.now();
  let x = 0;
  for (let i = 0; i < 2e6; i++) x += Math.sin(i);
  const control = performance.now() - t0;
  return {redraw, hover, weekIn, weekDraw, control, points: tl.t.length, sink: x > 1e9};
}

async function main() {
  let chromium;
  try {
    ({chromium} = await import(path.join(ROOT, 'tests', 'browser', 'node_modules', 'playwright-core', 'index.mjs')));
  } catch (e) {
    fail('playwright-core is not installed in tests/browser/node_modules (scripts/setup.sh runs npm ci there): ' + e.message);
  }
  const {host, url} = await startHost();
  const browser = await chromium.launch({executablePath: CHROMIUM, headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage']});
  try {
    const page = await browser.newPage({viewport: {width: 1400, height: 1000}});
    await page.goto(url);
    await page.waitForFunction(() => Number(document.getElementById('segmap').dataset.sweeps) >= 1, null, {timeout: 120000});
    const cells = Number(await page.$eval('#segmap', (e) => e.dataset.cells));
    await page.click('#pause'); // nothing else draws while it is timed
    await page.waitForFunction(() => document.body.dataset.state === 'paused', null, {timeout: 60000});
    console.log('# ' + cells + ' cells; ' + ROUNDS + ' rounds; ms per full redraw, per hover frame, to take in a week, to draw it, control');
    const rounds = [];
    for (let r = 0; r < ROUNDS; r++) {
      const f = await page.evaluate(round);
      rounds.push(f);
      console.log('round ' + (r + 1) + ': redraw ' + f.redraw.toFixed(1) + ', hover ' + f.hover.toFixed(2) + ', week in ' +
          f.weekIn.toFixed(1) + ', week drawn ' + f.weekDraw.toFixed(1) + ', control ' + f.control.toFixed(1) + ' (' + f.points + ' points)');
    }
    const summary = {cells, rounds: ROUNDS};
    for (const k of ['redraw', 'hover', 'weekIn', 'weekDraw', 'control']) {
      const xs = rounds.map((f) => f[k]);
      summary[k] = {median: median(xs), min: Math.min(...xs), max: Math.max(...xs)};
      console.log(k.padEnd(9) + ' median ' + summary[k].median.toFixed(2) + ' ms (' + summary[k].min.toFixed(2) + '-' +
          summary[k].max.toFixed(2) + ')');
    }
    console.log(JSON.stringify(summary));
  } finally {
    await browser.close();
    host.stdin.end();
  }
}

main().catch((e) => fail(e && e.stack ? e.stack : String(e)));
