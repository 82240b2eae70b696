// Drawing one host's section and one finding row from the page data (report/views.py and
// report/xid_timeline.py decide what each value says; this only lays it out). Parts most hosts
// share (topology, NVLink, packages, services, sysctls, device nodes) are indices into
// data.shared.

var GPU_STATUSES = ["ok", "attention", "error"];

function gpuTable(host, columns) {
  var at = {};
  columns.forEach(function (name, i) { at[name] = i; });
  var rows = host.gpus.map(function (g) {
    var name = add(el("div"), g[at.name]);
    if (g[at.uuid]) { add(name, el("div", "muted small code", g[at.uuid])); }
    var status = add(el("div"),
      el("span", "gpu-status gs-" + allowed(g[at.status], GPU_STATUSES), g[at.status]));
    if (g[at.status_detail]) { add(status, el("div", "small wrap", g[at.status_detail])); }
    if (g[at.problems].length) {
      var problems = status.appendChild(el("ul", "plain small warn"));
      g[at.problems].forEach(function (text) { add(problems, el("li", null, text)); });
    }
    // Status next to the name: the table is wide, and what needs a person comes first.
    return [
      {text: g[at.index], cls: "num"}, name, status, {text: g[at.serial], cls: "code"},
      {text: g[at.bus], cls: "code"}, {text: g[at.vbios], cls: "code"},
      {text: g[at.inforom], cls: "code"}, {text: g[at.memory], cls: "num"},
      {text: g[at.temperature], cls: "num"}, {text: g[at.power], cls: "num"}, g[at.pcie_gen],
      {text: g[at.pcie_width], cls: g[at.pcie_width_down] ? "warn" : ""}, g[at.mig],
      g[at.persistence], {text: g[at.ecc], cls: "small"}
    ];
  });
  var t = table("gpus", ["#", "Name", "Status", "Serial", "Bus id", "VBIOS", "InfoROM", "Memory",
    "Temp", "Power draw/limit", "PCIe gen cur/max", "PCIe width cur/max", "MIG", "Persistence",
    "ECC / remap"], rows);
  host.gpus.forEach(function (g, i) {
    if (g[at.attention]) { t.tBodies[0].rows[i].className = "attention"; }
  });
  return t;
}

function errorCount(value) {
  return {text: value, cls: value > 0 ? "num warn" : "num"};
}

// Every link of every GPU; the table starts open when a link is down or counts errors.
function nvlinkBlock(nv) {
  var rows = nv.rows.map(function (r) {
    var state = r[2] === "active" ? "" : (r[2] === DASH ? "muted" : "warn");
    return [{text: r[0], cls: "num"}, {text: r[1], cls: "num"}, {text: r[2], cls: state},
      r[3], errorCount(r[4]), errorCount(r[5]), errorCount(r[6]), {text: r[7], cls: "small"}];
  });
  var details = add(el("details", "nvlink"), el("summary", null, nv.summary),
    scroller(table("nvlink-links", ["GPU", "Link", "State", "Speed", "Replay errors",
      "Recovery errors", "CRC errors", "Other counters"], rows)));
  details.open = nv.problem;
  return add(el("div"), el("h4", null, "NVLink"), details);
}

// Driver packages and holds, services, sysctls and device nodes, side by side.
function systemBlock(host, shared) {
  var parts = [];
  var packages = host.packages === null ? null : shared.packages[host.packages];
  if (packages) {
    var held = packages.filter(function (p) { return p[2]; }).length;
    parts.push([
      "Driver packages (" + packages.length + ", " + held + " held)", "packages",
      ["Package", "Version", "Hold"],
      packages.map(function (p) {
        return [{text: p[0], cls: "code"}, {text: p[1], cls: "code"},
          p[2] ? "held" : {text: "not held", cls: "muted"}];
      })
    ]);
  }
  if (host.services !== null) {
    parts.push(["Services", "services", ["Service", "Active", "Enabled"],
      shared.services[host.services].map(function (s) {
        var state = s[1] === "active" ? "good" : (s[1] === "failed" ? "bad" : "muted");
        return [{text: s[0], cls: "code"}, {text: s[1], cls: state}, s[2]];
      })]);
  }
  if (host.sysctls !== null) {
    parts.push(["Sysctls", "sysctls", ["Key", "Value"],
      shared.sysctls[host.sysctls].map(function (pair) {
        return [{text: pair[0], cls: "code"}, {text: pair[1], cls: "code"}];
      })]);
  }
  if (host.device_nodes !== null) {
    parts.push(["Device nodes", "device-nodes", ["Path", "Mode", "Owner", "Group"],
      shared.device_nodes[host.device_nodes].map(function (d) {
        return [{text: d[0], cls: "code"}, {text: d[1], cls: "code"}, d[2], d[3]];
      })]);
  }
  if (!parts.length) { return null; }
  var grid = el("div", "system-grid");
  parts.forEach(function (part) {
    add(grid, add(el("div"), el("h4", null, part[0]),
      scroller(table("compact " + part[1], part[2], part[3]))));
  });
  return grid;
}

function topologyBlock(topo) {
  var headers = [""].concat(topo.columns);
  if (topo.has_affinity) { headers = headers.concat(["CPU affinity", "NUMA affinity"]); }
  var rows = topo.rows.map(function (row) {
    var cells = [{node: el("strong", null, row.device)}];
    row.cells.forEach(function (cell) {
      cells.push({text: cell[0], cls: "link-" + allowed(cell[1],
        ["self", "nvlink", "near", "mid", "far", "other"])});
    });
    if (topo.has_affinity) { cells.push(row.cpu, row.numa); }
    return cells;
  });
  var block = add(el("div"), el("h4", null, "Topology"), scroller(table("topo", headers, rows)));
  if (topo.legend.length) {
    var legend = block.appendChild(el("p", "small"));
    topo.legend.forEach(function (pair, i) {
      add(legend, i ? " \u00b7 " : null, el("code", null, pair[0]), " = " + pair[1]);
    });
  }
  return block;
}

function xidBlock(xid) {
  var incidents = xid.incidents.length + xid.omitted;
  // Events of the boots before the running one (the journal's) say which boot they were in.
  var boots = xid.earlier > 0;
  var earlier = boots ? ", " + (xid.earlier === xid.total ? "all" : xid.earlier) +
    " in earlier boots" : "";
  var block = add(el("div"), el("h4", null, "XID incidents (" + plural(xid.total, "event") +
    " in " + plural(incidents, "incident") + earlier + ")"));
  var rows = xid.incidents.map(function (i) {
    var row = [{text: i.what, cls: "nowrap"}, {text: i.gpu, cls: "nowrap"},
      {text: i.count, cls: "num"}, {text: i.first_seen, cls: "nowrap"},
      {text: i.last_seen, cls: "nowrap"}, {text: i.message, cls: "wrap"},
      {node: excerpt(i.count === 1 ? "log line" : plural(i.count, "log line"), i.raw)}];
    if (boots) { row.splice(2, 0, {text: i.boot || "this boot", cls: "nowrap"}); }
    return row;
  });
  var heads = ["XID", "GPU", "Count", "First seen", "Last seen", "First message", "Raw"];
  if (boots) { heads.splice(2, 0, "Boot"); }
  add(block, scroller(table("xid", heads, rows)));
  if (xid.omitted) {
    add(block, el("p", "small muted", plural(xid.omitted, "more incident") +
      " not listed; the host's snapshot keeps every event."));
  }
  xid.notes.forEach(function (note) { add(block, el("p", "small muted", note)); });
  return block;
}

function hostFindings(host, data, riskOf) {
  var rows = host.findings.map(function (i) {
    var f = data.findings[i];
    var risk = data.risks[riskOf[i]];
    var rule = risk ? link("#risk-" + risk.index, risk.id, "risk-link code") : f.rule;
    var message = add(el("div", "wrap"), codeText(f.message));
    if (f.override_reason) {
      add(message, el("div", "small muted", "severity set by site policy: " + f.override_reason));
    }
    return [badge(f.severity), rule, risk ? risk.title : "",
      f.gpu === null || f.gpu === undefined ? DASH : "GPU " + f.gpu, message,
      riskStatus(f.status || (risk ? risk.status : "open"))];
  });
  return table("host-findings", ["Severity", "Risk", "Title", "GPU", "Message", "Status"], rows);
}

function checklistBlock(checklists) {
  var block = add(el("div"), el("h4", null, "Checklists"));
  var list = block.appendChild(el("ul", "plain"));
  checklists.forEach(function (c) {
    var pct = c.score_pct === null ? "not scored" : Math.round(c.score_pct) + "%";
    var item = add(list.appendChild(el("li")), el("strong", null, c.title + ": "), pct,
      el("span", "muted small", " (" + c.passed + "/" + c.checked + " items pass)"));
    if (c.failed.length) {
      var failed = item.appendChild(el("ul", "small"));
      c.failed.forEach(function (text) { add(failed, el("li", "fail", text)); });
    }
    // Items the audit could not verify count against the score: say which, and why.
    if (c.not_verified && c.not_verified.length) {
      var unknown = item.appendChild(el("ul", "small not-verified"));
      c.not_verified.forEach(function (text) {
        add(unknown, el("li", "muted", "not verified: " + text));
      });
    }
  });
  return block;
}

function renderHostBody(host, data, riskOf) {
  var body = document.createDocumentFragment();
  if (host.status_detail) {
    add(body, el("p", "status-detail st-" + allowed(host.status, STATUSES), host.status_detail));
  }
  var facts = body.appendChild(el("dl", "host-facts"));
  var gpuText = String(host.gpu_count);
  if (host.attached_gpus !== null && host.attached_gpus !== host.gpu_count) {
    gpuText += " of " + host.attached_gpus + " attached";
  }
  if (host.expected_gpus !== null && host.expected_gpus !== undefined) {
    gpuText += " (expected " + host.expected_gpus + ")";
  }
  host.facts.concat([["GPUs", gpuText]]).forEach(function (pair) {
    add(facts, add(el("div"), el("dt", null, pair[0]), el("dd", null, pair[1])));
  });
  if (host.gpus.length) {
    add(body, el("h4", null, "GPU inventory"), scroller(gpuTable(host, data.gpu_columns)));
  } else if (host.status === "ok") {
    add(body, el("p", "muted", "No GPUs reported."));
  }
  if (host.nvlink !== null) { add(body, nvlinkBlock(data.shared.nvlink[host.nvlink])); }
  if (host.topology !== null) { add(body, topologyBlock(data.shared.topology[host.topology])); }
  add(body, systemBlock(host, data.shared));
  if (host.xid.total) { add(body, xidBlock(host.xid)); }
  if (host.kernel_log_truncated) {
    add(body, el("p", "small warn",
      "The kernel log was truncated by the collector: older events may be missing."));
  }
  if (host.findings.length) {
    add(body, el("h4", null, "Findings on this host (" + host.findings.length + ")"),
      scroller(hostFindings(host, data, riskOf)));
  }
  if (host.checklists.length) { add(body, checklistBlock(host.checklists)); }
  if (host.parse_errors.length || host.failed_sections.length) {
    var problems = add(el("details", "collection"), el("summary", null, "Collection problems"));
    var list = problems.appendChild(el("ul"));
    host.parse_errors.forEach(function (pair) {
      add(list, add(el("li"), el("code", null, pair[0]), ": " + pair[1]));
    });
    host.failed_sections.forEach(function (s) {
      add(list, add(el("li"), el("code", null, s.name), " exited " + s.rc,
        s.stderr ? el("pre", null, s.stderr) : null));
    });
    add(body, problems);
  }
  if (host.parse_warnings.length) {
    var unplaced = add(el("details", "collection"),
      el("summary", null, "Output not understood (" + host.parse_warnings.length + ")"));
    var items = unplaced.appendChild(el("ul"));
    host.parse_warnings.forEach(function (w) {
      add(items, add(el("li"), el("code", null, w[0]),
        (w[1] === null ? "" : " GPU " + w[1]) + ": " + w[2],
        w[3] ? el("pre", null, w[3]) : null));
    });
    add(body, unplaced);
  }
  return body;
}

// One finding of a risk, as a row of the risk's findings table.
function findingRow(f, i, data, hostIndex) {
  var h = hostIndex[f.host];
  var host = h === undefined ? el("span", null, f.host) :
    link("#" + data.hosts[h].anchor, f.host, "host-link");
  var gpu = f.gpu === null || f.gpu === undefined ? DASH :
    add(el("div"), "GPU " + f.gpu, f.gpu_name ? el("div", "muted small", f.gpu_name) : null);
  var message = add(el("div", "wrap"), codeText(f.message));
  if (f.override_reason) {
    add(message, el("div", "small muted", "severity set by site policy: " + f.override_reason));
  }
  if (f.status && f.status !== "open" || f.waiver_expired) {
    var note = add(el("div", "small"), riskStatus(f.status || "open"));
    if (f.waiver) {
      add(note, " " + (f.waiver.reason || "") + (f.waiver.expires ? " (until " +
        f.waiver.expires + ")" : ""));
    }
    if (f.waiver_expired) { add(note, " ", el("span", "flag", "waiver expired")); }
    add(message, note);
  }
  var ev = f.evidence;
  var evidence = add(el("div", "evidence"),
    add(el("div"), el("span", "muted", "actual "), el("code", null, ev.actual)),
    add(el("div"), el("span", "muted", "expected "), el("code", null, ev.expected)),
    ev.fact ? add(el("div", "muted small"), el("code", null, ev.fact)) : null,
    ev.excerpt ? excerpt("raw excerpt", ev.excerpt) : null);
  var tr = el("tr", "finding");
  tr.dataset.finding = String(i);
  [badge(f.severity), host, gpu, message, evidence].forEach(function (cell) {
    tr.appendChild(cellNode(cell));
  });
  return tr;
}
