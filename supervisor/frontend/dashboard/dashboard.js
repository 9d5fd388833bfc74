// torchfarm's live dashboard (docs/operations.md "Dashboard"). Served from the supervisor's
// binary at /dashboard/dashboard.js: no library, nothing fetched from anywhere but the page's
// own origin (the Content-Security-Policy allows nothing else).
//
// About once a second it asks /v2/torchfarm/stats for the farm's status and the events after the
// last one it has, redraws the summary, the models, the workers and the events (the same
// columns as the server-rendered page, supervisor/frontend/dashboard.cc), and adds a point to
// each chart: throughput, p50/p99, queue depth and ready workers per model, 15 minutes kept in
// the page. Text is set with textContent only: names and exit causes are never parsed as HTML.
'use strict';

(function () {
  var REFRESH_MS = 1000;
  var HISTORY_MS = 15 * 60 * 1000;
  var MAX_EVENTS = 200;
  var COLOURS = ['#2f7ed8', '#e4572e', '#17a398', '#f3a712', '#8e5ea2', '#6c757d', '#c1121f',
                 '#3a86ff'];

  var lastSeq = 0;
  var supervisorPid = null;
  var events = [];  // newest first
  var history = {};  // model name -> {t: [], rps: [], p50: [], p99: [], queue: [], ready: []}
  var colourOf = {};
  var lastOk = 0;
  var charts = null;
  var lastNow = Date.now();  // the farm's clock at the last status (the charts' right edge)

  // Formatting, as dashboard.cc formats.
  function fixed(v, digits) { return Number(v).toFixed(digits); }
  function micros(v) {
    if (typeof v !== 'number' || v < 0) return '-';
    if (v < 1000) return fixed(v, 0) + 'us';
    var ms = v / 1000;
    if (ms < 10) return fixed(ms, 2) + 'ms';
    if (ms < 1000) return fixed(ms, 1) + 'ms';
    return fixed(ms / 1000, 2) + 's';
  }
  function bytes(v) {
    if (typeof v !== 'number') return '-';
    if (v < 1024) return fixed(v, 0) + 'B';
    var units = ['K', 'M', 'G', 'T'];
    var unit = -1;
    while (v >= 1024 && unit < 3) { v /= 1024; unit++; }
    return fixed(v, v < 10 ? 2 : 1) + units[unit];
  }
  function pad2(n) { return (n < 10 ? '0' : '') + n; }
  function uptime(s) {
    if (!(s > 0)) return '-';
    s = Math.floor(s);
    if (s < 60) return s + 's';
    if (s < 3600) return Math.floor(s / 60) + 'm' + pad2(s % 60) + 's';
    if (s < 86400) return Math.floor(s / 3600) + 'h' + pad2(Math.floor(s % 3600 / 60)) + 'm';
    return Math.floor(s / 86400) + 'd' + pad2(Math.floor(s % 86400 / 3600)) + 'h';
  }
  function clock(ms) {
    var d = new Date(ms);
    return pad2(d.getHours()) + ':' + pad2(d.getMinutes()) + ':' + pad2(d.getSeconds());
  }
  function num(v) { return typeof v === 'number' ? v : 0; }
  function int(v) { return typeof v === 'number' ? String(Math.round(v)) : '-'; }
  function stage(model, name) {
    var l = model.latency_us && model.latency_us[name];
    return l && l.count > 0 ? l : null;
  }
  function latency(model, name, q) {
    var l = stage(model, name);
    return l ? micros(l[q]) : '-';
  }
  function quantiles(model, name) {
    var l = stage(model, name);
    return l ? micros(l.p50) + ' / ' + micros(l.p99) : '-';
  }

  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    if (attrs) {
      for (var k in attrs) {
        if (Object.prototype.hasOwnProperty.call(attrs, k)) node.setAttribute(k, attrs[k]);
      }
    }
    if (text !== undefined) node.textContent = text;
    return node;
  }
  function cell(row, key, text, cls) {
    var attrs = {'data-k': key};
    if (cls) attrs['class'] = cls;
    row.appendChild(el('td', attrs, text));
  }
  function stateClass(state) { return 'state state-' + String(state).replace(/[^a-z0-9]/gi, '-'); }

  function summary(s) {
    var sv = s.supervisor || {};
    var t = s.totals || {};
    var p = document.getElementById('summary');
    p.textContent = '';
    function item(key, label, value) {
      var span = el('span', {'class': 'kv', 'data-k': key});
      span.appendChild(el('b', null, label));
      span.appendChild(document.createTextNode(' ' + value));
      p.appendChild(span);
      p.appendChild(document.createTextNode(' '));
    }
    item('ready', 'ready', sv.draining ? 'draining' : (sv.ready ? 'yes' : 'no'));
    item('rps', 'req/s', fixed(num(t.throughput_rps_1s), 1));
    item('requests', 'requests', int(t.requests));
    item('errors', 'errors', int(t.errors));
    item('queue', 'queued', int(t.queue_depth));
    item('workers', 'workers', int(t.ready_workers) + '/' + int(t.workers) + ' ready');
    item('restarts', 'restarts', int(t.restarts));
    item('pid', 'pid', int(sv.pid));
    item('uptime', 'up', uptime(sv.uptime_s));
    item('version', 'v', sv.version || '');
    item('rss', 'supervisor RSS', bytes(sv.rss_bytes));
    if (typeof sv.cpu_percent === 'number') item('cpu', 'supervisor CPU%', fixed(sv.cpu_percent, 1));
  }

  function models(s) {
    var body = document.querySelector('#models tbody');
    var rows = document.createDocumentFragment();
    (s.models || []).forEach(function (m) {
      var tr = el('tr', {'data-model': m.name, 'data-version': m.version});
      // One row per served version; the others loaded beside it are named.
      var versions = m.versions && m.versions.length > 1 ? ' (of ' + m.versions.join(',') + ')' : '';
      cell(tr, 'name', m.name + ' v' + m.version + versions);
      cell(tr, 'state', m.state, stateClass(m.state));
      cell(tr, 'workers', int(m.ready_workers) + '/' + int(m.workers));
      cell(tr, 'spares', int(m.spares_ready) + '/' + int(m.spares));
      cell(tr, 'queue', int(m.queue_depth));
      cell(tr, 'rps', fixed(num(m.throughput_rps_1s), 1));
      cell(tr, 'requests', int(m.requests));
      var codes = [];
      for (var code in (m.errors_by_code || {})) codes.push(code + ' ' + m.errors_by_code[code]);
      var errors = num(m.errors) + num(m.rejected);
      cell(tr, 'errors', errors + (codes.length ? ' (' + codes.join(', ') + ')' : ''),
           errors > 0 ? 'bad' : null);
      cell(tr, 'p50', latency(m, 'total', 'p50'));
      cell(tr, 'p99', latency(m, 'total', 'p99'));
      cell(tr, 'queue_latency', quantiles(m, 'queue'));
      cell(tr, 'compute_latency', quantiles(m, 'compute'));
      var stages = [];
      ['decode', 'preprocess', 'postprocess'].forEach(function (name) {
        if (stage(m, name)) stages.push(name + ' ' + quantiles(m, name));
      });
      cell(tr, 'stages', stages.length ? stages.join(', ') : '-');
      cell(tr, 'batch', fixed(num(m.mean_batch_size), 2));
      var r = m.rollout;
      var rollout = '-';
      if (r) rollout = r.state + ' ' + int(r.replaced) + '/' + int(r.total) + (r.reason ? ': ' + r.reason : '');
      var td = el('td', {'data-k': 'rollout', 'class': r && r.state === 'rolling' ? 'rolling' : ''});
      if (r && r.state === 'rolling') {
        var bar = el('progress', {max: String(Math.max(1, r.total)), value: String(r.replaced)});
        td.appendChild(bar);
        td.appendChild(document.createTextNode(' '));
      }
      td.appendChild(document.createTextNode(rollout));
      tr.appendChild(td);
      rows.appendChild(tr);
    });
    body.textContent = '';
    body.appendChild(rows);
  }

  function workers(s) {
    var body = document.querySelector('#workers tbody');
    var rows = document.createDocumentFragment();
    (s.workers || []).forEach(function (w) {
      var tr = el('tr', {'data-worker': String(w.id)});
      cell(tr, 'id', int(w.id));
      cell(tr, 'model', w.model + ' v' + w.version);
      cell(tr, 'state', w.state + (w.role === 'spare' ? ' (spare)' : ''), stateClass(w.state));
      cell(tr, 'pid', w.pid > 0 ? int(w.pid) : '-');
      cell(tr, 'device', w.device + (w.fallback ? ' (fallback)' : ''));
      cell(tr, 'restarts', int(w.restarts));
      var cause = w.last_exit || '';
      // A failed worker's reason says more than its last exit (a start that never got to one).
      if (w.failure_reason && w.state === 'failed') cause += (cause ? '; ' : '') + w.failure_reason;
      cell(tr, 'last_exit', cause || '-', 'cause');
      cell(tr, 'uptime', uptime(w.uptime_s));
      cell(tr, 'rss', bytes(w.rss_bytes));
      cell(tr, 'cpu', typeof w.cpu_percent === 'number' ? fixed(w.cpu_percent, 1) : '-');
      cell(tr, 'requests', int(w.requests));
      cell(tr, 'batch', fixed(num(w.mean_batch_size), 2));
      cell(tr, 'inflight', int(w.inflight));
      rows.appendChild(tr);
    });
    body.textContent = '';
    body.appendChild(rows);
  }

  function eventList(s) {
    var fresh = (s.events || []).filter(function (e) { return e.seq > lastSeq; });
    if (fresh.length) {
      events = fresh.concat(events).slice(0, MAX_EVENTS);
      lastSeq = fresh[0].seq;
    }
    if (typeof s.last_event === 'number' && s.last_event > lastSeq) lastSeq = s.last_event;
    var list = document.getElementById('events');
    if (!fresh.length && list.getAttribute('data-live') === '1') return;
    list.setAttribute('data-live', '1');
    var items = document.createDocumentFragment();
    if (!events.length) items.appendChild(el('li', {'class': 'empty'}, 'no events yet'));
    events.forEach(function (e) {
      var li = el('li', {'data-seq': String(e.seq), 'class': 'event event-' + e.kind});
      li.appendChild(el('time', null, clock(e.time_ms)));
      li.appendChild(document.createTextNode(' '));
      li.appendChild(el('b', null, e.kind));
      li.appendChild(document.createTextNode(' '));
      if (e.model) {
        li.appendChild(el('i', null, e.model));
        li.appendChild(document.createTextNode(' '));
      }
      li.appendChild(el('span', null, e.text));
      items.appendChild(li);
    });
    list.textContent = '';
    list.appendChild(items);
  }

  // History: one point per refresh and model, older than 15 minutes dropped.
  function record(s) {
    var now = typeof s.time_ms === 'number' ? s.time_ms : Date.now();
    var seen = {};
    (s.models || []).forEach(function (m) {
      var key = m.name;
      if (seen[key]) return;  // several versions of a name: the first (the page is per name)
      seen[key] = true;
      if (!history[key]) {
        history[key] = {t: [], rps: [], p50: [], p99: [], queue: [], ready: []};
        colourOf[key] = COLOURS[Object.keys(colourOf).length % COLOURS.length];
      }
      var h = history[key];
      var total = stage(m, 'total');
      h.t.push(now);
      h.rps.push(num(m.throughput_rps_1s));
      h.p50.push(total ? total.p50 / 1000 : null);
      h.p99.push(total ? total.p99 / 1000 : null);
      h.queue.push(num(m.queue_depth));
      h.ready.push(num(m.ready_workers));
    });
    for (var key in history) {
      var h = history[key];
      var drop = 0;
      while (drop < h.t.length && h.t[drop] < now - HISTORY_MS) drop++;
      if (drop) {
        for (var field in h) h[field].splice(0, drop);
      }
      if (!h.t.length) {
        delete history[key];
      }
    }
  }

  function niceMax(v) {
    if (!(v > 0)) return 1;
    var p = Math.pow(10, Math.floor(Math.log10(v)));
    var steps = [1, 2, 2.5, 5, 10];
    for (var i = 0; i < steps.length; i++) {
      if (steps[i] * p >= v) return steps[i] * p;
    }
    return 10 * p;
  }

  function axisLabel(v, unit) {
    if (unit === 'ms') return v >= 100 ? fixed(v, 0) : v >= 10 ? fixed(v, 1) : fixed(v, 2);
    if (v >= 10000) return fixed(v / 1000, 0) + 'k';
    if (v >= 1000) return fixed(v / 1000, 1) + 'k';
    return String(Math.round(v * 100) / 100);
  }

  // One chart: series [{name, colour, t: [], v: [], dashed}] over the last 15 minutes.
  function draw(chart, series, now) {
    var canvas = chart.canvas;
    var ratio = window.devicePixelRatio || 1;
    var width = Math.max(200, canvas.clientWidth);
    var height = Math.max(120, canvas.clientHeight);
    if (canvas.width !== Math.round(width * ratio) || canvas.height !== Math.round(height * ratio)) {
      canvas.width = Math.round(width * ratio);
      canvas.height = Math.round(height * ratio);
    }
    var g = canvas.getContext('2d');
    g.setTransform(ratio, 0, 0, ratio, 0, 0);
    g.clearRect(0, 0, width, height);
    var left = 44, right = 8, top = 8, bottom = 20;
    var plotW = width - left - right, plotH = height - top - bottom;
    var max = 0, points = 0, latest = 0;
    series.forEach(function (s) {
      s.v.forEach(function (v) { if (v !== null && v > max) max = v; });
      points = Math.max(points, s.v.length);
      var last = s.v.length ? s.v[s.v.length - 1] : null;
      if (last !== null && !s.dashed) latest += last;
    });
    // Counts (queue depth, workers) get whole-number ticks: four steps of at least 1.
    max = chart.integer ? 4 * Math.ceil(Math.max(max, 1) / 4) : niceMax(max);
    var style = getComputedStyle(canvas);
    g.font = '11px sans-serif';
    g.fillStyle = style.color;
    g.strokeStyle = 'rgba(128,128,128,0.3)';
    g.lineWidth = 1;
    g.textAlign = 'right';
    g.textBaseline = 'middle';
    for (var i = 0; i <= 4; i++) {
      var y = top + plotH - plotH * i / 4;
      g.beginPath();
      g.moveTo(left, Math.round(y) + 0.5);
      g.lineTo(left + plotW, Math.round(y) + 0.5);
      g.stroke();
      g.fillText(axisLabel(max * i / 4, chart.unit), left - 4, y);
    }
    g.textAlign = 'center';
    g.textBaseline = 'top';
    for (var m = 15; m >= 0; m -= 5) {
      var x = left + plotW * (1 - m * 60000 / HISTORY_MS);
      g.fillText(m ? '-' + m + 'm' : 'now', Math.min(Math.max(x, left + 10), left + plotW - 12),
                 top + plotH + 5);
    }
    series.forEach(function (s) {
      g.strokeStyle = s.colour;
      g.lineWidth = s.dashed ? 1.25 : 1.75;
      g.setLineDash(s.dashed ? [4, 3] : []);
      g.beginPath();
      var pen = false;
      for (var k = 0; k < s.t.length; k++) {
        var v = s.v[k];
        // A gap of more than 5 refreshes (the page slept, the farm did not answer) is not joined.
        if (v === null || (k > 0 && s.t[k] - s.t[k - 1] > 5 * REFRESH_MS)) pen = false;
        if (v === null) continue;
        var px = left + plotW * (1 - (now - s.t[k]) / HISTORY_MS);
        var py = top + plotH - plotH * Math.min(v, max) / max;
        if (pen) g.lineTo(px, py); else g.moveTo(px, py);
        pen = true;
      }
      g.stroke();
    });
    g.setLineDash([]);
    canvas.setAttribute('data-points', String(points));
    canvas.setAttribute('data-latest', String(Math.round(latest * 1000) / 1000));
    canvas.setAttribute('data-max', String(max));
    var legend = chart.legend;
    legend.textContent = '';
    series.forEach(function (s) {
      if (s.dashed && series.length > 1 && !s.legend) return;
      var item = el('span', {'class': 'legend-item'});
      var swatch = el('i', {'class': s.dashed ? 'swatch dashed' : 'swatch'});
      swatch.style.borderColor = s.colour;
      item.appendChild(swatch);
      item.appendChild(document.createTextNode(s.name));
      legend.appendChild(item);
    });
  }

  function makeCharts() {
    var section = document.getElementById('charts');
    var holder = section.querySelector('.charts');
    var defs = [
      {id: 'throughput', title: 'Throughput (req/s)', unit: 'req/s'},
      {id: 'latency', title: 'Latency p99 (solid) and p50 (dashed), ms', unit: 'ms'},
      {id: 'queue', title: 'Queue depth', unit: '', integer: true},
      {id: 'ready', title: 'Ready workers', unit: '', integer: true}
    ];
    var made = {};
    defs.forEach(function (d) {
      var figure = el('figure', {'class': 'chart'});
      figure.appendChild(el('figcaption', null, d.title));
      var canvas = el('canvas', {id: 'chart-' + d.id, 'aria-label': d.title, role: 'img'});
      figure.appendChild(canvas);
      var legend = el('div', {'class': 'legend'});
      figure.appendChild(legend);
      holder.appendChild(figure);
      made[d.id] = {canvas: canvas, legend: legend, unit: d.unit, integer: !!d.integer};
    });
    section.hidden = false;
    return made;
  }

  function drawAll(now) {
    if (!charts) return;
    var names = Object.keys(history);
    function series(field, dashed) {
      return names.map(function (name) {
        var h = history[name];
        return {name: name, colour: colourOf[name], t: h.t, v: h[field], dashed: dashed};
      });
    }
    draw(charts.throughput, series('rps'), now);
    draw(charts.latency, series('p99').concat(series('p50', true)), now);
    draw(charts.queue, series('queue'), now);
    draw(charts.ready, series('ready'), now);
  }

  function setLive(ok, detail) {
    var live = document.getElementById('live');
    if (ok) {
      lastOk = Date.now();
      live.className = 'live';
      live.textContent = 'live, updated ' + clock(lastOk);
    } else {
      live.className = 'stale';
      live.textContent = 'no answer from the farm' +
          (lastOk ? ' since ' + clock(lastOk) : '') + ' (' + detail + '); retrying';
    }
  }

  function render(s) {
    var restarted = supervisorPid !== null && s.supervisor && s.supervisor.pid !== supervisorPid;
    if (restarted) {
      // Another supervisor: its events and counters start again (this answer's events were
      // picked by the old supervisor's numbers: the next refresh asks for them all).
      lastSeq = 0;
      events = [];
      history = {};
      document.getElementById('events').removeAttribute('data-live');
    }
    if (s.supervisor) supervisorPid = s.supervisor.pid;
    summary(s);
    models(s);
    workers(s);
    if (!restarted) eventList(s);
    record(s);
    lastNow = typeof s.time_ms === 'number' ? s.time_ms : Date.now();
    drawAll(lastNow);
  }

  var inFlight = false;
  function poll() {
    if (inFlight) return;
    inFlight = true;
    var started = Date.now();
    var url = '/v2/torchfarm/stats' + (lastSeq ? '?events_after=' + lastSeq : '');
    fetch(url, {cache: 'no-store', headers: {Accept: 'application/json'}})
      .then(function (r) {
        if (!r.ok) throw new Error('HTTP ' + r.status);
        return r.json();
      })
      .then(function (s) {
        render(s);
        setLive(true);
      })
      .catch(function (e) { setLive(false, e && e.message ? e.message : String(e)); })
      .then(function () {
        inFlight = false;
        setTimeout(poll, Math.max(100, REFRESH_MS - (Date.now() - started)));
      });
  }

  charts = makeCharts();
  window.addEventListener('resize', function () { drawAll(lastNow); });
  poll();
})();
