"""The register as JUnit XML, so a CI job can gate on an audit and show it as test results.

One ``testsuite`` per host, one ``testcase`` per rule with an outcome on that host (every rule
of the catalogue, for a register written by an audit) or a finding there. The rule's outcome
(``hosts[].outcomes`` in register.json) decides the testcase:

- **fail** with open findings above info at the ``--fail-on`` severity or above (any, without a
  threshold): a ``failure``; open findings below the threshold, and info findings (GA801's model
  sizes: information, never a risk, as kube-bench never fails an INFO check), are listed in
  ``system-out`` of a passing testcase; all findings waived: ``skipped`` with the waiver;
- **pass**: a passing testcase;
- **not_evaluated**: ``skipped``, message ``not evaluated: <why>`` (the section that failed, the
  host that could not be reached). Skipped, not ``error``: Jenkins, GitLab and GitHub's test
  reporters all count an ``error`` as a failed build, and a blind spot that is a risk is
  already a failing finding of its own (GA001 unreachable, GA002 data incomplete, GA101 driver
  not answering, GA104 no GPU tool, GA105 no kernel log); skipped testcases stay visible, with
  their message, in every one of them;
- **disabled**: ``skipped``, message ``disabled by policy: <where>``, never a pass.

A testcase carries at most one ``failure`` element (its message counts the findings, its text
lists them): several CI parsers keep only the first failure of a testcase.

Built with xml.etree, which escapes markup; characters XML 1.0 cannot hold at all (control
characters from a kernel log, lone surrogates) are written as ``\\xNN`` text first, since
ElementTree would otherwise emit a file no parser accepts.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from typing import Any

from gpuaudit.report.register_types import (
    OPEN,
    Register,
    RegisterFinding,
    at_or_above,
    is_risk_severity,
)
from gpuaudit.rules.base import Finding, Outcome, RuleOutcome

_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
# Enough raw host output to recognise the evidence in a CI log; register.json has all of it.
_EXCERPT_CHARS = 2000
_SKIPPED = {
    Outcome.NOT_EVALUATED.value: "not evaluated",
    Outcome.DISABLED.value: "disabled by policy",
    Outcome.NOT_APPLICABLE.value: "not applicable",
}


def xml_text(value: Any) -> str:
    text = "" if value is None else str(value)
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def render_junit(register: Register, *, fail_on: str | None = None) -> str:
    by_host: dict[str, list[RegisterFinding]] = {}
    for finding in register.findings:
        by_host.setdefault(finding.host, []).append(finding)
    outcomes = {h.name: {o.rule: o for o in h.outcomes} for h in register.hosts}
    hosts = sorted(set(outcomes) | set(by_host))
    stamp = register.generated_at.removesuffix("Z")
    root = ET.Element("testsuites", name="gpuaudit")
    totals = {"tests": 0, "failures": 0, "skipped": 0}
    for host in hosts:
        suite = _suite(host, by_host.get(host, []), outcomes.get(host, {}), register.rules, fail_on)
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
    findings: Sequence[RegisterFinding],
    outcomes: Mapping[str, RuleOutcome],
    titles: Mapping[str, str],
    fail_on: str | None,
) -> ET.Element:
    per_rule: dict[str, list[RegisterFinding]] = {}
    names = {code: str(titles.get(code) or "") for code in outcomes}
    for finding in findings:
        names.setdefault(finding.rule, finding.finding.title)
        per_rule.setdefault(finding.rule, []).append(finding)
    suite = ET.Element("testsuite", name=xml_text(host))
    counts = {"failures": 0, "skipped": 0}
    for code in sorted(names):
        case = ET.SubElement(
            suite,
            "testcase",
            classname=xml_text(host),
            name=xml_text(f"{code} {names[code]}".strip()),
            time="0",
        )
        result = _testcase(case, per_rule.get(code, []), outcomes.get(code), fail_on)
        if result:
            counts[result] += 1
    suite.set("tests", str(len(names)))
    suite.set("failures", str(counts["failures"]))
    suite.set("errors", "0")
    suite.set("skipped", str(counts["skipped"]))
    suite.set("time", "0")
    return suite


def _testcase(
    case: ET.Element,
    findings: Sequence[RegisterFinding],
    outcome: RuleOutcome | None,
    fail_on: str | None,
) -> str | None:
    """Attach the testcase's result; return "failures", "skipped" or None (passed).

    Open findings that do not fail it (below the threshold, or info) go to ``system-out``,
    whatever the result.
    """
    open_findings = [f for f in findings if f.status == OPEN]
    risks = [f for f in open_findings if is_risk_severity(f.severity)]
    failing = [f for f in risks if fail_on is None or at_or_above(f.severity, fail_on)]
    below = [f for f in risks if f not in failing]
    info = [f for f in open_findings if not is_risk_severity(f.severity)]
    result: str | None = None
    state = outcome.outcome.value if outcome else None
    if failing:
        worst = failing[0]  # the register lists findings most severe first
        element = ET.SubElement(
            case,
            "failure",
            message=xml_text(f"{len(failing)} open finding(s): {worst.finding.message}"),
            type=worst.severity.value,
        )
        element.text = xml_text(_describe_all(failing))
        result = "failures"
    elif outcome is not None and state in _SKIPPED:
        reason = outcome.reason or "no reason recorded"
        element = ET.SubElement(case, "skipped", message=xml_text(f"{_SKIPPED[state]}: {reason}"))
        element.text = xml_text(reason)
        result = "skipped"
    elif findings and not open_findings:
        waiver = findings[0].waiver
        expires, why = (waiver.expires, waiver.reason) if waiver else (None, "")
        ET.SubElement(case, "skipped", message=xml_text(f"waived until {expires}: {why}"))
        result = "skipped"
    parts = []
    if below:
        parts.append(f"open findings below --fail-on {fail_on}:\n\n" + _describe_all(below))
    if info:
        parts.append("informational findings (not risks):\n\n" + _describe_all(info))
    if parts:
        ET.SubElement(case, "system-out").text = xml_text("\n\n".join(parts))
    return result


def _describe_all(findings: Sequence[RegisterFinding]) -> str:
    return "\n\n".join(_describe(f.finding) for f in findings)


def _describe(finding: Finding) -> str:
    evidence = finding.evidence
    gpu = "" if finding.gpu is None else f" GPU {finding.gpu}"
    excerpt = str(evidence.excerpt or "")[:_EXCERPT_CHARS]
    return (
        f"[{finding.severity.value}] {finding.host}{gpu}: {finding.message}\n"
        f"evidence: {evidence.fact} = {_jsonish(evidence.actual)!r}"
        f" (expected {_jsonish(evidence.expected)!r})\n"
        + (f"host output: {excerpt}\n" if excerpt else "")
        + f"remediation: {finding.remediation}"
    )


def _jsonish(value: Any) -> Any:
    """A value as register.json shows it (tuples as lists), so both read alike."""
    return json.loads(json.dumps(value, default=str))
