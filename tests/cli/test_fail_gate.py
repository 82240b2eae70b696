"""The CI gate: the exit status of `gpuaudit audit` and `gpuaudit report` and the junit.xml
threshold agree, whichever path wrote the register."""

from __future__ import annotations

import argparse
import os
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import gpuaudit.audit_run as audit_run
from gpuaudit.audit_run import AuditRun, _audit_result
from gpuaudit.cli import main, parse_args
from gpuaudit.model.status import unreachable_snapshot
from gpuaudit.pipeline import rebuild_register
from gpuaudit.report.run import RunDir, RunEnd, new_run_dir
from gpuaudit.report.verdict import VERDICT_ENV, AuditVerdict, hand_over, taken_over

REPO = Path(__file__).resolve().parents[2]
# A demo host the example run audited, with no finding above info.
HEALTHY_SNAPSHOT = REPO / "reports" / "example" / "hosts" / "_sim_t4-01-cba6616223e0.json"


def _run(tmp_path: Path, unreachable: tuple[str, ...], healthy: bool = False) -> RunDir:
    run = new_run_dir(tmp_path / "reports", "r1")
    for host in unreachable:
        run.write_snapshot(unreachable_snapshot(host, "Could not connect (timed out)"))
    if healthy:
        shutil.copy(HEALTHY_SNAPSHOT, run.hosts_dir / HEALTHY_SNAPSHOT.name)
    return run


def _junit_failures(run: RunDir) -> int:
    return int(ET.parse(run.path / "junit.xml").getroot().get("failures") or 0)


def test_report_fail_on_fails_a_run_in_which_no_host_could_be_audited(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As `gpuaudit audit` does: a collection job whose every node failed is not a healthy
    fleet, whatever the threshold (GA001 is high)."""
    run = _run(tmp_path, ("gpu-a", "gpu-b"))
    assert main(["report", str(run.path), "--fail-on", "critical"]) == 1
    assert "no host could be audited (2 hosts)" in capsys.readouterr().err
    audited = _run(tmp_path / "other", ("gpu-a",), healthy=True)
    assert main(["report", str(audited.path), "--fail-on", "critical"]) == 0
    assert main(["report", str(run.path)]) == 0  # no gate asked for: the register is written


@pytest.mark.parametrize("healthy", [False, True])
def test_report_and_audit_gate_one_register_alike(tmp_path: Path, healthy: bool) -> None:
    run = _run(tmp_path, ("gpu-a",), healthy=healthy)
    for threshold in ("critical", "high"):
        assert main(["report", str(run.path), "--fail-on", threshold]) == _audit_result(
            run, None, threshold
        )


def test_a_register_written_without_pyinfra_takes_the_fail_on_threshold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the second pyinfra process writes no register, the audit writes one from the
    snapshots alone: its junit.xml fails by the same --fail-on as the exit status."""
    run = _run(tmp_path, ("gpu-a",))  # GA001, high
    monkeypatch.setattr(audit_run, "_run_pyinfra", lambda *args, **kwargs: 1)
    audit = AuditRun(run, ["inventory/none.py"], {"GPUAUDIT_FAIL_ON": "critical"})
    audit.close(RunEnd(exit_status=1))
    assert run.register_path.exists()
    assert _junit_failures(run) == 0  # high is below --fail-on critical
    assert AuditVerdict.of(run.load_register(outcomes=False)).gate("critical") == 0


def test_audit_gives_pyinfra_only_its_own_fail_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """junit.xml's threshold is the audit's --fail-on: one left in the environment (by a CI
    job, for plain pyinfra) is not passed on, where the exit status would not follow it, or a
    value such as HIGH would stop the deploy writing the register."""
    seen: list[dict[str, str]] = []

    def audit(self: AuditRun) -> RunEnd:
        seen.append(self.env)
        return RunEnd(exit_status=2)  # pyinfra refused the command line: nothing more runs

    monkeypatch.setattr(AuditRun, "audit", audit)
    monkeypatch.setenv("GPUAUDIT_FAIL_ON", "HIGH")
    reports = ["--reports-dir", str(tmp_path / "reports")]
    for given, expected in (([], None), (["--fail-on", "medium"], "medium")):
        args: argparse.Namespace = parse_args(["audit", "inventory/demo.py", *reports, *given])
        audit_run.cmd_audit(args)
        assert seen.pop().get("GPUAUDIT_FAIL_ON") == expected


def _refuse_register(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(self: RunDir, *, outcomes: bool = True) -> object:
        raise AssertionError("register.json read back")

    monkeypatch.setattr(RunDir, "load_register", refused)


@pytest.mark.parametrize("threshold", ["critical", "high"])
def test_a_handed_over_verdict_says_what_the_register_says(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    threshold: str,
) -> None:
    """The verdict the register's writer hands over gives `gpuaudit audit` the same lines and
    exit status as register.json read back, without reading it."""
    run = _run(tmp_path, ("gpu-a",), healthy=True)  # GA001 (high) on one host of two
    handed = tmp_path / "verdict.json"
    monkeypatch.setenv(VERDICT_ENV, str(handed))
    hand_over(rebuild_register(run), run.register_path)
    expected = (_audit_result(run, None, threshold), capsys.readouterr())
    with monkeypatch.context() as patched:
        _refuse_register(patched)
        assert (_audit_result(run, None, threshold, handed), capsys.readouterr()) == expected
    assert expected[0] == (1 if threshold == "high" else 0)
    assert "gpuaudit: 2 hosts: 1 ok, 1 unreachable" in expected[1].out


def test_a_verdict_is_not_taken_for_another_register(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A verdict sealed for another register.json, or a file that is no verdict, is left:
    the register is read back."""
    run = _run(tmp_path, ("gpu-a", "gpu-b"))
    handed = tmp_path / "verdict.json"
    monkeypatch.setenv(VERDICT_ENV, str(handed))
    hand_over(rebuild_register(run), run.register_path)
    assert taken_over(handed, run.register_path) is not None
    stamp = run.register_path.stat()
    os.utime(run.register_path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns + 1_000_000))
    assert taken_over(handed, run.register_path) is None
    assert _audit_result(run, None, "critical", handed) == 1  # read back: no host audited
    assert "no host could be audited (2 hosts)" in capsys.readouterr().err
    for text in ("{", '{"schema": 1}', '{"schema": 99, "summary": []}', "[]"):
        handed.write_text(text)
        assert taken_over(handed, run.register_path) is None
    assert taken_over(tmp_path / "absent.json", run.register_path) is None
