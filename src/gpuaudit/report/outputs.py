"""Views of the register for other tools, written next to register.json (renderers.py).

- ``register.csv``   one row per finding, for spreadsheets and ticket imports;
- ``summary.md``     a short Markdown digest for a ticket or a chat channel;
- ``junit.xml``      one testsuite per host, one testcase per rule and its outcome there
                     (junit.py);
- ``gpuaudit.prom``  a Prometheus textfile (node_exporter's textfile collector).

Host names, messages and evidence come from the hosts and are untrusted; each format escapes
them its own way: CSV quoting plus neutralised formulas (a cell that a spreadsheet would run as a
formula gets a leading apostrophe), Markdown backslash escapes with line breaks flattened,
Prometheus label escapes (backslash, double quote, newline), XML escaping in junit.py.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from gpuaudit.report.register import SEVERITY_ORDER
from gpuaudit.report.register_types import ChecklistScore, Register, Risk, Trends

CSV_FILE = "register.csv"
MARKDOWN_FILE = "summary.md"
JUNIT_FILE = "junit.xml"
PROMETHEUS_FILE = "gpuaudit.prom"

CSV_COLUMNS = (
    "severity",
    "status",
    "rule",
    "title",
    "category",
    "owner",
    "host",
    "gpu",
    "message",
    "actual",
    "expected",
    "remediation",
    "operation",
)
# Leading characters that make Excel, LibreOffice or Sheets treat a cell as a formula
# (OWASP "CSV injection"); tab and carriage return are on the list because some strip them first.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
# Markdown characters that could start emphasis, code, links, HTML or a table cell.
_MARKDOWN_SPECIAL = "\\`*_[]<>|~&#!"
TOP_RISKS = 10
_LIST_LIMIT = 10


# --- CSV -----------------------------------------------------------------------------------------


def csv_cell(value: Any) -> str:
    """A cell's text: JSON for structured evidence, and never a live formula."""
    if value is None:
        return ""
    text = (
        value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False)
    )
    return "'" + text if text.startswith(_FORMULA_START) else text


def render_csv(register: Register) -> str:
    return "".join(csv_chunks(register))


# Rows of register.csv made into text together (csv_chunks).
_CSV_BATCH_ROWS = 1000


def csv_chunks(register: Register) -> Iterator[str]:
    """register.csv's text (:func:`render_csv`) in pieces of a thousand rows: at 10,000 hosts
    the file is tens of MiB, and made whole it was held two or three times over while it was
    written, beside everything else the report holds."""
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_MINIMAL, lineterminator="\r\n")
    writer.writerow(CSV_COLUMNS)
    # The register's own finding entries (register.json's, made once): copied, never changed.
    for number, entry in enumerate(register.head["findings"], 1):
        row = dict(entry)
        evidence = row["evidence"]
        row.update(actual=evidence.get("actual"), expected=evidence.get("expected"))
        writer.writerow([csv_cell(row.get(column)) for column in CSV_COLUMNS])
        if number % _CSV_BATCH_ROWS == 0:
            yield out.getvalue()
            out.seek(0)
            out.truncate()
    yield out.getvalue()


# --- Markdown ------------------------------------------------------------------------------------


def md(value: Any) -> str:
    """Inline Markdown text that renders as the literal value, on one line."""
    text = " ".join(str("" if value is None else value).split())
    return "".join("\\" + c if c in _MARKDOWN_SPECIAL else c for c in text)


def _some(names: Iterable[Any], limit: int = 3) -> str:
    items = list(names)
    shown = ", ".join(md(n) for n in items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def render_markdown(register: Register) -> str:
    summary = register.summary
    risks = register.risks
    by_status = summary.risks_by_status
    lines = [
        f"# gpuaudit risk register {md(register.run_id or '')}".rstrip(),
        "",
        f"Generated {md(register.generated_at)}: {summary.host_count} hosts, "
        f"{summary.gpu_count} GPUs, {summary.finding_count} findings in "
        f"{len(risks)} risks ({by_status.get('open', 0)} open, "
        f"{by_status.get('waived', 0)} waived, {summary.info_risk_count} "
        "informational).",
        *_outcome_line(summary.outcomes),
        "",
        "| severity | findings | open risks |",
        "| --- | ---: | ---: |",
    ]
    for severity in SEVERITY_ORDER:
        count = summary.findings_by_severity.get(severity.value, 0)
        open_risks = summary.open_risks_by_severity.get(severity.value, 0)
        lines.append(f"| {severity.value} | {count} | {open_risks} |")
    lines += ["", "## Hosts not ok", ""]
    for name in summary.hosts_not_ok:
        host = register.host(name)
        status, detail = (host.status, host.status_detail) if host else ("", "")
        lines.append(f"- {md(name)}: {md(status)}" + (f" ({md(detail)})" if detail else ""))
    if not summary.hosts_not_ok:
        lines.append("Every host was audited and is ok.")
    lines += _top_risks(risks)
    lines += _checklists(register.checklists)
    lines += _trends(register.trends)
    return "\n".join(lines) + "\n"


def _outcome_line(outcomes: Mapping[str, int]) -> list[str]:
    if not any(outcomes.values()):
        return []
    return [
        "",
        f"Rules on hosts: {outcomes.get('fail', 0)} failed, {outcomes.get('pass', 0)} passed, "
        f"{outcomes.get('not_evaluated', 0)} not evaluated (data missing), "
        f"{outcomes.get('disabled', 0)} disabled by policy, "
        f"{outcomes.get('not_applicable', 0)} not applicable.",
    ]


def _top_risks(risks: Sequence[Risk]) -> list[str]:
    open_risks = [r for r in risks if r.is_open]
    lines = ["", "## Top risks", ""]
    if not open_risks:
        return [*lines, "No open risks."]
    lines += [
        "| severity | risk | title | owner | score | hosts | findings |",
        "| --- | --- | --- | --- | ---: | --- | ---: |",
    ]
    for risk in open_risks[:TOP_RISKS]:
        hosts = risk.affected_hosts
        lines.append(
            f"| {md(risk.severity.value)} | {md(risk.id)} | {md(risk.title)} "
            f"| {md(risk.owner.value)} | {risk.score} | {len(hosts)}: {_some(hosts)} "
            f"| {risk.finding_count} |"
        )
    if len(open_risks) > TOP_RISKS:
        lines += ["", f"…and {len(open_risks) - TOP_RISKS} more open risks in register.json."]
    return lines


def _checklists(checklists: Sequence[ChecklistScore]) -> list[str]:
    if not checklists:
        return []
    lines = ["", "## Readiness checklists", ""]
    lines.append("| checklist | fleet score | items checked | host checks not verified |")
    lines.append("| --- | ---: | ---: | ---: |")
    for checklist in checklists:
        fleet = checklist.fleet
        score = "n/a" if fleet.score_pct is None else f"{fleet.score_pct}%"
        checked = sum(1 for item in checklist.items if item.checked)
        unknown = f"{fleet.unknown} of {fleet.checked}"
        lines.append(
            f"| {md(checklist.title)} | {score} | {checked} of {len(checklist.items)} | {unknown} |"
        )
    return lines


def _trends(trends: Trends | None) -> list[str]:
    lines = ["", "## Since the previous audit", ""]
    if not trends:
        return [*lines, "No previous run to compare with."]
    lines[1] += f" ({md(trends.previous_run_id)})"
    resolved = [r.id for r in trends.resolved]
    lines += [
        f"- New risks: {len(trends.new)}"
        + (f" ({_some(trends.new, _LIST_LIMIT)})" if trends.new else ""),
        f"- Resolved: {len(resolved)}" + (f" ({_some(resolved, _LIST_LIMIT)})" if resolved else ""),
        f"- Persisting: {len(trends.persisting)}",
    ]
    unverified = [r.id for r in trends.unverified]
    if unverified:
        lines.append(
            "- Not re-checked (its host or its rule did not look this time): "
            + _some(unverified, _LIST_LIMIT)
        )
    if trends.risks_not_judged_before:
        lines.append(
            "- Not checked last time (its host or its rule did not look then): "
            + _some(trends.risks_not_judged_before, _LIST_LIMIT)
        )
    for hosts, label in (
        (trends.hosts_added, "New hosts"),
        (trends.hosts_removed, "Not in this run's scope"),
    ):
        if hosts:
            lines.append(f"- {label}: {_some(hosts, _LIST_LIMIT)}")
    for change in trends.driver_changes[:_LIST_LIMIT]:
        lines.append(f"- Driver on {md(change.host)}: {md(change.before)} → {md(change.after)}")
    growth = trends.growth
    if growth:
        lines.append(f"- Error counters grew on {len(growth)} GPU counters:")
        lines += [
            f"  - {md(g.host)} GPU {md(g.gpu)} ({md(g.pci_bus_id)}): "
            f"{md(g.metric)} {g.before} → {g.after}"
            for g in growth[:_LIST_LIMIT]
        ]
    return lines


# --- Prometheus textfile -------------------------------------------------------------------------


def prom_label(value: Any) -> str:
    """A label value escaped as the text exposition format requires."""
    text = "" if value is None else str(value)
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _series(name: str, labels: Mapping[str, Any], value: int | float) -> str:
    body = ",".join(f'{key}="{prom_label(v)}"' for key, v in labels.items())
    return f"{name}{{{body}}} {value}" if body else f"{name} {value}"


def _family(name: str, help_text: str, samples: Iterable[str]) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", *samples]


def render_prometheus(register: Register) -> str:
    findings = register.head["findings"]  # register.json's entries, made once; only read
    # Two findings may share every label (one rule, two subjects on one GPU): a textfile must
    # not repeat a series, so they are counted in one sample.
    risk_series: dict[tuple[tuple[str, str], ...], int] = {}
    for f in findings:
        labels = {
            "host": f["host"],
            "rule": f["rule"],
            "risk": f.get("risk", f["rule"]),
            "gpu": "" if f.get("gpu") is None else f["gpu"],
            "severity": f["severity"],
            "status": f.get("status", "open"),
        }
        key = tuple((k, str(v)) for k, v in labels.items())
        risk_series[key] = risk_series.get(key, 0) + 1
    hosts = {h.name: h.status for h in register.hosts}
    all_hosts = sorted(set(hosts) | {f["host"] for f in findings})
    open_counts: dict[tuple[str, str], int] = {}
    for f in findings:
        if f.get("status", "open") == "open":
            open_counts[(f["host"], f["severity"])] = (
                open_counts.get((f["host"], f["severity"]), 0) + 1
            )
    lines = _family(
        "gpuaudit_risk",
        "Findings of the last gpuaudit run, one series per host, rule and GPU (value: count).",
        (_series("gpuaudit_risk", dict(key), n) for key, n in risk_series.items()),
    )
    lines += _family(
        "gpuaudit_findings",
        "Open (not waived) findings of the last gpuaudit run per host and severity.",
        (
            _series(
                "gpuaudit_findings",
                {"host": h, "severity": s.value},
                open_counts.get((h, s.value), 0),
            )
            for h in all_hosts
            for s in SEVERITY_ORDER
        ),
    )
    lines += _family(
        "gpuaudit_host_status",
        "Audit status of each host in the last gpuaudit run (1 for the host's status).",
        (
            _series("gpuaudit_host_status", {"host": h, "status": hosts[h]}, 1)
            for h in sorted(hosts)
        ),
    )
    lines += _family(
        "gpuaudit_last_run_timestamp_seconds",
        "When the last gpuaudit register was generated, in seconds since the Unix epoch.",
        [_series("gpuaudit_last_run_timestamp_seconds", {}, _epoch(register.generated_at))],
    )
    return "\n".join(lines) + "\n"


def _epoch(timestamp: Any) -> int:
    try:
        return int(datetime.fromisoformat(str(timestamp).replace("Z", "+00:00")).timestamp())
    except ValueError:
        return 0
