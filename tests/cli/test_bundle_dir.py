"""``gpuaudit report --bundle-dir DIR``: a directory of collector bundles (a collection job's)
read one bundle at a time into a run, with the register ``--bundle`` gives for the same files.

The bundles are the real collector's output on simulated hosts (tests/sim/simhelpers.py);
where one bundle's text is copied under several host names, the test says so.
"""

from __future__ import annotations

import gc
import gzip
import json
import os
import sys
import tracemalloc
import weakref
from pathlib import Path

import pytest

from gpuaudit.cli import main
from gpuaudit.model.snapshot import HostSnapshot
from gpuaudit.offline import (
    bundle_dir_files,
    snapshots_from_bundles,
    store_snapshots,
)
from gpuaudit.report.run import RunDir, new_run_dir
from gpuaudit.sim.host import materialize

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sim"))
from simhelpers import collector_output

MARKER = (
    "gpuaudit collection failed on node gpu-d (Slurm job 41): the collector did not finish "
    "within 600s (exit status 124)\n--- the end of the collector's stderr ---\nTerminated\n"
)


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Collector output of two simulated hosts: an A100 HGX with a row remap pending on GPU 3
    (a100-hgx-02) and a T4 with persistence mode off (t4-02)."""
    sims = tmp_path_factory.mktemp("sim")
    return {
        name: collector_output(materialize(name, name, sims)) for name in ("a100-hgx-02", "t4-02")
    }


def _fill(folder: Path, bundles: dict[str, str]) -> list[Path]:
    """A collection job's directory: two bundles, a file that is no bundle, a failure marker,
    a dangling link, and what a reader must leave alone (hidden, temporary, the job's log)."""
    folder.mkdir()
    (folder / "gpu-a.bundle").write_text(bundles["a100-hgx-02"])
    (folder / "gpu-b.txt").write_text(bundles["t4-02"])
    (folder / "gpu-c.out").write_bytes(b"\xff\xfe not collector output\n")
    (folder / "gpu-d.failed").write_text(MARKER)
    (folder / "gpu-e.bundle").symlink_to(folder / "gone.bundle.tmp")
    (folder / ".gpu-f.bundle.41.tmp").write_text(bundles["t4-02"][:100])
    (folder / "gpu-g.bundle.tmp").write_text(bundles["t4-02"][:100])
    (folder / ".hidden.bundle").write_text(bundles["t4-02"])
    (folder / "gpuaudit-slurm-41.log").write_text("gpuaudit: 2 bundle(s), 1 failed node(s)\n")
    (folder / ".gpuaudit-job.41").mkdir()
    return [folder / n for n in ("gpu-a.bundle", "gpu-b.txt", "gpu-c.out", "gpu-d.failed",
                                 "gpu-e.bundle")]  # fmt: skip


def _register(reports: Path, run_id: str) -> dict:
    data: dict = json.loads((reports / run_id / "register.json").read_text())
    return data


def _findings(register: dict) -> set[tuple[str, str, int | None, str]]:
    return {(f["rule"], f["host"], f["gpu"], f["message"]) for f in register["findings"]}


def test_bundle_dir_gives_the_register_bundle_gives(
    tmp_path: Path, bundles: dict[str, str]
) -> None:
    folder = tmp_path / "shared"
    files = _fill(folder, bundles)
    assert bundle_dir_files(folder) == files  # sorted by name, the rest left alone
    reports = tmp_path / "reports"
    run_options = ["--reports-dir", str(reports)]
    assert main(["report", "--bundle-dir", str(folder), *run_options, "--run-id", "dir"]) == 0
    assert main(["report", "--bundle", *map(str, files), *run_options, "--run-id", "files"]) == 0
    by_dir, by_files = _register(reports, "dir"), _register(reports, "files")

    hosts = {h["name"]: h for h in by_dir["hosts"]}
    assert {n: h["status"] for n, h in hosts.items()} == {
        "gpu-a": "ok",
        "gpu-b": "ok",
        "gpu-c": "collection_failed",
        "gpu-d": "collection_failed",
        "gpu-e": "collection_failed",
    }
    assert [(h["name"], h["status"]) for h in by_files["hosts"]] == [
        (h["name"], h["status"]) for h in by_dir["hosts"]
    ]
    assert _findings(by_dir) == _findings(by_files)
    found = {(rule, host, gpu) for rule, host, gpu, _ in _findings(by_dir)}
    assert ("GA304", "gpu-a", 3) in found  # a100-hgx-02's pending row remap on GPU 3
    assert len(hosts["gpu-a"]["gpus"]) == 8 and len(hosts["gpu-b"]["gpus"]) == 1
    # The marker's first line is the failed host's reason; the link is named, not followed.
    assert hosts["gpu-d"]["status_detail"] == MARKER.splitlines()[0]
    assert "gpu-e.bundle could not be read" in hosts["gpu-e"]["status_detail"]
    assert by_dir["provenance"]["scope"]["bundles"] == [p.name for p in files]
    assert by_dir["provenance"]["scope"]["bundle_dir"] == str(folder.resolve())
    assert "bundle_dir" not in by_files["provenance"]["scope"]
    # The marker's whole text stays in the snapshot as the evidence of the failure.
    snapshot = json.loads((reports / "dir/hosts/gpu-d.json").read_text())
    assert snapshot["sections"]["collect_job"]["stdout"] == MARKER


def test_two_bundles_for_one_host_are_refused_before_any_run_exists(
    tmp_path: Path, bundles: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "shared"
    folder.mkdir()
    (folder / "gpu-a.bundle").write_text(bundles["t4-02"])
    (folder / "gpu-a.txt.gz").write_bytes(gzip.compress(bundles["t4-02"].encode()))
    (folder / "gpu-b.bundle").write_text(bundles["t4-02"])
    (folder / "gpu-b.txt").write_text(bundles["t4-02"])
    (folder / "gpu-c.bundle").write_text(bundles["t4-02"])
    reports = tmp_path / "reports"
    assert main(["report", "--bundle-dir", str(folder), "--reports-dir", str(reports)]) == 2
    assert "several bundles name the same host: gpu-a, gpu-b" in capsys.readouterr().err
    assert not reports.exists()


@pytest.mark.parametrize("newer", ["bundle", "marker"])
def test_a_bundle_beside_its_hosts_marker_the_newer_is_read_the_older_named(
    tmp_path: Path, bundles: dict[str, str], capsys: pytest.CaptureFixture[str], newer: str
) -> None:
    # What a collection job leaves when it ends between writing a node's new file and
    # removing its old one (jobs/slurm.py replaces one with the other).
    folder = tmp_path / "shared"
    folder.mkdir()
    bundle, marker = folder / "gpu-a.bundle", folder / "gpu-a.failed"
    bundle.write_text(bundles["t4-02"])
    marker.write_text(MARKER)
    (folder / "gpu-b.bundle").write_text(bundles["t4-02"])
    older, newer_file = (marker, bundle) if newer == "bundle" else (bundle, marker)
    os.utime(older, ns=(1_700_000_000 * 10**9,) * 2)
    os.utime(newer_file, ns=(1_700_000_100 * 10**9,) * 2)
    assert bundle_dir_files(folder) == [newer_file, folder / "gpu-b.bundle"]

    reports = tmp_path / "reports"
    assert main(["report", "--bundle-dir", str(folder), "--reports-dir", str(reports),
                 "--run-id", "r"]) == 0  # fmt: skip
    err = capsys.readouterr().err
    assert f"{older.name} is older than the other file for host gpu-a and was not read" in err
    hosts = {h["name"]: h for h in _register(reports, "r")["hosts"]}
    assert hosts["gpu-a"]["status"] == ("ok" if newer == "bundle" else "collection_failed")
    snapshot = json.loads((reports / "r/hosts/gpu-a.json").read_text())
    notes = [w for w in snapshot["parse_warnings"] if w["source"] == "bundle directory"]
    assert [w["text"] for w in notes] == [older.name]
    assert hosts["gpu-b"]["status"] == "ok"
    assert not [
        w for w in json.loads((reports / "r/hosts/gpu-b.json").read_text())["parse_warnings"]
        if w["source"] == "bundle directory"
    ]  # fmt: skip


def test_gzipped_bundles_are_read_and_what_is_left_out_is_said(
    tmp_path: Path, bundles: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    plain, packed = tmp_path / "plain", tmp_path / "packed"
    plain.mkdir()
    packed.mkdir()
    (plain / "gpu-a.bundle").write_text(bundles["a100-hgx-02"])
    (plain / "gpu-d.failed").write_text(MARKER)
    (packed / "gpu-a.bundle.gz").write_bytes(gzip.compress(bundles["a100-hgx-02"].encode()))
    (packed / "gpu-d.failed.gz").write_bytes(gzip.compress(MARKER.encode()))
    whole = gzip.compress(bundles["t4-02"].encode())
    (packed / "gpu-x.bundle.gz").write_bytes(whole[: len(whole) // 2])  # cut short in transit
    (packed / "gpu-y.bundle.gz").write_text(bundles["t4-02"])  # not gzip at all
    (packed / "gpu-z.bundle.zst").write_text("?")
    (packed / "notes.md").write_text("?")
    (packed / "gpu-w.bundle.tmp").write_text("?")
    reports = tmp_path / "reports"
    for folder in (plain, packed):
        argv = ["report", "--bundle-dir", str(folder), "--reports-dir", str(reports)]
        assert main([*argv, "--run-id", folder.name]) == 0
    err = capsys.readouterr().err
    assert (
        f"{packed}: left out, not named as bundles (*.bundle, *.txt, *.out, *.failed, or .gz): "
        "gpu-z.bundle.zst, notes.md"
    ) in err
    assert f"{packed}: left out, still being written (*.tmp): gpu-w.bundle.tmp" in err
    assert f"{plain}:" not in err
    by_plain, by_packed = _register(reports, "plain"), _register(reports, "packed")
    same_hosts = {f for f in _findings(by_packed) if f[1] in ("gpu-a", "gpu-d")}
    assert _findings(by_plain) == same_hosts and len(same_hosts) > 2
    hosts = {h["name"]: h for h in by_packed["hosts"]}
    assert {n: h["status"] for n, h in hosts.items()} == {
        "gpu-a": "ok",
        "gpu-d": "collection_failed",
        "gpu-x": "collection_failed",
        "gpu-y": "collection_failed",
    }
    assert hosts["gpu-d"]["status_detail"] == MARKER.splitlines()[0]
    assert "not a whole gzip file" in hosts["gpu-x"]["status_detail"]
    assert "gpu-y.bundle.gz could not be read" in hosts["gpu-y"]["status_detail"]


@pytest.mark.parametrize("contents", [(), (".hidden.bundle", "x.bundle.tmp", "job.log")])
def test_a_directory_without_bundles_is_a_clear_error(
    tmp_path: Path, contents: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "shared"
    folder.mkdir()
    for name in contents:
        (folder / name).write_text("x")
    reports = tmp_path / "reports"
    assert main(["report", "--bundle-dir", str(folder), "--reports-dir", str(reports)]) == 2
    err = capsys.readouterr().err
    assert f"bundle directory {folder} holds no bundle (*.bundle, *.txt, *.out, *.failed)" in err
    assert not reports.exists()


def test_a_missing_directory_and_two_sources_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", "--bundle-dir", str(tmp_path / "nope")]) == 2
    assert "does not exist or is not a directory" in capsys.readouterr().err
    (tmp_path / "a.bundle").write_text("x")
    both = ["report", "--bundle-dir", str(tmp_path), "--bundle", str(tmp_path / "a.bundle")]
    assert main(both) == 2
    assert "give either a run directory or --bundle" in capsys.readouterr().err


def _peak(run: RunDir, paths: list[Path]) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        store_snapshots(paths, run.write_snapshot)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _held(path: Path) -> int:
    """The memory one snapshot holds once built (a lower bound on each of K held at once)."""
    gc.collect()
    tracemalloc.start()
    try:
        [snapshot] = snapshots_from_bundles([path])
        held = tracemalloc.get_traced_memory()[0]
        assert snapshot.host == path.stem
        return held
    finally:
        tracemalloc.stop()


def test_bundles_are_read_one_at_a_time(tmp_path: Path, bundles: dict[str, str]) -> None:
    """The memory a bundle run needs while it reads the bundles is that of one bundle and its
    snapshot, however many there are; holding every snapshot would need K times one's."""
    folder = tmp_path / "many"
    folder.mkdir()
    count = 24
    for i in range(count):  # derived: one host's bundle copied under 24 host names
        (folder / f"gpu-{i:02}.bundle").write_text(bundles["t4-02"])
    paths = bundle_dir_files(folder)
    store_snapshots(paths[:1], new_run_dir(tmp_path / "warm").write_snapshot)  # imports

    # Each snapshot is gone (written, dropped) before the next bundle is read.
    alive: set[str] = set()
    seen_alive: list[int] = []

    def write(snapshot: HostSnapshot) -> None:
        seen_alive.append(len(alive))
        alive.add(snapshot.host)
        weakref.finalize(snapshot, alive.discard, snapshot.host)

    store_snapshots(paths, write)
    assert seen_alive == [0] * count

    one = _peak(new_run_dir(tmp_path / "one"), paths[:1])
    run = new_run_dir(tmp_path / "all")
    every = _peak(run, paths)
    assert len(run.snapshot_files()) == count
    bound = 2.5 * one + 64 * 1024  # uncollected garbage cycles come and go between bundles
    assert every < bound, (one, every)
    # Holding all 24 costs at least 24 times what one holds: above the bound, so a run that
    # kept them all would fail the assertion above.
    assert count * _held(paths[0]) > 1.5 * bound


def test_a_file_name_that_is_not_utf8_is_its_own_host(
    tmp_path: Path, bundles: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node whose name is not UTF-8 (a file name of bytes, as a Latin-1 node leaves it) is a
    host of its own, its name spelled with the bytes escaped, and the run is written whole; so
    is a run from a directory so named, whose command line provenance.json keeps."""
    folder = tmp_path / os.fsdecode(b"shared-\xe9")
    folder.mkdir()
    reports = tmp_path / "reports"
    argv = ["report", "--bundle-dir", str(folder), "--reports-dir", str(reports)]
    monkeypatch.setattr(sys, "argv", ["gpuaudit", *argv])
    (folder / "gpu-a.bundle").write_text(bundles["t4-02"])
    (folder / os.fsdecode(b"gpu-\xe9.bundle")).write_text(bundles["t4-02"])
    (folder / os.fsdecode(b"gpu-\xe8.failed")).write_text(MARKER)
    assert main(argv) == 0
    [run] = reports.iterdir()
    register = _register(reports, run.name)
    statuses = {h["name"]: h["status"] for h in register["hosts"]}
    assert statuses == {"gpu-a": "ok", "gpu-\\xe9": "ok", "gpu-\\xe8": "collection_failed"}
    assert sorted(register["provenance"]["scope"]["bundles"]) == [
        "gpu-\\xe8.failed",
        "gpu-\\xe9.bundle",
        "gpu-a.bundle",
    ]
    assert register["provenance"]["scope"]["bundle_dir"].endswith("shared-\\xe9")
    assert "--bundle-dir" in register["provenance"]["command"]
