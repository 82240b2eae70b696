"""The risk rules, and ``evaluate()`` which runs them over a fleet's snapshots.

Importing this package registers every rule (each module registers its rules on import).
Rules are pure: snapshot + fleet + policy in, findings and outcomes out (``assess()``: each
rule failed, passed, was not evaluated, with why, or is disabled, per host and per GPU); no
pyinfra, no I/O.

Codes: GA0xx the audit itself, GA1xx driver/software, GA2xx MIG, GA3xx memory/ECC/XID health
and clock slowdowns, GA4xx services, GA5xx topology/PCIe, GA6xx system/sysctl/security,
GA7xx fleet consistency, GA8xx capacity, GA90x/GA91x what Kubernetes and Slurm believe,
GA92x monitoring coverage, GA93x active readiness checks (DCGM diagnostics). A code is never
reused.
"""

from __future__ import annotations

import dataclasses
import traceback
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple

from gpuaudit.model.cluster import ClusterView
from gpuaudit.model.snapshot import HostSnapshot
from gpuaudit.policy.defaults import DEFAULT_POLICY, effective_policy, host_overrides
from gpuaudit.rules import (
    audit,
    capacity,
    compat,
    condition,
    ecc,
    fleet,
    health,
    mig,
    monitoring,
    nvlink,
    readiness,
    scheduler_kube,
    scheduler_slurm,
    services,
    software,
    system,
    topology,
    visibility,
    xid,
)
from gpuaudit.rules.audit import (
    NOT_COLLECTED,
    HostJudging,
    judge,
    not_audited,
    quiet_key,
    rule_failed,
)
from gpuaudit.rules.base import (
    FLEET_HOST,
    REGISTRY,
    CheckResult,
    Evaluation,
    Evidence,
    Finding,
    FleetCheck,
    Outcome,
    Rule,
    RuleContext,
    RuleOutcome,
    Severity,
)

if TYPE_CHECKING:
    from gpuaudit.policy import Policy

__all__ = [
    "DEFAULT_POLICY",
    "FLEET_HOST",
    "all_rules",
    "assess",
    "evaluate",
    "sort_findings",
]

# Keep the rule modules referenced: importing them is what registers their rules.
_RULE_MODULES = (
    *(audit, software, compat, visibility, mig, xid, health, ecc, condition),
    *(services, topology, nvlink, system, fleet, capacity),
    scheduler_kube,
    scheduler_slurm,
    monitoring,
    readiness,
)


def all_rules() -> list[Rule]:
    """Every registered rule, sorted by code."""
    return sorted(REGISTRY.values(), key=lambda r: r.code)


def evaluate(
    snapshots: Sequence[HostSnapshot],
    policy: Policy | Mapping[str, Any] | None = None,
    cluster: ClusterView | None = None,
) -> list[Finding]:
    """The sorted findings of :func:`assess` (what most callers need)."""
    return list(assess(snapshots, policy, cluster).findings)


def assess(
    snapshots: Sequence[HostSnapshot],
    policy: Policy | Mapping[str, Any] | None = None,
    cluster: ClusterView | None = None,
) -> Evaluation:
    """Run the host rules on each snapshot and the fleet rules once: sorted findings, and every
    rule's outcome on every host.

    ``policy`` is a site :class:`gpuaudit.policy.Policy` (each host gets its
    ``settings_for()``: defaults, then its groups, then its inventory data; fleet rules get the
    policy's defaults) or a plain mapping merged over policy.defaults.DEFAULT_POLICY for every
    host (per-host values from ``snapshot.host_data`` are merged over that by the rules).
    Hosts that could not be collected only get the rules that report on collection (GA001);
    the others are not evaluated there. A rule that raises becomes a GA000 finding for that
    host (or for the fleet) instead of ending the audit, and is not evaluated there. A rule in
    a host's ``disabled_rules`` is disabled on it (a fleet rule's findings for it are dropped);
    the severity overrides are applied last, and a Policy's override keeps its reason in the
    finding. ``cluster`` is the Kubernetes view the scheduler rules (GA9xx) compare the hosts
    with; without one they are not evaluated.
    """
    from gpuaudit.policy.settings import SettingsResolver  # late: policy imports this package

    fleet = tuple(snapshots)
    settings_for, override = _policy_hooks(policy)
    fleet_ctx = RuleContext(fleet=fleet, policy=settings_for(None), cluster=cluster)
    resolver = SettingsResolver(_site(policy))  # each host's settings, resolved once
    contexts = [
        RuleContext(
            fleet=fleet,
            policy=resolver.resolve(snap.host, snap.host_data).as_dict(),
            resolved_for=snap.host,
            cluster=cluster,
        )
        for snap in fleet
    ]
    hosts = [
        _Host(snap, ctx, _disabled(ctx), snap.status not in NOT_COLLECTED, HostJudging(snap))
        for snap, ctx in zip(fleet, contexts, strict=True)
    ]
    findings: list[Finding] = []
    outcomes: list[RuleOutcome] = []
    add = outcomes.append
    for rule in all_rules():
        if rule.check_host is not None:
            check_host, code, per_gpu = rule.check_host, rule.code, rule.per_gpu
            quiet = quiet_key(rule)
            for snap, ctx, off, collected, judging in hosts:
                if off and code in off:
                    add(_disabled_outcome(rule, snap, policy))
                    continue
                if not collected and not rule.runs_without_data:
                    add(not_audited(rule, snap))
                    continue
                # _guarded's work, inline: this runs once per rule and host.
                try:
                    results = list(check_host(rule, snap, ctx))
                except Exception as exc:  # any rule bug must become a finding, not a crash
                    results = [_failure(rule, snap.host, exc)]
                if not results:  # judge()'s common case, inline
                    outcome, why, gpus = judging.quiet(quiet, rule, snap)
                    add(RuleOutcome(code, snap.host, outcome, why, 0, gpus, per_gpu))
                    continue
                failure = _failure_of(rule, results)
                findings.extend(r for r in results if isinstance(r, Finding))
                add(judge(rule, snap, [] if failure else results, failure, judging))
        if rule.check_fleet is not None:
            outcomes += _run_fleet(rule, rule.check_fleet, hosts, fleet_ctx, policy, findings)
    outcomes += _rule_failures(hosts, findings)
    return Evaluation(
        findings=tuple(sort_findings(override(f) for f in findings)), outcomes=tuple(outcomes)
    )


class _Host(NamedTuple):
    """A host as the rules are run on it: its snapshot, its context (its own settings), the
    rules its policy disables, whether it was collected, and what judging a rule there needs
    (worked out once for every rule)."""

    snap: HostSnapshot
    ctx: RuleContext
    off: set[str]
    collected: bool
    judging: HostJudging


def _run_fleet(
    rule: Rule,
    check: FleetCheck,
    hosts: Sequence[_Host],
    fleet_ctx: RuleContext,
    policy: Policy | Mapping[str, Any] | None,
    findings: list[Finding],
) -> list[RuleOutcome]:
    """Run a fleet rule once; add its findings and return its outcome on every host."""
    if rule.code in _disabled(fleet_ctx):
        return [_disabled_outcome(rule, host.snap, policy) for host in hosts]
    fleet = fleet_ctx.fleet
    results = _guarded(rule, FLEET_HOST, partial(check, rule, fleet, fleet_ctx))
    failure = _failure_of(rule, results)
    disabled_on = {host.snap.host for host in hosts if rule.code in host.off}
    findings.extend(r for r in results if isinstance(r, Finding) and r.host not in disabled_on)
    by_host: dict[str | None, list[CheckResult]] = {}
    for r in results:
        by_host.setdefault(r.host, []).append(r)
    outcomes = []
    for snap, _ctx, off, collected, judging in hosts:
        if rule.code in off:
            outcomes.append(_disabled_outcome(rule, snap, policy))
        elif not collected:
            outcomes.append(not_audited(rule, snap))
        else:
            mine = [] if failure else by_host.get(snap.host, [])
            outcomes.append(judge(rule, snap, mine, failure, judging))
    return outcomes


def _failure_of(rule: Rule, results: Sequence[CheckResult]) -> Finding | None:
    """The GA000 finding _guarded made when the rule raised, else None."""
    return next(
        (
            r
            for r in results
            if isinstance(r, Finding)
            and r.rule == rule_failed().code
            and r.evidence.fact == rule.code
        ),
        None,
    )


def _rule_failures(hosts: Sequence[_Host], findings: Sequence[Finding]) -> list[RuleOutcome]:
    """GA000's own outcome: failed where another rule raised, passed elsewhere."""
    failed = rule_failed()
    counts = Counter(f.host for f in findings if f.rule == failed.code)
    return [
        RuleOutcome(
            failed.code,
            snap.host,
            Outcome.FAIL if counts[snap.host] else Outcome.PASS,
            findings=counts[snap.host],
        )
        for snap in (host.snap for host in hosts)
    ]


def _disabled_outcome(
    rule: Rule, snap: HostSnapshot, policy: Policy | Mapping[str, Any] | None
) -> RuleOutcome:
    return RuleOutcome(
        rule.code, snap.host, Outcome.DISABLED, _disabled_by(policy, snap), per_gpu=rule.per_gpu
    )


def _disabled_by(policy: Policy | Mapping[str, Any] | None, snap: HostSnapshot) -> str:
    """Where the site turned rules off for this host: the layer whose ``disabled_rules`` won
    (a later layer's list replaces an earlier one's)."""
    from gpuaudit.policy import Policy

    layers: list[tuple[str, Mapping[str, Any]]]
    if isinstance(policy, Policy):
        groups = snap.host_data.get("groups") or ()
        named = dict(policy.groups)
        site = f"the site policy {policy.source}"
        layers = [(f"{site} (defaults)", policy.defaults)] + [
            (f"{site} (group {name})", named[name])
            for name in policy.groups_for((groups,) if isinstance(groups, str) else groups)
        ]
    else:
        layers = [("the policy", policy or {})]
    layers.append(("the host's inventory data", host_overrides(snap.host_data)))
    layer = next(
        (name for name, values in reversed(layers) if values.get("disabled_rules") is not None),
        "the policy",
    )
    return f"disabled_rules of {layer}"


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


def _guarded(rule: Rule, host: str, run: Callable[[], Iterable[CheckResult]]) -> list[CheckResult]:
    # list() inside the try: checks are generators and raise only when iterated.
    try:
        return list(run())
    except Exception as exc:  # any rule bug must become a finding, not a crash
        return [_failure(rule, host, exc)]


def _failure(rule: Rule, host: str, exc: Exception) -> Finding:
    tail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-3:])
    return rule_failed().finding_for(
        host,
        f"Rule {rule.code} ({rule.title}) failed: {type(exc).__name__}: {exc}",
        Evidence(
            fact=rule.code,
            actual=f"{type(exc).__name__}: {exc}",
            expected="the rule evaluates",
            excerpt=tail.strip()[-2000:],
        ),
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
