"""The rollout plan of a staged driver upgrade: every host's stage, and whether it is upgraded.

Stages run in the order of ``UpgradeSettings.stages``, hosts within a stage in inventory order
(:func:`gpuaudit.upgrade.inventory.assign_stage` says which stage a host is in). Each host is
upgraded or skipped with the reason: a rollout_stage naming no stage, not collected, no NVIDIA
driver packages, already at the target, or a pre-check that did not pass
(:func:`gpuaudit.upgrade.gates.precheck`). The plan also lists the hosts already out of service
(:func:`gpuaudit.upgrade.limits.unavailable_hosts`), which the ``max_unavailable`` limit counts.

The limits (:mod:`gpuaudit.upgrade.limits`) and the stage assignment are re-exported here, so
``gpuaudit.upgrade.plan`` is the one import a controller needs for planning and pacing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from typing import TYPE_CHECKING, Any, Literal

from gpuaudit.model.snapshot import HostSnapshot, Package
from gpuaudit.policy.upgrade import UpgradeSettings
from gpuaudit.rules.base import Finding
from gpuaudit.rules.software import host_driver_version
from gpuaudit.rules.versions import is_driver_version, same_version, version_key
from gpuaudit.upgrade.gate_types import GateResult
from gpuaudit.upgrade.gates import precheck
from gpuaudit.upgrade.health import host_settings, not_collected
from gpuaudit.upgrade.inventory import (
    STAGE_KEY,
    InventoryHost,
    StageAssignment,
    StageSource,
    assign_stage,
    evaluate_hosts,
    findings_by_host,
)
from gpuaudit.upgrade.limits import (
    StartDecision,
    UnavailableHost,
    already_unavailable,
    halt_reason,
    may_start,
    unavailable_budget,
    unavailable_hosts,
)

if TYPE_CHECKING:
    from gpuaudit.policy import Policy

__all__ = [
    "STAGE_KEY",
    "Action",
    "HostPlan",
    "InventoryHost",
    "RolloutPlan",
    "StageAssignment",
    "StagePlan",
    "StageSource",
    "StartDecision",
    "UnavailableHost",
    "already_unavailable",
    "assign_stage",
    "halt_reason",
    "may_start",
    "plan_rollout",
    "unavailable_budget",
    "unavailable_hosts",
]

Action = Literal["upgrade", "skip"]


@dataclass(frozen=True)
class HostPlan:
    name: str
    stage: str
    action: Action
    reason: str
    current_version: str | None
    # Whether the driver packages are held now (None: no driver packages, or holds unread).
    pinned: bool | None
    stage_source: StageSource = "group"
    precheck: GateResult | None = None

    @property
    def unstaged(self) -> bool:
        return self.stage_source == "unstaged"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "stage": self.stage,
            "stage_source": self.stage_source,
            "action": self.action,
            "reason": self.reason,
            "current_version": self.current_version,
            "pinned": self.pinned,
            "precheck": self.precheck.to_dict() if self.precheck else None,
        }


@dataclass(frozen=True)
class StagePlan:
    name: str
    hosts: tuple[HostPlan, ...] = ()

    @property
    def to_upgrade(self) -> tuple[HostPlan, ...]:
        return tuple(h for h in self.hosts if h.action == "upgrade")


@dataclass(frozen=True)
class RolloutPlan:
    target_version: str
    settings: UpgradeSettings
    # Every stage of the settings, in their order, empty ones included.
    stages: tuple[StagePlan, ...]
    unavailable: tuple[UnavailableHost, ...]
    planned_on: date

    @property
    def hosts(self) -> tuple[HostPlan, ...]:
        """Every host, in the order the rollout takes them."""
        return tuple(h for stage in self.stages for h in stage.hosts)

    @property
    def total_hosts(self) -> int:
        return len(self.hosts)

    @property
    def to_upgrade(self) -> tuple[HostPlan, ...]:
        return tuple(h for h in self.hosts if h.action == "upgrade")

    @property
    def skipped(self) -> tuple[HostPlan, ...]:
        return tuple(h for h in self.hosts if h.action == "skip")

    @property
    def unstaged(self) -> tuple[str, ...]:
        return tuple(h.name for h in self.hosts if h.unstaged)

    @property
    def already_unavailable(self) -> frozenset[str]:
        return frozenset(u.name for u in self.unavailable)

    def out_of_service(self) -> str:
        """'a (why; why), b (why)': the hosts out of service before the rollout, each with why
        (empty when none is)."""
        return ", ".join(
            f"{u.name} ({'; '.join(u.reasons)})"
            for u in sorted(self.unavailable, key=lambda u: u.name)
        )

    @property
    def unavailable_budget(self) -> int:
        return self.settings.unavailable_budget(self.total_hosts)

    def host(self, name: str) -> HostPlan:
        for plan in self.hosts:
            if plan.name == name:
                return plan
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "target_version": self.target_version,
            "planned_on": self.planned_on.isoformat(),
            "settings": self.settings.to_dict(),
            "total_hosts": self.total_hosts,
            "unavailable_budget": self.unavailable_budget,
            "already_unavailable": [
                {"name": u.name, "reasons": list(u.reasons)} for u in self.unavailable
            ],
            "unstaged": list(self.unstaged),
            "stages": [
                {"name": s.name, "hosts": [h.to_dict() for h in s.hosts]} for s in self.stages
            ],
        }


# --- the plan ----------------------------------------------------------------------------------


def plan_rollout(
    hosts: Sequence[InventoryHost],
    target_version: str,
    settings: UpgradeSettings,
    on: date,
    *,
    policy: Policy | None = None,
    findings: Sequence[Finding] | None = None,
) -> RolloutPlan:
    """Every host's stage and action for an upgrade to ``target_version``.

    ``findings``: the audit's findings when the caller has them (a register); otherwise the
    rules are evaluated on the hosts' snapshots with ``policy``. ``on``: the day waivers are
    judged on (an expired waiver does not hide a critical finding).
    """
    target = target_version.strip()
    if not is_driver_version(target):
        raise ValueError(f"{target_version!r} is not a driver version such as 550.127.05")
    seen: set[str] = set()
    for host in hosts:
        if host.name in seen:
            raise ValueError(f"host {host.name!r} is listed twice")
        seen.add(host.name)
    if findings is None:
        findings = evaluate_hosts(hosts, policy)
    by_host = findings_by_host(findings)
    by_stage: dict[str, list[HostPlan]] = {stage: [] for stage in settings.stages}
    for host in hosts:
        mine = by_host.get(host.snapshot.host, []) if host.snapshot is not None else []
        plan = _plan_host(host, target, settings, on, policy, mine)
        by_stage[plan.stage].append(plan)
    return RolloutPlan(
        target_version=target,
        settings=settings,
        stages=tuple(StagePlan(name, tuple(plans)) for name, plans in by_stage.items()),
        unavailable=unavailable_hosts(hosts, findings=findings, policy=policy, on=on),
        planned_on=on,
    )


def _plan_host(
    host: InventoryHost,
    target: str,
    settings: UpgradeSettings,
    on: date,
    policy: Policy | None,
    findings: Sequence[Finding],
) -> HostPlan:
    """One host's plan; ``findings`` are this host's."""
    assignment = assign_stage(host, settings)
    snap = host.snapshot
    version = host_driver_version(snap) if snap is not None else None
    pinned = _pinned(snap, policy) if snap is not None else None

    def plan(action: Action, reason: str, gate: GateResult | None = None) -> HostPlan:
        notes = [n for n in (assignment.note,) if n]
        return HostPlan(
            name=host.name,
            stage=assignment.stage,
            action=action,
            reason="; ".join([reason, *notes]),
            current_version=version,
            pinned=pinned,
            stage_source=assignment.source,
            precheck=gate,
        )

    if assignment.problem:
        return plan("skip", assignment.problem)
    missing = not_collected(snap)
    if snap is None or missing:
        return plan("skip", missing or "not collected")
    packages = _driver_packages(snap, policy)
    if isinstance(packages, str):
        return plan("skip", packages)
    if version == target:
        return plan("skip", f"already at {target}")
    gate = precheck(snap, findings, policy=policy, on=on)
    if gate.outcome != "pass":
        said = "failed" if gate.outcome == "fail" else "inconclusive"
        deciding = gate.failed or gate.inconclusive
        return plan("skip", f"pre-check {said}: " + "; ".join(c.detail for c in deciding), gate)
    direction = ""
    if version and version_key(version) > version_key(target):
        direction = " (a downgrade)"
    reason = f"driver {version} → {target}{direction}; pre-check passed"
    unchecked = [f"{c.name.replace('_', ' ')} not checked" for c in gate.not_checked]
    if unchecked:
        reason += f" ({', '.join(unchecked)})"
    if any(same_version(p.version, target) for p in packages):
        reason += "; the packages are at the target already: a reload or reboot finishes it"
    return plan("upgrade", reason, gate)


def _driver_packages(snap: HostSnapshot, policy: Policy | None) -> list[Package] | str:
    """The driver packages installed, or why there is nothing to upgrade with them."""
    section = snap.sections.get("packages")
    if section is not None and section.rc not in (0, None) and not snap.packages:
        return f"the package list could not be read (rc={section.rc}): driver packages unknown"
    wanted = host_settings(snap, policy).get("driver_package_patterns") or ()
    patterns = [re.compile(str(p)) for p in wanted]
    found = [p for p in snap.packages if any(rx.match(p.name) for rx in patterns)]
    if not found:
        return (
            "no NVIDIA driver packages installed (a host without NVIDIA GPUs, or a driver "
            "installed by NVIDIA's .run installer, which gpuaudit does not upgrade)"
        )
    return found


def _pinned(snap: HostSnapshot, policy: Policy | None) -> bool | None:
    packages = _driver_packages(snap, policy)
    if isinstance(packages, str):
        return None
    if any(p.held for p in packages):
        return True
    holds = snap.sections.get("package_holds")
    if holds is not None and holds.rc not in (0, None):
        return None  # the hold list was not read: holds may exist unseen
    return False
