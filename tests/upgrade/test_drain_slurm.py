"""The Slurm drain hook against a real Slurm: munged, slurmctld and slurmd (Debian's slurm-wlm
and munge, installed by `make test`) started on this machine for the tests, on ports of their
own, with their state in a temporary directory.

The node really goes DRAIN (reason "gpuaudit: …"), the hook waits for the job running on it,
and undrain returns it to IDLE — but never resumes a node a person drained for another reason.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuaudit.policy.upgrade import DrainSettings
from gpuaudit.upgrade.drain import drain_commands

NODE = "gpu-01"

pytestmark = pytest.mark.slow
SLURM = DrainSettings(kind="slurm", timeout_seconds=60)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait(predicate, what: str, seconds: float = 30) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def slurm() -> Iterator[dict[str, str]]:
    missing = [t for t in ("munged", "slurmctld", "slurmd", "scontrol") if not shutil.which(t)]
    assert not missing, f"install slurm-wlm and munge (make system-deps): missing {missing}"
    assert os.geteuid() == 0, "the Slurm daemons of this test run as root"
    # munged wants every directory above its socket open to all: not pytest's private tmp.
    root = Path(tempfile.mkdtemp(prefix="gpuaudit-slurm-"))
    root.chmod(0o755)
    for name in ("state", "spool", "log", "run"):
        (root / name).mkdir()
    key = root / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    socket_path = root / "run" / "munge.socket"
    conf = root / "slurm.conf"
    conf.write_text(
        f"""ClusterName=gpuaudit-test
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/munge
AuthInfo=socket={socket_path}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/run/slurmctld.pid
SlurmdPidFile={root}/run/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
ReturnToService=2
NodeName={NODE} NodeHostname=localhost NodeAddr=127.0.0.1 CPUs=1 State=UNKNOWN
PartitionName=gpu Nodes={NODE} Default=YES MaxTime=INFINITE State=UP
"""
    )
    env = {**os.environ, "SLURM_CONF": str(conf)}
    daemons = [
        [
            "munged",
            f"--key-file={key}",
            f"--socket={socket_path}",
            f"--pid-file={root}/run/munged.pid",
            f"--log-file={root}/log/munged.log",
            f"--seed-file={root}/run/munge.seed",
        ],
        ["slurmctld", "-f", str(conf)],
        ["slurmd", "-f", str(conf), "-N", NODE],
    ]
    for command in daemons:
        subprocess.run(command, env=env, check=True, capture_output=True, timeout=60)
        if command[0] == "munged":
            _wait(socket_path.exists, "munged")
    try:
        _wait(lambda: _state(env) == "IDLE", "the node to come up IDLE", 60)
        yield env
    finally:
        for name in ("slurmd", "slurmctld", "munged"):
            pid = root / "run" / f"{name}.pid"
            if pid.exists():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid.read_text().strip()), 15)
        time.sleep(0.5)
        shutil.rmtree(root, ignore_errors=True)


def _node(env: dict[str, str]) -> dict[str, str]:
    shown = subprocess.run(
        ["scontrol", "show", "node", "-o", NODE],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    fields = {}
    for word in shown.split():
        key, sep, value = word.partition("=")
        if sep:
            fields[key] = value
    # Reason= is the rest of the line (it holds spaces).
    if "Reason=" in shown:
        fields["Reason"] = shown.split("Reason=", 1)[1].rsplit(" [", 1)[0].strip()
    return fields


def _state(env: dict[str, str]) -> str:
    return _node(env).get("State", "")


def _run(commands: list[str], env: dict[str, str]) -> None:
    for command in commands:
        done = subprocess.run(
            command, shell=True, env=env, capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, (command, done.stdout, done.stderr)


def test_drain_waits_for_the_running_job_and_undrain_gives_the_node_back(
    slurm: dict[str, str], tmp_path: Path
) -> None:
    job = subprocess.run(
        ["sbatch", "--parsable", "-o", str(tmp_path / "job.out"), "--wrap", "sleep 3"],
        env=slurm,
        capture_output=True,
        text=True,
        check=True,
    )
    job_id = job.stdout.strip().split(";")[0]
    _wait(lambda: "RUNNING" in _job_state(slurm, job_id), "the job to run")

    _run(drain_commands(SLURM, f"@sim/{NODE}", "550.127.05", undrain=False), slurm)
    node = _node(slurm)
    assert "DRAIN" in node["State"], node
    assert node["Reason"].startswith("gpuaudit: driver upgrade to 550.127.05"), node
    # The hook returned only once the node ran no job: the job has finished.
    assert "COMPLETED" in _job_state(slurm, job_id)

    _run(drain_commands(SLURM, f"@sim/{NODE}", "550.127.05", undrain=True), slurm)
    _wait(lambda: _state(slurm) == "IDLE", "the node to be IDLE again")


def test_undrain_leaves_a_node_drained_for_another_reason(slurm: dict[str, str]) -> None:
    _run([f"scontrol update nodename={NODE} state=drain reason='bad DIMM, ticket 4711'"], slurm)
    _run(drain_commands(SLURM, NODE, "550.127.05", undrain=True), slurm)
    node = _node(slurm)
    assert "DRAIN" in node["State"] and node["Reason"].startswith("bad DIMM"), node
    _run([f"scontrol update nodename={NODE} state=resume"], slurm)
    _wait(lambda: _state(slurm) == "IDLE", "the node to be IDLE again")


def _job_state(env: dict[str, str], job_id: str) -> str:
    shown = subprocess.run(
        ["scontrol", "show", "job", job_id], env=env, capture_output=True, text=True, check=False
    ).stdout
    return shown.split("JobState=", 1)[1].split()[0] if "JobState=" in shown else ""


def test_a_rollout_drains_the_node_in_slurm_and_gives_it_back(
    slurm: dict[str, str], tmp_path: Path
) -> None:
    import json
    import sys

    repo = Path(__file__).resolve().parents[2]
    inventory = tmp_path / "inventory.py"
    inventory.write_text(
        "import runpy\n"
        f"_host = runpy.run_path({str(repo / 'inventory/rehearsal.py')!r})['_host']\n"
        f"fleet = [_host({NODE!r}, 'canary')]\n"
    )
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "version: 1\nupgrade:\n  stages: [canary]\n  drain: {kind: slurm, timeout_seconds: 60}\n"
    )
    env = {**slurm, "GPUAUDIT_SIM_DIR": str(tmp_path / "sim")}
    env.pop("GPUAUDIT_POLICY", None)
    done = subprocess.run(
        [sys.executable, "-m", "gpuaudit.cli", "upgrade", str(inventory), "--to", "535.161.08",
         "--policy", str(policy), "--reports-dir", str(tmp_path / "reports"),
         "--rollout-id", "slurm"],
        cwd=repo, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    rollout = tmp_path / "reports/upgrades/slurm"
    events = [json.loads(line) for line in (rollout / "journal.jsonl").read_text().splitlines()]
    steps = [(e["step"], e["status"]) for e in events if e["host"] == f"@sim/{NODE}"]
    assert ("drain", "done") in steps and ("undrain", "done") in steps
    drained = next(e for e in events if e["step"] == "drain" and e["status"] == "done")
    assert "scontrol update nodename=gpu-01 state=drain" in drained["detail"]
    # slurmctld itself saw the node drained for the upgrade, then resumed.
    log = Path(slurm["SLURM_CONF"]).parent.joinpath("log/slurmctld.log").read_text()
    assert "gpuaudit: driver upgrade to 535.161.08" in log
    _wait(lambda: _state(slurm) == "IDLE", "the node to be IDLE after the rollout")
