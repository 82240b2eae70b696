"""Registers for the page tests: hand-set risks, waivers, checklists and trends, and pages of
simulated demo hosts.

The page must render whatever a register holds, so the hand-set registers are written out in
the register's documented shapes here rather than produced by the rules, the site policy or a
previous run. :func:`demo_page` is the other half: demo hosts (gpuaudit.sim, built from real
captures) collected by the real collector script, audited by the rules, rendered as one page,
so what the page shows is checked against what a real snapshot holds.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from report_factories import EVIL, GENERATED_AT, finding, healthy_host, unreachable_host

from gpuaudit.assemble.build import build_snapshot
from gpuaudit.model.snapshot import HostSnapshot
from gpuaudit.report.html import render_html
from gpuaudit.report.register import build_register
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


def _risk(register: dict[str, Any], risk_id: str, rule: str, **changes: Any) -> dict[str, Any]:
    indices = [i for i, f in enumerate(register["findings"]) if f["rule"] == rule]
    first = register["findings"][indices[0]]
    risk = {
        "id": risk_id,
        **{
            k: first[k]
            for k in ("rule", "title", "category", "owner", "severity", "likelihood", "impact")
        },
        "score": first["score"],
        "status": "open",
        "waiver": None,
        "waiver_expired": False,
        "affected_hosts": sorted({register["findings"][i]["host"] for i in indices}),
        "affected_gpus": [
            {
                "host": register["findings"][i]["host"],
                "gpu": register["findings"][i]["gpu"],
                "gpu_name": register["findings"][i]["gpu_name"],
            }
            for i in indices
            if register["findings"][i]["gpu"] is not None
        ],
        "finding_count": len(indices),
        "remediation": first["remediation"],
        "operation": first["operation"],
        "references": first["references"],
        "findings": indices,
    }
    risk.update(changes)
    return risk


def full_register(
    snapshots: list[HostSnapshot] | None = None, findings: list[Finding] | None = None
) -> tuple[dict[str, Any], list[HostSnapshot]]:
    """A register with every optional key: a waiver, an expired one, trends, checklists."""
    if snapshots is None or findings is None:
        snapshots, findings = fleet_and_findings()
    register = build_register(snapshots, findings, generated_at=GENERATED_AT, run_id="run-2")
    waiver = {
        "reason": WAIVER_REASON,
        "expires": "2027-03-31",
        "hosts": ["gpu-a01"],
        "owner": "infra",
    }
    expired = {"reason": EXPIRED_REASON, "expires": "2026-01-31", "hosts": None, "owner": "ml"}
    register["risks"] = [
        _risk(register, "GA001", "GA001"),
        _risk(register, "GA301:79", "GA301"),
        _risk(register, "GA501", "GA501", status="waived", waiver=waiver),
        _risk(register, "GA101", "GA101", waiver=expired, waiver_expired=True),
    ]
    for entry in register["findings"]:
        entry["status"] = "waived" if entry["rule"] == "GA501" else "open"
        entry["waiver"] = waiver if entry["rule"] == "GA501" else None
    register["findings"][4]["override_reason"] = "site policy: ML hosts treat GA101 as low"
    register["checklists"] = {
        "pre_production": {
            "title": "Pre-production checklist",
            "items": [
                {
                    "id": "PP1",
                    "text": "Driver loaded on every GPU",
                    "rules": ["GA101"],
                    "checked": True,
                },
                {"id": "PP2", "text": "No XID 79 in the log", "rules": ["GA301"], "checked": True},
                {"id": "PP3", "text": "Burn-in run signed off", "rules": [], "checked": False},
            ],
            "fleet": {"passed": 1, "checked": 2, "score_pct": 50.0},
            "hosts": {
                "gpu-a01": {"passed": 1, "checked": 2, "score_pct": 50.0, "failed_items": ["PP2"]},
                "gpu-b01": {
                    "passed": 0,
                    "checked": 2,
                    "score_pct": 0.0,
                    "failed_items": ["PP1", "PP2"],
                },
            },
        }
    }
    register["trends"] = {
        "previous_run_id": "run-1",
        "previous_generated_at": "2026-08-29T16:10:00Z",
        "new": ["GA301:79"],
        "resolved": [
            {
                "id": "GA304",
                "title": "Row remap pending",
                "severity": "high",
                "affected_hosts": ["x"],
            }
        ],
        "persisting": ["GA001", "GA501"],
        "hosts_added": ["gpu-b01"],
        "hosts_removed": ["gpu-old-07"],
        "driver_changes": [{"host": "gpu-a01", "from": "535.161.08", "to": "550.127.05"}],
        "growth": [
            {
                "host": "gpu-a01",
                "gpu": 1,
                "pci_bus_id": "0000:19:00.0",
                "metric": "ecc_aggregate.uncorrected",
                "before": 0,
                "after": 3,
            }
        ],
    }
    return register, snapshots


@dataclass(frozen=True)
class DemoPage:
    snapshots: dict[str, HostSnapshot]
    register: dict[str, Any]
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
