"""trend-basis.json: the previous run's counters read without loading its snapshots, and the
snapshots read whenever that file cannot be trusted."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest
from report_factories import finding, healthy_host
from test_trends import NEW_DRIVER, OLD_DRIVER, sysctl_finding, two_runs, with_counters, xid_finding

from gpuaudit.pipeline import rebuild, write_report
from gpuaudit.report import trends
from gpuaudit.report.run import RunDir, atomic_write_streams, new_run_dir
from gpuaudit.report.trend_basis import BASIS_FILE, GPU_COUNTERS, read_basis, read_trend_basis
from gpuaudit.report.trends import load_previous
from gpuaudit.rules.base import Severity

FIRST, SECOND = "20261101T000000Z", "20261201T000000Z"
CORRECTED = GPU_COUNTERS.index("ecc_aggregate.corrected")


def _no_snapshot_loading(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(_run: RunDir) -> list[Any]:
        raise AssertionError("the snapshots were loaded")

    monkeypatch.setattr(RunDir, "load_snapshots", refuse)


def test_the_basis_holds_what_trends_compare(tmp_path: Path) -> None:
    two_runs(tmp_path)
    first = RunDir(tmp_path / FIRST)
    assert (first.path / BASIS_FILE).is_file()
    hosts = {h.host: h for h in read_basis(first.path) or ()}
    assert sorted(hosts) == ["h-old", "h1", "h2"]
    h1 = hosts["h1"]
    assert h1.driver == OLD_DRIVER  # two_runs wrote h1 with the old driver the first time
    gpu0 = next(g for g in h1.gpus if g.index == 0)
    assert gpu0.pci_bus_id == "0000:18:00.0" and gpu0.counters[CORRECTED] == 0
    # healthy_host's kernel log: an XID 79 on GPU 1 (19:00.0) and an XID 13 on GPU 0 (18:00.0).
    assert h1.xids == {"0000:19:00.0": 1, "0000:18:00.0": 1}


def test_trends_from_the_basis_are_those_from_the_snapshots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from_basis = two_runs(tmp_path)["trends"]
    assert from_basis["driver_changes"] == [{"host": "h1", "from": OLD_DRIVER, "to": NEW_DRIVER}]
    assert [(g["metric"], g["before"], g["after"]) for g in from_basis["growth"]] == [
        ("ecc_aggregate.corrected", 0, 7),
        ("xid_events", 1, 3),
    ]
    with monkeypatch.context() as patch:
        _no_snapshot_loading(patch)
        previous = load_previous(tmp_path / FIRST)  # register.json + trend-basis.json only
    assert sorted(h.host for h in previous.hosts) == ["h-old", "h1", "h2"]
    # Without the file, the same comparison from the previous run's snapshots.
    (tmp_path / FIRST / BASIS_FILE).unlink()
    second = RunDir(tmp_path / SECOND)
    findings = [f.finding for f in second.load_register().findings]
    write_report(second, second.load_snapshots(), findings)
    from_snapshots = json.loads(second.register_path.read_text())["trends"]
    assert from_snapshots == from_basis
    # And a rebuild (the rules judging again) of the second run reads the first's basis again.
    with monkeypatch.context() as patch:
        rebuild(tmp_path / FIRST)
        real = RunDir.load_snapshots
        loaded: list[Path] = []

        def counting(run: RunDir) -> list[Any]:
            loaded.append(run.path)
            return real(run)

        patch.setattr(RunDir, "load_snapshots", counting)
        rebuild(second)
    assert loaded == [second.path]  # this run's snapshots only, never the previous run's


def test_a_snapshot_changed_after_the_report_is_read_again(tmp_path: Path) -> None:
    two_runs(tmp_path)
    first = RunDir(tmp_path / FIRST)
    path = first.snapshot_path("h1")
    before = path.stat()
    first.write_snapshot(with_counters(healthy_host("h1"), 5))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
    assert read_basis(first.path) is None  # no longer the file it was made from
    h1 = next(h for h in load_previous(first.path).hosts if h.host == "h1")
    gpu0 = next(g for g in h1.gpus if g.index == 0)
    assert gpu0.counters[CORRECTED] == 5 and h1.driver == NEW_DRIVER  # the snapshot as it is


def test_a_snapshot_added_or_removed_makes_the_basis_stale(tmp_path: Path) -> None:
    two_runs(tmp_path)
    first = RunDir(tmp_path / FIRST)
    first.write_snapshot(healthy_host("h3"))
    assert read_basis(first.path) is None
    first.snapshot_path("h3").unlink()
    assert read_basis(first.path) is not None
    first.snapshot_path("h2").unlink()
    assert read_basis(first.path) is None
    assert sorted(h.host for h in load_previous(first.path).hosts) == ["h-old", "h1"]


def test_without_a_register_the_snapshots_are_judged_again(tmp_path: Path) -> None:
    two_runs(tmp_path)
    first = RunDir(tmp_path / FIRST)
    first.register_path.unlink()
    assert (first.path / BASIS_FILE).is_file()
    previous = load_previous(first.path)
    # The rules ran on the snapshots: healthy_host's XID 79 on GPU 1 is a risk again.
    assert "GA301:79" in {r.id for r in previous.risks}
    assert previous.generated_at == "2026-11-29T16:05:00Z"  # the snapshots' collection time


def test_an_unreadable_basis_is_not_used(tmp_path: Path) -> None:
    two_runs(tmp_path)
    basis = tmp_path / FIRST / BASIS_FILE
    kept = json.loads(basis.read_text())
    without_uuids = {**kept, "version": 1}  # version 1 kept no GPU UUIDs
    for entry in without_uuids["hosts"]:
        entry["gpus"] = [gpu[:3] for gpu in entry["gpus"]]
    damaged = ("{", '{"version": 99, "hosts": []}', '{"version": 2, "hosts": [{}]}')
    for text in (*damaged, json.dumps(without_uuids)):
        basis.write_text(text)
        assert read_basis(basis.parent) is None
        assert sorted(h.host for h in load_previous(basis.parent).hosts) == ["h-old", "h1", "h2"]


def test_no_basis_for_snapshots_that_are_not_the_runs_files(tmp_path: Path) -> None:
    run = new_run_dir(tmp_path, FIRST)
    write_report(run, [healthy_host("h1")])  # never written to hosts/
    assert not (run.path / BASIS_FILE).exists()
    twice = new_run_dir(tmp_path, SECOND)
    twice.write_snapshot(healthy_host("h1"))
    later = dataclasses.replace(healthy_host("h1"), collected_at="2026-11-30T00:00:00Z")
    write_report(twice, [healthy_host("h1"), later])  # two snapshots of one host file
    assert not (twice.path / BASIS_FILE).exists()


def _no_register_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(_path: Path) -> dict[str, Any] | None:
        raise AssertionError("register.json was read")

    monkeypatch.setattr(trends, "_read_register", refuse)


def _sealed_run(reports: Path) -> RunDir:
    """A run whose risks have several hosts each, given in no order, and one waived."""
    run = new_run_dir(reports, FIRST)
    for name in ("h3", "h1", "h2"):
        run.write_snapshot(healthy_host(name))
    findings = [
        sysctl_finding("h3"),
        sysctl_finding("h1"),
        xid_finding("h2", 79),
        xid_finding("h1", 79),
        finding("GA106", Severity.LOW, host="h3"),
    ]
    waiver = {"rule": "GA106", "reason": "accepted", "expires": "2099-01-01"}
    write_report(run, run.load_snapshots(), findings, policy={"waivers": [waiver]})
    return run


def test_the_previous_risks_come_from_the_basis_while_the_register_is_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _sealed_run(tmp_path)
    basis = read_trend_basis(run.path)
    assert basis is not None and basis.register is not None
    with monkeypatch.context() as patch:
        _no_register_reading(patch)
        _no_snapshot_loading(patch)
        sealed = load_previous(run.path)
    # The same as register.json read back gives: drop the register's part from the basis.
    text = (run.path / BASIS_FILE).read_text()
    data = json.loads(text)
    del data["register"]
    stat = (run.path / BASIS_FILE).stat()
    (run.path / BASIS_FILE).write_text(json.dumps(data))
    os.utime(run.path / BASIS_FILE, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert read_trend_basis(run.path) is not None  # the hosts' part is still trusted
    read_back = load_previous(run.path)
    assert sealed == read_back
    assert {r.id: r.affected_hosts for r in sealed.risks} == {
        "GA601:net.core.rmem_max": ("h1", "h3"),
        "GA301:79": ("h1", "h2"),
        "GA106": ("h3",),
    }
    registered = json.loads(run.register_path.read_text())
    assert sealed.generated_at == registered["generated_at"]


def test_a_register_changed_after_the_report_is_read_again(tmp_path: Path) -> None:
    run = _sealed_run(tmp_path)
    text = run.register_path.read_text()
    # Same length, other bytes: the digest, not the size, tells.
    edited = text.replace('"Title of GA601"', '"Title of GA6O1"')
    assert edited != text and len(edited) == len(text)
    run.register_path.write_text(edited)
    titles = {r.id: r.title for r in load_previous(run.path).risks}
    assert titles["GA601:net.core.rmem_max"] == "Title of GA6O1"
    # Gone: the rules judge the snapshots again (healthy_host's XID 13 is a risk then, though
    # the register written had none), never the basis' copy of the register's risks.
    basis = read_trend_basis(run.path)
    assert basis is not None and basis.register is not None
    assert "GA301:13" not in {r.id for r in basis.register.risks}
    run.register_path.unlink()
    assert "GA301:13" in {r.id for r in load_previous(run.path).risks}


def test_a_damaged_register_part_of_the_basis_is_not_used(tmp_path: Path) -> None:
    run = _sealed_run(tmp_path)
    path = run.path / BASIS_FILE
    stat = path.stat()
    data = json.loads(path.read_text())
    for damaged in ({"risks": [["GA1", "t", "low", "h1"]]}, {"size": "12"}, {"sha256": None}):
        path.write_text(json.dumps({**data, "register": {**data["register"], **damaged}}))
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        basis = read_trend_basis(run.path)
        assert basis is not None and basis.register is None
        assert "GA301:79" in {r.id for r in load_previous(run.path).risks}


def test_the_register_is_renamed_last_whenever_it_is_made(tmp_path: Path) -> None:
    register = tmp_path / "register.json"
    files = [(tmp_path / "a", ["a"]), (register, ["r"]), (tmp_path / "b", ["b"])]
    assert atomic_write_streams(files, last=register) == [tmp_path / "a", tmp_path / "b", register]

    def failing() -> Any:
        yield "c"
        raise OSError("disk full")

    later = [(register, ["r2"]), (tmp_path / "c", failing())]
    with pytest.raises(OSError, match="disk full"):
        atomic_write_streams(later, last=register)
    assert register.read_text() == "r" and not (tmp_path / "c").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "register.json"]


def test_the_basis_keeps_boot_times_and_the_rules_that_did_not_judge(tmp_path: Path) -> None:
    run = new_run_dir(tmp_path, FIRST)
    booted = healthy_host("h1")
    booted = dataclasses.replace(
        booted, os=dataclasses.replace(booted.os, boot_time="2026-11-20T09:30:00Z")
    )
    run.write_snapshot(booted)
    run.write_snapshot(healthy_host("h2"))
    write_report(run, run.load_snapshots(), policy={"disabled_rules": ["GA301"]})
    basis = read_trend_basis(run.path)
    assert basis is not None and basis.register is not None
    assert {h.host: h.boot_time for h in basis.hosts} == {"h1": "2026-11-20T09:30:00Z", "h2": None}
    assert "GA301" in basis.register.unjudged["h1"] and "GA301" in basis.register.unjudged["h2"]
    # A file of this version from before it kept them: the snapshots and register.json tell.
    path = run.path / BASIS_FILE
    stat = path.stat()
    data = json.loads(path.read_text())
    for entry in data["hosts"]:
        del entry["boot_time"]
    del data["register"]["unjudged"]
    path.write_text(json.dumps(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert read_trend_basis(run.path) is None
    previous = load_previous(run.path)
    assert {h.host: h.boot_time for h in previous.hosts}["h1"] == "2026-11-20T09:30:00Z"
    assert "GA301" in previous.unjudged["h1"]
