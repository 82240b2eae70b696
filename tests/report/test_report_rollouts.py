"""An audit beside a rollout that is not completed says so, in register.json and on the page."""

from __future__ import annotations

import json
from pathlib import Path

from gpuaudit.pipeline import write_report
from gpuaudit.report.rollouts import open_rollouts
from gpuaudit.report.run import new_run_dir


def _rollout(reports: Path, rollout_id: str, status: str, reason: str = "") -> None:
    directory = reports / "upgrades" / rollout_id
    directory.mkdir(parents=True)
    document = {
        "schema_version": 1,
        "rollout_id": rollout_id,
        "target_version": "550.127.05",
        "status": status,
        "reason": reason,
        "updated_at": f"2026-12-01T10:0{len(rollout_id) % 10}:00Z",
        "hosts": [{"name": "gpu-01", "outcome": "rolled_back"}, {"name": "gpu-02",
                   "outcome": "untouched"}],
    }  # fmt: skip
    (directory / "rollout.json").write_text(json.dumps(document))


def test_open_rollouts_are_listed_and_completed_ones_are_not(tmp_path: Path) -> None:
    _rollout(tmp_path, "r-done", "completed")
    _rollout(tmp_path, "r-halted", "halted", "canary failed its gate <script>x</script>")
    broken = tmp_path / "upgrades" / "r-broken"
    broken.mkdir(parents=True)
    (broken / "rollout.json").write_text("{not json")
    listed = {r.rollout_id: r for r in open_rollouts(tmp_path)}
    assert set(listed) == {"r-halted", "r-broken"}
    assert listed["r-halted"].outcomes == {"rolled_back": 1, "untouched": 1}
    assert listed["r-halted"].report == "../upgrades/r-halted/index.html"
    assert listed["r-broken"].status == "unreadable"


def test_the_register_and_the_page_show_a_halted_rollout(tmp_path: Path) -> None:
    _rollout(tmp_path, "r-halted", "halted", "canary failed its gate <script>x</script>")
    run = new_run_dir(tmp_path, "20261201T100000Z")
    write_report(run, [], [])
    register = json.loads(run.register_path.read_text())
    assert [r["status"] for r in register["rollouts"]] == ["halted"]
    page = Path(run.html_path).read_text()
    assert "Driver rollout r-halted → 550.127.05: halted" in page
    assert "&lt;script&gt;x&lt;/script&gt;" in page and "<script>x</script>" not in page
    assert 'href="../upgrades/r-halted/index.html"' in page


def test_no_banner_without_an_open_rollout(tmp_path: Path) -> None:
    _rollout(tmp_path, "r-done", "completed")
    run = new_run_dir(tmp_path, "20261201T100000Z")
    write_report(run, [], [])
    assert json.loads(run.register_path.read_text())["rollouts"] == []
    assert "Driver rollout" not in Path(run.html_path).read_text()
