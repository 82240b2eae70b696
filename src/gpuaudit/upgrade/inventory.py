"""Inventory hosts as the upgrade planner sees them, and which stage each belongs to.

A host's stage is, first that applies: its ``rollout_stage`` host data (inventory/group_data/
canary.py sets it for every host of the canary group); the first of its inventory groups that
``UpgradeSettings.stages`` names, in the order the host's groups are listed; else the last
stage, where the host is *unstaged*: it goes last and the plan says so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from gpuaudit.model.snapshot import HostSnapshot
from gpuaudit.policy.upgrade import UpgradeSettings
from gpuaudit.rules.base import Finding

if TYPE_CHECKING:
    from gpuaudit.policy import Policy

__all__ = [
    "STAGE_KEY",
    "InventoryHost",
    "StageAssignment",
    "StageSource",
    "assign_stage",
    "evaluate_hosts",
    "findings_by_host",
]

# Where a host's stage came from: its rollout_stage host data, an inventory group, or nowhere.
StageSource = Literal["host_data", "group", "unstaged"]
STAGE_KEY = "rollout_stage"


@dataclass(frozen=True)
class InventoryHost:
    """One inventory host as the planner needs it: its name, groups and host data (group data
    included, as pyinfra merges it), and its latest audit snapshot (None: not audited)."""

    name: str
    groups: tuple[str, ...] = ()
    host_data: Mapping[str, Any] = field(default_factory=dict)
    snapshot: HostSnapshot | None = None


@dataclass(frozen=True)
class StageAssignment:
    stage: str
    source: StageSource
    # Something the plan must say about the assignment ("also in stage group(s) wave2").
    note: str = ""
    # Why the host cannot be placed (a rollout_stage the settings do not list): it is skipped.
    problem: str = ""


def assign_stage(host: InventoryHost, settings: UpgradeSettings) -> StageAssignment:
    """The host's stage: its rollout_stage host data, else its first group named in the
    settings' stages, else the last stage (unstaged).

    A rollout_stage that names no stage of the settings is a mistake in the inventory: the
    host is placed in the last stage with a ``problem`` and the plan skips it, rather than
    upgrading a host at a time nobody chose.
    """
    stages = settings.stages
    wanted = host.host_data.get(STAGE_KEY)
    if wanted is not None:
        if isinstance(wanted, str) and wanted in stages:
            return StageAssignment(wanted, "host_data")
        problem = (
            f"its {STAGE_KEY} {wanted!r} is not a stage of the upgrade settings "
            f"({', '.join(stages)}): fix the inventory or add the stage"
        )
        return StageAssignment(settings.last_stage, "host_data", problem=problem)
    named = [g for g in host.groups if g in stages]
    if named:
        note = f"also in stage group(s) {', '.join(named[1:])}" if len(named) > 1 else ""
        return StageAssignment(named[0], "group", note=note)
    return StageAssignment(settings.last_stage, "unstaged", note="unstaged: in no stage, goes last")


def evaluate_hosts(hosts: Iterable[InventoryHost], policy: Policy | None) -> list[Finding]:
    """The rules' findings on the hosts' snapshots (a host without one has none)."""
    from gpuaudit.rules import evaluate

    snapshots = [h.snapshot for h in hosts if h.snapshot is not None]
    return evaluate(snapshots, policy) if snapshots else []


def findings_by_host(findings: Iterable[Finding]) -> dict[str, Sequence[Finding]]:
    """The findings grouped by host, so a fleet's hosts each look at their own only."""
    grouped: dict[str, list[Finding]] = {}
    for found in findings:
        grouped.setdefault(found.host, []).append(found)
    return dict(grouped)
