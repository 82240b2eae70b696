from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from report_factories import EVIL, evil_host, finding, healthy_host, unreachable_host

import gpuaudit.rules
from gpuaudit.model.snapshot import HostSnapshot, HostStatus, OsInfo
from gpuaudit.pipeline import rebuild, write_report
from gpuaudit.report import renderers
from gpuaudit.report import run as run_module
from gpuaudit.report.run import (
    RunDir,
    load_snapshot_file,
    new_run_dir,
    new_run_id,
    safe_host_filename,
)
from gpuaudit.rules.base import Evaluation, Severity

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def fake_rules(monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[HostSnapshot], object]]:
    """Stand in for gpuaudit.rules.assess: one finding per host, calls recorded."""
    calls: list[tuple[list[HostSnapshot], object]] = []

    def assess(
        snapshots: list[HostSnapshot], policy: object = None, cluster: object = None
    ) -> Evaluation:
        calls.append((list(snapshots), policy))
        found = [finding("GA900", Severity.INFO, s.host, gpu_index=None) for s in snapshots]
        return Evaluation(findings=tuple(found))

    monkeypatch.setattr(gpuaudit.rules, "assess", assess, raising=False)
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


def test_snapshots_load_and_the_report_is_built_with_the_cycle_collector_paused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loading and building make a fleet's objects without the cyclic collector walking them
    each pass; it runs again after, also when loading fails, and a caller's pause is kept."""
    import gc

    run = RunDir(tmp_path)
    run.write_snapshot(healthy_host("good"))
    seen: list[bool] = []
    real = run_module.load_snapshot_file

    def load(path: Path) -> HostSnapshot:
        seen.append(gc.isenabled())
        return real(path)

    monkeypatch.setattr(run_module, "load_snapshot_file", load)
    assert gc.isenabled()
    run.load_snapshots()
    assert seen == [False] and gc.isenabled()
    seen.clear()
    rebuild(run)  # loads, then builds
    assert seen == [False] and gc.isenabled()

    def broken(path: Path) -> HostSnapshot:
        raise OSError("disk gone")

    monkeypatch.setattr(run_module, "load_snapshot_file", broken)
    with pytest.raises(OSError):
        run.load_snapshots()
    assert gc.isenabled()
    gc.disable()
    try:
        monkeypatch.setattr(run_module, "load_snapshot_file", load)
        run.load_snapshots()
        assert not gc.isenabled()  # the caller's pause is the caller's to end
    finally:
        gc.enable()


def test_unreadable_file_becomes_collection_failed_host(tmp_path: Path) -> None:
    path = tmp_path / "dir-not-file.json"
    path.mkdir()
    snap = load_snapshot_file(path)
    assert snap.status is HostStatus.COLLECTION_FAILED
    assert "cannot be read" in snap.status_detail


def test_write_report_with_given_findings(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "20261129T161000Z")
    snaps = [healthy_host("h1"), unreachable_host("h2")]
    html = write_report(
        run, snaps, [finding("GA301", host="h1")], generated_at="2026-11-29T16:10:00Z"
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
    html = write_report(run, [healthy_host("h1")], [finding("GA301", host="h1")])
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
    monkeypatch.setattr(renderers, "DOCS_DIR", tmp_path / "no-docs")
    run = RunDir(tmp_path / "run")
    html = write_report(run, [healthy_host("h1")], [finding("GA301", host="h1")])
    assert not (run.path / "docs").exists()
    text = html.read_text()
    assert '<a href="docs/' not in text
    assert '["docs/field-guide/gpu-memory-errors.md#row-remapping",false]' in text


def test_write_report_evaluates_rules_when_no_findings_given(
    tmp_path: Path, fake_rules: list[tuple[list[HostSnapshot], object]]
) -> None:
    run = RunDir(tmp_path)
    write_report(run, [healthy_host("h1")], policy={"x": 1})
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


def test_snapshot_files_are_the_json_files_by_name(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    assert run.snapshot_files() == []  # no run directory yet
    for name in ("h2", "h10", "h1"):
        run.write_snapshot(healthy_host(name))
    (run.hosts_dir / ".h3.json").write_text("{}")  # a leftover temporary's kind of name
    (run.hosts_dir / "linked.json").symlink_to(run.hosts_dir / "h1.json")
    (run.hosts_dir / "dangling.json").symlink_to(run.hosts_dir / "gone.json")
    listed = run.snapshot_files()
    assert listed == [run.hosts_dir / n for n in ("h1.json", "h10.json", "h2.json", "linked.json")]
    assert listed == sorted(listed)  # as Paths sort
    other = RunDir(tmp_path / "other")
    other.path.mkdir()
    other.hosts_dir.write_text("not a directory")
    assert other.snapshot_files() == []


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


def _hand_edit(run: RunDir, host: str, edit: Callable[[dict[str, Any]], None]) -> Path:
    """Change one host's snapshot file the way a person with an editor would."""
    path = run.snapshot_path(host)
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data, indent=1))
    return path


def test_wrong_typed_fields_are_read_as_absent_and_mark_only_their_host(tmp_path: Path) -> None:
    run = new_run_dir(tmp_path / "reports", run_id="20261129T161000Z")
    for name in ("edited", "intact"):
        run.write_snapshot(healthy_host(name))

    def edit(data: dict[str, Any]) -> None:
        data["gpus"][1]["temperature_c"] = "hot"
        data["gpus"][0]["power_draw_w"] = float("nan")
        data["os"] = None
        data["xid_events"][0]["timestamp"] = 1764590400
        data["topology"]["legend"]["NIC0"] = ["mlx5_0"]

    _hand_edit(run, "edited", edit)
    html = rebuild(run.path)  # does not raise

    snap = load_snapshot_file(run.snapshot_path("edited"))
    assert snap.status is HostStatus.DEGRADED
    assert snap.gpus[1].temperature_c is None and snap.gpus[0].power_draw_w is None
    assert snap.gpus[0].temperature_c == 41.0  # the rest of the GPU is kept
    assert snap.os == OsInfo() and snap.xid_events[0].timestamp is None
    assert snap.xid_events[0].code == 79 and snap.topology is not None
    assert snap.topology.legend == {}
    evidence = snap.parse_errors["snapshot"]
    for said in (
        "field gpus[1].temperature_c: expected a number, got 'hot'",
        "field gpus[0].power_draw_w: expected a finite number within ±2^64, got nan",
        "field os: expected an object, got null",
        "field xid_events[0].timestamp: expected a string, got 1764590400",
        "field topology.legend.NIC0: expected a string, got a list; left out",
    ):
        assert said in evidence
    register = json.loads(run.register_path.read_text())
    hosts = {h["name"]: h for h in register["hosts"]}
    assert hosts["intact"]["status"] == "ok"
    assert hosts["edited"]["status"] == "degraded"
    detail = hosts["edited"]["status_detail"]
    assert detail.startswith("snapshot file hosts/edited.json holds 5 unusable values, read as")
    assert "field os: expected an object, got null; field gpus[0].power_draw_w" in detail
    # The register's finding quotes the evidence, and the page shows it.
    messages = [f["message"] for f in register["findings"] if f["host"] == "edited"]
    assert any("field os: expected an object, got null" in m for m in messages)
    assert "field gpus[1].temperature_c" in html.read_text()


def test_unusable_name_status_and_time_are_stood_in_for(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    path = run.write_snapshot(healthy_host("gpu-a07"))
    _hand_edit(
        run,
        "gpu-a07",
        lambda data: data.update(host=7, status="fine", collected_at=1764590400),
    )
    os.utime(path, (1764590400, 1764590400))
    snap = load_snapshot_file(path)
    # Not thrown away as unreadable: the GPUs are still there, named by the file.
    assert snap.host == "gpu-a07" and len(snap.gpus) == 2
    assert snap.status is HostStatus.DEGRADED
    assert snap.collected_at == "2025-12-01T12:00:00Z"  # the file's time
    for said in (
        "field host: expected a string, got 7",
        "field status: expected one of ok, degraded,",
        "field collected_at: expected a string, got 1764590400",
    ):
        assert said in snap.parse_errors["snapshot"]


def test_an_object_without_a_usable_required_field_is_left_out(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    run.write_snapshot(healthy_host("h1"))

    def edit(data: dict[str, Any]) -> None:
        data["gpus"][0]["index"] = "zero"
        data["host_data"] = {"groups": ["a100", 5], "site": float("inf")}

    snap = load_snapshot_file(_hand_edit(run, "h1", edit))
    assert [g.index for g in snap.gpus] == [1]
    assert snap.host_data == {"groups": ["a100"]}
    evidence = snap.parse_errors["snapshot"]
    assert "field gpus[0].index: expected an integer, got 'zero'; gpus[0] left out" in evidence
    assert "field host_data.groups[1]: expected a string, got 5; left out" in evidence
    assert "field host_data.site: expected a finite number, got inf; left out" in evidence


def _old_report(tmp_path: Path) -> tuple[RunDir, dict[str, str]]:
    run = RunDir(tmp_path / "run")
    write_report(run, [healthy_host("h1")], [finding("GA301", host="h1")], generated_at="old")
    return run, {p.name: p.read_text() for p in run.path.iterdir() if p.is_file()}


def test_a_failing_renderer_leaves_the_previous_report_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run, before = _old_report(tmp_path)
    assert {"register.json", "index.html", "summary.md"} <= set(before)

    def broken(_given: renderers.RenderInput) -> str:
        raise RuntimeError("renderer bug")

    # A renderer late in the list fails: the page and register.json are already rendered.
    failing = (*renderers.RENDERERS[:-1], renderers.Format("summary.md", broken))
    monkeypatch.setattr(renderers, "RENDERERS", (*failing, renderers.RENDERERS[-1]))
    with pytest.raises(RuntimeError):
        write_report(run, [healthy_host("h1")], [finding("GA301", host="h1")], generated_at="new")
    assert {p.name: p.read_text() for p in run.path.iterdir() if p.is_file()} == before


def test_a_failed_rename_never_leaves_a_new_register_beside_an_old_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run, before = _old_report(tmp_path)
    real_replace = os.replace

    def replace(src: str, dst: str | os.PathLike[str]) -> None:
        if Path(dst).name == "index.html":
            raise OSError("I/O error")
        real_replace(src, dst)

    monkeypatch.setattr(run_module.os, "replace", replace)
    with pytest.raises(OSError):
        write_report(run, [healthy_host("h1")], [finding("GA301", host="h1")], generated_at="new")
    monkeypatch.undo()
    after = {p.name: p.read_text() for p in run.path.iterdir() if p.is_file()}
    assert after["register.json"] == before["register.json"]  # written last: not reached
    assert after["index.html"] == before["index.html"]
    assert not [p for p in run.path.rglob("*.tmp")]  # no temporaries left behind


def test_a_run_that_remembers_what_it_wrote_reads_it_back_without_decoding(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run", remember_written=True)
    run.hosts_dir.mkdir(parents=True)
    first, second = healthy_host("gpu-a"), healthy_host("gpu-b")
    run.write_snapshot(first)
    run.write_snapshot(second)
    loaded = run.load_snapshots()
    assert [s.host for s in loaded] == ["gpu-a", "gpu-b"]
    # The very objects written: nothing was decoded again.
    assert loaded[0] is first and loaded[1] is second
    # What a later process reads from the files is the same snapshot.
    assert RunDir(run.path).load_snapshots() == loaded


def test_a_remembered_snapshot_whose_file_changed_is_read_from_the_file(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run", remember_written=True)
    run.hosts_dir.mkdir(parents=True)
    run.write_snapshot(healthy_host("gpu-a"))
    # Another writer (a second pyinfra process closing the run) replaces the file.
    RunDir(run.path).write_snapshot(unreachable_host("gpu-a"))
    (loaded,) = run.load_snapshots()
    assert loaded.status == HostStatus.UNREACHABLE
    # A file removed is not remembered into the register either.
    run.snapshot_path("gpu-a").unlink()
    assert run.load_snapshots() == []


def test_a_run_directory_remembers_nothing_unless_asked(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    run.hosts_dir.mkdir(parents=True)
    written = healthy_host("gpu-a")
    run.write_snapshot(written)
    (loaded,) = run.load_snapshots()
    assert loaded == written and loaded is not written


@pytest.mark.parametrize(
    "value",
    [("a", "b"), {"nested": ("a",)}, {1: "int key"}],
    ids=["tuple", "nested-tuple", "int-key"],
)
def test_inventory_data_json_would_change_is_read_from_the_file(
    tmp_path: Path, value: object
) -> None:
    run = RunDir(tmp_path / "run", remember_written=True)
    run.hosts_dir.mkdir(parents=True)
    written = healthy_host("gpu-a")
    written = dataclasses.replace(written, host_data={**written.host_data, "site_value": value})
    run.write_snapshot(written)
    (loaded,) = run.load_snapshots()
    # What the rules judge is the file's, as a rebuild reads it.
    assert loaded is not written
    assert loaded == RunDir(run.path).load_snapshots()[0]
