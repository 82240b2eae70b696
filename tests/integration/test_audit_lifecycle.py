"""`gpuaudit audit` from start to end on small simulated fleets: runs where no host connects,
runs stopped by a signal, runs that fail before any host is audited, pyinfra's own options.

Every run goes through the real command (`python -m gpuaudit.cli audit`), the real pyinfra and
the production deploy; the simulated hosts live under the test's own GPUAUDIT_SIM_DIR.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from gpuaudit.sim.profiles import get_profile

REPO = Path(__file__).resolve().parents[2]
OUTPUTS = (
    "register.json",
    "index.html",
    "register.csv",
    "summary.md",
    "junit.xml",
    "gpuaudit.prom",
)
# How long a test waits for something the audit does within seconds (a first snapshot).
PATIENCE_S = 120


def profile(base: str, **changes: Any) -> dict[str, Any]:
    result = get_profile(base)
    result.update(changes)
    return result


def write_inventory(tmp: Path, hosts: Mapping[str, Mapping[str, Any]]) -> Path:
    entries = [(f"@sim/{name}", {"sim_reset": True, **data}) for name, data in hosts.items()]
    inventory = tmp / "inventory.py"
    inventory.write_text(f"fleet = {entries!r}\n", encoding="utf-8")
    return inventory


def audit_env(tmp: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ, GPUAUDIT_SIM_DIR=str(tmp / "sim"), **extra)
    for name in ("GPUAUDIT_RUN_DIR", "GPUAUDIT_REPORTS_DIR", "GPUAUDIT_RUN_ID", "GPUAUDIT_POLICY"):
        if name not in extra:
            env.pop(name, None)
    return env


def gpuaudit(tmp: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuaudit.cli", *args],
        cwd=tmp,
        env=audit_env(tmp, **env),
        capture_output=True,
        text=True,
        timeout=300,
    )


def plain_pyinfra(
    tmp: Path, inventory: Path, **env: str
) -> tuple[subprocess.CompletedProcess[str], str]:
    """``pyinfra -y INVENTORY deploys/audit.py`` as a user runs it, without gpuaudit's command;
    the run and all it printed."""
    done = subprocess.run(
        [sys.executable, "-m", "pyinfra", "-y", str(inventory), str(REPO / "deploys/audit.py")],
        cwd=tmp,
        env=audit_env(tmp, **env),
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done, done.stdout + done.stderr


def host_statuses(run: Path) -> dict[str, dict[str, Any]]:
    register = json.loads((run / "register.json").read_text())
    return {h["name"]: h for h in register["hosts"]}


DOWN = {
    "down": {"sim_profile": profile("t4-01", faults={"unreachable": {}})},
    "refused": {"sim_profile": profile("t4-01", faults={"auth_refused": {}})},
}


def test_a_run_where_no_host_connects_still_writes_the_register(tmp_path: Path) -> None:
    inventory = write_inventory(tmp_path, DOWN)
    done = gpuaudit(tmp_path, "audit", str(inventory), "--reports-dir", "reports", "--run-id", "r")
    output = done.stdout + done.stderr
    # Not one host could be audited: that is a failed audit, as pyinfra's failed hosts are.
    assert done.returncode == 1, output
    run = tmp_path / "reports" / "r"
    for name in OUTPUTS:
        assert (run / name).is_file(), (name, output)
    hosts = host_statuses(run)
    assert {name: h["status"] for name, h in hosts.items()} == {
        "@sim/down": "unreachable",
        "@sim/refused": "auth_failed",
    }
    assert "Could not connect" in hosts["@sim/down"]["status_detail"]
    assert "Authentication" in hosts["@sim/refused"]["status_detail"]
    register = json.loads((run / "register.json").read_text())
    assert {(f["rule"], f["host"]) for f in register["findings"]} >= {
        ("GA001", "@sim/down"),
        ("GA001", "@sim/refused"),
    }
    assert len(list((run / "hosts").glob("*.json"))) == 2
    assert "no host could be audited" in done.stderr
    # The terminal summary: hosts by status, open risks by severity, the top risk, the page.
    assert "2 hosts: 1 auth_failed, 1 unreachable" in done.stdout
    assert "1 open risk: 1 high" in done.stdout
    assert "GA001" in done.stdout and "Host could not be audited" in done.stdout
    assert f"gpuaudit report: {run.resolve() / 'index.html'}" in done.stdout


def test_pyinfra_options_pass_through_and_reports_dir_comes_from_the_environment(
    tmp_path: Path,
) -> None:
    inventory = write_inventory(tmp_path, {"t4": {"sim_profile": "t4-01"}})
    env_reports = tmp_path / "env-reports"
    done = gpuaudit(
        tmp_path,
        "audit",
        "--parallel", "1",  # a pyinfra option with a value, before the inventory
        str(inventory),
        "--sudo",
        "--data", "expected_gpu_count=4",
        "--run-id", "r",
        GPUAUDIT_REPORTS_DIR=str(env_reports),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run = env_reports / "r"
    assert not (tmp_path / "reports").exists()
    hosts = host_statuses(run)
    assert hosts["@sim/t4"]["status"] == "ok"
    # pyinfra's --data reached the host data the rules read.
    (snapshot,) = (json.loads(p.read_text()) for p in (run / "hosts").glob("*.json"))
    assert snapshot["host_data"]["expected_gpu_count"] == 4
    register = json.loads((run / "register.json").read_text())
    assert "GA102" in {f["rule"] for f in register["findings"]}  # 1 GPU where 4 are expected
    assert "1 host: 1 ok" in done.stdout


@pytest.mark.parametrize(
    ("inventory_text", "options"),
    [
        ("fleet = [\n", []),  # an inventory that is not Python
        ("fleet = ['@sim/t4-01']\n", ["--no-such-pyinfra-option"]),  # pyinfra refuses it
    ],
)
def test_a_run_that_fails_before_any_host_leaves_no_empty_run_directory(
    tmp_path: Path, inventory_text: str, options: list[str]
) -> None:
    inventory = tmp_path / "inventory.py"
    inventory.write_text(inventory_text, encoding="utf-8")
    done = gpuaudit(tmp_path, "audit", str(inventory), "--reports-dir", "reports", *options)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert "gpuaudit: no register was written" in done.stderr
    assert list((tmp_path / "reports").iterdir()) == []


def test_a_broken_policy_under_plain_pyinfra_is_a_message_not_a_traceback(
    tmp_path: Path,
) -> None:
    inventory = write_inventory(tmp_path, {"t4": {"sim_profile": "t4-01"}})
    broken = tmp_path / "broken.yaml"
    broken.write_text("version: 1\nbogus: 1\n", encoding="utf-8")
    done, output = plain_pyinfra(
        tmp_path,
        inventory,
        GPUAUDIT_POLICY=str(broken),
        GPUAUDIT_REPORTS_DIR=str(tmp_path / "reports"),
    )
    assert done.returncode != 0
    assert "Traceback" not in output, output
    assert f"{broken}:2:1: unknown key 'bogus'" in output
    # Nothing was audited, so no run directory is left behind.
    assert not (tmp_path / "reports").exists() or not any((tmp_path / "reports").iterdir())


def _pyinfra_processes(run_dir: Path) -> list[int]:
    """pyinfra processes of this run (found by the run directory in their environment)."""
    marker = f"GPUAUDIT_RUN_DIR={run_dir.resolve()}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue
        if b"pyinfra" in cmdline and marker in environ.split(b"\0"):
            found.append(int(proc.name))
    return found


@pytest.fixture
def interrupted_audit(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A fleet whose second host hangs in nvidia-smi, so the audit is still running after the
    first host's snapshot has arrived; any pyinfra left behind is killed at the end."""
    hosts = {
        "quick": {"sim_profile": "t4-01"},
        # Each nvidia-smi call sleeps 30 s (under the collector's 60 s per-call bound).
        "wedged": {"sim_profile": profile("t4-01", faults={"hang": {"seconds": 30}})},
    }
    inventory = write_inventory(tmp_path, hosts)
    run = tmp_path / "reports" / "r"
    yield inventory, run
    for pid in _pyinfra_processes(run):
        os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_an_interrupted_audit_stops_pyinfra_and_writes_what_it_collected(
    tmp_path: Path, interrupted_audit: tuple[Path, Path], signum: int, code: int
) -> None:
    inventory, run = interrupted_audit
    audit = subprocess.Popen(
        [sys.executable, "-m", "gpuaudit.cli", "audit", str(inventory),
         "--reports-dir", "reports", "--run-id", "r"],
        cwd=tmp_path,
        env=audit_env(tmp_path, GPUAUDIT_TIMEOUT="300"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + PATIENCE_S
        while not list((run / "hosts").glob("*quick*.json")):
            assert audit.poll() is None, audit.communicate()
            assert time.monotonic() < deadline, "the quick host was never collected"
            time.sleep(0.2)
        assert audit.poll() is None  # the wedged host is still being collected
        audit.send_signal(signum)
        out, err = audit.communicate(timeout=PATIENCE_S)
    finally:
        if audit.poll() is None:
            audit.kill()
            audit.wait()
    assert audit.returncode == code, out[-3000:] + err[-3000:]
    assert "Traceback" not in err, err
    # pyinfra (and every process of its group) is gone: nothing writes to the run any more.
    assert _pyinfra_processes(run) == []
    hosts = host_statuses(run)
    assert hosts["@sim/quick"]["status"] == "ok"
    assert hosts["@sim/wedged"]["status"] == "not_audited"
    assert "interrupted" in hosts["@sim/wedged"]["status_detail"]
    assert signal.Signals(signum).name in hosts["@sim/wedged"]["status_detail"]
    for name in OUTPUTS:
        assert (run / name).is_file(), name
    register = json.loads((run / "register.json").read_text())
    assert ("GA001", "@sim/wedged") in {(f["rule"], f["host"]) for f in register["findings"]}
    # One line says what happened and how to rebuild the register.
    hint = [line for line in err.splitlines() if line.startswith("gpuaudit: the audit was")]
    assert len(hint) == 1, err
    assert f"gpuaudit report {run.resolve()}" in hint[0]
    # The snapshots are the truth: a rebuild says the same.
    rebuilt = gpuaudit(tmp_path, "report", str(run))
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert {n: h["status"] for n, h in host_statuses(run).items()} == {
        "@sim/quick": "ok",
        "@sim/wedged": "not_audited",
    }


def test_a_run_directory_that_cannot_be_written_is_a_message_under_plain_pyinfra(
    tmp_path: Path,
) -> None:
    inventory = write_inventory(tmp_path, {"t4": {"sim_profile": "t4-01"}})
    run = tmp_path / "run"
    run.mkdir()
    (run / "hosts").write_text("a file where the snapshots should go\n", encoding="utf-8")
    done, output = plain_pyinfra(tmp_path, inventory, GPUAUDIT_RUN_DIR=str(run))
    assert done.returncode != 0
    assert "Traceback" not in output, output
    assert f"gpuaudit: cannot write the snapshot in {run / 'hosts'}" in output
    assert f"gpuaudit: cannot write the register in {run}" in output
