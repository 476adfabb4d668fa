/* msprobe HTML report: inlined into the page by msprobe/report/html.py. Vanilla JS, no network, no closing-tag text. */
(function () {
  'use strict';
  var D = JSON.parse(document.getElementById('msprobe-data').textContent);
  var C = D.columns, K = D.kinds, T = D.texts, G = D.groups, R = D.rows, N = R.length, S = D.summary;
  var ROW_H = 22, MAX_SPACE = 8000000, TREE_PAGE = 300;

  // ---------------------------------------------------------------- cells
  var pos = [], gi = 0, p = 1;
  for (var c = 0; c < C.length; c++) { pos.push(K[c] === 'g' ? gi++ : p++); }
  var prefixed = {};
  C.forEach(function (name, col) {
    if (K[col] !== 'p') return;
    var out = new Array(N), prev = '', at = pos[col];
    for (var r = 0; r < N; r++) {
      var v = R[r][at];
      if (Array.isArray(v)) v = prev.slice(0, v[0]) + v[1];
      out[r] = v; prev = v;
    }
    prefixed[col] = out;
  });
  function raw(r, col) {
    switch (K[col]) {
      case 'g': return T[G[R[r][0]][pos[col]]];
      case 't': return T[R[r][pos[col]]];
      case 'p': return prefixed[col][r];
      case 's': { var v = R[r][pos[col]]; return v === 0 ? raw(r, D.base[col]) : v; }
      default: return R[r][pos[col]];
    }
  }
  function fmt(v) { return String(v); }
  function text(r, col) {
    var v = raw(r, col);
    if (v === null || v === undefined) return 'None';
    if (typeof v === 'number') return D.pct[col] ? fmt(v) + '%' : fmt(v);
    return String(v);
  }
  function num(r, col) {
    var v = raw(r, col);
    if (typeof v === 'number') return v;
    if (typeof v !== 'string') return NaN;
    var s = v.trim();
    if (s.charAt(s.length - 1) === '%') s = s.slice(0, -1);
    if (s === 'inf' || s === 'Infinity') return Infinity;
    if (s === '-inf' || s === '-Infinity') return -Infinity;
    return s === '' ? NaN : Number(s);
  }
  function colIndex(name) { return C.indexOf(name); }
  var NAME = colIndex('NPU Name'), BENCH = colIndex('Bench Name'), RESULT = colIndex('Result');
  var STACK = colIndex('NPU_Stack_Info'), MESSAGE = colIndex('Err_message');
  var RES_CODE = { pass: 0, warning: 1, error: 2 };
  var res = new Int8Array(N), dir = new Int8Array(N);   // result 0/1/2 (-1 none); 0 forward, 1 backward, 2 other
  for (var r0 = 0; r0 < N; r0++) {
    var rv = RESULT >= 0 ? RES_CODE[text(r0, RESULT)] : undefined;
    res[r0] = rv === undefined ? -1 : rv;
    var nm = NAME >= 0 ? text(r0, NAME) : '';
    dir[r0] = nm.indexOf('.forward') >= 0 ? 0 : nm.indexOf('.backward') >= 0 ? 1 : 2;
  }
  var firstError = S.first_error_row ? S.first_error_row - 1 : -1;
  // Error_Origin (statistics and tensor modes): introduced rows are marked apart from inherited and dtype ones
  var ORIGIN = colIndex('Error_Origin'), introduced = [], firstIntroduced = -1;
  if (ORIGIN >= 0) {
    for (var ro = 0; ro < N; ro++) if (text(ro, ORIGIN) === 'introduced') introduced.push(ro);
    firstIntroduced = introduced.length ? introduced[0] : -1;
  }
  // rows below the noise floor of their inputs (the compare's note): their differences are rounding
  var noise = [];
  if (MESSAGE >= 0) for (var rn = 0; rn < N; rn++) if (text(rn, MESSAGE).indexOf('note: below the noise floor') >= 0) noise.push(rn);

  // ---------------------------------------------------------------- dom helpers
  function el(tag, cls, txt) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (txt !== undefined && txt !== null) e.textContent = txt;
    return e;
  }
  function add(parent) { for (var i = 1; i < arguments.length; i++) parent.appendChild(arguments[i]); return parent; }
  var body = document.body;

  // ---------------------------------------------------------------- summary
  var head = add(el('header'), el('h1', null, 'msprobe compare report'),
    el('span', 'muted', (S.source || '') + (S.mode ? '  \u00b7  ' + S.mode + ' mode' : '')));
  body.appendChild(head);
  var sumSec = el('section');
  sumSec.id = 'summary';
  var cards = el('div', 'cards');
  function card(id, key, value, cls) {
    var box = el('div', 'card' + (cls ? ' ' + cls : ''));
    var v = el('div', 'v', value); v.id = id;
    return add(box, v, el('div', 'k', key));
  }
  var counts = S.results || {};
  add(cards, card('sum-rows', 'rows', String(S.rows)), card('sum-matched', 'matched', String(S.matched)),
    card('sum-pass', 'pass', String(counts.pass || 0), 'pass'),
    card('sum-warning', 'warning', String(counts.warning || 0), 'warning'),
    card('sum-error', 'error', String(counts.error || 0), 'error'));
  // a name and its row in a wide card: the name may wrap after a dot, "(row N)" stays on one line
  function rowLink(name, row) {
    var link = el('span', 'link');
    String(name).split('.').forEach(function (part, i, parts) {
      link.appendChild(document.createTextNode(part + (i < parts.length - 1 ? '.' : '')));
      if (i < parts.length - 1) link.appendChild(el('wbr'));
    });
    link.appendChild(document.createTextNode('  '));
    link.appendChild(el('span', 'rowref', '(row ' + row + ')'));
    return link;
  }
  var firstBox = card('sum-first', 'culprit (the advisor\'s: first row of the highest verdict level)', '', 'wide');
  var firstV = firstBox.querySelector('.v');
  if (S.first_error) {
    var link = rowLink(S.first_error, S.first_error_row);
    link.addEventListener('click', function () { goToRow(firstError); });
    firstV.appendChild(link);
  } else {
    firstV.textContent = 'none';
  }
  cards.appendChild(firstBox);
  if (ORIGIN >= 0) {
    var introBox = card('sum-introduced', 'first introduced error (not explained by inputs or dtypes)', '', 'wide');
    var introV = introBox.querySelector('.v');
    if (firstIntroduced >= 0) {
      var introLink = rowLink(NAME >= 0 ? text(firstIntroduced, NAME) : '', firstIntroduced + 1);
      introLink.addEventListener('click', function () { goToRow(firstIntroduced); });
      introV.appendChild(introLink);
    } else {
      introV.textContent = 'none';
    }
    cards.appendChild(introBox);
  }
  sumSec.appendChild(cards);
  var advice = el('div', S.first_error ? 'error' : '', S.advice ? 'Advice: ' + S.advice : '');
  advice.id = 'advice';
  if (S.advice) sumSec.appendChild(advice);
  if (S.diff_analyze && S.diff_analyze.length) {
    var da = el('div', 'diff-analyze');
    da.id = 'diff-analyze';
    da.appendChild(el('div', 'label', 'First-divergence analysis (-da):'));
    S.diff_analyze.forEach(function (line) { da.appendChild(el('div', null, line)); });
    sumSec.appendChild(da);
  }
  body.appendChild(sumSec);

  // ---------------------------------------------------------------- chart
  var chartSec = el('section');
  var bar = el('div', 'toolbar');
  var metricSel = el('select'); metricSel.id = 'metric';
  var metrics = (D.metrics || []).slice();
  if (!metrics.length && RESULT >= 0) metrics.push('Result');
  metrics.forEach(function (m) { var o = el('option', null, m); o.value = m; metricSel.appendChild(o); });
  var logBox = el('input'); logBox.type = 'checkbox'; logBox.id = 'logscale';
  var logLabel = add(el('label'), logBox, document.createTextNode(' log scale'));
  var legend = el('span', 'legend');
  var legendItems = [['forward', 'var(--fwd)'], ['backward', 'var(--bwd)'], ['other', 'var(--other)'], ['error row', 'var(--error)']];
  if (ORIGIN >= 0) legendItems.push(['introduced (Error_Origin)', 'var(--introduced)']);
  if (noise.length) legendItems.push(['below the noise floor (rounding, not judged)', 'var(--noise)']);
  legendItems.forEach(function (x) { var i = el('i'); i.style.background = x[1]; legend.appendChild(add(el('span'), i, document.createTextNode(x[0]))); });
  add(bar, el('h2', null, 'Metric along execution order'), metricSel, logLabel, legend);
  var canvas = el('canvas'); canvas.id = 'chart';
  var hover = el('div', 'muted'); hover.id = 'hover';
  add(chartSec, bar, canvas, hover);
  body.appendChild(chartSec);
  // the plot lies below a band that holds one label line per marked row (first divergence, first introduced), so
  // no label covers a point; the left margin holds the tick labels and the axis title (metric and unit)
  var LABEL_LINE = 14, marks = (firstError >= 0 ? 1 : 0) + (firstIntroduced >= 0 ? 1 : 0);
  var M = { l: 84, r: 12, t: 12 + marks * LABEL_LINE, b: 22 }, chartVals = null, chartLog = false, yMin = 0, yMax = 1,
    cssW = 0, cssH = 0, chartInfo = null;

  function metricValues(name) {
    var out = new Float64Array(N), col = colIndex(name);
    for (var r = 0; r < N; r++) out[r] = name === 'Result' ? res[r] : num(r, col);
    return out;
  }
  function yOf(v) {
    var y = chartLog ? (v > 0 ? Math.log(v) / Math.LN10 : yMin) : v;
    var f = yMax > yMin ? (y - yMin) / (yMax - yMin) : 0.5;
    return M.t + (1 - f) * (cssH - M.t - M.b);
  }
  function xOf(r) { return M.l + (N > 1 ? r / (N - 1) : 0.5) * (cssW - M.l - M.r); }
  function drawChart() {
    var name = metricSel.value;
    chartVals = metricValues(name);
    chartLog = logBox.checked;
    var lo = Infinity, hi = -Infinity;
    for (var r = 0; r < N; r++) {
      var v = chartVals[r];
      if (!isFinite(v)) continue;
      if (chartLog) { if (v <= 0) continue; v = Math.log(v) / Math.LN10; }
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
    if (lo === Infinity) { lo = 0; hi = 1; }
    if (hi === lo) { hi = lo + 1; lo = lo - 1; }
    yMin = lo; yMax = hi;
    var dpr = window.devicePixelRatio || 1;
    cssW = canvas.clientWidth || 800; cssH = canvas.clientHeight || 240;
    canvas.width = Math.round(cssW * dpr); canvas.height = Math.round(cssH * dpr);
    var g = canvas.getContext('2d');
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, cssW, cssH);
    g.font = '11px system-ui, sans-serif'; g.fillStyle = '#6b7380'; g.strokeStyle = '#dde2ea';
    g.textAlign = 'right'; g.textBaseline = 'middle';
    var unit = D.pct[colIndex(name)] ? '%' : '', ticks = tickLabels(chartLog, unit);
    var yTitle = name + (unit ? ' (' + unit + ')' : '');       // ", log scale" when it fits beside the plot
    if (chartLog && g.measureText(yTitle + ', log scale').width <= cssH - M.t - M.b) yTitle += ', log scale';
    chartInfo = { plotTop: M.t, plotBottom: cssH - M.b, plotLeft: M.l, ticks: ticks, labels: [], yTitle: yTitle };
    for (var k = 0; k <= 4; k++) {
      var yp = M.t + (1 - k / 4) * (cssH - M.t - M.b);
      g.beginPath(); g.moveTo(M.l, yp); g.lineTo(cssW - M.r, yp); g.stroke();
      g.fillText(ticks[k], M.l - 4, yp);
    }
    g.save(); g.translate(11, M.t + (cssH - M.t - M.b) / 2); g.rotate(-Math.PI / 2);
    g.textAlign = 'center'; g.textBaseline = 'middle'; g.fillText(chartInfo.yTitle, 0, 0); g.restore();
    g.textAlign = 'center'; g.textBaseline = 'top';
    for (var q = 0; q <= 4; q++) {
      var rr = Math.round((N - 1) * q / 4);
      g.fillText('row ' + (rr + 1), Math.min(Math.max(xOf(rr), M.l + 20), cssW - M.r - 20), cssH - M.b + 5);
    }
    var colors = ['#1a73e8', '#f29900', '#80868b'];
    var W = Math.ceil(cssW) + 2, H = Math.ceil(cssH) + 2;
    for (var s = 0; s < 3; s++) {              // one pass per series; a pixel is drawn once per series
      var seen = new Uint8Array(W * H);
      g.fillStyle = colors[s];
      for (var r2 = 0; r2 < N; r2++) {
        if (dir[r2] !== s) continue;
        var v2 = chartVals[r2];
        if (!isFinite(v2)) continue;
        var x = Math.round(xOf(r2)), y = Math.round(yOf(v2)), key = y * W + x;
        if (seen[key]) continue;
        seen[key] = 1;
        g.fillRect(x - 1, y - 1, 2.5, 2.5);
      }
    }
    g.fillStyle = '#d93025';
    var seenE = new Uint8Array(W * H);
    for (var r3 = 0; r3 < N; r3++) {
      if (res[r3] !== 2 || !isFinite(chartVals[r3])) continue;
      var xe = Math.round(xOf(r3)), ye = Math.round(yOf(chartVals[r3]));
      if (seenE[ye * W + xe]) continue;
      seenE[ye * W + xe] = 1;
      g.beginPath(); g.arc(xe, ye, 3, 0, 2 * Math.PI); g.fill();
    }
    g.fillStyle = '#8e24aa';
    var seenI = new Uint8Array(W * H);
    for (var k2 = 0; k2 < introduced.length; k2++) {     // introduced rows: triangles above the point
      var ri = introduced[k2];
      if (!isFinite(chartVals[ri])) continue;
      var xi = Math.round(xOf(ri)), yi = Math.round(yOf(chartVals[ri]));
      if (seenI[yi * W + xi]) continue;
      seenI[yi * W + xi] = 1;
      g.beginPath(); g.moveTo(xi, yi - 9); g.lineTo(xi - 4, yi - 3); g.lineTo(xi + 4, yi - 3); g.closePath(); g.fill();
    }
    g.strokeStyle = '#5f6368'; g.lineWidth = 1.2;
    for (var k3 = 0; k3 < noise.length; k3++) {          // below the noise floor: hollow rings around the point
      var rz = noise[k3];
      if (!isFinite(chartVals[rz])) continue;
      g.beginPath(); g.arc(Math.round(xOf(rz)), Math.round(yOf(chartVals[rz])), 5, 0, 2 * Math.PI); g.stroke();
    }
    var line = 0;
    if (firstError >= 0) markRow(g, firstError, '#d93025', [4, 3], 'culprit: ' + (S.first_error || ''), line++);
    if (firstIntroduced >= 0) {
      markRow(g, firstIntroduced, '#8e24aa', [2, 2],
        'first introduced: ' + (NAME >= 0 ? text(firstIntroduced, NAME) : ''), line++);
    }
  }
  // five tick labels from the bottom, with as many digits as it takes to tell them apart, and the unit
  function tickLabels(log, unit) {
    var values = [];
    for (var k = 0; k <= 4; k++) {
      var yv = yMin + (yMax - yMin) * k / 4;
      values.push(log ? Math.pow(10, yv) : yv);
    }
    var labels = [];
    for (var digits = log ? 2 : 4; digits <= 15; digits++) {
      labels = values.map(function (v) { return Number(v.toPrecision(digits)).toString() + unit; });
      if (labels.every(function (x, i) { return i === 0 || x !== labels[i - 1]; })) break;
    }
    return labels;
  }
  // a marked row: a dashed line through the plot and its label on line `line` of the band above the plot
  function markRow(g, row, color, dash, label, line) {
    var x = xOf(row), y = 2 + line * LABEL_LINE, right = x > cssW * 0.6;
    g.strokeStyle = color; g.setLineDash(dash); g.lineWidth = 1.5;
    g.beginPath(); g.moveTo(x, y + LABEL_LINE - 2); g.lineTo(x, cssH - M.b); g.stroke(); g.setLineDash([]);
    g.textAlign = right ? 'right' : 'left'; g.textBaseline = 'top';
    var shown = ' ' + label + ' ', width = g.measureText(shown).width, left = right ? x - width : x;
    g.fillStyle = '#fff'; g.fillRect(left, y - 1, width, LABEL_LINE - 1);   // over an earlier mark's line
    g.fillStyle = color; g.fillText(shown, x, y);
    chartInfo.labels.push({ text: label, x: left, y: y, w: width, h: 11 });
  }
  function nearestPoint(cx, cy) {
    if (!chartVals || !N) return -1;
    var plotW = cssW - M.l - M.r, center = (cx - M.l) / plotW * (N - 1);
    var tol = Math.max(1, 6 * (N - 1) / plotW);
    var from = Math.max(0, Math.floor(center - tol)), to = Math.min(N - 1, Math.ceil(center + tol));
    var step = Math.max(1, Math.floor((to - from) / 20000)), best = -1, bestD = 64;
    for (var r = from; r <= to; r += step) {
      if (!isFinite(chartVals[r])) continue;
      var dx = xOf(r) - cx, dy = yOf(chartVals[r]) - cy, d = dx * dx + dy * dy;
      if (d < bestD) { bestD = d; best = r; }
    }
    return best;
  }
  function canvasXY(ev) { var b = canvas.getBoundingClientRect(); return [ev.clientX - b.left, ev.clientY - b.top]; }
  canvas.addEventListener('click', function (ev) {
    var xy = canvasXY(ev), r = nearestPoint(xy[0], xy[1]);
    if (r >= 0) goToRow(r);
  });
  canvas.addEventListener('mousemove', function (ev) {
    var xy = canvasXY(ev), r = nearestPoint(xy[0], xy[1]);
    hover.textContent = r >= 0 ? 'row ' + (r + 1) + ': ' + (NAME >= 0 ? text(r, NAME) : '') + ' = ' +
      (metricSel.value === 'Result' ? text(r, RESULT) : text(r, colIndex(metricSel.value))) : '';
  });
  function defaultLog() { logBox.checked = /RelativeErr|diff|MaxAbsErr|EucDist/.test(metricSel.value); }
  defaultLog();
  metricSel.addEventListener('change', function () { defaultLog(); drawChart(); });
  logBox.addEventListener('change', drawChart);

  // ---------------------------------------------------------------- main: tree + table
  var main = el('div', 'main');
  var tree = D.tree, treeBox = null;
  if (tree) {
    var tb = el('div'); tb.id = 'treebox';
    treeBox = tb;
    add(tb, el('h2', null, 'Module tree'));
    main.appendChild(tb);
  }
  var right = el('div', 'right');
  var tbar = el('div', 'toolbar');
  var resSel = el('select'); resSel.id = 'filter-result';
  [['', 'all results'], ['error', 'error'], ['warning', 'warning'], ['pass', 'pass']].forEach(function (x) {
    var o = el('option', null, x[1]); o.value = x[0]; resSel.appendChild(o);
  });
  var nameIn = el('input'); nameIn.type = 'search'; nameIn.id = 'filter-name'; nameIn.placeholder = 'name contains\u2026';
  var viewCount = el('span', 'muted'); viewCount.id = 'view-count';
  add(tbar, el('h2', null, 'Rows'), resSel, nameIn, viewCount);
  var grid = el('div'); grid.id = 'grid';
  var ghead = el('div', 'ghead'), gspace = el('div', 'gspace'), glayer = el('div', 'glayer');
  glayer.id = 'table-body';
  add(grid, ghead, add(gspace, glayer));
  var details = el('div'); details.id = 'details';
  details.appendChild(el('span', 'muted', 'Click a row to see its cells and its stack (NPU_Stack_Info).'));
  add(right, tbar, grid, details);
  main.appendChild(right);
  body.appendChild(main);

  // column widths from the header and a sample of the cells
  var widths = C.map(function (name, col) {
    var longest = Math.min(name.length, 18);
    for (var i = 0; i < Math.min(N, 200); i++) {
      var t = col === STACK ? '' : text(Math.floor(i * N / Math.min(N, 200)), col);
      if (t.length > longest) longest = t.length;
    }
    return col === STACK ? 320 : Math.max(64, Math.min(380, 14 + longest * 7));
  });
  var totalW = widths.reduce(function (a, b) { return a + b; }, 0);
  ghead.style.width = totalW + 'px'; gspace.style.width = totalW + 'px';
  var numeric = C.map(function (name, col) { return K[col] === 'n'; });
  var sortCol = -1, sortDir = 0, order = null, view = null, selected = -1;
  var headCells = C.map(function (name, col) {
    var h = el('div', 'h', name);
    h.style.width = widths[col] + 'px';
    h.title = 'sort by ' + name;
    h.addEventListener('click', function () { sortBy(col); });
    ghead.appendChild(h);
    return h;
  });

  function sortBy(col) {
    if (sortCol !== col) { sortCol = col; sortDir = 1; } else { sortDir = sortDir === 1 ? -1 : sortDir === -1 ? 0 : 1; }
    headCells.forEach(function (h, i) { h.textContent = C[i] + (i === sortCol && sortDir ? (sortDir > 0 ? ' \u25b2' : ' \u25bc') : ''); });
    if (!sortDir) { order = null; applyFilter(); return; }
    var idx = new Int32Array(N);
    for (var i = 0; i < N; i++) idx[i] = i;
    var arr = Array.prototype.slice.call(idx), dirn = sortDir;
    if (numeric[col]) {
      var keys = new Float64Array(N);
      for (var r = 0; r < N; r++) keys[r] = num(r, col);
      arr.sort(function (a, b) {
        var x = keys[a], y = keys[b], xn = x !== x, yn = y !== y;
        if (xn || yn) return xn === yn ? a - b : xn ? 1 : -1;      // no number: always last
        return x < y ? -dirn : x > y ? dirn : a - b;
      });
    } else {
      var skeys = new Array(N);
      for (var r2 = 0; r2 < N; r2++) skeys[r2] = text(r2, col);
      arr.sort(function (a, b) { var x = skeys[a], y = skeys[b]; return x < y ? -dirn : x > y ? dirn : a - b; });
    }
    order = Int32Array.from(arr);
    applyFilter();
  }

  var lowerNames = null;
  function applyFilter() {
    var want = resSel.value === '' ? -2 : RES_CODE[resSel.value], needle = nameIn.value.trim().toLowerCase();
    if (needle && !lowerNames) {
      lowerNames = new Array(N);
      for (var i = 0; i < N; i++) {
        lowerNames[i] = ((NAME >= 0 ? text(i, NAME) : '') + '\n' + (BENCH >= 0 ? text(i, BENCH) : '')).toLowerCase();
      }
    }
    var out = new Int32Array(N), n = 0;
    for (var k = 0; k < N; k++) {
      var r = order ? order[k] : k;
      if (want !== -2 && res[r] !== want) continue;
      if (needle && lowerNames[r].indexOf(needle) < 0) continue;
      out[n++] = r;
    }
    view = out.subarray(0, n);
    viewCount.textContent = n + ' of ' + N + ' rows';
    layout();
    grid.scrollTop = 0;
    render(true);
  }
  resSel.addEventListener('change', applyFilter);
  var typing = 0;
  nameIn.addEventListener('input', function () { clearTimeout(typing); typing = setTimeout(applyFilter, 150); });

  var pool = [], spaceH = 0, scaled = false;
  function visibleCount() { return Math.max(1, Math.ceil((grid.clientHeight - ghead.offsetHeight) / ROW_H)); }
  function layout() {
    var want = view.length * ROW_H;
    scaled = want > MAX_SPACE;
    spaceH = scaled ? MAX_SPACE : want;
    gspace.style.height = spaceH + 'px';
    var need = visibleCount() + 2;
    while (pool.length < need) {
      var row = el('div', 'row');
      row.style.width = totalW + 'px';
      row.style.display = 'none';
      for (var col = 0; col < C.length; col++) {
        var cell = el('div', 'c' + (numeric[col] ? ' num' : ''));
        cell.style.width = widths[col] + 'px';
        row.appendChild(cell);
      }
      row.addEventListener('click', onRowClick);
      glayer.appendChild(row);
      pool.push(row);
    }
  }
  function firstVisible() {
    var vis = visibleCount();
    if (!scaled) return Math.floor(grid.scrollTop / ROW_H);
    var span = Math.max(1, spaceH - (grid.clientHeight - ghead.offsetHeight));
    return Math.round(Math.min(1, grid.scrollTop / span) * Math.max(0, view.length - vis));
  }
  var lastStart = -1;
  function render(force) {
    var start = Math.max(0, Math.min(firstVisible(), Math.max(0, view.length - 1)));
    if (!force && start === lastStart) return;
    lastStart = start;
    glayer.style.top = (scaled ? grid.scrollTop : start * ROW_H) + 'px';
    for (var i = 0; i < pool.length; i++) {
      var row = pool[i], k = start + i;
      if (k >= view.length) { row.style.display = 'none'; row._r = -1; continue; }
      var r = view[k];
      row.style.display = '';
      row._r = r;
      row.className = 'row r' + res[r] + (r === selected ? ' sel' : '');
      var cells = row.childNodes;
      for (var col = 0; col < C.length; col++) {
        var t = text(r, col);
        if (col === STACK && t.length > 200) t = t.slice(0, 200);
        cells[col].textContent = t;
        if (col === RESULT) cells[col].className = 'c res' + res[r];
      }
    }
  }
  grid.addEventListener('scroll', function () { render(false); }, { passive: true });
  window.addEventListener('resize', function () { layout(); render(true); drawChart(); });

  function onRowClick(ev) { var r = ev.currentTarget._r; if (r >= 0) selectRow(r); }
  function parseStack(t) {
    var s = (t || '').trim();
    if (!s || s === 'N/A' || s === 'None') return null;
    if (s.charAt(0) !== '[') return [s];
    var re = /'((?:[^'\\]|\\.)*)'|"((?:[^"\\]|\\.)*)"/g, m, out = [];
    while ((m = re.exec(s)) !== null) {
      var part = m[1] !== undefined ? m[1] : m[2];
      out.push(part.replace(/\\(n|t|'|"|\\)/g, function (x, y) { return y === 'n' ? '\n' : y === 't' ? '\t' : y; }));
    }
    return out.length ? out : [s];
  }
  function selectRow(r) {
    selected = r;
    render(true);
    details.textContent = '';
    var title = el('h3', null, 'Row ' + (r + 1) + ': ' + (NAME >= 0 ? text(r, NAME) : ''));
    var cellsBox = el('div'); cellsBox.id = 'cells';
    C.forEach(function (name, col) {
      if (col === STACK || col === NAME) return;
      add(cellsBox, el('div', null, name), el('div', null, text(r, col)));
    });
    var stack = el('pre'); stack.id = 'stack';
    var frames = STACK >= 0 ? parseStack(text(r, STACK)) : null;
    stack.textContent = frames ? frames.join('\n') : 'no stack recorded for this row (' +
      (STACK >= 0 ? 'N/A: stacks are on the first row of each API call' : 'no NPU_Stack_Info column') + ')';
    add(details, title, cellsBox, el('h3', null, 'Stack (NPU_Stack_Info)'), stack);
    if (MESSAGE >= 0) title.title = text(r, MESSAGE);
  }
  function goToRow(r) {
    if (r < 0 || r >= N) return;
    var k = view.indexOf(r);
    if (k < 0) {
      resSel.value = ''; nameIn.value = '';
      applyFilter();
      k = view.indexOf(r);
    }
    var vis = visibleCount(), top;
    if (!scaled) top = Math.max(0, (k - Math.floor(vis / 3)) * ROW_H);
    else top = Math.max(0, view.length > vis ? (k - Math.floor(vis / 3)) / (view.length - vis) : 0) *
      (spaceH - (grid.clientHeight - ghead.offsetHeight));
    grid.scrollTop = top;
    selectRow(r);
    grid.scrollIntoView({ block: 'nearest' });
  }

  // ---------------------------------------------------------------- module tree
  if (tree) {
    var kids = tree.names.map(function () { return null; }), roots = [];
    tree.parent.forEach(function (up, node) {
      if (up < 0) roots.push(node); else (kids[up] || (kids[up] = [])).push(node);
    });
    var treeRoot = el('ul'); treeRoot.id = 'tree';
    treeBox.appendChild(treeRoot);
    var fill = function (ul, nodes, from) {
      var end = Math.min(nodes.length, from + TREE_PAGE);
      for (var i = from; i < end; i++) ul.appendChild(treeItem(nodes[i]));
      if (end < nodes.length) {
        var more = el('li', 'link', 'show ' + Math.min(TREE_PAGE, nodes.length - end) + ' more of ' + (nodes.length - end));
        more.addEventListener('click', function () { ul.removeChild(more); fill(ul, nodes, end); });
        ul.appendChild(more);
      }
    };
    var treeItem = function (node) {
      var li = el('li');
      li.dataset.node = node;
      var tw = el('span', 'tw', kids[node] ? '\u25b8' : '');
      var dot = el('span', 'dot' + (tree.worst[node] >= 0 ? ' w' + tree.worst[node] : ''));
      var name = el('span', 'tn', tree.names[node]);
      name.title = tree.rows[node] + ' rows; ' + tree.errors[node] + ' errors, ' + tree.warnings[node] + ' warnings in this subtree';
      add(li, tw, dot, name);
      if (tree.errors[node]) li.appendChild(el('span', 'badge', String(tree.errors[node])));
      else if (tree.warnings[node]) li.appendChild(el('span', 'badge w', String(tree.warnings[node])));
      li.appendChild(el('span', 'cnt', tree.rows[node] + ' rows'));
      var open = null;
      tw.addEventListener('click', function () {
        if (!kids[node]) return;
        if (open) { li.removeChild(open); open = null; tw.textContent = '\u25b8'; return; }
        open = el('ul'); fill(open, kids[node], 0); li.appendChild(open); tw.textContent = '\u25be';
      });
      name.addEventListener('click', function () { if (tree.first[node] >= 0) goToRow(tree.first[node]); });
      return li;
    };
    fill(treeRoot, roots, 0);
  }

  // ---------------------------------------------------------------- start
  applyFilter();
  drawChart();
  function pointAt(r) {
    var b = canvas.getBoundingClientRect();
    return { x: b.left + xOf(r), y: b.top + yOf(chartVals[r]) };
  }
  window.msprobeReport = {
    rows: N, columns: C, text: text, goToRow: goToRow, pointAt: pointAt,
    introducedRows: function () { return introduced.slice(); },
    noiseRows: function () { return noise.slice(); },
    chartLayout: function () { return chartInfo; },
    firstPoint: function () { for (var r = 0; r < N; r++) if (isFinite(chartVals[r])) return r; return -1; },
    view: function () { return Array.prototype.slice.call(view); },
    selected: function () { return selected; },
    visibleRows: function () { return pool.filter(function (x) { return x._r >= 0 && x.style.display !== 'none'; }).map(function (x) { return x._r; }); },
    readyMs: performance.now()
  };
  document.documentElement.setAttribute('data-ready', '1');
})();
