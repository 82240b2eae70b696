"""Trends between two runs written in a temporary reports directory."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from report_factories import finding, gpu, healthy_host, unreachable_host

from gpuaudit.model.snapshot import EccCounts, HostSnapshot, HostStatus, XidEvent
from gpuaudit.pipeline import rebuild, write_report
from gpuaudit.report.provenance import INVENTORY, Scope, bundle_scope, record_provenance
from gpuaudit.report.run import RunDir, new_run_dir
from gpuaudit.report.trend_basis import BASIS_FILE
from gpuaudit.report.trends import build_trends, find_previous, load_previous
from gpuaudit.rules.base import Evidence, Finding, Outcome, RuleOutcome, Severity

OLD_DRIVER, NEW_DRIVER = "535.183.01", "550.127.05"
FLEET = Scope(INVENTORY, inventory="/srv/inventory/prod.py")


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
              scope: Scope | None = None, **kwargs: Any) -> dict[str, Any]:  # fmt: skip
    """Write a run's snapshots, its provenance when ``scope`` is given, and its register."""
    run = new_run_dir(reports, run_id)
    for snap in snaps:
        run.write_snapshot(snap)
    if scope is not None:
        record_provenance(run.path, scope, argv=["gpuaudit", "audit"])
    write_report(run, run.load_snapshots(), findings, **kwargs)
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
        [xid_finding("h1", 79), finding("GA304", host="h2"), finding("GA402", host="h-new")],
    )


def test_fixed_fault_is_resolved_and_new_risk_is_new(tmp_path: Path) -> None:
    trends = two_runs(tmp_path)["trends"]
    assert trends["previous_run_id"] == "20261101T000000Z"
    assert trends["previous_generated_at"].endswith("Z")
    assert trends["compared_hosts"] == 2  # h1 and h2: the hosts both runs hold
    assert trends["new"] == ["GA304"]
    assert trends["persisting"] == ["GA301:79"]
    # h2's sysctl was fixed. h-old is not in this run: its risk is not in scope, not resolved.
    assert trends["resolved"] == [
        {
            "id": "GA601:net.core.rmem_max",
            "title": "Title of GA601",
            "severity": "medium",
            "affected_hosts": ["h2"],
            "status": "resolved",
        }
    ]
    assert [r["id"] for r in trends["risks_not_in_scope"]] == ["GA106"]
    # h-new was not in the previous run: its risk is on a new host, not a new risk.
    assert trends["risks_on_new_hosts"] == ["GA402"]
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
        write_report(run, [healthy_host("h1")], [])
        runs[run.run_id] = run
    example = RunDir(tmp_path / "example")  # a hand-named run (the committed example)
    example.write_snapshot(healthy_host("demo"))
    write_report(example, [healthy_host("demo")], [])
    no_register = new_run_dir(tmp_path, "20261101T120000Z")  # an audit that never finished
    assert find_previous(runs["20261102T000000Z-2"].path) == runs["20261102T000000Z"].path
    assert find_previous(runs["20261203T000000Z"].path) == runs["20261102T000000Z-2"].path
    assert find_previous(runs["20261102T000000Z"].path) == runs["20261101T000000Z"].path
    assert find_previous(runs["20261101T000000Z"].path) is None
    assert find_previous(no_register.path) == runs["20261101T000000Z"].path
    # A hand-named run is compared with every sibling by when its snapshots were written.
    os.utime(example.hosts_dir, (0, 0))
    assert find_previous(example.path) is None


def test_previous_run_from_snapshots_alone(tmp_path: Path) -> None:
    old = new_run_dir(tmp_path / "elsewhere", "old")
    old.write_snapshot(healthy_host("h1"))  # no register.json: the rules run on the snapshot
    previous = load_previous(old.path)
    assert previous.generated_at == "2026-11-29T16:05:00Z"  # the snapshot's collection time
    assert "GA301:79" in {r.id for r in previous.risks}
    reg = write_run(tmp_path, "20261201T000000Z", [healthy_host("h1")], [], previous=old.path)
    assert reg["trends"]["previous_run_id"] == "old"
    assert "GA301:79" in {r["id"] for r in reg["trends"]["resolved"]}


def test_previous_risks_regrouped_from_an_older_register(tmp_path: Path) -> None:
    old = new_run_dir(tmp_path, "20261101T000000Z")
    old.write_snapshot(healthy_host("h1"))
    write_report(old, [healthy_host("h1")], [sysctl_finding("h1")])
    register = json.loads(old.register_path.read_text())
    del register["risks"]  # as a register of schema 1.0 was
    old.register_path.write_text(json.dumps(register))
    assert [r.id for r in load_previous(old.path).risks] == ["GA601:net.core.rmem_max"]


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
    assert trends["growth"] == [] and trends["new"] == []
    # The previous run held h1 but did not look at it: its risk is not known to be new.
    assert trends["risks_not_judged_before"] == ["GA301:79"]
    assert trends["hosts_added"] == [] and trends["hosts_removed"] == []


def three_hosts(
    run_hosts: tuple[str, ...] = ("a", "b", "c"),
) -> tuple[list[HostSnapshot], list[Finding]]:
    """Hosts a, b, c, each with a risk of its own that never changes."""
    risks = {
        "a": sysctl_finding("a"),
        "b": finding("GA106", host="b", gpu_index=None),
        "c": xid_finding("c", 79),
    }
    snaps = [healthy_host(h) for h in run_hosts]
    return snaps, [risks[h] for h in run_hosts]


def limited(*patterns: str) -> Scope:
    return Scope(INVENTORY, inventory=FLEET.inventory, limit=patterns)


def assert_nothing_changed(trends: dict[str, Any]) -> None:
    assert trends["new"] == [] and trends["resolved"] == [] and trends["unverified"] == []


def test_a_limit_run_and_the_next_full_run_show_only_real_changes(tmp_path: Path) -> None:
    write_run(tmp_path, "20261101T000000Z", *three_hosts(), scope=FLEET)
    limit_run = write_run(tmp_path, "20261102T000000Z", *three_hosts(("a",)), scope=limited("a"))
    trends = limit_run["trends"]
    assert trends["previous_run_id"] == "20261101T000000Z"
    assert_nothing_changed(trends)
    assert trends["persisting"] == ["GA601:net.core.rmem_max"]
    # b and c were not audited by the --limit run: not in its scope, never "resolved".
    assert trends["hosts_removed"] == ["b", "c"]
    assert [r["id"] for r in trends["risks_not_in_scope"]] == ["GA106", "GA301:79"]
    assert trends["previous_scope"] == FLEET.to_dict()
    # The page and the digest say so too: b and c are out of scope, nothing was resolved.
    page = (tmp_path / "20261102T000000Z/index.html").read_text()
    panel = page.split('id="trends"', 1)[1].split("</section>", 1)[0]
    assert (
        "+0</span> new, 2 not in this run's scope" in panel
        and "Not in scope:</strong> b, c" in panel
    )
    assert "/srv/inventory/prod.py, every host, on the 1 host both runs hold" in panel
    resolved = panel.split("trend-resolved", 1)[1].split("</div>", 1)[0]
    assert "None." in resolved
    out_of_scope = panel.split("trend-risks_not_in_scope", 1)[1].split("</div>", 1)[0]
    assert "GA106" in out_of_scope and "GA301:79" in out_of_scope
    digest = (tmp_path / "20261102T000000Z/summary.md").read_text()
    assert "- Resolved: 0" in digest and "- Not in this run's scope: b, c" in digest

    full = write_run(tmp_path, "20261103T000000Z", *three_hosts(), scope=FLEET)["trends"]
    # Compared with the last full run, not with the --limit run in between.
    assert full["previous_run_id"] == "20261101T000000Z"
    assert_nothing_changed(full)
    assert full["hosts_added"] == [] and full["hosts_removed"] == []
    assert len(full["persisting"]) == 3


def test_rebuilding_a_limit_run_compares_it_like_with_like(tmp_path: Path) -> None:
    quiet = dataclasses.replace(healthy_host("a"), xid_events=())
    faulty = healthy_host("b")  # its XID 79 is GA301:79, on b alone
    write_run(tmp_path, "20261101T000000Z", [quiet, faulty], None, scope=FLEET)
    write_run(tmp_path, "20261102T000000Z", [quiet], None, scope=limited("a"))
    write_run(tmp_path, "20261103T000000Z", [faulty], None, scope=limited("b"))

    rebuild(tmp_path / "20261102T000000Z")  # gpuaudit report RUN_DIR, rules run again
    trends = json.loads((tmp_path / "20261102T000000Z/register.json").read_text())["trends"]
    assert trends["previous_run_id"] == "20261101T000000Z"
    assert_nothing_changed(trends)
    assert "GA301:79" in {r["id"] for r in trends["risks_not_in_scope"]}


def test_a_full_run_after_only_a_limit_run_reports_new_hosts_not_new_risks(
    tmp_path: Path,
) -> None:
    write_run(tmp_path, "20261102T000000Z", *three_hosts(("a",)), scope=limited("a"))
    trends = write_run(tmp_path, "20261103T000000Z", *three_hosts(), scope=FLEET)["trends"]
    assert trends["previous_run_id"] == "20261102T000000Z"
    assert_nothing_changed(trends)
    assert trends["hosts_added"] == ["b", "c"]
    assert trends["risks_on_new_hosts"] == ["GA106", "GA301:79"]
    assert trends["persisting"] == ["GA601:net.core.rmem_max"]


def test_a_full_run_after_an_interrupted_one_reports_no_old_risk_as_new(tmp_path: Path) -> None:
    write_run(tmp_path, "20261101T000000Z", *three_hosts(), scope=FLEET)
    snaps, findings = three_hosts()
    # Interrupted after a: b and c have snapshots saying they were not audited.
    stopped = [
        dataclasses.replace(unreachable_host(h), status=HostStatus.NOT_AUDITED) for h in "bc"
    ]
    write_run(tmp_path, "20261102T000000Z", [snaps[0], *stopped], findings[:1], scope=FLEET)
    trends = write_run(tmp_path, "20261103T000000Z", snaps, findings, scope=FLEET)["trends"]
    # The interrupted run looked at one of its three hosts: the full run before it is the one
    # compared with.
    assert trends["previous_run_id"] == "20261101T000000Z"
    assert trends["new"] == [] and trends["resolved"] == []
    assert sorted(trends["persisting"]) == ["GA106", "GA301:79", "GA601:net.core.rmem_max"]
    # Compared with the interrupted run itself (--previous), b's and c's risks were there all
    # along; that run did not look at them.
    trends = write_run(
        tmp_path, "20261104T000000Z", snaps, findings, previous=tmp_path / "20261102T000000Z"
    )["trends"]
    assert trends["new"] == [] and trends["resolved"] == []
    assert trends["persisting"] == ["GA601:net.core.rmem_max"]
    assert trends["risks_not_judged_before"] == ["GA106", "GA301:79"]
    page = (tmp_path / "20261104T000000Z/index.html").read_text()
    panel = page.split('id="trends"', 1)[1].split("</section>", 1)[0]
    assert "GA106" in panel.split("trend-risks_not_judged_before", 1)[1].split("</div>", 1)[0]
    digest = (tmp_path / "20261104T000000Z/summary.md").read_text()
    assert "- New risks: 0" in digest and "GA106" in digest


def test_a_risk_whose_rule_did_not_judge_its_host_before_is_not_new(tmp_path: Path) -> None:
    off = {"disabled_rules": ["GA301"]}
    write_run(tmp_path, "20261101T000000Z", [healthy_host("h1")], None, policy=off)
    # GA301 on again: h1's XIDs were in its kernel log before, GA301 did not look at them.
    trends = write_run(tmp_path, "20261102T000000Z", [healthy_host("h1")], None)["trends"]
    assert trends["new"] == []
    assert sorted(trends["risks_not_judged_before"]) == ["GA301:13", "GA301:79"]
    # The same when the previous run's outcomes are read from its register.json.
    (tmp_path / "20261101T000000Z" / BASIS_FILE).unlink()
    rebuild(tmp_path / "20261102T000000Z")
    again = json.loads((tmp_path / "20261102T000000Z/register.json").read_text())["trends"]
    assert (
        again["new"] == [] and again["risks_not_judged_before"] == trends["risks_not_judged_before"]
    )


def test_runs_of_another_inventory_are_not_compared(tmp_path: Path) -> None:
    write_run(tmp_path, "20261101T000000Z", *three_hosts(), scope=FLEET)
    other = Scope(INVENTORY, inventory="/srv/inventory/lab.py")
    assert write_run(tmp_path, "20261102T000000Z", *three_hosts(), scope=other)["trends"] is None
    # Nor is a run that shares no host with this one.
    write_run(tmp_path, "20261103T000000Z", [healthy_host("z")], [], scope=FLEET)
    assert (
        write_run(tmp_path, "20261104T000000Z", *three_hosts(), scope=other)["trends"][
            "previous_run_id"
        ]
        == "20261102T000000Z"
    )


def test_a_bundle_run_of_one_machine_is_compared_with_a_run_holding_it(tmp_path: Path) -> None:
    from gpuaudit.cli import main

    write_run(tmp_path, "20261101T000000Z", *three_hosts(), scope=FLEET)
    # A file that is not collector output is a failed host named after the file: gpu-07.
    bundle = tmp_path / "gpu-07.bundle"
    bundle.write_text("not collector output\n")

    def report(run_id: str, path: Path) -> dict[str, Any]:
        argv = ["report", "--bundle", str(path), "--reports-dir", str(tmp_path)]
        assert main([*argv, "--run-id", run_id]) == 0
        result: dict[str, Any] = json.loads((tmp_path / run_id / "register.json").read_text())
        return result

    first = report("20261102T000000Z", bundle)
    assert first["trends"] is None  # the fleet run does not hold gpu-07: nothing to compare
    assert first["provenance"]["scope"] == bundle_scope([bundle]).to_dict()
    assert report("20261103T000000Z", bundle)["trends"]["previous_run_id"] == "20261102T000000Z"

    # A bundle of a fleet host is compared with the fleet run, on that host alone.
    (tmp_path / "a.bundle").write_text("not collector output\n")
    trends = report("20261104T000000Z", tmp_path / "a.bundle")["trends"]
    assert trends["previous_run_id"] == "20261101T000000Z"
    assert trends["hosts_removed"] == ["b", "c"] and trends["resolved"] == []
    # The inventory run after it is still compared with the inventory run.
    again = write_run(tmp_path, "20261105T000000Z", *three_hosts(), scope=FLEET)["trends"]
    assert again["previous_run_id"] == "20261101T000000Z"
    assert_nothing_changed(again)


def test_the_previous_run_is_judged_again_by_its_own_policy(tmp_path: Path) -> None:
    old = new_run_dir(tmp_path, "20261101T000000Z")
    old.write_snapshot(healthy_host("h1"))  # its XID 79 is GA301:79 under the default policy
    (old.path / "policy.yaml").write_text("version: 1\ndefaults:\n  disabled_rules: [GA301]\n")
    assert "GA301:79" not in {r.id for r in load_previous(old.path).risks}

    # Rebuilt with the old run as previous: its snapshots alone, judged by its own policy.
    new = new_run_dir(tmp_path, "20261201T000000Z")
    new.write_snapshot(dataclasses.replace(healthy_host("h1"), xid_events=()))
    rebuild(new, previous=old.path)
    trends = json.loads(new.register_path.read_text())["trends"]
    assert "GA301:79" not in {r["id"] for r in trends["resolved"]}
    assert trends["notes"] == []

    # A copy that no longer loads is said so, and the defaults judge the snapshots.
    (old.path / "policy.yaml").write_text("version: 1\nnot_a_key: 3\n")
    previous = load_previous(old.path)
    assert "GA301:79" in {r.id for r in previous.risks}
    assert "policy.yaml does not load" in previous.notes[0]


def test_fleet_checks_are_not_compared_between_runs_of_different_hosts(tmp_path: Path) -> None:
    drift = finding("GA701", Severity.MEDIUM, "a", category="consistency", gpu_index=None)
    snaps, findings = three_hosts()
    write_run(tmp_path, "20261101T000000Z", snaps, [*findings, drift], scope=FLEET)
    # Alone in a --limit run, a has no peers to drift from: that is no fix.
    trends = write_run(tmp_path, "20261102T000000Z", *three_hosts(("a",)), scope=limited("a"))[
        "trends"
    ]
    assert_nothing_changed(trends)
    assert trends["fleet_not_compared"] == ["GA701"]
    page = (tmp_path / "20261102T000000Z/index.html").read_text()
    assert "Fleet checks not compared" in page.split('id="trends"', 1)[1].split("</section>")[0]
    # Between runs of the same hosts it is compared as any risk is.
    full = write_run(tmp_path, "20261103T000000Z", *three_hosts(), scope=FLEET)["trends"]
    assert [r["id"] for r in full["resolved"]] == ["GA701"] and full["fleet_not_compared"] == []


def test_a_risk_whose_rule_did_not_judge_its_host_now_is_not_resolved(tmp_path: Path) -> None:
    write_run(tmp_path, "20261101T000000Z", [healthy_host("h1")], None)  # the rules judge
    # The XIDs are still in h1's kernel log, but GA301 is off: nothing was fixed.
    off = {"disabled_rules": ["GA301"]}
    trends = write_run(tmp_path, "20261102T000000Z", [healthy_host("h1")], None, policy=off)[
        "trends"
    ]
    assert trends["resolved"] == []
    assert [r["id"] for r in trends["unverified"]] == ["GA301:13", "GA301:79"]
    # A rule that could not look at the host (its data did not arrive) resolves nothing either.
    previous = load_previous(tmp_path / "20261101T000000Z")
    unread = RuleOutcome("GA301", "h1", Outcome.NOT_EVALUATED, "the kernel log was not read")
    now = build_trends([healthy_host("h1")], [], previous, [unread])
    assert now is not None and "GA301:79" in {r.id for r in now.unverified}
    assert "GA301:79" not in {r.id for r in now.resolved}


def with_boards(name: str, *boards: tuple[str, int]) -> HostSnapshot:
    """``name`` with a GPU per (UUID, corrected ECC errors), in slot order (PCI bus ids)."""
    gpus = tuple(
        gpu(i, uuid=uuid, ecc_aggregate=EccCounts(corrected=errors, uncorrected=0))
        for i, (uuid, errors) in enumerate(boards)
    )
    return dataclasses.replace(healthy_host(name), gpus=gpus)


def test_a_replaced_gpu_is_not_compared_with_the_one_it_replaced(tmp_path: Path) -> None:
    write_run(tmp_path, "20261101T000000Z", [with_boards("h1", ("GPU-a", 0), ("GPU-b", 0))], [])
    # GPU 0 went back to the vendor (RMA); the board in its slot came with errors of its own.
    now = with_boards("h1", ("GPU-spare", 40), ("GPU-b", 0))
    trends = write_run(tmp_path, "20261201T000000Z", [now], [])["trends"]
    assert trends["growth"] == []
    assert any("0000:18:00.0" in note and "GPU-spare" in note for note in trends["notes"])


def test_gpus_that_changed_slots_are_compared_with_themselves(tmp_path: Path) -> None:
    write_run(tmp_path, "20261101T000000Z", [with_boards("h1", ("GPU-a", 7), ("GPU-b", 0))], [])
    # The boards were swapped between the two slots; GPU-a gained 2 errors, GPU-b none.
    now = with_boards("h1", ("GPU-b", 0), ("GPU-a", 9))
    trends = write_run(tmp_path, "20261201T000000Z", [now], [])["trends"]
    assert [(g["pci_bus_id"], g["metric"], g["before"], g["after"]) for g in trends["growth"]] == [
        ("0000:19:00.0", "ecc_aggregate.corrected", 7, 9)
    ]


def test_a_hand_named_run_rebuilt_is_not_compared_with_a_later_audit(tmp_path: Path) -> None:
    def audited(run_id: str, when: int) -> RunDir:
        run = new_run_dir(tmp_path, run_id)
        run.write_snapshot(healthy_host("h1"))
        write_report(run, run.load_snapshots(), [])
        for path in (run.hosts_dir, run.path):
            os.utime(path, (when, when))
        return run

    q1, q2 = audited("q1-audit", 1_000_000), audited("q2-audit", 2_000_000)
    assert find_previous(q2.path) == q1.path
    # gpuaudit report q1-audit, twice (a new policy, say): its files are written anew each
    # time, yet it was audited before q2-audit, which stays later than it.
    rebuild(q1)
    rebuild(q1)
    assert json.loads(q1.register_path.read_text())["trends"] is None
    assert find_previous(q1.path) is None


def booted(boot_time: str | None, volatile: tuple[int, int], aggregate: int) -> HostSnapshot:
    """h1 booted at ``boot_time``, its two GPUs with these volatile corrected ECC counts and
    GPU 0 with ``aggregate`` corrected errors since manufacture; healthy_host's kernel log."""
    snap = healthy_host("h1")
    gpus = tuple(
        dataclasses.replace(
            board,
            ecc_volatile=EccCounts(corrected=count, uncorrected=0),
            ecc_aggregate=EccCounts(corrected=aggregate if board.index == 0 else 0, uncorrected=0),
        )
        for board, count in zip(snap.gpus, volatile, strict=True)
    )
    return dataclasses.replace(
        snap, gpus=gpus, os=dataclasses.replace(snap.os, boot_time=boot_time)
    )


def grown(trends: dict[str, Any]) -> list[tuple[str, str, int, int]]:
    return [(g["pci_bus_id"], g["metric"], g["before"], g["after"]) for g in trends["growth"]]


def test_counters_a_reboot_resets_count_from_zero_after_it(tmp_path: Path) -> None:
    write_run(tmp_path, "20261101T000000Z", [booted("2026-10-01T08:00:00Z", (10, 10), 30)], [])
    # Rebooted since: the volatile counts and the kernel log start again from nothing.
    now = booted("2026-11-20T09:30:00Z", (12, 5), 30)
    trends = write_run(tmp_path, "20261201T000000Z", [now], [])["trends"]
    assert grown(trends) == [
        ("0000:18:00.0", "ecc_volatile.corrected", 0, 12),
        ("0000:18:00.0", "xid_events", 0, 1),
        ("0000:19:00.0", "ecc_volatile.corrected", 0, 5),
        ("0000:19:00.0", "xid_events", 0, 1),
    ]
    assert any(
        note.startswith("Rebooted since the previous run") and "h1" in note
        for note in trends["notes"]
    )
    # A boot time read again a second off (the kernel derives it from the clock) is one boot.
    write_run(tmp_path, "20261202T000000Z", [booted("2026-11-20T09:30:01Z", (12, 5), 31)], [])
    same_boot = json.loads((tmp_path / "20261202T000000Z/register.json").read_text())["trends"]
    assert grown(same_boot) == [("0000:18:00.0", "ecc_aggregate.corrected", 30, 31)]
    assert same_boot["notes"] == []


def test_counters_are_compared_as_before_where_a_boot_time_is_unknown(tmp_path: Path) -> None:
    write_run(tmp_path, "20261101T000000Z", [booted(None, (10, 10), 30)], [])
    trends = write_run(
        tmp_path, "20261201T000000Z", [booted("2026-11-20T09:30:00Z", (12, 5), 30)], []
    )["trends"]
    assert grown(trends) == [("0000:18:00.0", "ecc_volatile.corrected", 10, 12)]
    assert trends["notes"] == []


def test_a_run_is_never_compared_with_itself(tmp_path: Path) -> None:
    from gpuaudit.cli import main

    write_run(tmp_path, "20261101T000000Z", [healthy_host("h1")], [])
    run = RunDir(tmp_path / "20261201T000000Z")
    write_run(tmp_path, run.run_id, [healthy_host("h1")], [])
    (tmp_path / "latest").symlink_to(run.path)
    for itself in (run.path, tmp_path / "latest", run.hosts_dir / ".."):
        assert main(["report", str(run.path), "--previous", str(itself)]) == 2
    register = json.loads(run.register_path.read_text())
    assert register["trends"]["previous_run_id"] == "20261101T000000Z"  # left as it was
    # Nor is the run found as its own previous run, by any name it goes by.
    (tmp_path / "20261102T000000Z").symlink_to(run.path)
    assert find_previous(run.path) == tmp_path / "20261101T000000Z"
    assert find_previous(tmp_path / "latest") == tmp_path / "20261101T000000Z"


def test_fleet_checks_are_not_compared_when_the_peers_could_not_be_reached(
    tmp_path: Path,
) -> None:
    """The same three hosts, but b and c unreachable this time: a's drift finding went because
    it had no audited peer to drift from, which is no fix."""
    drift = finding("GA701", Severity.MEDIUM, "a", category="consistency", gpu_index=None)
    snaps, findings = three_hosts()
    write_run(tmp_path, "20261101T000000Z", snaps, [*findings, drift], scope=FLEET)
    now = [healthy_host("a"), unreachable_host("b"), unreachable_host("c")]
    trends = write_run(tmp_path, "20261102T000000Z", now, findings[:1], scope=FLEET)["trends"]
    assert trends["compared_hosts"] == 3 and trends["hosts_removed"] == []
    assert "GA701" not in [r["id"] for r in trends["resolved"]]
    assert trends["fleet_not_compared"] == ["GA701"]
    # And back: the drift found again once the peers answer is not new either.
    outage = tmp_path / "20261102T000000Z"
    again = write_run(tmp_path, "20261103T000000Z", snaps, [*findings, drift], previous=outage)
    assert again["trends"]["previous_run_id"] == "20261102T000000Z"
    assert "GA701" not in again["trends"]["new"]
    assert again["trends"]["fleet_not_compared"] == ["GA701"]


def test_a_run_that_reached_no_host_is_not_the_default_previous(tmp_path: Path) -> None:
    hosts = ("h1", "h2")
    write_run(tmp_path, "20261101T000000Z", [healthy_host(h) for h in hosts], [], scope=FLEET)
    # An outage: every host unreachable. It holds their snapshots, but looked at none.
    outage = [unreachable_host(h) for h in hosts]
    write_run(tmp_path, "20261102T000000Z", outage, [], scope=FLEET)
    current = new_run_dir(tmp_path, "20261103T000000Z")
    assert find_previous(current.path, hosts, FLEET) == tmp_path / "20261101T000000Z"
    # A run that reached half of them is a run like any other: the newest is taken.
    half = [healthy_host("h1"), unreachable_host("h2")]
    write_run(tmp_path, "20261102T120000Z", half, [], scope=FLEET)
    assert find_previous(current.path, hosts, FLEET) == tmp_path / "20261102T120000Z"
    # Without one that reached more, the outage run is still better than none.
    (tmp_path / "20261102T120000Z" / "register.json").unlink()
    (tmp_path / "20261101T000000Z" / "register.json").unlink()
    assert find_previous(current.path, hosts, FLEET) == tmp_path / "20261102T000000Z"
    # A register whose head cannot be read counts as one that reached its hosts.
    write_run(tmp_path, "20261101T120000Z", outage, [], scope=FLEET)
    (tmp_path / "20261101T120000Z" / "register.json").write_text("{}\n")
    assert find_previous(current.path, hosts, FLEET) == tmp_path / "20261101T120000Z"
