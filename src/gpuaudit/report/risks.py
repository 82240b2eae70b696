"""Risks: the findings of one rule, about one thing, grouped across every host they occur on.

A finding says "XID 79 on GPU 5 of host a"; the risk says "XID 79 (GPU fell off the bus) on 3
hosts, 4 GPUs" and is what an audit tracks, waives and reports as resolved. The **risk key** is
the rule code plus a discriminator read from the finding's evidence, so that different subjects
of one rule stay apart while the same subject on many hosts or GPUs becomes one risk:

- the evidence's ``actual`` holds a ``code`` (XID / SXid rules): that code, ``unknown`` when the
  log line's code could not be read → ``GA301:79``, ``GA302:12``;
- the evidence's fact is itself a rule code (GA000, a rule that failed): that code →
  ``GA000:GA301``;
- the fact names a keyed item, ``name[key]`` with a key that is not a GPU index: the key →
  ``GA601:net.core.rmem_max``, ``GA402:nvidia-fabricmanager``;
- otherwise the rule alone → ``GA304`` (per-GPU facts such as ``gpus[3].remapped_rows.pending``
  differ only by GPU, which is exactly what is grouped).

Waivers come from the site policy, duck-typed: any object with
``waiver_status(finding, on=date) -> ("open" | "waived" | "waiver_expired", waiver | None)``
where the waiver has ``rule``, ``hosts``, ``reason``, ``expires`` and ``owner``. A risk is waived
only when every one of its findings is covered by an unexpired waiver: a waiver written for
three hosts does not hide the same fault on a fourth. An open risk is as severe as the worst of
its open findings.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any

from gpuaudit.report.register_types import (
    OPEN,
    RESOLVED,
    WAIVED,
    AffectedGpu,
    RegisterFinding,
    Risk,
    Waiver,
)
from gpuaudit.rules.base import Finding

__all__ = ["OPEN", "RESOLVED", "WAIVED", "build_risks", "check_waivers", "risk_id"]
# Presentation order of risk statuses: what needs work first.
STATUS_ORDER = (OPEN, WAIVED, RESOLVED)

_RULE_CODE = re.compile(r"^GA\d{3}$")
_KEYED_FACT = re.compile(r"\[([^\]]+)\]")


@dataclass(frozen=True)
class WaiverCheck:
    """What the policy said about one finding."""

    status: str  # OPEN | WAIVED
    waiver: Waiver | None = None
    expired: bool = False


NO_WAIVER = WaiverCheck(OPEN)


def discriminator(finding: Finding) -> str | None:
    """The part of the risk key after the rule code (see the module doc), or None."""
    actual = finding.evidence.actual
    if isinstance(actual, Mapping) and "code" in actual:
        code = actual["code"]
        return "unknown" if code is None else str(code)
    fact = finding.evidence.fact or ""
    if _RULE_CODE.match(fact):
        return fact
    keys = [k for k in _KEYED_FACT.findall(fact) if not k.strip().isdigit()]
    return ",".join(keys) if keys else None


def risk_id(finding: Finding) -> str:
    key = discriminator(finding)
    return finding.rule if key is None else f"{finding.rule}:{key}"


def waiver_entry(waiver: Any) -> Waiver:
    """A policy's waiver as the register shows it: its reason, expiry date, host pattern and
    owner."""
    expires = getattr(waiver, "expires", None)
    hosts = getattr(waiver, "hosts", None)
    owner = getattr(waiver, "owner", None)
    return Waiver(
        str(getattr(waiver, "reason", "") or ""),
        expires.isoformat() if isinstance(expires, date) else _text(expires),
        tuple(str(h) for h in hosts) if isinstance(hosts, (list, tuple)) else _text(hosts),
        _text(getattr(owner, "value", owner)),
    )


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def check_waivers(findings: Sequence[Finding], policy: object, on: date) -> list[WaiverCheck]:
    """The waiver status of each finding; everything is open without a policy that has waivers."""
    waiver_status = getattr(policy, "waiver_status", None)
    if waiver_status is None:
        return [NO_WAIVER for _ in findings]
    checks = []
    for finding in findings:
        status, waiver = waiver_status(finding, on=on)
        entry = waiver_entry(waiver) if waiver is not None else None
        if status == WAIVED:
            checks.append(WaiverCheck(WAIVED, entry))
        elif status == "waiver_expired":
            checks.append(WaiverCheck(OPEN, entry, expired=True))
        else:
            checks.append(NO_WAIVER)
    return checks


def register_finding(finding: Finding, check: WaiverCheck) -> RegisterFinding:
    """The finding as the register holds it: with its risk id and its waiver state."""
    return RegisterFinding(finding, risk_id(finding), check.status, check.waiver, check.expired)


def build_risks(
    findings: Sequence[Finding], checks: Sequence[WaiverCheck] | None = None
) -> list[Risk]:
    """Group findings (in register order: indices refer to it) into sorted risk entries."""
    checks = list(checks) if checks is not None else [NO_WAIVER] * len(findings)
    groups: dict[str, list[int]] = {}
    for index, finding in enumerate(findings):
        groups.setdefault(risk_id(finding), []).append(index)
    risks = [_risk(rid, idx, findings, checks) for rid, idx in groups.items()]
    return sorted(risks, key=risk_sort_key)


def risk_sort_key(risk: Risk) -> tuple[Any, ...]:
    return (STATUS_ORDER.index(risk.status), -risk.severity.rank, -risk.score, risk.id)


def _risk(
    rid: str, indices: list[int], findings: Sequence[Finding], checks: Sequence[WaiverCheck]
) -> Risk:
    members = [findings[i] for i in indices]
    member_checks = [checks[i] for i in indices]
    waived = all(c.status == WAIVED for c in member_checks)
    # The most severe finding speaks for the risk (owner, remediation); the highest score sets
    # likelihood and impact, so that the risk's score is the worst of its findings. Of an open
    # risk, only its open findings: a waived critical finding beside an open low one leaves a
    # low risk open, which is what the summary counts and --fail-on gates on.
    judged = members if waived else [findings[i] for i in indices if checks[i].status != WAIVED]
    lead = max(judged, key=lambda f: (f.severity.rank, f.score))
    scored = max(judged, key=lambda f: (f.score, f.severity.rank))
    gpus = sorted(
        {(f.host, f.gpu, f.gpu_name or "") for f in members if f.gpu is not None},
        key=lambda g: (g[0], g[1], g[2]),
    )
    return Risk(
        id=rid,
        rule=lead.rule,
        title=lead.title,
        category=lead.category,
        owner=lead.owner,
        severity=lead.severity,
        likelihood=scored.likelihood,
        impact=scored.impact,
        score=scored.score,
        status=WAIVED if waived else OPEN,
        waiver=_risk_waiver(member_checks, waived),
        waiver_expired=any(c.expired for c in member_checks),
        affected_hosts=tuple(sorted({f.host for f in members})),
        affected_gpus=tuple(AffectedGpu(h, g, n or None) for h, g, n in gpus),
        finding_count=len(members),
        remediation=lead.remediation,
        operation=lead.operation,
        references=tuple(dict.fromkeys(ref for f in members for ref in f.references)),
        findings=tuple(indices),
    )


def _risk_waiver(checks: Sequence[WaiverCheck], waived: bool) -> Waiver | None:
    """The waiver a reader needs to see for the risk.

    Waived: the covering waiver that runs out first (when the risk reopens). Open: the expired
    waiver that no longer covers it, else one that covers only some of its findings, else None.
    """
    entries = [c.waiver for c in checks if c.waiver is not None]
    if waived:
        return min(entries, key=lambda w: (w.expires is None, w.expires or ""), default=None)
    expired = [c.waiver for c in checks if c.expired and c.waiver is not None]
    candidates = expired or entries
    return candidates[0] if candidates else None
