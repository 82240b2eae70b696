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

Written as text, laid out as xml.etree writes an indented tree, with markup escaped as it
escapes it; characters XML 1.0 cannot hold at all (control characters from a kernel log, lone
surrogates) are written as ``\\xNN`` text first, since no parser accepts them however escaped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from gpuaudit.report.register_types import (
    OPEN,
    Register,
    RegisterFinding,
    at_or_above,
    is_risk_severity,
)
from gpuaudit.rules.base import Finding, Outcome, RuleOutcome

# The characters XML 1.0 does not allow (its Char production), named as themselves: the same
# set as "not \t \n \r, U+0020-U+D7FF, U+E000-U+FFFD, U+10000-U+10FFFF", which takes the
# regular expression compiler ten times as long.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
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


# What xml.etree writes as entities: in element text, then also in attribute values.
_TEXT_ENTITIES = (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"))
_ATTR_ENTITIES = (
    *_TEXT_ENTITIES,
    ('"', "&quot;"),
    ("\r", "&#13;"),
    ("\n", "&#10;"),
    ("\t", "&#09;"),
)


def _escaped(value: Any, entities: tuple[tuple[str, str], ...]) -> str:
    text = xml_text(value)
    for mark, entity in entities:
        if mark in text:  # most text holds none: testing first is cheaper than replacing
            text = text.replace(mark, entity)
    return text


def _attr(value: Any) -> str:
    """An attribute value as xml.etree writes it: markup, quotes and line ends as entities."""
    return _escaped(value, _ATTR_ENTITIES)


def _text(value: Any) -> str:
    """Element text as xml.etree writes it."""
    return _escaped(value, _TEXT_ENTITIES)


def render_junit(register: Register, *, fail_on: str | None = None) -> str:
    """junit.xml's text (:func:`junit_chunks` joined)."""
    return "".join(junit_chunks(register, fail_on=fail_on))


def junit_chunks(register: Register, *, fail_on: str | None = None) -> Iterator[str]:
    """junit.xml's text, a host's suite at a time, for writing it without holding all of it.

    The file reads as xml.etree writes an indented tree; it is written here as text, each
    value escaped once, since a large fleet has a testcase per rule and host (76,000 for
    1,000 hosts). The totals on the root element are counted first, in a pass that only
    classifies the testcases.
    """
    by_host: dict[str, list[RegisterFinding]] = {}
    for finding in register.findings:
        by_host.setdefault(finding.host, []).append(finding)
    outcomes = {h.name: {o.rule: o for o in h.outcomes} for h in register.hosts}
    hosts = sorted(set(outcomes) | set(by_host))
    stamp = _attr(register.generated_at.removesuffix("Z"))
    # Testcase texts repeat from host to host: each distinct one is made once (_Suite).
    memo: dict[Any, str] = {}
    suites = [
        _Suite(host, by_host.get(host, []), outcomes.get(host, {}), register.rules, fail_on, memo)
        for host in hosts
    ]
    totals = {"tests": 0, "failures": 0, "skipped": 0}
    for suite in suites:
        totals["tests"] += len(suite.pieces)
        totals["failures"] += suite.failures
        totals["skipped"] += suite.skipped
    root = (
        f'<testsuites name="gpuaudit" tests="{totals["tests"]}" '
        f'failures="{totals["failures"]}" skipped="{totals["skipped"]}" errors="0" time="0"'
    )
    yield '<?xml version="1.0" encoding="UTF-8"?>\n'
    if not suites:
        yield root + " />\n"
        return
    yield root + ">\n"
    last = len(suites) - 1
    for number, suite in enumerate(suites):
        yield suite.text(stamp)
        yield "  </testsuite>\n" if number < last else "  </testsuite>\n</testsuites>\n"
    # xml.etree ends the root element without a newline; the file adds one, as before.


class _Suite:
    """One host's testsuite: its testcases classified (counted) and made, before any suite is
    written (the root element carries the totals).

    Each testcase is kept as what follows its host's name (``classname``): the text of a
    testcase without findings repeats from host to host (the passing ones, and the skipped
    ones of outcomes alike), so it is made once for the whole file (``memo``)."""

    __slots__ = ("failures", "host", "pieces", "skipped")

    def __init__(
        self,
        host: str,
        findings: Sequence[RegisterFinding],
        outcomes: Mapping[str, RuleOutcome],
        titles: Mapping[str, str],
        fail_on: str | None,
        memo: dict[Any, str],
    ) -> None:
        self.host = host
        per_rule: dict[str, list[RegisterFinding]] = {}
        extra: dict[str, str] = {}
        for finding in findings:
            if finding.rule not in outcomes and finding.rule not in extra:
                extra[finding.rule] = finding.finding.title
            per_rule.setdefault(finding.rule, []).append(finding)
        cases = sorted([*outcomes, *extra]) if extra else sorted(outcomes)
        failures = skipped = 0
        pieces: list[str] = []
        add = pieces.append
        for code in cases:
            outcome = outcomes.get(code)
            name = str(titles.get(code) or "") if outcome is not None else extra[code]
            mine = per_rule.get(code)
            if mine is None:  # the common case: one text for every host alike
                state = outcome.outcome._value_ if outcome is not None else None
                if state in _SKIPPED:
                    skipped += 1
                    key: Any = (code, name, state, outcome.reason)  # type: ignore[union-attr]
                else:
                    key = (code, name)
                piece = memo.get(key)
                if piece is None:
                    piece = memo[key] = _case(code, name, _testcase((), outcome, fail_on))
                add(piece)
                continue
            result = _result(mine, outcome, fail_on)
            if result == "failures":
                failures += 1
            elif result == "skipped":
                skipped += 1
            add(_case(code, name, _testcase(mine, outcome, fail_on)))
        self.pieces, self.failures, self.skipped = pieces, failures, skipped

    def text(self, stamp: str) -> str:
        """The suite's XML, without its closing tag."""
        host = _attr(self.host)
        head = (
            f'  <testsuite name="{host}" tests="{len(self.pieces)}" failures="{self.failures}" '
            f'errors="0" skipped="{self.skipped}" time="0" timestamp="{stamp}"'
        )
        if not self.pieces:
            return head + " />\n"
        lead = f'    <testcase classname="{host}'
        return "".join((head, ">\n", lead, lead.join(self.pieces)))


def _case(code: str, name: str, body: Sequence[str]) -> str:
    """A testcase's text after its ``classname`` value: its name, then its elements."""
    head = f'" name="{_attr(f"{code} {name}".strip())}" time="0"'
    if not body:
        return head + " />\n"
    inner = "".join(f"      {element}\n" for element in body)
    return f"{head}>\n{inner}    </testcase>\n"


def _split(
    findings: Sequence[RegisterFinding], fail_on: str | None
) -> tuple[list[RegisterFinding], list[RegisterFinding], list[RegisterFinding], bool]:
    """(failing, open risks below the threshold, open info findings, any open finding)."""
    open_findings = [f for f in findings if f.status == OPEN]
    risks = [f for f in open_findings if is_risk_severity(f.severity)]
    failing = [f for f in risks if fail_on is None or at_or_above(f.severity, fail_on)]
    below = [f for f in risks if f not in failing]
    info = [f for f in open_findings if not is_risk_severity(f.severity)]
    return failing, below, info, bool(open_findings)


def _result(
    findings: Sequence[RegisterFinding], outcome: RuleOutcome | None, fail_on: str | None
) -> str | None:
    """The testcase's result: "failures", "skipped" or None (passed)."""
    state = outcome.outcome._value_ if outcome else None
    if not findings:
        return "skipped" if state in _SKIPPED else None
    failing, _below, _info, any_open = _split(findings, fail_on)
    if failing:
        return "failures"
    if state in _SKIPPED or not any_open:
        return "skipped"
    return None


def _testcase(
    findings: Sequence[RegisterFinding],
    outcome: RuleOutcome | None,
    fail_on: str | None,
) -> list[str]:
    """The testcase's elements, one a string (none: it passed and has nothing to say).

    Open findings that do not fail it (below the threshold, or info) go to ``system-out``,
    whatever the result.
    """
    state = outcome.outcome.value if outcome else None
    if not findings and state not in _SKIPPED:
        return []
    failing, below, info, any_open = _split(findings, fail_on)
    elements = []
    if failing:
        worst = failing[0]  # the register lists findings most severe first
        message = _attr(f"{len(failing)} open finding(s): {worst.finding.message}")
        elements.append(
            f'<failure message="{message}" type="{_attr(worst.severity.value)}">'
            f"{_text(_describe_all(failing))}</failure>"
        )
    elif outcome is not None and state in _SKIPPED:
        reason = outcome.reason or "no reason recorded"
        message = _attr(f"{_SKIPPED[state]}: {reason}")
        elements.append(f'<skipped message="{message}">{_text(reason)}</skipped>')
    elif findings and not any_open:
        waiver = findings[0].waiver
        expires, why = (waiver.expires, waiver.reason) if waiver else (None, "")
        elements.append(f'<skipped message="{_attr(f"waived until {expires}: {why}")}" />')
    parts = []
    if below:
        parts.append(f"open findings below --fail-on {fail_on}:\n\n" + _describe_all(below))
    if info:
        parts.append("informational findings (not risks):\n\n" + _describe_all(info))
    if parts:
        joined = "\n\n".join(parts)
        elements.append(f"<system-out>{_text(joined)}</system-out>")
    return elements


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
    if value is None or type(value) in _PLAIN:  # JSON gives these back as they are
        return value
    return json.loads(json.dumps(value, default=str))


# Types whose values come back from a trip through JSON equal and of the same type (not
# float: NaN and the infinities do not).
_PLAIN = frozenset((str, int, bool))
