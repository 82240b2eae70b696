"""The report-build benchmark's fleet of snapshots as the audit writes them (``--collected``),
in a tiny configuration: every host a collected board under its own name, raw sections kept,
and the register built from them judging each board's faults on every host that carries it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

from report_build import (  # noqa: E402
    COLLECTED_PROFILES,
    terminal_summary,
    write_collected_fleet,
    write_fleet,
)

from gpuaudit.pipeline import rebuild  # noqa: E402
from gpuaudit.report.run import RunDir  # noqa: E402

pytestmark = pytest.mark.slow


def test_collected_fleet_keeps_the_sections_and_gives_each_board_its_findings(
    tmp_path: Path,
) -> None:
    hosts = 2 * len(COLLECTED_PROFILES)
    run = RunDir(tmp_path / "run")
    written = write_collected_fleet(run, hosts, tmp_path / "bundles")
    snapshots = run.load_snapshots()
    assert len(snapshots) == hosts
    assert written == sum(p.stat().st_size for p in run.snapshot_files())
    assert sorted(s.host for s in snapshots) == [f"gpu-{n:05d}" for n in range(hosts)]
    for snapshot in snapshots:
        assert len(snapshot.gpus) == (7 if snapshot.host in ("gpu-00004", "gpu-00010") else 8)
        assert snapshot.sections["nvidia_smi_xml"].stdout.lstrip().startswith("<?xml")
    # The outputs of the first run were kept for the next.
    assert sorted(p.stem for p in (tmp_path / "bundles").iterdir()) == sorted(COLLECTED_PROFILES)

    rebuild(run)
    register = json.loads(run.register_path.read_text(encoding="utf-8"))
    fallen = COLLECTED_PROFILES.index("a100-hgx-05")
    missing_gpu = {f["host"] for f in register["findings"] if f["rule"] == "GA102"}
    assert missing_gpu == {f"gpu-{n:05d}" for n in (fallen, fallen + len(COLLECTED_PROFILES))}


def test_the_terminal_summary_is_read_both_ways_alike(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The benchmark's side-by-side of what `gpuaudit audit` reads for its summary: it checks
    that the verdict handed over equals the register read back before it times either."""
    run = RunDir(tmp_path / "run")
    write_fleet(run, 12, 8)
    rebuild(run)
    terminal_summary(run, 1)
    printed = capsys.readouterr().out
    assert "register.json read back" in printed and "verdict handed over" in printed
