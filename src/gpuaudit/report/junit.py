"""The register as JUnit XML, so a CI job can gate on an audit and show it as test results.

One ``testsuite`` per host, one ``testcase`` per rule evaluated for that host: every rule of
the catalogue for a host that was collected, only the rules that report on the collection
itself for a host that was not (the others did not run), and any rule with a finding there. A
testcase fails when the rule has open findings at the ``--fail-on`` severity or above (any
open finding without a threshold); it is skipped when all its findings are waived; open
findings below the threshold are listed in ``system-out`` of a passing testcase.

A testcase carries at most one ``failure`` element (its message counts the findings, its text
lists them): several CI parsers keep only the first failure of a testcase.

Built with xml.etree, which escapes markup; characters XML 1.0 cannot hold at all (control
characters from a kernel log, lone surrogates) are written as ``\\xNN`` text first, since
ElementTree would otherwise emit a file no parser accepts.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from typing import Any

from gpuaudit.report.register import at_or_above
from gpuaudit.rules.audit import NOT_COLLECTED

# (code, title, runs_without_data) of each rule that was evaluated.
Catalogue = Sequence[tuple[str, str, bool]]

_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_NOT_AUDITED = {status.value for status in NOT_COLLECTED}
# Enough raw host output to recognise the evidence in a CI log; register.json has all of it.
_EXCERPT_CHARS = 2000


def xml_text(value: Any) -> str:
    text = "" if value is None else str(value)
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def rule_catalogue(policy: object | None = None) -> list[tuple[str, str, bool]]:
    """The rules an evaluation with ``policy`` runs: the catalogue less disabled rules."""
    from gpuaudit.rules import all_rules  # the report package imports the rules only here

    if isinstance(policy, Mapping):
        disabled = policy.get("disabled_rules")
    else:
        disabled = getattr(policy, "disabled_rules", None)
    off = {str(code) for code in disabled or ()}
    return [(r.code, r.title, r.runs_without_data) for r in all_rules() if r.code not in off]


def render_junit(
    register: Mapping[str, Any], *, fail_on: str | None = None, catalogue: Catalogue = ()
) -> str:
    findings = register.get("findings", [])
    by_host: dict[str, list[Mapping[str, Any]]] = {}
    for finding in findings:
        by_host.setdefault(finding["host"], []).append(finding)
    statuses = {h["name"]: h["status"] for h in register.get("hosts", [])}
    hosts = sorted(set(statuses) | set(by_host))
    stamp = str(register.get("generated_at") or "").removesuffix("Z")
    root = ET.Element("testsuites", name="gpuaudit")
    totals = {"tests": 0, "failures": 0, "skipped": 0}
    for host in hosts:
        audited = statuses.get(host) not in _NOT_AUDITED if host in statuses else None
        suite = _suite(host, by_host.get(host, []), audited, fail_on, catalogue)
        suite.set("timestamp", xml_text(stamp))
        root.append(suite)
        for key in totals:
            totals[key] += int(suite.get(key, "0"))
    for key, count in totals.items():
        root.set(key, str(count))
    root.set("errors", "0")
    root.set("time", "0")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _suite(
    host: str,
    findings: Sequence[Mapping[str, Any]],
    audited: bool | None,
    fail_on: str | None,
    catalogue: Catalogue,
) -> ET.Element:
    titles: dict[str, str] = {}
    if audited is not None:  # a host of the inventory, not a fleet rule's pseudo-host
        titles.update((code, title) for code, title, anyway in catalogue if audited or anyway)
    per_rule: dict[str, list[Mapping[str, Any]]] = {}
    for finding in findings:
        titles.setdefault(finding["rule"], finding["title"])
        per_rule.setdefault(finding["rule"], []).append(finding)
    suite = ET.Element("testsuite", name=xml_text(host))
    counts = {"failures": 0, "skipped": 0}
    for code in sorted(titles):
        case = ET.SubElement(
            suite,
            "testcase",
            classname=xml_text(host),
            name=xml_text(f"{code} {titles[code]}"),
            time="0",
        )
        outcome = _outcome(case, per_rule.get(code, []), fail_on)
        if outcome:
            counts[outcome] += 1
    suite.set("tests", str(len(titles)))
    suite.set("failures", str(counts["failures"]))
    suite.set("errors", "0")
    suite.set("skipped", str(counts["skipped"]))
    suite.set("time", "0")
    return suite


def _outcome(
    case: ET.Element, findings: Sequence[Mapping[str, Any]], fail_on: str | None
) -> str | None:
    """Attach the testcase's result; return "failures", "skipped" or None (passed)."""
    open_findings = [f for f in findings if f.get("status", "open") == "open"]
    failing = [f for f in open_findings if fail_on is None or at_or_above(f["severity"], fail_on)]
    if failing:
        worst = failing[0]  # the register lists findings most severe first
        element = ET.SubElement(
            case,
            "failure",
            message=xml_text(f"{len(failing)} open finding(s): {worst['message']}"),
            type=worst["severity"],
        )
        element.text = xml_text("\n\n".join(_describe(f) for f in failing))
        return "failures"
    if findings and not open_findings:
        waiver = findings[0].get("waiver") or {}
        ET.SubElement(
            case,
            "skipped",
            message=xml_text(f"waived until {waiver.get('expires')}: {waiver.get('reason', '')}"),
        )
        return "skipped"
    if open_findings:
        below = f"open findings below --fail-on {fail_on}:\n\n"
        out = ET.SubElement(case, "system-out")
        out.text = xml_text(below + "\n\n".join(_describe(f) for f in open_findings))
    return None


def _describe(finding: Mapping[str, Any]) -> str:
    evidence = finding.get("evidence") or {}
    gpu = "" if finding.get("gpu") is None else f" GPU {finding['gpu']}"
    excerpt = str(evidence.get("excerpt") or "")[:_EXCERPT_CHARS]
    return (
        f"[{finding['severity']}] {finding['host']}{gpu}: {finding['message']}\n"
        f"evidence: {evidence.get('fact')} = {evidence.get('actual')!r}"
        f" (expected {evidence.get('expected')!r})\n"
        + (f"host output: {excerpt}\n" if excerpt else "")
        + f"remediation: {finding.get('remediation', '')}"
    )
