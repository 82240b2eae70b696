"""Registers for the page tests: hand-set risks, waivers, checklists and trends, and pages of
simulated demo hosts.

The page must render whatever a register holds, so the hand-set registers are written out in
the register's documented shapes here rather than produced by the rules, the site policy or a
previous run. :func:`demo_page` is the other half: demo hosts (gpuaudit.sim, built from real
captures) collected by the real collector script, audited by the rules, rendered as one page,
so what the page shows is checked against what a real snapshot holds.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from report_factories import EVIL, GENERATED_AT, finding, healthy_host, unreachable_host

from gpuaudit.assemble.build import build_snapshot
from gpuaudit.model.snapshot import HostSnapshot
from gpuaudit.report.html import render_html
from gpuaudit.report.register import build_register
from gpuaudit.report.register_types import (
    AffectedGpu,
    ChecklistScore,
    CounterGrowth,
    DriverChange,
    HostChecklist,
    ItemScore,
    Register,
    Risk,
    RiskBrief,
    Tally,
    Trends,
    Waiver,
)
from gpuaudit.rules import assess
from gpuaudit.rules.base import Finding, Owner, Severity
from gpuaudit.sim.host import materialize
from gpuaudit.sim.profiles import PROFILES, expected_gpu_count

# The simulator tests' helper runs the collector "on" a simulated host.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "sim"))
from simhelpers import collect

WAIVER_REASON = "Vendor RMA open, case 4711"
EXPIRED_REASON = "Accepted until the Q3 maintenance window"


def fleet_and_findings() -> tuple[list[HostSnapshot], list[Finding]]:
    snapshots = [healthy_host("gpu-a01", gpus=8), healthy_host("gpu-b01"), unreachable_host()]
    findings = [
        finding("GA001", Severity.CRITICAL, "gpu-z99", category="audit", gpu_index=None),
        finding("GA301", Severity.HIGH, "gpu-a01", gpu_index=1, excerpt="NVRM: Xid 79"),
        finding("GA301", Severity.HIGH, "gpu-b01", gpu_index=0, excerpt="NVRM: Xid 79"),
        finding("GA501", Severity.MEDIUM, "gpu-a01", category="topology", gpu_index=3),
        finding("GA101", Severity.LOW, "gpu-b01", category="software", owner=Owner.ML_ENGINEERING),
    ]
    return snapshots, findings


def _risk(register: Register, risk_id: str, rule: str, **changes: Any) -> Risk:
    indices = [i for i, f in enumerate(register.findings) if f.rule == rule]
    members = [register.findings[i].finding for i in indices]
    first = members[0]
    risk = Risk(
        id=risk_id,
        rule=first.rule,
        title=first.title,
        category=first.category,
        owner=first.owner,
        severity=first.severity,
        likelihood=first.likelihood,
        impact=first.impact,
        score=first.score,
        status="open",
        waiver=None,
        waiver_expired=False,
        affected_hosts=tuple(sorted({f.host for f in members})),
        affected_gpus=tuple(
            AffectedGpu(f.host, f.gpu, f.gpu_name) for f in members if f.gpu is not None
        ),
        finding_count=len(indices),
        remediation=first.remediation,
        operation=first.operation,
        references=first.references,
        findings=tuple(indices),
    )
    return dataclasses.replace(risk, **changes)


def full_register(
    snapshots: list[HostSnapshot] | None = None, findings: list[Finding] | None = None
) -> tuple[Register, list[HostSnapshot]]:
    """A register with every optional part: a waiver, an expired one, trends, checklists."""
    if snapshots is None or findings is None:
        snapshots, findings = fleet_and_findings()
    register = build_register(snapshots, findings, generated_at=GENERATED_AT, run_id="run-2")
    waiver = Waiver(WAIVER_REASON, "2027-03-31", ("gpu-a01",), "infra")
    expired = Waiver(EXPIRED_REASON, "2026-01-31", None, "ml")
    risks = (
        _risk(register, "GA001", "GA001"),
        _risk(register, "GA301:79", "GA301"),
        _risk(register, "GA501", "GA501", status="waived", waiver=waiver),
        _risk(register, "GA101", "GA101", waiver=expired, waiver_expired=True),
    )
    entries = [
        dataclasses.replace(
            entry,
            status="waived" if entry.rule == "GA501" else "open",
            waiver=waiver if entry.rule == "GA501" else None,
        )
        for entry in register.findings
    ]
    entries[4] = dataclasses.replace(
        entries[4],
        finding=dataclasses.replace(
            entries[4].finding, override_reason="site policy: ML hosts treat GA101 as low"
        ),
    )
    checklist = ChecklistScore(
        key="pre_production",
        title="Pre-production checklist",
        reference="",
        items=(
            ItemScore("PP1", "Driver loaded on every GPU", ("GA101",), ""),
            ItemScore("PP2", "No XID 79 in the log", ("GA301",), ""),
            ItemScore("PP3", "Burn-in run signed off", (), ""),
        ),
        fleet=Tally(1, 2),
        hosts={
            "gpu-a01": HostChecklist(Tally(1, 2), ("PP2",)),
            "gpu-b01": HostChecklist(Tally(0, 2), ("PP1", "PP2")),
        },
    )
    trends = Trends(
        previous_run_id="run-1",
        previous_generated_at="2026-08-29T16:10:00Z",
        previous_scope=None,
        compared_hosts=2,
        new=("GA301:79",),
        resolved=(RiskBrief("GA304", "Row remap pending", "high", ("x",)),),
        persisting=("GA001", "GA501"),
        hosts_added=("gpu-b01",),
        hosts_removed=("gpu-old-07",),
        driver_changes=(DriverChange("gpu-a01", "535.161.08", "550.127.05"),),
        growth=(CounterGrowth("gpu-a01", 1, "0000:19:00.0", "ecc_aggregate.uncorrected", 0, 3),),
    )
    register = dataclasses.replace(
        register,
        risks=risks,
        findings=tuple(entries),
        checklists=(checklist,),
        trends=trends,
    )
    return register, snapshots


@dataclass(frozen=True)
class DemoPage:
    snapshots: dict[str, HostSnapshot]
    register: Register
    html: str


def demo_snapshot(name: str, sim_dir: Path) -> HostSnapshot:
    """One demo host, collected by the real collector script and parsed as an audit does."""
    bundle = collect(materialize(name, name, sim_dir))
    host_data = {"expected_gpu_count": expected_gpu_count(PROFILES[name])}
    return build_snapshot(name, bundle, host_data=host_data, collected_at=GENERATED_AT)


def demo_page(names: tuple[str, ...], sim_dir: Path) -> DemoPage:
    """The demo hosts ``names`` audited by the rules (default policy, every rule's outcome
    recorded, as an audit does) and rendered as a page."""
    snapshots = [demo_snapshot(name, sim_dir) for name in names]
    evaluation = assess(snapshots)
    register = build_register(
        snapshots,
        list(evaluation.findings),
        generated_at=GENERATED_AT,
        run_id="demo",
        outcomes=evaluation.outcomes,
    )
    return DemoPage(
        {snap.host: snap for snap in snapshots}, register, render_html(register, snapshots)
    )


__all__ = [
    "EVIL",
    "EXPIRED_REASON",
    "WAIVER_REASON",
    "DemoPage",
    "demo_page",
    "demo_snapshot",
    "fleet_and_findings",
    "full_register",
]
