"""The risk rules, and ``evaluate()`` which runs them over a fleet's snapshots.

Importing this package registers every rule (each module registers its rules on import).
Rules are pure: snapshot + fleet + policy in, findings out; no pyinfra, no I/O.

Codes: GA0xx the audit itself, GA1xx driver/software, GA2xx MIG, GA3xx memory/ECC/XID health
and clock slowdowns, GA4xx services, GA5xx topology/PCIe, GA6xx system/sysctl/security,
GA7xx fleet consistency, GA8xx capacity. A code is never reused.
"""

from __future__ import annotations

import dataclasses
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from gpuaudit.model.snapshot import HostSnapshot
from gpuaudit.rules import (
    audit,
    capacity,
    compat,
    condition,
    ecc,
    fleet,
    health,
    mig,
    nvlink,
    services,
    software,
    system,
    topology,
    visibility,
    xid,
)
from gpuaudit.rules.audit import NOT_COLLECTED, rule_failed
from gpuaudit.rules.base import REGISTRY, Evidence, Finding, Rule, RuleContext, Severity
from gpuaudit.rules.policy_defaults import DEFAULT_POLICY, effective_policy

if TYPE_CHECKING:
    from gpuaudit.policy import Policy

__all__ = [
    "DEFAULT_POLICY",
    "FLEET_HOST",
    "all_rules",
    "evaluate",
    "sort_findings",
]

# Keep the rule modules referenced: importing them is what registers their rules.
_RULE_MODULES = (
    *(audit, software, compat, visibility, mig, xid, health, ecc, condition),
    *(services, topology, nvlink, system, fleet, capacity),
)

# The host name a fleet rule's failure is filed under (it belongs to no single host).
FLEET_HOST = "(fleet)"


def all_rules() -> list[Rule]:
    """Every registered rule, sorted by code."""
    return sorted(REGISTRY.values(), key=lambda r: r.code)


def evaluate(
    snapshots: Sequence[HostSnapshot], policy: Policy | Mapping[str, Any] | None = None
) -> list[Finding]:
    """Run the host rules on each snapshot and the fleet rules once; return sorted findings.

    ``policy`` is a site :class:`gpuaudit.policy.Policy` (each host gets its
    ``settings_for()``: defaults, then its groups, then its inventory data; fleet rules get the
    policy's defaults) or a plain mapping merged over policy_defaults.DEFAULT_POLICY for every
    host (per-host values from ``snapshot.host_data`` are merged over that by the rules).
    Hosts that could not be collected only get the rules that report on collection (GA001).
    A rule that raises becomes a GA000 finding for that host (or for the fleet) instead of
    ending the audit. ``disabled_rules`` (per host with a Policy) and the severity overrides
    are applied last; a Policy's override keeps its reason in the finding.
    """
    from gpuaudit.policy.settings import resolve_settings  # late: policy imports this package

    fleet = tuple(snapshots)
    settings_for, override = _policy_hooks(policy)
    fleet_ctx = RuleContext(fleet=fleet, policy=settings_for(None))
    contexts = [
        RuleContext(
            fleet=fleet,
            policy=resolve_settings(_site(policy), snap.host, snap.host_data).as_dict(),
            resolved_for=snap.host,
        )
        for snap in fleet
    ]
    hosts = [(snap, ctx, _disabled(ctx)) for snap, ctx in zip(fleet, contexts, strict=True)]
    findings: list[Finding] = []
    for rule in all_rules():
        if rule.check_host is not None:
            check_host = rule.check_host
            for snap, ctx, off in hosts:
                if rule.code in off or (
                    snap.status in NOT_COLLECTED and not rule.runs_without_data
                ):
                    continue
                findings.extend(_guarded(rule, snap.host, partial(check_host, rule, snap, ctx)))
        if rule.check_fleet is not None and rule.code not in _disabled(fleet_ctx):
            check_fleet = rule.check_fleet
            findings.extend(
                _guarded(rule, FLEET_HOST, partial(check_fleet, rule, fleet, fleet_ctx))
            )
    return sort_findings(override(f) for f in findings)


def _policy_hooks(
    policy: Policy | Mapping[str, Any] | None,
) -> tuple[Callable[[HostSnapshot | None], dict[str, Any]], Callable[[Finding], Finding]]:
    """(settings for a host or, given None, the fleet; the severity override of a finding)."""
    from gpuaudit.policy import Policy  # late: gpuaudit.policy imports this package

    if isinstance(policy, Policy):
        site = policy

        def settings(snap: HostSnapshot | None) -> dict[str, Any]:
            return site.settings_for(snap if snap is not None else {})

        def override(finding: Finding) -> Finding:
            wanted = site.override_for(finding)
            if wanted is None:
                return finding
            return _with_severity(finding, wanted.severity, wanted.reason)

        return settings, override
    merged = effective_policy(policy)
    overrides = merged.get("severity_overrides") or {}
    return (lambda _snap: merged), partial(_override_severity, overrides=overrides)


def _site(policy: Policy | Mapping[str, Any] | None) -> Policy | Mapping[str, Any] | None:
    """What resolve_settings layers under host data: a Policy, or the plain mapping's merge."""
    from gpuaudit.policy import Policy

    return policy if isinstance(policy, Policy) else effective_policy(policy)


def _disabled(ctx: RuleContext) -> set[str]:
    return {str(code) for code in ctx.policy.get("disabled_rules") or ()}


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Most severe first, then by host, rule and GPU (host-wide findings before per-GPU ones)."""
    return sorted(
        findings,
        key=lambda f: (-f.severity.rank, f.host, f.rule, -1 if f.gpu is None else f.gpu),
    )


def _guarded(rule: Rule, host: str, run: Callable[[], Iterable[Finding]]) -> list[Finding]:
    # list() inside the try: checks are generators and raise only when iterated.
    try:
        return list(run())
    except Exception as exc:  # any rule bug must become a finding, not a crash
        return [_failure(rule, host, exc)]


def _failure(rule: Rule, host: str, exc: Exception) -> Finding:
    failed = rule_failed()
    tail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-3:])
    return Finding(
        rule=failed.code,
        title=failed.title,
        severity=failed.severity,
        category=failed.category,
        owner=failed.owner,
        host=host,
        message=f"Rule {rule.code} ({rule.title}) failed: {type(exc).__name__}: {exc}",
        evidence=Evidence(
            fact=rule.code,
            actual=f"{type(exc).__name__}: {exc}",
            expected="the rule evaluates",
            excerpt=tail.strip()[-2000:],
        ),
        remediation=failed.remediation,
        references=failed.references,
        likelihood=failed.likelihood,
        impact=failed.impact,
    )


def _override_severity(finding: Finding, overrides: Mapping[str, Any]) -> Finding:
    wanted = overrides.get(finding.rule)
    if not wanted:
        return finding
    try:
        severity = Severity(str(wanted).lower())
    except ValueError:
        note = f" (policy severity override {wanted!r} ignored: not a severity)"
        return dataclasses.replace(finding, message=finding.message + note)
    return _with_severity(finding, severity, None)


def _with_severity(finding: Finding, severity: Severity, reason: str | None) -> Finding:
    """The finding at the site's severity; a reason is kept in the finding and its message."""
    if reason is None:
        return dataclasses.replace(finding, severity=severity)
    note = (
        f" Site policy: severity {severity.value} (rule gives {finding.severity.value}): "
        f"{reason.rstrip('.')}."
    )
    return dataclasses.replace(
        finding, severity=severity, message=finding.message + note, override_reason=reason
    )
