// Helpers shared by the page script. Every string from the page data (host names, GPU names,
// kernel log lines, evidence) reaches the page through textContent or an attribute value,
// never through innerHTML, so host output can only ever be text. Class names are taken from
// fixed lists, never from the data.
var SEVERITIES = ["critical", "high", "medium", "low", "info"];
var STATUSES = ["ok", "degraded", "driver_not_responding", "no_gpu_tooling",
  "collection_failed", "timed_out", "auth_failed", "unreachable",
  "not_audited"];
var RISK_STATUSES = ["open", "waived", "resolved"];
var DASH = "\u2014";

function allowed(value, list) {
  return list.indexOf(value) !== -1 ? value : "unknown";
}

function el(tag, className, text) {
  var node = document.createElement(tag);
  if (className) { node.className = className; }
  if (text !== undefined && text !== null) { node.textContent = String(text); }
  return node;
}

function add(parent) {
  for (var i = 1; i < arguments.length; i += 1) {
    var child = arguments[i];
    if (child === null || child === undefined) { continue; }
    parent.appendChild(typeof child === "object" ? child : document.createTextNode(String(child)));
  }
  return parent;
}

function badge(severity) {
  return el("span", "badge sev-" + allowed(severity, SEVERITIES), severity || DASH);
}

function statusBadge(status) {
  return el("span", "status st-" + allowed(status, STATUSES), status);
}

function riskStatus(status) {
  return el("span", "rstatus rs-" + allowed(status, RISK_STATUSES), status);
}

function link(href, text, className) {
  var a = el("a", className, text);
  a.setAttribute("href", href);
  return a;
}

function plural(count, word) {
  return count + " " + word + (count === 1 ? "" : "s");
}

// A table from a header list and an array of rows, each row an array of cells; a cell is a
// node, a string, or {node|text, cls} for a styled cell.
function table(className, headers, rows) {
  var t = el("table", className);
  var head = t.appendChild(el("thead")).appendChild(el("tr"));
  headers.forEach(function (h) { head.appendChild(el("th", null, h)); });
  var body = t.appendChild(el("tbody"));
  rows.forEach(function (cells) {
    var tr = body.appendChild(el("tr"));
    cells.forEach(function (cell) { tr.appendChild(cellNode(cell)); });
  });
  return t;
}

function cellNode(cell) {
  var td = el("td");
  if (cell !== null && typeof cell === "object" && !(cell instanceof Node)) {
    if (cell.cls) { td.className = cell.cls; }
    if (cell.title) { td.title = cell.title; }
    add(td, cell.node !== undefined ? cell.node : cell.text);
  } else {
    add(td, cell === null || cell === undefined || cell === "" ? DASH : cell);
  }
  return td;
}

function scroller(node) {
  return add(el("div", "scroll"), node);
}

// Text with each `backtick pair` as a <code> element, read as report/html.py code_spans()
// reads the text it writes into the page; every piece goes in as text.
var CODE_SPAN = /`([^`\n]+)`/g;
function codeText(text) {
  var source = text === null || text === undefined ? "" : String(text);
  var fragment = document.createDocumentFragment();
  var last = 0;
  var match;
  CODE_SPAN.lastIndex = 0;
  while ((match = CODE_SPAN.exec(source)) !== null) {
    add(fragment, source.slice(last, match.index) || null, el("code", null, match[1]));
    last = CODE_SPAN.lastIndex;
  }
  add(fragment, source.slice(last) || null);
  return fragment;
}

function excerpt(label, text) {
  var details = el("details", "excerpt");
  add(details, el("summary", null, label), el("pre", null, text));
  return details;
}

function debounce(fn, ms) {
  var timer = null;
  return function () {
    clearTimeout(timer);
    timer = setTimeout(fn, ms);
  };
}
