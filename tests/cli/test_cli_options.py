"""The command line itself: options, defaults from the environment, the terminal summary, and
clear messages (never a traceback) for input it cannot use."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from gpuaudit import __version__
from gpuaudit.cli import PYINFRA_VALUE_OPTIONS, build_parser, main, parse_args
from gpuaudit.model.status import unreachable_snapshot
from gpuaudit.report.run import RunDir, new_run_dir

REPO = Path(__file__).resolve().parents[2]


def _unreachable_run(tmp_path: Path, *hosts: str, healthy: bool = False) -> RunDir:
    """A run of unreachable hosts (and, ``healthy``, one demo host audited without findings
    above info: a run in which some host could be audited)."""
    run = new_run_dir(tmp_path / "reports", "r1")
    for host in hosts:
        run.write_snapshot(unreachable_snapshot(host, "Could not connect (timed out)"))
    if healthy:
        snapshot = REPO / "reports" / "example" / "hosts" / "_sim_t4-01-cba6616223e0.json"
        shutil.copy(snapshot, run.hosts_dir / snapshot.name)
    return run


def test_version_names_gpuaudit_and_pyinfra(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert f"gpuaudit {__version__}" in out
    assert f"pyinfra {metadata.version('pyinfra')}" in out


def test_versions_are_looked_up_only_when_asked_for() -> None:
    """Every command starts faster for it: reading package metadata walks the installed
    packages, and `gpuaudit audit` waits on it before pyinfra starts."""
    probe = (
        "import sys\n"
        "from gpuaudit.cli import parse_args\n"
        "parse_args(['audit', 'inventory.py'])\n"
        "print('importlib.metadata' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert done.stdout.strip() == "False"


def test_audit_passes_pyinfra_options_through_wherever_they_stand(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = parse_args(
        ["audit", "--ssh-user", "ops", "inventory/prod.py", "--sudo", "--parallel", "20",
         "--fail-on", "high", "-vv", "--data", "expected_gpu_count=8", "--ssh-port=2222"]
    )  # fmt: skip
    assert args.inventory == "inventory/prod.py"
    assert args.fail_on == "high"
    assert args.pyinfra == [
        "--ssh-user=ops",
        "--sudo",
        "--parallel=20",
        "-vv",
        "--data=expected_gpu_count=8",
        "--ssh-port=2222",
    ]
    # Only the audit runs pyinfra: every other command still refuses what it does not know.
    with pytest.raises(SystemExit) as exit_info:
        main(["rules", "--sudo"])
    assert exit_info.value.code == 2
    assert "unrecognized arguments: --sudo" in capsys.readouterr().err


def test_audit_refuses_pyinfra_options_an_audit_cannot_honour(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reports = tmp_path / "reports"
    assert main(["audit", "inventory/demo.py", "--dry", "--reports-dir", str(reports)]) == 2
    err = capsys.readouterr().err
    assert "--dry" in err and "collection" in err
    assert not reports.exists()


def test_the_value_options_are_pyinfra_s_own() -> None:
    # pyinfra's command is read in a child process: importing it patches the interpreter.
    code = (
        "import json, click\n"
        "from pyinfra_cli.cli import cli\n"
        "names = [n for p in cli.params if isinstance(p, click.Option)\n"
        "         and not p.is_flag and not p.count for n in p.opts if n.startswith('--')]\n"
        "print(json.dumps(names))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert set(json.loads(done.stdout)) == PYINFRA_VALUE_OPTIONS


def test_reports_dir_defaults_to_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("GPUAUDIT_REPORTS_DIR", str(tmp_path / "elsewhere"))
    for command in (["audit", "inventory/demo.py"], ["report", "--bundle", "x.bundle"]):
        assert build_parser().parse_args(command).reports_dir == str(tmp_path / "elsewhere")
    assert parse_args(["audit", "inv.py", "--reports-dir", "r"]).reports_dir == "r"


@pytest.mark.parametrize("run_id", ["../x", "a/b", ".hidden", "x" * 300])
def test_a_run_id_must_be_one_safe_path_component(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], run_id: str
) -> None:
    reports = tmp_path / "reports"
    with pytest.raises(SystemExit) as exit_info:
        main(["audit", "inventory/demo.py", "--run-id", run_id, "--reports-dir", str(reports)])
    assert exit_info.value.code == 2
    assert "--run-id" in capsys.readouterr().err
    assert not reports.exists() and not (tmp_path / "x").exists()


def test_a_reports_dir_that_cannot_be_written_is_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    occupied = tmp_path / "a-file"
    occupied.write_text("not a directory\n")
    assert main(["audit", "inventory/demo.py", "--reports-dir", str(occupied / "reports")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpuaudit: cannot ") and str(occupied) in err
    assert occupied.read_text() == "not a directory\n"


def test_a_full_reports_dir_is_a_message_and_loses_nothing(tmp_path: Path) -> None:
    run = _unreachable_run(tmp_path, "gpu-a")
    snapshot = (run.hosts_dir / "gpu-a.json").read_bytes()

    def small_files() -> None:  # a file system with almost no room left
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    done = subprocess.run(
        [sys.executable, "-m", "gpuaudit.cli", "report", str(run.path)],
        capture_output=True,
        text=True,
        preexec_fn=small_files,
        env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"),
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "gpuaudit: cannot write" in done.stderr and "File too large" in done.stderr
    assert (run.hosts_dir / "gpu-a.json").read_bytes() == snapshot
    assert [p.name for p in run.path.iterdir() if p.name.startswith(".")] == []


def test_report_fail_on_gates_like_audit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _unreachable_run(tmp_path, "gpu-a", healthy=True)  # GA001, high
    assert main(["report", str(run.path), "--fail-on", "critical"]) == 0
    capsys.readouterr()
    assert main(["report", str(run.path), "--fail-on", "high"]) == 1
    assert "1 risks at high or above" in capsys.readouterr().err
    junit = (run.path / "junit.xml").read_text()
    assert "failure" in junit  # junit.xml takes the same threshold


def test_report_prints_the_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _unreachable_run(tmp_path, "gpu-a", "gpu-\x1b[31mb")
    assert main(["report", str(run.path)]) == 0
    out = capsys.readouterr().out
    assert "gpuaudit: 2 hosts: 2 unreachable" in out
    assert "gpuaudit: 1 open risk: 1 high" in out
    assert "high" in out and "GA001" in out and "Host could not be audited (2 hosts)" in out
    assert f"gpuaudit report: {run.path.resolve() / 'index.html'}" in out
    assert "\x1b" not in out  # host names are printed without their control characters


def test_explain_takes_the_risk_id_the_page_shows(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "GA301:79"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("GA301  XID errors in the kernel log")
    assert main(["explain", "GA999:79"]) == 2
    assert "no rule 'GA999'" in capsys.readouterr().err


def test_explain_shows_the_risk_of_a_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _unreachable_run(tmp_path, "gpu-a", "gpu-b")
    assert main(["report", str(run.path)]) == 0
    capsys.readouterr()
    assert main(["explain", "GA001", str(run.path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("GA001  Host could not be audited")
    assert "risk GA001 in run r1: open, high" in out
    assert "gpu-a" in out and "gpu-b" in out and "could not be reached" in out
    assert main(["explain", "GA001:nothing", str(run.path)]) == 1
    assert "no risk 'GA001:nothing' in" in capsys.readouterr().err


def test_report_summarises_and_gates_on_the_register_it_wrote(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`gpuaudit report` prints and gates on the register it has just built, not on
    register.json read back (a 10,000-host register is over 100 MiB): the same lines and the
    same exit status as that file gives, waived and informational risks included."""
    from gpuaudit.report.verdict import AuditVerdict

    example = REPO / "reports" / "example"
    run = RunDir(tmp_path / "example")
    shutil.copytree(example / "hosts", run.hosts_dir)
    for name in ("policy.yaml", "provenance.json"):
        shutil.copy(example / name, run.path / name)
    shutil.copytree(example / "cluster", run.path / "cluster")
    read_back = RunDir.load_register

    def refused(self: RunDir, *, outcomes: bool = True) -> object:
        raise AssertionError("register.json read back")

    for threshold in ("critical", "high", "medium", "low"):
        monkeypatch.setattr(RunDir, "load_register", refused)
        status = main(["report", str(run.path), "--fail-on", threshold])
        printed = capsys.readouterr()
        monkeypatch.setattr(RunDir, "load_register", read_back)
        written = AuditVerdict.of(run.load_register(outcomes=False))
        written.print_summary(run.html_path, run.register_path)
        assert written.gate(threshold) == status
        expected = capsys.readouterr()
        assert (printed.out, printed.err) == (expected.out, expected.err), threshold
    assert "waived" in printed.out and "open risk" in printed.out
    assert status == 1  # the example fleet has open risks at low and above
