// Drawing one host's section and one finding row from the page data (report/views.py
// decides what each value says; this only lays it out).

function gpuTable(host, columns) {
  var at = {};
  columns.forEach(function (name, i) { at[name] = i; });
  var rows = host.gpus.map(function (g) {
    var name = add(el("div"), g[at.name]);
    if (g[at.uuid]) { add(name, el("div", "muted small code", g[at.uuid])); }
    var status = add(el("div"), g[at.status]);
    if (g[at.status_detail]) { add(status, el("div", "small wrap", g[at.status_detail])); }
    if (g[at.recovery]) { add(status, el("div", "small warn", g[at.recovery])); }
    return [
      {text: g[at.index], cls: "num"}, name, {text: g[at.bus], cls: "code"},
      {text: g[at.vbios], cls: "code"}, {text: g[at.memory], cls: "num"},
      {text: g[at.temperature], cls: "num"}, {text: g[at.power], cls: "num"}, g[at.pcie_gen],
      {text: g[at.pcie_width], cls: g[at.pcie_width_down] ? "warn" : ""}, g[at.mig],
      g[at.persistence], {text: g[at.ecc], cls: "small"}, status
    ];
  });
  var t = table("gpus", ["#", "Name", "Bus id", "VBIOS", "Memory", "Temp", "Power draw/limit",
    "PCIe gen cur/max", "PCIe width cur/max", "MIG", "Persistence", "ECC / remap", "Status"], rows);
  host.gpus.forEach(function (g, i) {
    if (g[at.attention]) { t.tBodies[0].rows[i].className = "attention"; }
  });
  return t;
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
  var block = add(el("div"), el("h4", null, "XID timeline (" + plural(xid.total, "event") + ")"));
  var counts = block.appendChild(el("p", "small"));
  xid.summary.forEach(function (e) {
    add(counts, el("span", "xid-count",
      e.kind + " " + e.code + " \u00d7 " + e.count + " (" + e.gpus + ")"));
  });
  if (xid.omitted) {
    add(block, el("p", "small muted",
      xid.omitted + " earlier events not shown; the counts above include them."));
  }
  var rows = xid.events.map(function (e) {
    return [{text: e.timestamp, cls: "code nowrap"}, e.kind, {text: e.code, cls: "num"}, e.gpu,
      {text: e.message, cls: "wrap", title: e.raw}];
  });
  return add(block, scroller(table("xid", ["Time", "Kind", "Code", "GPU", "Message"], rows)));
}

function hostFindings(host, data, riskOf) {
  var rows = host.findings.map(function (i) {
    var f = data.findings[i];
    var risk = data.risks[riskOf[i]];
    var rule = risk ? link("#risk-" + risk.index, risk.id, "risk-link code") : f.rule;
    var message = add(el("div", "wrap"), f.message);
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
  if (host.topology !== null) { add(body, topologyBlock(data.topologies[host.topology])); }
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
  return body;
}

// One finding of a risk, as a row of the risk's findings table.
function findingRow(f, i, data, hostIndex) {
  var h = hostIndex[f.host];
  var host = h === undefined ? el("span", null, f.host) :
    link("#" + data.hosts[h].anchor, f.host, "host-link");
  var gpu = f.gpu === null || f.gpu === undefined ? DASH :
    add(el("div"), "GPU " + f.gpu, f.gpu_name ? el("div", "muted small", f.gpu_name) : null);
  var message = add(el("div", "wrap"), f.message);
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
