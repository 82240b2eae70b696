from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path

import pytest
from report_factories import EVIL, evil_host, finding, healthy_host, unreachable_host

import gpuaudit.rules
from gpuaudit.model.snapshot import HostSnapshot, HostStatus
from gpuaudit.report import run as run_module
from gpuaudit.report.run import (
    RunDir,
    load_snapshot_file,
    new_run_dir,
    new_run_id,
    rebuild,
    safe_host_filename,
)
from gpuaudit.rules.base import Finding, Severity

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def fake_rules(monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[HostSnapshot], object]]:
    """Stand in for gpuaudit.rules.evaluate: one finding per host, calls recorded."""
    calls: list[tuple[list[HostSnapshot], object]] = []

    def evaluate(snapshots: list[HostSnapshot], policy: object = None) -> list[Finding]:
        calls.append((list(snapshots), policy))
        return [finding("GA900", Severity.INFO, s.host, gpu_index=None) for s in snapshots]

    monkeypatch.setattr(gpuaudit.rules, "evaluate", evaluate, raising=False)
    return calls


def test_safe_host_filename() -> None:
    assert safe_host_filename("gpu-a01.example.com") == "gpu-a01.example.com.json"
    names = {safe_host_filename(h) for h in ("a/b", "a_b", "a b", "../a_b", "", ".", "..")}
    assert len(names) == 7  # no collisions
    for name in names:
        assert "/" not in name and not name.startswith(".")
        assert name.endswith(".json")
    evil = safe_host_filename(EVIL)
    assert set(evil) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
    assert len(safe_host_filename("x" * 5000)) < 200


def test_write_snapshot_is_immediate_atomic_and_round_trips(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    snap = evil_host()
    path = run.write_snapshot(snap)
    assert path.parent == run.hosts_dir and path.exists()
    assert path.name == safe_host_filename(EVIL)
    assert [p.name for p in run.hosts_dir.iterdir()] == [path.name]  # no temporaries left
    assert HostSnapshot.from_json(path.read_text()) == snap
    # Rewriting replaces the file in one step.
    run.write_snapshot(healthy_host(EVIL))
    assert len(list(run.hosts_dir.iterdir())) == 1
    assert run.load_snapshots()[0].status is HostStatus.OK


def test_failed_write_leaves_previous_snapshot_intact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = RunDir(tmp_path)
    run.write_snapshot(healthy_host("h1"))
    before = run.snapshot_path("h1").read_text()

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(run_module.os, "replace", broken_replace)
    with pytest.raises(OSError):
        run.write_snapshot(unreachable_host("h1"))
    monkeypatch.undo()
    assert run.snapshot_path("h1").read_text() == before
    assert [p.name for p in run.hosts_dir.iterdir()] == ["h1.json"]


def test_corrupt_snapshot_becomes_collection_failed_host(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    run.write_snapshot(healthy_host("good"))
    (run.hosts_dir / "truncated.json").write_text('{"host": "gpu-c03", "status": "ok", "gpu')
    (run.hosts_dir / "binary.json").write_bytes(b"\xff\xfe\x00garbage")
    (run.hosts_dir / "shape.json").write_text(json.dumps({"host": "gpu-d04", "status": "ok"}))
    (run.hosts_dir / "list.json").write_text("[1, 2, 3]")
    (run.hosts_dir / "future.json").write_text(
        json.dumps(
            {"host": "gpu-e05", "status": "ok", "collected_at": "x", "schema_version": "9.0"}
        )
    )
    (run.hosts_dir / ".good.json.abc.tmp").write_text("half a file")  # an interrupted write
    snapshots = {s.host: s for s in run.load_snapshots()}
    assert set(snapshots) == {"good", "truncated", "binary", "gpu-d04", "list", "gpu-e05"}
    assert snapshots["good"].status is HostStatus.OK
    for name in ("truncated", "binary", "gpu-d04", "list", "gpu-e05"):
        snap = snapshots[name]
        assert snap.status is HostStatus.COLLECTION_FAILED, name
        assert "hosts/" in snap.status_detail and "not a readable snapshot" in snap.status_detail
        assert snap.collected_at.endswith("Z")
    assert "schema" in snapshots["gpu-e05"].status_detail
    # The damaged content is kept as evidence.
    assert snapshots["truncated"].sections["snapshot_file"].stdout.startswith('{"host"')


def test_unreadable_file_becomes_collection_failed_host(tmp_path: Path) -> None:
    path = tmp_path / "dir-not-file.json"
    path.mkdir()
    snap = load_snapshot_file(path)
    assert snap.status is HostStatus.COLLECTION_FAILED
    assert "cannot be read" in snap.status_detail


def test_write_report_with_given_findings(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "20261129T161000Z")
    snaps = [healthy_host("h1"), unreachable_host("h2")]
    html = run.write_report(
        snaps, [finding("GA301", host="h1")], generated_at="2026-11-29T16:10:00Z"
    )
    assert html == run.html_path and html.exists()
    register = json.loads(run.register_path.read_text())
    assert register["run_id"] == "20261129T161000Z"
    assert register["generated_at"] == "2026-11-29T16:10:00Z"
    assert [h["name"] for h in register["hosts"]] == ["h1", "h2"]
    assert register["findings"][0]["rule"] == "GA301"
    assert "GA301" in html.read_text()


def test_write_report_puts_the_cited_docs_beside_the_page(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    html = run.write_report([healthy_host("h1")], [finding("GA301", host="h1")])
    # The finding cites docs/field-guide/gpu-memory-errors.md#row-remapping; the checklists
    # cite readiness-checklists.md; pages they link to come along, so their links work too.
    for page in ("gpu-memory-errors.md", "readiness-checklists.md", "xid.md", "llm-memory.md"):
        copy = run.path / "docs" / "field-guide" / page
        assert copy.read_text() == (REPO / "docs" / "field-guide" / page).read_text(), page
    assert (run.path / "docs" / "rules.md").is_file()
    assert not list((run.path / "docs").rglob(".*.tmp"))
    text = html.read_text()
    data = json.loads(text.split('id="gpuaudit-data">', 1)[1].split("</script>", 1)[0])
    assert ["docs/field-guide/gpu-memory-errors.md#row-remapping", True] in data["risks"][0][
        "references"
    ]
    assert '<a href="docs/field-guide/readiness-checklists.md#pre-production-checklist"' in text


def test_write_report_without_docs_leaves_docs_references_as_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # gpuaudit installed without its source tree: no docs to copy, so no links to them.
    monkeypatch.setattr(run_module, "DOCS_DIR", tmp_path / "no-docs")
    run = RunDir(tmp_path / "run")
    html = run.write_report([healthy_host("h1")], [finding("GA301", host="h1")])
    assert not (run.path / "docs").exists()
    text = html.read_text()
    assert '<a href="docs/' not in text
    assert '["docs/field-guide/gpu-memory-errors.md#row-remapping",false]' in text


def test_write_report_evaluates_rules_when_no_findings_given(
    tmp_path: Path, fake_rules: list[tuple[list[HostSnapshot], object]]
) -> None:
    run = RunDir(tmp_path)
    run.write_report([healthy_host("h1")], policy={"x": 1})
    assert fake_rules[0][1] == {"x": 1}
    assert json.loads(run.register_path.read_text())["findings"][0]["rule"] == "GA900"


def test_rebuild_from_snapshots_alone(
    tmp_path: Path, fake_rules: list[tuple[list[HostSnapshot], object]]
) -> None:
    run = new_run_dir(tmp_path / "reports", run_id="20261129T161000Z")
    for snap in (healthy_host("h1"), unreachable_host("h2"), evil_host()):
        run.write_snapshot(snap)
    (run.hosts_dir / "broken.json").write_text("{")
    html = rebuild(str(run.path))
    assert html == run.html_path
    register = json.loads(run.register_path.read_text())
    statuses = {h["name"]: h["status"] for h in register["hosts"]}
    assert statuses == {
        "h1": "ok",
        "h2": "unreachable",
        EVIL: "degraded",
        "broken": "collection_failed",
    }
    assert len(fake_rules[0][0]) == 4  # the rules saw the failed host too
    page = html.read_text()
    assert "broken" in page and "collection_failed" in page
    assert "<script>alert" not in page


def test_rebuild_refuses_what_is_not_a_run(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        rebuild(tmp_path / "missing")
    with pytest.raises(FileNotFoundError):
        rebuild(tmp_path)


def test_new_run_dir_ids_are_utc_and_unique(tmp_path: Path) -> None:
    assert new_run_id(datetime(2026, 11, 29, 16, 10, tzinfo=timezone.utc)) == "20261129T161000Z"
    first = new_run_dir(tmp_path, run_id="20261129T161000Z")
    second = new_run_dir(tmp_path, run_id="20261129T161000Z")
    third = new_run_dir(tmp_path, run_id="20261129T161000Z")
    assert [first.run_id, second.run_id, third.run_id] == [
        "20261129T161000Z",
        "20261129T161000Z-2",
        "20261129T161000Z-3",
    ]
    assert first.hosts_dir.is_dir()
    fresh = new_run_dir(tmp_path / "nested" / "reports")
    assert fresh.path.parent == tmp_path / "nested" / "reports"
    assert len(fresh.run_id) == len("20261129T161000Z") and fresh.run_id.endswith("Z")


@pytest.mark.parametrize("bad", ["../escape", "a/b", "", ".hidden"])
def test_new_run_dir_rejects_path_like_ids(tmp_path: Path, bad: str) -> None:
    if bad == "":
        # An empty id means "make one up", not an error.
        assert new_run_dir(tmp_path, run_id=bad).path.parent == tmp_path
        return
    with pytest.raises(ValueError):
        new_run_dir(tmp_path, run_id=bad)


def test_snapshot_files_ignore_other_files(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    run.write_snapshot(healthy_host("h1"))
    (run.hosts_dir / "notes.txt").write_text("hello")
    os.mkdir(run.hosts_dir / "sub.json")
    assert [p.name for p in run.snapshot_files()] == ["h1.json"]


def test_report_package_does_not_import_pyinfra() -> None:
    import subprocess
    import sys

    code = (
        "import sys, gpuaudit.report.run, gpuaudit.report.html, gpuaudit.report.register\n"
        "sys.exit('pyinfra' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_written_files_follow_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        run = run_module.new_run_dir(tmp_path, "perm-run")
        path = run.write_snapshot(healthy_host())
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644
