"""The limits that pace a rollout: how many hosts may be upgraded and out of service at once,
and how many may fail before it halts.

As in NVIDIA's GPU Operator upgrade controller (k8s-operator-libs pkg/upgrade,
https://github.com/NVIDIA/k8s-operator-libs), ``max_parallel`` caps the hosts being upgraded
and ``max_unavailable`` the hosts out of service, and the second counts hosts that were
unhealthy before the rollout began: an upgrade must not take away capacity that a broken host
has already taken. Unlike it, the canary stage has a failure budget of its own.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import date
from typing import TYPE_CHECKING

from gpuaudit.model.snapshot import HostStatus
from gpuaudit.policy.upgrade import UpgradeSettings
from gpuaudit.rules.base import Finding
from gpuaudit.upgrade.gate_types import names
from gpuaudit.upgrade.health import (
    describe_findings,
    driver_problem,
    expected_gpu_count,
    lost_gpus,
    not_collected,
    open_critical,
)
from gpuaudit.upgrade.inventory import InventoryHost, evaluate_hosts, findings_by_host

if TYPE_CHECKING:
    from gpuaudit.policy import Policy

__all__ = [
    "StartDecision",
    "UnavailableHost",
    "already_unavailable",
    "halt_reason",
    "may_start",
    "unavailable_budget",
    "unavailable_hosts",
]


@dataclass(frozen=True)
class UnavailableHost:
    """A host out of service before the rollout starts, and why."""

    name: str
    reasons: tuple[str, ...]


def unavailable_budget(settings: UpgradeSettings, total_hosts: int) -> int:
    """Hosts that may be out of service at once: ``max_unavailable`` as a count, or that
    percentage of ``total_hosts`` rounded down, at least 1."""
    return settings.unavailable_budget(total_hosts)


def unavailable_hosts(
    hosts: Iterable[InventoryHost],
    *,
    findings: Sequence[Finding] | None = None,
    policy: Policy | None = None,
    on: date | None = None,
) -> tuple[UnavailableHost, ...]:
    """The hosts out of service before the rollout, with why: not collected, driver not
    answering, a GPU lost, or an open critical finding."""
    listed = list(hosts)
    if findings is None:
        findings = evaluate_hosts(listed, policy)
    day = on or date.today()
    by_host = findings_by_host(findings)
    result = []
    for host in listed:
        snap = host.snapshot
        missing = not_collected(snap)
        if snap is None or missing:
            result.append(UnavailableHost(host.name, (missing or "not collected",)))
            continue
        reasons: list[str] = []
        # Only a driver that does not answer: a host without NVIDIA tools (an AMD host) is
        # not out of service for lacking them.
        if snap.status is HostStatus.DRIVER_NOT_RESPONDING:
            reasons.append(driver_problem(snap) or "the NVIDIA driver does not answer")
        elif snap.status is not HostStatus.NO_GPU_TOOLING:
            # Without a GPU tool the GPUs cannot be listed, which says nothing of their state.
            reasons += lost_gpus(snap, expected_gpu_count(snap, policy))
        critical = open_critical(by_host.get(snap.host, ()), snap.host, policy, day)
        if critical:
            reasons.append("open critical findings: " + describe_findings(critical))
        if reasons:
            result.append(UnavailableHost(host.name, tuple(reasons)))
    return tuple(result)


def already_unavailable(
    hosts: Iterable[InventoryHost],
    *,
    findings: Sequence[Finding] | None = None,
    policy: Policy | None = None,
    on: date | None = None,
) -> frozenset[str]:
    """Names of the hosts unhealthy before the rollout (see :func:`unavailable_hosts`)."""
    return frozenset(
        u.name for u in unavailable_hosts(hosts, findings=findings, policy=policy, on=on)
    )


@dataclass(frozen=True)
class StartDecision:
    """Whether a host may start its upgrade now, and why (true when it may)."""

    allowed: bool
    reason: str

    def __bool__(self) -> bool:
        return self.allowed


def may_start(
    host: str,
    running: Collection[str],
    unavailable_now: Collection[str],
    settings: UpgradeSettings,
    total: int,
) -> StartDecision:
    """May ``host`` start now, with ``running`` hosts being upgraded?

    ``unavailable_now``: hosts out of service other than the running ones — those unhealthy
    before the rollout (:func:`already_unavailable`), hosts that failed and were not restored,
    hosts paused on an inconclusive gate. A host already among them adds nothing to the count.
    """
    busy = set(running)
    if host in busy:
        return StartDecision(False, f"{host} is already being upgraded")
    if len(busy) >= settings.max_parallel:
        return StartDecision(
            False,
            f"{_hosts(len(busy))} being upgraded ({names(sorted(busy))}): "
            f"max_parallel is {settings.max_parallel}",
        )
    budget = settings.unavailable_budget(total)
    out = busy | set(unavailable_now)
    if len(out | {host}) > budget:
        return StartDecision(
            False,
            f"{len(out)} of {total} hosts unavailable ({names(sorted(out))}) and "
            f"max_unavailable ({settings.max_unavailable}) allows {budget}",
        )
    return StartDecision(
        True,
        f"{len(out | {host})} of {budget} unavailable hosts allowed with {host}; "
        f"{len(busy) + 1} of {settings.max_parallel} upgrading at once",
    )


def halt_reason(
    settings: UpgradeSettings, canary_failed: Collection[str], waves_failed: Collection[str]
) -> str | None:
    """Why the rollout must halt on these failed hosts (None: it may go on).

    The canary stage may fail ``canary_failure_budget`` hosts, the waves together
    ``failure_budget``; one more halts the rollout.
    """
    if len(canary_failed) > settings.canary_failure_budget:
        return (
            f"{_hosts(len(canary_failed), 'canary ')} failed ({names(sorted(canary_failed))}); "
            f"canary_failure_budget is {settings.canary_failure_budget}"
        )
    if len(waves_failed) > settings.failure_budget:
        return (
            f"{_hosts(len(waves_failed))} failed in the waves ({names(sorted(waves_failed))}); "
            f"failure_budget is {settings.failure_budget}"
        )
    return None


def _hosts(count: int, kind: str = "") -> str:
    return f"{count} {kind}host" + ("" if count == 1 else "s")
