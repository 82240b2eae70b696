"""Trends between two runs written in a temporary reports directory."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from report_factories import finding, gpu, healthy_host, unreachable_host

from gpuaudit.model.snapshot import EccCounts, HostSnapshot, XidEvent
from gpuaudit.report.run import RunDir, new_run_dir
from gpuaudit.report.trends import find_previous, load_previous
from gpuaudit.rules.base import Evidence, Finding, Severity

OLD_DRIVER, NEW_DRIVER = "535.183.01", "550.127.05"


def xid_finding(host: str, code: int) -> Finding:
    base = finding("GA301", Severity.HIGH, host, gpu_index=1)
    return dataclasses.replace(base, evidence=Evidence("xid_events", {"code": code}, "none"))


def sysctl_finding(host: str) -> Finding:
    base = finding("GA601", Severity.MEDIUM, host, gpu_index=None)
    return dataclasses.replace(base, evidence=Evidence("sysctls[net.core.rmem_max]", 1, 2))


def with_counters(snap: HostSnapshot, corrected: int, extra_xids: int = 0) -> HostSnapshot:
    gpus = (
        gpu(0, ecc_aggregate=EccCounts(corrected=corrected, uncorrected=0)),
        *snap.gpus[1:],
    )
    event = XidEvent("xid", 79, "0000:19:00.0", "fell off the bus", "NVRM: Xid 79", None, 1)
    return dataclasses.replace(snap, gpus=gpus, xid_events=snap.xid_events + (event,) * extra_xids)


def write_run(reports: Path, run_id: str, snaps: list[HostSnapshot], findings: list[Finding],
              **kwargs: Any) -> dict[str, Any]:  # fmt: skip
    run = new_run_dir(reports, run_id)
    for snap in snaps:
        run.write_snapshot(snap)
    run.write_report(run.load_snapshots(), findings, **kwargs)
    result: dict[str, Any] = json.loads(run.register_path.read_text())
    return result


def two_runs(reports: Path) -> dict[str, Any]:
    h1_old = dataclasses.replace(with_counters(healthy_host("h1"), 0), driver_version=OLD_DRIVER)
    first = write_run(
        reports,
        "20261101T000000Z",
        [h1_old, healthy_host("h2"), healthy_host("h-old")],
        [xid_finding("h1", 79), sysctl_finding("h2"), finding("GA106", host="h-old")],
    )
    assert first["trends"] is None  # nothing earlier to compare with
    h1_new = with_counters(healthy_host("h1"), 7, extra_xids=2)
    return write_run(
        reports,
        "20261201T000000Z",
        [h1_new, healthy_host("h2"), healthy_host("h-new")],
        [xid_finding("h1", 79), finding("GA304", host="h-new")],
    )


def test_fixed_fault_is_resolved_and_new_risk_is_new(tmp_path: Path) -> None:
    trends = two_runs(tmp_path)["trends"]
    assert trends["previous_run_id"] == "20261101T000000Z"
    assert trends["previous_generated_at"].endswith("Z")
    assert trends["new"] == ["GA304"]
    assert trends["persisting"] == ["GA301:79"]
    resolved = {r["id"]: r for r in trends["resolved"]}
    # h2's sysctl was fixed; h-old left the fleet, taking its risk with it.
    assert set(resolved) == {"GA601:net.core.rmem_max", "GA106"}
    assert resolved["GA601:net.core.rmem_max"] == {
        "id": "GA601:net.core.rmem_max",
        "title": "Title of GA601",
        "severity": "medium",
        "affected_hosts": ["h2"],
        "status": "resolved",
    }
    assert trends["unverified"] == []


def test_hosts_drivers_and_counter_growth(tmp_path: Path) -> None:
    trends = two_runs(tmp_path)["trends"]
    assert trends["hosts_added"] == ["h-new"]
    assert trends["hosts_removed"] == ["h-old"]
    assert trends["driver_changes"] == [{"host": "h1", "from": OLD_DRIVER, "to": NEW_DRIVER}]
    assert trends["growth"] == [
        {
            "host": "h1",
            "gpu": 0,
            "pci_bus_id": "0000:18:00.0",
            "metric": "ecc_aggregate.corrected",
            "before": 0,
            "after": 7,
        },
        {
            "host": "h1",
            "gpu": 1,
            "pci_bus_id": "0000:19:00.0",
            "metric": "xid_events",
            "before": 1,
            "after": 3,
        },
    ]


def test_a_host_not_audited_now_does_not_resolve_its_risks(tmp_path: Path) -> None:
    write_run(tmp_path, "20261101T000000Z", [healthy_host("h1")], [xid_finding("h1", 79)])
    reg = write_run(
        tmp_path,
        "20261102T000000Z",
        [unreachable_host("h1")],
        [finding("GA001", host="h1", gpu_index=None)],
    )
    trends = reg["trends"]
    assert trends["resolved"] == []
    assert [r["id"] for r in trends["unverified"]] == ["GA301:79"]
    assert trends["growth"] == [] and trends["driver_changes"] == []


def test_default_previous_is_the_newest_earlier_stamped_run(tmp_path: Path) -> None:
    runs = {}
    for run_id in ("20261101T000000Z", "20261102T000000Z", "20261102T000000Z", "20261203T000000Z"):
        run = new_run_dir(tmp_path, run_id)
        run.write_report([healthy_host("h1")], [])
        runs[run.run_id] = run
    example = RunDir(tmp_path / "example")  # a hand-named run (the committed example)
    example.write_snapshot(healthy_host("demo"))
    example.write_report([healthy_host("demo")], [])
    no_register = new_run_dir(tmp_path, "20261101T120000Z")  # an audit that never finished
    assert find_previous(runs["20261102T000000Z-2"].path) == runs["20261102T000000Z"].path
    assert find_previous(runs["20261203T000000Z"].path) == runs["20261102T000000Z-2"].path
    assert find_previous(runs["20261102T000000Z"].path) == runs["20261101T000000Z"].path
    assert find_previous(runs["20261101T000000Z"].path) is None
    assert find_previous(no_register.path) == runs["20261101T000000Z"].path
    # A hand-named run is compared by modification time with every sibling.
    os.utime(example.path, (0, 0))
    assert find_previous(example.path) is None


def test_previous_run_from_snapshots_alone(tmp_path: Path) -> None:
    old = new_run_dir(tmp_path / "elsewhere", "old")
    old.write_snapshot(healthy_host("h1"))  # no register.json: the rules run on the snapshot
    previous = load_previous(old.path)
    assert previous.generated_at == "2026-11-29T16:05:00Z"  # the snapshot's collection time
    assert "GA301:79" in {r["id"] for r in previous.risks}
    reg = write_run(tmp_path, "20261201T000000Z", [healthy_host("h1")], [], previous=old.path)
    assert reg["trends"]["previous_run_id"] == "old"
    assert "GA301:79" in {r["id"] for r in reg["trends"]["resolved"]}


def test_previous_risks_regrouped_from_an_older_register(tmp_path: Path) -> None:
    old = new_run_dir(tmp_path, "20261101T000000Z")
    old.write_snapshot(healthy_host("h1"))
    old.write_report([healthy_host("h1")], [sysctl_finding("h1")])
    register = json.loads(old.register_path.read_text())
    del register["risks"]  # as a register of schema 1.0 was
    old.register_path.write_text(json.dumps(register))
    assert [r["id"] for r in load_previous(old.path).risks] == ["GA601:net.core.rmem_max"]


def test_report_command_takes_previous(tmp_path: Path) -> None:
    from gpuaudit.cli import main

    old = new_run_dir(tmp_path / "a", "first")
    old.write_snapshot(unreachable_host("h9"))
    new = new_run_dir(tmp_path / "b", "second")
    new.write_snapshot(unreachable_host("h1"))
    assert main(["report", str(new.path), "--previous", str(old.path)]) == 0
    trends = json.loads(new.register_path.read_text())["trends"]
    assert (trends["previous_run_id"], trends["hosts_added"]) == ("first", ["h1"])
    assert main(["report", str(new.path), "--previous", str(tmp_path / "nope")]) == 2


def test_no_growth_from_a_host_that_was_not_audited_before(tmp_path: Path) -> None:
    write_run(tmp_path, "20261101T000000Z", [unreachable_host("h1")], [])
    reg = write_run(tmp_path, "20261102T000000Z", [healthy_host("h1")], [xid_finding("h1", 79)])
    trends = reg["trends"]
    assert trends["growth"] == [] and trends["new"] == ["GA301:79"]
    assert trends["hosts_added"] == [] and trends["hosts_removed"] == []
