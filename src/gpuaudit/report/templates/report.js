// The register's behaviour: filters and search (they toggle a class on whole risks and host
// sections), column sorting, expanding a risk into its findings, drawing a host's section on
// first open, and opening everything before printing. Parts that grow with the fleet are drawn
// only when asked for, so a page of thousands of hosts opens without drawing them all.
var data = JSON.parse(document.getElementById("gpuaudit-data").textContent);
var form = document.getElementById("filters");
var riskTable = document.getElementById("risks-table");
var counter = document.getElementById("filter-count");
var hostCounter = document.getElementById("host-count");
var groups = riskTable ? Array.prototype.slice.call(riskTable.tBodies) : [];
var hostSections = Array.prototype.slice.call(document.querySelectorAll("details.host"));
var FINDINGS_PAGE = 100;
var STATUS_RANK = {open: 0, waived: 1, resolved: 2};

// Maps keyed by host names need no prototype: a host may be called "constructor".
var hostIndex = Object.create(null);
data.hosts.forEach(function (h, i) {
  if (hostIndex[h.name] === undefined) { hostIndex[h.name] = i; }
});
var riskOf = [];
data.risks.forEach(function (r) { r.findings.forEach(function (i) { riskOf[i] = r.index; }); });

var riskTexts = [];
var findingTexts = [];
function haystack(parts) {
  return parts.filter(function (p) { return p !== null && p !== undefined; })
    .join("\n").toLowerCase();
}
function riskText(r) {
  if (riskTexts[r.index] === undefined) {
    riskTexts[r.index] = haystack([r.id, r.rule, r.title, r.category, r.owner, r.status,
      r.remediation, r.operation, r.waiver && r.waiver.reason]);
  }
  return riskTexts[r.index];
}
function findingText(i) {
  if (findingTexts[i] === undefined) {
    var f = data.findings[i];
    var ev = f.evidence;
    var gpu = f.gpu === null || f.gpu === undefined ? null : "GPU " + f.gpu;
    findingTexts[i] = haystack([f.host, gpu, f.gpu_name, f.gpu_uuid, f.message, ev.fact,
      ev.actual, ev.expected, ev.excerpt, f.override_reason]);
  }
  return findingTexts[i];
}
function has(text, needle) { return String(text).toLowerCase().indexOf(needle) !== -1; }

function readFilters() {
  var f = {severity: Object.create(null), q: "", host: ""};
  if (!form) { return f; }
  Array.prototype.forEach.call(form.querySelectorAll("input[name=severity]"), function (box) {
    f.severity[box.value] = box.checked;
  });
  ["status", "category", "owner", "rule"].forEach(function (name) {
    f[name] = form.elements[name].value;
  });
  f.host = form.elements.host.value.trim().toLowerCase();
  f.q = form.elements.q.value.trim().toLowerCase();
  return f;
}

function riskMatches(r, f) {
  if (f.severity[r.severity] === false) { return false; }
  if ((f.status && r.status !== f.status) || (f.category && r.category !== f.category) ||
      (f.owner && r.owner !== f.owner) || (f.rule && r.rule !== f.rule)) { return false; }
  if (f.host && !r.affected_hosts.some(function (h) { return has(h, f.host); })) { return false; }
  return !f.q || riskText(r).indexOf(f.q) !== -1 ||
    r.findings.some(function (i) { return findingText(i).indexOf(f.q) !== -1; });
}

// Within a shown risk: the findings the host filter and the search point at (all of them when
// the search matched the risk itself).
function findingShown(r, i, f) {
  if (f.host && !has(data.findings[i].host, f.host)) { return false; }
  return !f.q || riskText(r).indexOf(f.q) !== -1 || findingText(i).indexOf(f.q) !== -1;
}

// What the search finds a host by besides its findings: its name and summary, and each GPU's
// UUID, serial, bus id and name (a UUID or serial from a ticket finds its host).
var gpuAt = {};
data.gpu_columns.forEach(function (name, i) { gpuAt[name] = i; });
var hostTexts = [];
function hostText(h) {
  var parts = [h.name, h.gpu_models, h.driver, h.status, h.status_detail];
  if (h.search) { return haystack(parts.concat(h.search)); }  // details not in the page
  h.gpus.forEach(function (g) {
    parts.push(g[gpuAt.uuid], g[gpuAt.serial], g[gpuAt.bus], g[gpuAt.name]);
  });
  h.xid.incidents.forEach(function (i) { parts.push(i.what); });
  return haystack(parts);
}
function hostMatches(h, f) {
  if (f.host && !has(h.name, f.host)) { return false; }
  if (!f.q) { return true; }
  if (hostTexts[h.position] === undefined) { hostTexts[h.position] = hostText(h); }
  return hostTexts[h.position].indexOf(f.q) !== -1 ||
    h.findings.some(function (i) { return findingText(i).indexOf(f.q) !== -1; });
}

function riskMeta(r) {
  var meta = el("div", "risk-meta small");
  add(meta, el("span", null, "likelihood " + (r.likelihood === null ? DASH : r.likelihood) +
    " \u00d7 impact " + (r.impact === null ? DASH : r.impact) + " = score " + r.score +
    " \u00b7 rule " + r.rule + " \u00b7 " + plural(r.affected_hosts.length, "host") +
    (r.gpu_count ? ", " + plural(r.gpu_count, "GPU") : "")));
  if (r.waiver) {
    var w = r.waiver;
    add(meta, add(el("div", "waiver" + (w.expired ? " expired" : "")),
      w.expired ? el("span", "flag", "waiver expired") : "waived", ": " + w.reason +
      " (" + (w.expires ? "until " + w.expires : "no expiry") + (w.owner ? ", " + w.owner : "") +
      (w.hosts.length ? "; hosts: " + w.hosts.join(", ") : "") + ")"));
  }
  if (r.references.length) {
    add(meta, el("div", "muted", "References"));
    var refs = meta.appendChild(el("ul", "refs"));
    r.references.forEach(function (ref) {
      add(refs, add(el("li"), ref[1] ? link(ref[0], ref[0]) : ref[0]));
    });
    Array.prototype.forEach.call(refs.querySelectorAll("a"), function (a) {
      a.rel = "noopener noreferrer";
    });
  }
  return meta;
}

function drawFindings(group, f, limit) {
  var r = data.risks[+group.dataset.risk];
  var cell = group.querySelector("tr.risk-detail > td");
  if (!cell) {
    var row = group.appendChild(el("tr", "risk-detail"));
    cell = row.appendChild(el("td"));
    cell.colSpan = 9;
  }
  cell.textContent = "";
  var shown = r.findings.filter(function (i) { return findingShown(r, i, f); });
  var t = table("findings", ["Severity", "Host", "GPU", "Message", "Evidence"], []);
  shown.slice(0, limit).forEach(function (i) {
    t.tBodies[0].appendChild(findingRow(data.findings[i], i, data, hostIndex));
  });
  add(cell, riskMeta(r), scroller(t));
  if (shown.length > limit) {
    var more = el("button", "more no-print", "Show " +
      Math.min(FINDINGS_PAGE, shown.length - limit) + " more (" + (shown.length - limit) +
      " not shown)");
    more.type = "button";
    more.dataset.limit = String(limit + FINDINGS_PAGE);
    add(cell, more);
  }
  if (shown.length < r.findings.length) {
    add(cell, el("p", "small muted", shown.length + " of " +
      plural(r.findings.length, "finding") + " match the filters."));
  }
}

function setOpen(group, open) {
  group.classList.toggle("open", open);
  var button = group.querySelector("button.expand");
  button.setAttribute("aria-expanded", String(open));
  button.textContent = open ? "\u25be" : "\u25b8";
  if (open) { drawFindings(group, readFilters(), FINDINGS_PAGE); }
}

// A large fleet's page keeps each host's details in files beside it (data.chunk_files, of
// data.chunk_hosts hosts each): a file is loaded, by a script element (file:// pages cannot
// fetch), the first time one of its hosts is drawn, and hands its details to
// gpuauditHostChunk. A page whose hosts carry their details (no h.chunk) needs none of this.
var chunkState = [];  // per file: undefined, "loading" or "loaded"
var chunkWaiting = [];  // per file: what to call once it is loaded (true) or failed (false)
window.gpuauditHostChunk = function (n, details) {
  if (chunkState[n] !== "loading" || !Array.isArray(details)) { return; }
  details.forEach(function (d, k) {
    var h = data.hosts[n * data.chunk_hosts + k];
    if (h && h.chunk === n) { Object.keys(d).forEach(function (key) { h[key] = d[key]; }); }
  });
  chunkState[n] = "loaded";
};
function chunkDone(n, loaded) {
  if (chunkState[n] !== "loaded") { chunkState[n] = undefined; }
  var waiting = chunkWaiting[n] || [];
  chunkWaiting[n] = [];
  waiting.forEach(function (call) { call(loaded && chunkState[n] === "loaded"); });
}
function withDetails(h, call) {
  if (h.chunk === undefined || chunkState[h.chunk] === "loaded") { call(true); return; }
  var n = h.chunk;
  (chunkWaiting[n] = chunkWaiting[n] || []).push(call);
  if (chunkState[n] === "loading") { return; }
  chunkState[n] = "loading";
  var script = document.createElement("script");
  script.src = data.chunk_files[n];
  script.onload = function () { chunkDone(n, true); };
  script.onerror = function () { chunkDone(n, false); };
  document.head.appendChild(script);
}
function drawHost(section, then) {
  if (section.dataset.drawn) { if (then) { then(); } return; }
  section.dataset.drawn = "true";
  var h = data.hosts[+section.dataset.host];
  withDetails(h, function (loaded) {
    var body = section.querySelector(".host-body");
    if (loaded) {
      body.appendChild(renderHostBody(h, data, riskOf));
    } else {
      delete section.dataset.drawn;  // opening it again tries again
      body.textContent = "";
      body.appendChild(el("p", "warn", "This host's details are in " + data.chunk_files[h.chunk] +
        " beside this page, which could not be loaded: open the page from the run directory " +
        "it was written in, with its page/ folder."));
    }
    if (then) { then(); }
  });
}
// Every host of ``sections`` drawn, then ``then`` (at once when their details are here).
// The detail files they need are all loaded first and the hosts drawn after, in one go: drawn
// as each file arrives, the browser would lay out the growing page once per file.
function drawHosts(sections, then) {
  var needed = {};
  sections.forEach(function (section) {
    var h = data.hosts[+section.dataset.host];
    if (h.chunk !== undefined && chunkState[h.chunk] !== "loaded" && !(h.chunk in needed)) {
      needed[h.chunk] = h;
    }
  });
  var files = Object.keys(needed);
  var left = files.length + 1;
  var drawAll = function () {
    left -= 1;
    if (left > 0) { return; }
    var hosts = sections.length + 1;
    var one = function () { hosts -= 1; if (hosts === 0 && then) { then(); } };
    sections.forEach(function (section) { drawHost(section, one); });
    one();
  };
  files.forEach(function (n) { withDetails(needed[n], drawAll); });
  drawAll();
}

function apply() {
  var f = readFilters();
  var shown = 0;
  groups.forEach(function (group) {
    var visible = riskMatches(data.risks[+group.dataset.risk], f);
    group.classList.toggle("filtered-out", !visible);
    if (visible) {
      shown += 1;
      if (group.classList.contains("open")) { drawFindings(group, f, FINDINGS_PAGE); }
    }
  });
  if (counter) {
    counter.textContent = shown === groups.length ? plural(groups.length, "risk") :
      "Showing " + shown + " of " + plural(groups.length, "risk") + " (filtered)";
  }
  var hostsShown = 0;
  hostSections.forEach(function (section) {
    var visible = hostMatches(data.hosts[+section.dataset.host], f);
    section.classList.toggle("filtered-out", !visible);
    hostsShown += visible ? 1 : 0;
  });
  if (hostCounter) {
    hostCounter.textContent = hostsShown === hostSections.length ?
      plural(hostSections.length, "host") :
      "Showing " + hostsShown + " of " + plural(hostSections.length, "host");
  }
  shownCounts = {risks: shown, hosts: hostsShown};
  writePrintNote(f);
}

// The printed header names the filters, so a filtered print cannot pass for the whole register.
var printNote = document.getElementById("print-filters");
var summaryOnly = document.getElementById("print-summary-only");
var shownCounts = {risks: 0, hosts: 0};
function writePrintNote(f) {
  var parts = [];
  var severities = SEVERITIES.filter(function (s) { return f.severity[s] !== false; });
  if (severities.length < SEVERITIES.length) {
    parts.push("severity " + (severities.join(", ") || "none"));
  }
  ["status", "category", "owner", "rule"].forEach(function (name) {
    if (f[name]) { parts.push(name + " " + f[name]); }
  });
  if (f.host) { parts.push("host contains \u201c" + form.elements.host.value.trim() + "\u201d"); }
  if (f.q) { parts.push("search \u201c" + form.elements.q.value.trim() + "\u201d"); }
  var text = parts.length ? "Filtered: " + parts.join("; ") + ". Shown: " + shownCounts.risks +
    " of " + plural(groups.length, "risk") + ", " + shownCounts.hosts + " of " +
    plural(hostSections.length, "host") + "." :
    "No filters: every risk and host of the register is shown.";
  if (summaryOnly && summaryOnly.checked) {
    text += " Summary only: findings and host details are left out (register.json holds them).";
  }
  printNote.textContent = text;
}

var sortState = {key: "severity", desc: true};
function compare(a, b, key) {
  switch (key) {
  case "score": return a.score - b.score || a.severity_rank - b.severity_rank;
  case "status": return STATUS_RANK[a.status] - STATUS_RANK[b.status];
  case "hosts": return a.affected_hosts.length - b.affected_hosts.length;
  case "id": return a.id.localeCompare(b.id, undefined, {numeric: true});
  case "owner": return a.owner.localeCompare(b.owner);
  default: return a.severity_rank - b.severity_rank || a.score - b.score;
  }
}
function sortBy(key) {
  var numeric = ["severity", "score", "hosts"].indexOf(key) !== -1;
  sortState = {key: key, desc: sortState.key === key ? !sortState.desc : numeric};
  var sign = sortState.desc ? -1 : 1;
  groups.sort(function (ga, gb) {
    var a = data.risks[+ga.dataset.risk];
    var b = data.risks[+gb.dataset.risk];
    return sign * compare(a, b, key) || a.index - b.index;
  });
  groups.forEach(function (group) { riskTable.appendChild(group); });
  Array.prototype.forEach.call(riskTable.querySelectorAll("button.sort"), function (button) {
    var th = button.parentNode;
    if (button.dataset.sort === key) {
      th.setAttribute("aria-sort", sortState.desc ? "descending" : "ascending");
    } else {
      th.removeAttribute("aria-sort");
    }
  });
}

function reveal(hash) {
  var target = hash.length > 1 ? document.getElementById(decodeURIComponent(hash.slice(1))) : null;
  if (!target) { return; }
  if (target.matches("details.host")) {
    target.classList.remove("filtered-out");
    drawHost(target);
    target.open = true;
  } else if (target.matches("tbody.risk") && !target.classList.contains("open")) {
    setOpen(target, true);
  }
}

// Printing shows everything the filters leave visible: every shown risk with all its findings,
// every shown host section and every excerpt, put back as they were afterwards.
// "Print summary only" prints the summaries and one row per risk, and draws nothing more.
var printed = null;
function beforePrint() {
  if (printed) { return; }
  var f = readFilters();
  printed = {risks: [], details: []};
  writePrintNote(f);
  if (summaryOnly && summaryOnly.checked) {
    document.body.classList.add("print-summary");
    return;
  }
  groups.forEach(function (group) {
    if (group.classList.contains("filtered-out")) { return; }
    if (!group.classList.contains("open")) { printed.risks.push(group); }
    group.classList.add("open");
    drawFindings(group, f, Infinity);
  });
  drawHosts(hostSections.filter(function (section) {
    return !section.classList.contains("filtered-out");
  }));
  Array.prototype.forEach.call(document.querySelectorAll("main details:not([open])"),
    function (details) {
      if (!details.closest(".filtered-out")) {
        details.open = true;
        printed.details.push(details);
      }
    });
}
function afterPrint() {
  if (!printed) { return; }
  document.body.classList.remove("print-summary");
  printed.details.forEach(function (details) { details.open = false; });
  printed.risks.forEach(function (group) { setOpen(group, false); });
  groups.forEach(function (group) {
    if (group.classList.contains("open")) { drawFindings(group, readFilters(), FINDINGS_PAGE); }
  });
  printed = null;
}

function openHosts(open) {
  var pending = hostSections.filter(function (s) { return !s.classList.contains("filtered-out"); });
  var next = 0;
  // In slices, so opening thousands of sections never blocks the page for long.
  (function step() {
    var end = Math.min(next + 25, pending.length);
    for (; next < end; next += 1) {
      if (open) { drawHost(pending[next]); }
      pending[next].open = open;
    }
    if (next < pending.length) { setTimeout(step, 0); }
  })();
}

if (form) {
  var searchSoon = debounce(apply, 150);
  var typed = function (event) {
    return event.target.name === "q" || event.target.name === "host";
  };
  // Typing waits for a pause; ticking and choosing apply at once.
  form.addEventListener("input", function (event) { if (typed(event)) { searchSoon(); } });
  form.addEventListener("change", function (event) { if (!typed(event)) { apply(); } });
  form.addEventListener("reset", function () { setTimeout(apply, 0); });
  form.addEventListener("submit", function (event) { event.preventDefault(); });
}
if (riskTable) {
  riskTable.addEventListener("click", function (event) {
    var target = event.target;
    var sort = target.closest("button.sort");
    var more = target.closest("button.more");
    if (sort) {
      sortBy(sort.dataset.sort);
    } else if (more) {
      drawFindings(more.closest("tbody.risk"), readFilters(), +more.dataset.limit);
    } else if (target.closest("button.expand") ||
               (target.closest("tr.risk-row") && !target.closest("a"))) {
      var group = target.closest("tbody.risk");
      setOpen(group, !group.classList.contains("open"));
    }
  });
}
var hostsSection = document.getElementById("hosts");
hostsSection.addEventListener("toggle", function (event) {
  if (event.target.matches("details.host") && event.target.open) { drawHost(event.target); }
}, true);
document.getElementById("hosts-expand").addEventListener("click", function () { openHosts(true); });
document.getElementById("hosts-collapse").addEventListener("click", function () {
  openHosts(false);
});
document.addEventListener("click", function (event) {
  var a = event.target.closest("a[href^='#']");
  if (a) { reveal(a.getAttribute("href")); }
});
window.addEventListener("hashchange", function () { reveal(location.hash); });
summaryOnly.addEventListener("change", function () { writePrintNote(readFilters()); });
window.addEventListener("beforeprint", beforePrint);
window.addEventListener("afterprint", afterPrint);
document.getElementById("print-button").addEventListener("click", function () {
  // Details kept beside the page are loaded first, so the printout has every shown host.
  var shown = hostSections.filter(function (s) { return !s.classList.contains("filtered-out"); });
  var printing = function () { beforePrint(); window.print(); };
  if (data.chunk_files && !(summaryOnly && summaryOnly.checked)) {
    drawHosts(shown, printing);
  } else {
    printing();
  }
});
apply();
reveal(location.hash);
document.documentElement.setAttribute("data-ready", "true");
