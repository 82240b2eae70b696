"""register.csv, summary.md, junit.xml and gpuaudit.prom, each parsed back."""

from __future__ import annotations

import csv
import dataclasses
import io
import re
import xml.etree.ElementTree as ET
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from report_factories import GENERATED_AT, finding, healthy_host, unreachable_host

from gpuaudit.pipeline import write_report
from gpuaudit.report.junit import render_junit
from gpuaudit.report.outputs import (
    CSV_COLUMNS,
    md,
    render_csv,
    render_markdown,
    render_prometheus,
)
from gpuaudit.report.register import build_register
from gpuaudit.report.run import RunDir
from gpuaudit.report.verdict import AuditVerdict
from gpuaudit.rules.base import Evidence, Outcome, RuleOutcome, Severity

HOSTILE = 'gpu"01\\x\nnext="1"} 99 <b>&amp;|`@here'
GONE = "the host was not audited (unreachable: No route to host)"
# What the rules concluded on the fixture's hosts (rules.assess gives these for real hosts).
OUTCOMES = [
    RuleOutcome("GA001", HOSTILE, Outcome.PASS),
    RuleOutcome("GA301", HOSTILE, Outcome.FAIL, findings=1),
    RuleOutcome("GA601", HOSTILE, Outcome.PASS),
    RuleOutcome("GA001", "h1", Outcome.PASS),
    RuleOutcome("GA301", "h1", Outcome.FAIL, findings=1),
    RuleOutcome("GA601", "h1", Outcome.FAIL, findings=1),
    RuleOutcome("GA001", "gone", Outcome.FAIL, findings=1),
    RuleOutcome("GA301", "gone", Outcome.NOT_EVALUATED, GONE),
    RuleOutcome("GA601", "gone", Outcome.NOT_EVALUATED, GONE),
]


class WaiveGA601:
    def waiver_status(self, f: Any, on: date) -> tuple[str, Any]:
        if f.rule != "GA601":
            return "open", None

        @dataclasses.dataclass
        class W:
            reason: str = "ticket <OPS-1> & co"
            expires: date = date(2027, 1, 31)
            hosts: tuple[str, ...] = ("*",)
            owner: str = "infra"

        return "waived", W()


@pytest.fixture
def register() -> dict[str, Any]:
    evil_evidence = Evidence("gpus[0].name", '=HYPERLINK("http://x")', "-1+1", "\x1b[31m\x00")
    findings = [
        finding("GA301", Severity.HIGH, HOSTILE, message="@SUM(A1) fell off\nthe bus"),
        dataclasses.replace(
            finding("GA301", Severity.LOW, "h1", gpu_index=1, message="+cmd|' /C calc'!A0"),
            evidence=evil_evidence,
        ),
        finding("GA601", Severity.MEDIUM, "h1", gpu_index=None),
        finding("GA001", Severity.HIGH, "gone", gpu_index=None),
    ]
    snapshots = [healthy_host(HOSTILE), healthy_host("h1"), unreachable_host("gone")]
    return build_register(
        snapshots,
        findings,
        generated_at=GENERATED_AT,
        run_id="r1",
        policy=WaiveGA601(),
        outcomes=OUTCOMES,
    )


def test_csv_round_trips_and_neutralises_formulas(register: dict[str, Any]) -> None:
    rows = list(csv.DictReader(io.StringIO(render_csv(register), newline="")))
    assert tuple(rows[0]) == CSV_COLUMNS
    assert len(rows) == len(register.findings)
    by_message = {r["message"]: r for r in rows}
    hostile = by_message["'@SUM(A1) fell off\nthe bus"]
    assert hostile["host"] == HOSTILE  # quoted, newlines and quotes intact
    assert hostile["status"] == "open" and hostile["gpu"] == "0"
    low = by_message["'+cmd|' /C calc'!A0"]
    assert low["actual"] == '\'=HYPERLINK("http://x")'
    assert low["expected"] == "'-1+1"
    waived = next(r for r in rows if r["rule"] == "GA601")
    assert waived["status"] == "waived" and waived["gpu"] == ""
    for row in rows:
        for value in row.values():
            assert not value.startswith(("=", "+", "-", "@"))


def test_junit_is_valid_and_gates_on_the_threshold(register: dict[str, Any]) -> None:
    root = ET.fromstring(render_junit(register, fail_on="high"))
    assert root.tag == "testsuites"
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert set(suites) == {HOSTILE, "h1", "gone"}

    def cases(host: str) -> dict[str, ET.Element]:
        return {c.get("name", "").split()[0]: c for c in suites[host].findall("testcase")}

    # Every rule with an outcome is a testcase; on the unreachable host the others are skipped.
    assert set(cases("h1")) == {"GA001", "GA301", "GA601"}
    assert set(cases("gone")) == {"GA001", "GA301", "GA601"}
    assert cases("gone")["GA001"].find("failure") is not None
    not_run = cases("gone")["GA301"].find("skipped")
    assert not_run is not None and not_run.get("message") == f"not evaluated: {GONE}"
    hostile = cases(HOSTILE)["GA301"].find("failure")
    assert hostile is not None and hostile.get("type") == "high"
    assert "@SUM(A1)" in (hostile.get("message") or "")
    assert HOSTILE in (hostile.text or "")
    h1 = cases("h1")
    assert h1["GA301"].find("failure") is None  # low: below --fail-on high
    assert "\\x1b" in (h1["GA301"].findtext("system-out") or "")  # control chars made visible
    skipped = h1["GA601"].find("skipped")
    assert skipped is not None and "ticket <OPS-1> & co" in (skipped.get("message") or "")
    assert "2027-01-31" in (skipped.get("message") or "")
    assert suites["h1"].get("tests") == "3" and suites["h1"].get("skipped") == "1"
    assert (root.get("tests"), root.get("failures"), root.get("skipped")) == ("9", "2", "3")

    everything = ET.fromstring(render_junit(register))
    assert everything.get("failures") == "3"  # without a threshold every open finding fails


def parse_prometheus(text: str) -> tuple[dict[str, str], list[tuple[str, dict[str, str], str]]]:
    """A strict reader of the text exposition format: HELP/TYPE lines and samples."""
    types: dict[str, str] = {}
    samples = []
    label = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"(,|$)')
    for line in text.split("\n")[:-1]:
        if line.startswith("# HELP "):
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            types[name] = kind
            continue
        match = re.fullmatch(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)", line)
        assert match, line
        name, _, body, value = match.groups()
        labels: dict[str, str] = {}
        rest = body or ""
        while rest:
            m = label.match(rest)
            assert m, rest
            raw = m.group(2)
            labels[m.group(1)] = re.sub(
                r"\\(.)", lambda e: "\n" if e.group(1) == "n" else e.group(1), raw
            )
            rest = rest[m.end() :]
        assert name in types, name
        samples.append((name, labels, value))
    return types, samples


def test_prometheus_textfile_escapes_labels(register: dict[str, Any]) -> None:
    text = render_prometheus(register)
    assert text.endswith("\n")
    types, samples = parse_prometheus(text)
    assert set(types.values()) == {"gauge"}
    risks = [s for s in samples if s[0] == "gpuaudit_risk"]
    hostile = [labels for _, labels, _ in risks if labels["host"] == HOSTILE]
    assert hostile == [
        {
            "host": HOSTILE,
            "rule": "GA301",
            "risk": "GA301",
            "gpu": "0",
            "severity": "high",
            "status": "open",
        }
    ]
    assert {labels["status"] for _, labels, _ in risks if labels["rule"] == "GA601"} == {"waived"}
    counts = {
        (labels["host"], labels["severity"]): value
        for name, labels, value in samples
        if name == "gpuaudit_findings"
    }
    assert counts[(HOSTILE, "high")] == "1"
    assert counts[("h1", "medium")] == "0"  # the GA601 finding is waived
    statuses = {
        labels["host"]: labels["status"] for n, labels, _ in samples if n.endswith("status")
    }
    assert statuses == {HOSTILE: "ok", "h1": "ok", "gone": "unreachable"}
    (stamp,) = [v for n, _, v in samples if n == "gpuaudit_last_run_timestamp_seconds"]
    assert stamp == "1795968600"  # 2026-11-29T16:10:00Z
    series = [(n, tuple(sorted(labels.items()))) for n, labels, _ in samples]
    assert len(series) == len(set(series))  # no series repeated


def test_markdown_summary(register: dict[str, Any]) -> None:
    text = render_markdown(register)
    assert text.startswith("# gpuaudit risk register r1\n")
    assert "| high | 2 | 2 |" in text  # findings, open risks
    assert "## Top risks" in text and "GA301" in text
    assert "- gone: unreachable" in text
    assert "Pre-production checklist" in text
    assert "Rules on hosts: 4 failed, 3 passed, 2 not evaluated (data missing)" in text
    assert "No previous run to compare with." in text
    # Host output cannot open HTML, break a table row or start a new line.
    assert "<b>" not in text and "\\<b\\>" in text
    assert HOSTILE not in text
    assert md("a|b\nc") == "a\\|b c"


def test_markdown_does_not_count_info_findings_as_open_risks() -> None:
    findings = [finding("GA801", Severity.INFO, "h1", gpu_index=None, message="70B fits")]
    text = render_markdown(build_register([healthy_host("h1")], findings, run_id="r2"))
    assert "1 risks (0 open, 0 waived, 1 informational)" in text
    assert "| info | 1 | 0 |" in text
    assert "No open risks." in text and "GA801" not in text.split("## Top risks", 1)[1]


def test_terminal_summary_leaves_info_out_of_open_risks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    findings = [
        finding("GA801", Severity.INFO, "h1", gpu_index=None, message="70B fits"),
        finding("GA304", Severity.HIGH, "h1"),
    ]
    run = RunDir(tmp_path)
    verdict = AuditVerdict.of(build_register([healthy_host("h1")], findings))
    verdict.print_summary(run.html_path, run.register_path)
    out = capsys.readouterr().out
    assert "gpuaudit: 1 open risk: 1 high" in out
    assert "GA304" in out and "GA801" not in out


def test_write_report_writes_every_view(tmp_path: Path, register: dict[str, Any]) -> None:
    run = RunDir(tmp_path / "run")
    write_report(run, [healthy_host("h1")], [finding("GA301", host="h1")], fail_on="critical")
    names = {p.name for p in run.path.iterdir()}
    assert {"register.json", "index.html", "register.csv", "summary.md", "junit.xml"} <= names
    assert "gpuaudit.prom" in names
    junit = ET.parse(run.path / "junit.xml").getroot()
    assert junit.get("failures") == "0"  # high is below --fail-on critical
