// A minimal DOM for running msprobe/data/report/monitor.js under Node.js in the tests: elements record their tag,
// attributes, children, text and listeners; setting innerHTML throws (the page must never parse names as markup).
// usage: node dom_shim.js page.html  -> prints a JSON summary of what the page built, after clicking the first anomaly
'use strict';
const fs = require('fs');
const html = fs.readFileSync(process.argv[2], 'utf8');
const data = html.match(/<script type="application\/json" id="msprobe-data">([\s\S]*?)<\/script>/)[1];
const script = html.match(/<script>\n([\s\S]*?)\n<\/script>/)[1];

class Node {
  constructor(tag) {
    this.tagName = tag; this.attributes = {}; this.children = []; this.listeners = {}; this.style = {};
    this._text = ''; this.value = ''; this.checked = false; this.disabled = false;
  }
  setAttribute(k, v) { this.attributes[k] = String(v); if (k === 'value') this.value = String(v); }
  appendChild(c) { this.children.push(c); c.parentNode = this; if (this.tagName === 'select' && !this.value) this.value = c.value; return c; }
  removeChild(c) { this.children = this.children.filter((x) => x !== c); return c; }
  get firstChild() { return this.children[0] || null; }
  addEventListener(kind, f) { (this.listeners[kind] = this.listeners[kind] || []).push(f); }
  fire(kind) { (this.listeners[kind] || []).forEach((f) => f({})); }
  scrollIntoView() {}
  set textContent(t) { this._text = String(t); this.children = []; }
  get textContent() { return this._text + this.children.map((c) => c.textContent).join(''); }
  set innerHTML(_) { throw new Error('innerHTML used'); }
  all(tag) { const out = []; const walk = (n) => { if (n.tagName === tag) out.push(n); n.children.forEach(walk); }; walk(this); return out; }
}
const body = new Node('body');
global.document = {
  body,
  getElementById: (id) => (id === 'msprobe-data' ? { textContent: data } : null),
  createElement: (tag) => new Node(tag),
  createElementNS: (_, tag) => new Node(tag),
  createTextNode: (t) => { const n = new Node('#text'); n.textContent = t; return n; },
};
eval(script);   // eslint-disable-line no-eval
const summary = () => ({
  svgs: body.all('svg').length,
  paths: body.all('path').map((p) => p.attributes.d.length),
  marks: body.all('line').length,
  rows: body.all('tr').length - 1,
  text: body.textContent,
});
const before = summary();
const firstRow = body.all('tr')[1];
let after = null;
if (firstRow) { firstRow.fire('click'); after = summary(); }
process.stdout.write(JSON.stringify({ before, after }));
