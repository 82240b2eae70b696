"""The Slurm drain hook against a real Slurm: munged, slurmctld and slurmd (Debian's slurm-wlm
and munge, installed by `make test`) started on this machine for the tests, on ports of their
own, with their state in a temporary directory.

The node really goes DRAIN (reason "gpuaudit: …"), the hook waits for the job running on it,
and undrain returns it to IDLE — but never resumes a node a person drained for another reason.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuaudit.policy.upgrade import DrainSettings
from gpuaudit.upgrade.drain import drain_commands

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from slurmcluster import running_slurm, wait_for

NODE = "gpu-01"

pytestmark = pytest.mark.slow
SLURM = DrainSettings(kind="slurm", timeout_seconds=60)


@pytest.fixture(scope="module")
def slurm() -> Iterator[dict[str, str]]:
    with running_slurm(NODE) as cluster:
        yield cluster.env


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
    wait_for(lambda: "RUNNING" in _job_state(slurm, job_id), "the job to run")

    _run(drain_commands(SLURM, f"@sim/{NODE}", "550.127.05", undrain=False), slurm)
    node = _node(slurm)
    assert "DRAIN" in node["State"], node
    assert node["Reason"].startswith("gpuaudit: driver upgrade to 550.127.05"), node
    # The hook returned only once the node ran no job: the job has finished.
    assert "COMPLETED" in _job_state(slurm, job_id)

    _run(drain_commands(SLURM, f"@sim/{NODE}", "550.127.05", undrain=True), slurm)
    wait_for(lambda: _state(slurm) == "IDLE", "the node to be IDLE again")


def test_undrain_leaves_a_node_drained_for_another_reason(slurm: dict[str, str]) -> None:
    _run([f"scontrol update nodename={NODE} state=drain reason='bad DIMM, ticket 4711'"], slurm)
    _run(drain_commands(SLURM, NODE, "550.127.05", undrain=True), slurm)
    node = _node(slurm)
    assert "DRAIN" in node["State"] and node["Reason"].startswith("bad DIMM"), node
    _run([f"scontrol update nodename={NODE} state=resume"], slurm)
    wait_for(lambda: _state(slurm) == "IDLE", "the node to be IDLE again")


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
    wait_for(lambda: _state(slurm) == "IDLE", "the node to be IDLE after the rollout")
