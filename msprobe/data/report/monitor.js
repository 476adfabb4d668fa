/* msprobe monitor report: inlined into the page by msprobe/monitor/report.py. Vanilla JS, no network, no closing-tag
   text. Every name from the run is shown through textContent (never parsed as markup). */
(function () {
  'use strict';
  var D = JSON.parse(document.getElementById('msprobe-data').textContent);
  var S = D.summary, SERIES = D.series, A = D.anomalies, PAGE = 24, W = 320, H = 130, PAD = 30;
  var NS = 'http://www.w3.org/2000/svg';
  var KIND_COLOR = { nan: '#d93025', inf: '#d93025', spike: '#e8a400', drop: '#1a73e8', divergence: '#8e24aa' };

  function el(tag, attrs, txt) {
    var e = document.createElement(tag);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (txt !== undefined && txt !== null) e.textContent = txt;
    return e;
  }
  function svg(tag, attrs) {
    var e = document.createElementNS(NS, tag);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    return e;
  }
  function fmt(v) {
    if (v === null || v === undefined) return '-';
    if (typeof v === 'string') return v;
    var a = Math.abs(v);
    return (a !== 0 && (a < 1e-3 || a >= 1e5)) ? v.toExponential(3) : String(Number(v.toPrecision(5)));
  }
  function card(parent, key, value, cls) {
    var c = el('div', { 'class': 'card' + (cls ? ' ' + cls : '') });
    c.appendChild(el('div', { 'class': 'v' }, value));
    c.appendChild(el('div', { 'class': 'k' }, key));
    parent.appendChild(c);
  }

  // ---------------------------------------------------------------- header and summary
  var header = el('header');
  header.appendChild(el('h1', null, 'msprobe monitor report'));
  header.appendChild(el('span', { 'class': 'muted' }, S.directory));
  document.body.appendChild(header);
  var top = el('section');
  var cards = el('div', { 'class': 'cards' });
  card(cards, 'ranks', String(S.ranks.length));
  card(cards, 'steps', S.steps ? S.steps[0] + ' - ' + S.steps[1] : 'none');
  card(cards, 'series (metric and module)', S.shown < S.series ? S.shown + ' of ' + S.series : String(S.series));
  card(cards, 'anomalies', String(S.anomalies), S.anomalies ? 'error' : 'pass');
  card(cards, 'the first (the origin)', S.first ? S.first_text : 'none', 'wide');
  if (S.divergence) card(cards, 'first divergence from the golden run', S.divergence_text, 'wide');
  top.appendChild(cards);
  var notes = [];
  if (S.source) notes.push('anomalies: ' + S.source);
  if (S.shown < S.series) notes.push((S.series - S.shown) + ' series not drawn (the page draws at most ' + S.shown +
    ': those with anomalies first, then in the order they were taken)');
  Object.keys(S.strides).forEach(function (r) {
    if (S.strides[r] > 1) notes.push('rank ' + r + ': every ' + S.strides[r] + 'th step is drawn (a long run)');
  });
  if (S.listed < S.anomalies) notes.push('the first ' + S.listed + ' anomalies are listed');
  if (S.first) notes.push('next: msprobe monitor analyse -d ' + S.directory + ' writes the dump config of the origin');
  notes.forEach(function (n) { top.appendChild(el('div', { 'class': 'muted' }, n)); });
  document.body.appendChild(top);

  // ---------------------------------------------------------------- plots
  var plots = el('section');
  plots.appendChild(el('h2', null, 'Metrics over the steps'));
  var bar = el('div', { 'class': 'toolbar' });
  var search = el('input', { type: 'search', placeholder: 'filter names (substring)', size: '32' });
  var groupSel = el('select'), opSel = el('select'), onlyBox = el('input', { type: 'checkbox' });
  var logBox = el('input', { type: 'checkbox' });
  var groups = ['all groups'];
  SERIES.forEach(function (s) { if (groups.indexOf(s.group) < 0) groups.push(s.group); });
  groups.forEach(function (g) { groupSel.appendChild(el('option', { value: g }, g)); });
  D.ops.forEach(function (o) { opSel.appendChild(el('option', { value: o }, o)); });
  var prev = el('button', null, '\u2039 previous'), next = el('button', null, 'next \u203a');
  var pageInfo = el('span', { 'class': 'muted' });
  bar.appendChild(search); bar.appendChild(groupSel); bar.appendChild(opSel);
  var l1 = el('label'); l1.appendChild(onlyBox); l1.appendChild(document.createTextNode(' with anomalies only'));
  var l2 = el('label'); l2.appendChild(logBox); l2.appendChild(document.createTextNode(' log scale'));
  bar.appendChild(l1); bar.appendChild(l2); bar.appendChild(prev); bar.appendChild(pageInfo); bar.appendChild(next);
  var legend = el('div', { 'class': 'legend' });
  Object.keys(KIND_COLOR).forEach(function (k) {
    var s = el('span'); var i = el('i'); i.style.background = KIND_COLOR[k]; s.appendChild(i);
    s.appendChild(document.createTextNode(k)); legend.appendChild(s);
  });
  bar.appendChild(legend);
  plots.appendChild(bar);
  var grid = el('div');
  grid.style.display = 'flex'; grid.style.flexWrap = 'wrap'; grid.style.gap = '8px';
  plots.appendChild(grid);
  document.body.appendChild(plots);

  var page = 0, selected = null;
  function visible() {
    var q = search.value.toLowerCase(), g = groupSel.value, op = opSel.value;
    return SERIES.filter(function (s) {
      if (selected !== null) return s === selected;
      if (g !== 'all groups' && s.group !== g) return false;
      if (onlyBox.checked && !s.anomalies.length) return false;
      if (!(op in s.values)) return false;
      return !q || s.name.toLowerCase().indexOf(q) >= 0 || s.group.toLowerCase().indexOf(q) >= 0;
    });
  }
  function plot(s, op) {
    var box = el('div', { 'class': 'card' });
    box.style.padding = '4px 6px';
    var title = el('div', null, s.group + ' ' + s.name + (s.micro ? ' (micro-step ' + s.micro + ')' : ''));
    title.style.fontSize = '12px'; title.style.maxWidth = W + 'px'; title.style.overflowWrap = 'anywhere';
    box.appendChild(title);
    box.appendChild(el('div', { 'class': 'muted' }, 'rank ' + s.rank + ', ' + s.stage + ', ' + op));
    var steps = D.steps[String(s.rank)], ys = s.values[op], n = steps.length;
    var image = svg('svg', { width: W, height: H, viewBox: '0 0 ' + W + ' ' + H });
    var log = logBox.checked, lo = Infinity, hi = -Infinity;
    function y(v) { return log ? (v > 0 ? Math.log10(v) : null) : v; }
    ys.forEach(function (v) { if (typeof v === 'number') { var t = y(v); if (t !== null) { lo = Math.min(lo, t); hi = Math.max(hi, t); } } });
    if (!(lo <= hi)) { lo = 0; hi = 1; }
    if (hi === lo) { hi += 1; lo -= 1; }
    var x0 = steps[0], x1 = steps[n - 1] === x0 ? x0 + 1 : steps[n - 1];
    function px(step) { return PAD + (step - x0) / (x1 - x0) * (W - PAD - 6); }
    function py(t) { return 6 + (hi - t) / (hi - lo) * (H - 24); }
    image.appendChild(svg('rect', { x: PAD, y: 6, width: W - PAD - 6, height: H - 24, fill: '#fafbfc', stroke: '#dde2ea' }));
    var path = '', pen = false;
    for (var i = 0; i < n; i++) {
      var v = ys[i], t = typeof v === 'number' ? y(v) : null;
      if (t === null) { pen = false; if (typeof v === 'string') image.appendChild(svg('circle', { cx: px(steps[i]), cy: 9, r: 3, fill: '#d93025' })); continue; }
      path += (pen ? 'L' : 'M') + px(steps[i]).toFixed(1) + ' ' + py(t).toFixed(1);
      pen = true;
    }
    image.appendChild(svg('path', { d: path, fill: 'none', stroke: '#1a73e8', 'stroke-width': 1.2 }));
    s.anomalies.forEach(function (k) {
      var a = A[k], x = px(a[0]), first = k === 0;
      var mark = svg('line', { x1: x, x2: x, y1: 6, y2: H - 18, stroke: KIND_COLOR[a[7]] || '#d93025',
                               'stroke-width': first ? 2.5 : 1, 'stroke-dasharray': first ? '' : '3 2' });
      var tip = svg('title'); tip.textContent = 'step ' + a[0] + ': ' + a[6] + ' ' + a[7] + ' (' + fmt(a[8]) + ' against ' + fmt(a[9]) + ')' + (first ? ' - the origin' : '');
      mark.appendChild(tip);
      image.appendChild(mark);
    });
    [[lo, H - 20], [hi, 12]].forEach(function (p) {
      var t = svg('text', { x: 2, y: p[1], 'font-size': 9, fill: '#6b7380' });
      t.textContent = fmt(log ? Math.pow(10, p[0]) : p[0]);
      image.appendChild(t);
    });
    [[x0, PAD, 'start'], [steps[n - 1], W - 6, 'end']].forEach(function (p) {
      var t = svg('text', { x: p[1], y: H - 4, 'font-size': 9, fill: '#6b7380', 'text-anchor': p[2] });
      t.textContent = 'step ' + p[0];
      image.appendChild(t);
    });
    box.appendChild(image);
    return box;
  }
  function draw() {
    var list = visible(), op = opSel.value, pages = Math.max(1, Math.ceil(list.length / PAGE));
    page = Math.min(page, pages - 1);
    while (grid.firstChild) grid.removeChild(grid.firstChild);
    list.slice(page * PAGE, page * PAGE + PAGE).forEach(function (s) { grid.appendChild(plot(s, op)); });
    pageInfo.textContent = list.length ? 'page ' + (page + 1) + ' of ' + pages + ' (' + list.length + ' plots)' : 'no plot';
    prev.disabled = page === 0; next.disabled = page >= pages - 1;
  }
  [search, groupSel, opSel, onlyBox, logBox].forEach(function (c) {
    c.addEventListener('input', function () { page = 0; selected = null; draw(); });
    c.addEventListener('change', function () { page = 0; selected = null; draw(); });
  });
  prev.addEventListener('click', function () { page--; draw(); });
  next.addEventListener('click', function () { page++; draw(); });

  // ---------------------------------------------------------------- anomalies
  var table = el('section');
  table.appendChild(el('h2', null, 'Anomalies, in the order they happened (click one to see its plot)'));
  var box = el('div', { id: 'grid' });
  box.style.height = 'auto'; box.style.maxHeight = '420px';
  var t = el('table');
  t.style.borderCollapse = 'collapse'; t.style.fontSize = '12px';
  var head = el('tr');
  ['step', 'rank', 'micro', 'stage', 'module', 'name', 'metric', 'kind', 'value', 'baseline', 'rule', 'message'].forEach(function (h) {
    var th = el('th', null, h); th.style.textAlign = 'left'; th.style.padding = '2px 6px'; head.appendChild(th);
  });
  t.appendChild(head);
  A.forEach(function (a, k) {
    var tr = el('tr', { 'class': 'row' });
    if (k === 0) tr.style.fontWeight = '600';
    [a[0], a[1], a[2], a[3], a[4] || '(model)', a[5], a[6], a[7], fmt(a[8]), fmt(a[9]), a[10], a[11]].forEach(function (v, j) {
      var td = el('td', null, String(v)); td.style.padding = '1px 6px';
      if (j === 7) td.style.color = KIND_COLOR[a[7]] || '';
      tr.appendChild(td);
    });
    tr.addEventListener('click', function () {
      var s = SERIES.filter(function (x) { return x.anomalies.indexOf(k) >= 0; })[0];
      if (!s) return;
      selected = s;
      var op = a[6].split('.').pop();
      if (op in s.values) opSel.value = op;
      page = 0; draw(); plots.scrollIntoView();
    });
    t.appendChild(tr);
  });
  box.appendChild(t);
  table.appendChild(box);
  document.body.appendChild(table);

  if (S.first) { onlyBox.checked = true; opSel.value = S.first.metric.split('.').pop() in (SERIES[0] || { values: {} }).values ? S.first.metric.split('.').pop() : 'norm'; }
  draw();
}());
