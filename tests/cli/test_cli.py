from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from gpuaudit.cli import main, rules_markdown
from gpuaudit.collect import collector_script
from gpuaudit.parsers.bundle import parse_bundle_text
from gpuaudit.rules import all_rules

REPO = Path(__file__).resolve().parents[2]


def test_docs_rules_md_is_the_generated_catalogue() -> None:
    # Regenerate with: gpuaudit rules --markdown > docs/rules.md
    assert (REPO / "docs/rules.md").read_text(encoding="utf-8") == rules_markdown()


def test_rules_lists_every_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rules"]) == 0
    out = capsys.readouterr().out
    for rule in all_rules():
        assert rule.code in out


def test_collect_script_runs_offline_and_makes_its_own_nonce(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["collect-script"]) == 0
    script = capsys.readouterr().out
    assert script == collector_script()
    (tmp_path / "collect.sh").write_text(script)
    run = subprocess.run(["sh", str(tmp_path / "collect.sh")], capture_output=True, text=True)
    bundle = parse_bundle_text(run.stdout)
    assert bundle.complete and "meta" in bundle.sections


def test_report_rebuilds_a_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpuaudit.assemble.build import unreachable_snapshot
    from gpuaudit.report.run import new_run_dir

    run = new_run_dir(tmp_path, "r1")
    run.write_snapshot(unreachable_snapshot("gpu-x", "Could not connect (timed out)"))
    assert main(["report", str(run.path)]) == 0
    register = json.loads((run.path / "register.json").read_text())
    assert [h["name"] for h in register["hosts"]] == ["gpu-x"]
    assert [f["rule"] for f in register["findings"]] == ["GA001"]
    assert "index.html" in capsys.readouterr().out


def test_report_on_a_missing_directory_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(tmp_path / "nope")]) == 2
    assert "gpuaudit:" in capsys.readouterr().err
