// The browser side of tests/browser/dashboard_browser_check.py: Debian's headless Chromium
// (/usr/bin/chromium, or $TORCHFARM_CHROMIUM) driven by playwright-core, which downloads no
// browser. One JSON command per line on stdin, one JSON answer per line on stdout:
//   {"cmd": "open", "url": U, "javascript": true, "width": 1280, "height": 900}
//        opens U in a fresh context (JavaScript on or off); every request the page makes is kept
//   {"cmd": "state"}        what the page shows now (readState below) and the requests so far
//   {"cmd": "screenshot", "path": P, "full_page": true}
//   {"cmd": "close"}
// Answers: {"ok": true, ...} or {"ok": false, "error": "..."}.
'use strict';

const readline = require('readline');
const { chromium } = require('playwright-core');

let browser = null;
let context = null;
let page = null;
let requests = [];
let consoleErrors = [];

// Runs in the page: the tables, events, summary and charts as text and numbers.
function readState() {
  const cells = (row) => {
    const out = {};
    row.querySelectorAll('td[data-k]').forEach((td) => { out[td.getAttribute('data-k')] = td.textContent; });
    return out;
  };
  const models = Array.from(document.querySelectorAll('#models tbody tr')).map((tr) => ({
    name: tr.getAttribute('data-model'), cells: cells(tr) }));
  const workers = Array.from(document.querySelectorAll('#workers tbody tr')).map((tr) => ({
    id: Number(tr.getAttribute('data-worker')), cells: cells(tr) }));
  const events = Array.from(document.querySelectorAll('#events li[data-seq]')).map((li) => ({
    seq: Number(li.getAttribute('data-seq')), text: li.textContent }));
  const summary = {};
  document.querySelectorAll('#summary [data-k]').forEach((s) => { summary[s.getAttribute('data-k')] = s.textContent; });
  const charts = {};
  document.querySelectorAll('canvas[id^="chart-"]').forEach((c) => {
    charts[c.id.substring(6)] = { points: Number(c.getAttribute('data-points') || 0),
      latest: Number(c.getAttribute('data-latest') || 0), max: Number(c.getAttribute('data-max') || 0),
      width: c.clientWidth, height: c.clientHeight };
  });
  const live = document.getElementById('live');
  return { models, workers, events, summary, charts, live: live ? live.textContent : '',
    liveClass: live ? live.className : '', chartsHidden: document.getElementById('charts').hidden,
    scrollWidth: document.documentElement.scrollWidth, innerWidth: window.innerWidth };
}

async function handle(command) {
  switch (command.cmd) {
    case 'open': {
      if (!browser) {
        browser = await chromium.launch({
          executablePath: process.env.TORCHFARM_CHROMIUM || '/usr/bin/chromium',
          // As root (CI) Chromium needs --no-sandbox; nothing the page loads is untrusted here.
          args: ['--no-sandbox', '--disable-dev-shm-usage'],
        });
      }
      if (context) await context.close();
      context = await browser.newContext({
        javaScriptEnabled: command.javascript !== false,
        viewport: { width: command.width || 1280, height: command.height || 900 },
        deviceScaleFactor: command.scale || 1,
      });
      requests = [];
      consoleErrors = [];
      page = await context.newPage();
      page.on('request', (r) => requests.push(r.url()));
      page.on('console', (m) => { if (m.type() === 'error') consoleErrors.push(m.text()); });
      page.on('pageerror', (e) => consoleErrors.push(String(e)));
      const response = await page.goto(command.url, { waitUntil: 'load' });
      return { status: response ? response.status() : 0 };
    }
    case 'state':
      return { state: await page.evaluate(readState), requests, console_errors: consoleErrors };
    case 'screenshot':
      await page.screenshot({ path: command.path, fullPage: command.full_page !== false });
      return {};
    case 'close':
      if (browser) await browser.close();
      browser = null;
      return {};
    default:
      throw new Error('unknown command ' + JSON.stringify(command.cmd));
  }
}

const lines = readline.createInterface({ input: process.stdin });
let queue = Promise.resolve();
lines.on('line', (line) => {
  queue = queue.then(async () => {
    let answer;
    try {
      answer = Object.assign({ ok: true }, await handle(JSON.parse(line)));
    } catch (e) {
      answer = { ok: false, error: String(e && e.stack ? e.stack : e) };
    }
    process.stdout.write(JSON.stringify(answer) + '\n');
  });
});
lines.on('close', () => {
  queue.then(async () => { if (browser) await browser.close(); });
});
