"""Collection as a Slurm job, through a real Slurm: munged, slurmctld and slurmd (Debian's
slurm-wlm and munge) started on this machine by tests/slurmcluster.py, one node named after
this machine's short host name.

The script ``gpuaudit collect-job slurm`` prints is submitted with the real ``sbatch --wait``;
slurmd runs its batch step and its ``srun`` task on the node, and the task's collector runs
"on" a simulated GPU host (the host's PATH and root given to the collector with ``--env``, as
test_slurm_real.py does with the collector's environment). The bundle directory's name holds
spaces, quotes, ``$(...)``, ``%`` and ``#``: sbatch's reading of the #SBATCH lines and bash's
of the script must both keep it as it is. ``gpuaudit report --bundle-dir`` then builds the
register from what the job left.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuaudit.sim.host import SimHost, materialize

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from slurmcluster import SlurmCluster, running_slurm

pytestmark = pytest.mark.slow
NODE = socket.gethostname().split(".")[0]
REPO = Path(__file__).resolve().parents[2]
HOSTILE = "shared dir 'q' \"dq\" $(touch pwned) %j #x"


@pytest.fixture(scope="module")
def cluster() -> Iterator[SlurmCluster]:
    with running_slurm(NODE, prefix="gpuaudit-slurm-job-") as slurm:
        yield slurm


def _gpuaudit(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuaudit.cli", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO / "src")},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _sim_env(host: SimHost) -> list[str]:
    return [f"--env={key}={value}" for key, value in host.env().items()]


def _run_job(
    cluster: SlurmCluster, tmp_path: Path, shared: Path, *options: str
) -> subprocess.CompletedProcess[str]:
    """Render the job, submit it with sbatch --wait (which exits with the job's status)."""
    shared.mkdir()  # sbatch opens the job's log there before the script runs
    script = tmp_path / "collect.sbatch"
    rendered = _gpuaudit("collect-job", "slurm", "--bundle-dir", str(shared), "-N", "1",
                         "-t", "5", "-o", str(script), *options, cwd=tmp_path)  # fmt: skip
    assert rendered.returncode == 0, rendered.stderr
    return subprocess.run(
        ["sbatch", "--wait", str(script)],
        cwd=tmp_path,
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def _report(tmp_path: Path, shared: Path) -> dict:
    done = _gpuaudit("report", "--bundle-dir", str(shared), "--reports-dir",
                     str(tmp_path / "reports"), "--run-id", "slurm", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    register: dict = json.loads((tmp_path / "reports/slurm/register.json").read_text())
    return register


def _job_log(shared: Path) -> str:
    return "\n".join(p.read_text() for p in shared.glob("gpuaudit-slurm-*.log"))


def test_a_slurm_job_collects_the_node_and_the_report_reads_its_bundle(
    cluster: SlurmCluster, tmp_path: Path
) -> None:
    # a100-hgx-02: 8 A100-SXM4-80GB, GPU 3 with a row remap pending (its profile).
    host = materialize("a100-hgx-02", "a100-hgx-02", tmp_path / "sim")
    shared = tmp_path / HOSTILE
    job = _run_job(cluster, tmp_path, shared, *_sim_env(host))
    log = _job_log(shared)
    assert job.returncode == 0, (job.stdout, job.stderr, log)
    assert "gpuaudit: 1 bundle(s), 0 failed node(s)" in log
    # Exactly the node's bundle and the job's log: the work directory is gone, no temporaries.
    names = {p.name for p in shared.iterdir()}
    logs = {name for name in names if name.startswith("gpuaudit-slurm-")}
    assert names - logs == {f"{NODE}.bundle"}
    [log_name] = logs
    assert log_name[len("gpuaudit-slurm-") : -len(".log")].isdigit()  # %j: the job id
    assert not list(tmp_path.rglob("pwned"))  # $(touch pwned) was never run

    register = _report(tmp_path, shared)
    [entry] = register["hosts"]
    assert entry["name"] == NODE
    assert entry["status"] == "ok"
    assert len(entry["gpus"]) == 8
    assert {g["name"] for g in entry["gpus"]} == {"NVIDIA A100-SXM4-80GB"}
    found = {(f["rule"], f["host"], f["gpu"]) for f in register["findings"]}
    assert ("GA304", NODE, 3) in found  # the pending row remap on GPU 3
    assert register["provenance"]["scope"]["bundles"] == [f"{NODE}.bundle"]
    command = register["provenance"]["command"]
    assert command[command.index("--bundle-dir") + 1] == str(shared)


def test_a_node_whose_collector_does_not_finish_is_a_failed_host(
    cluster: SlurmCluster, tmp_path: Path
) -> None:
    # t4-hang: nvidia-smi hangs for an hour. The collector's bound on each command (10 s) is
    # longer than the job's bound on the whole collector (2 s): the node's task stops it.
    host = materialize("t4-hang", "t4-hang", tmp_path / "sim")
    shared = tmp_path / "bundles"
    job = _run_job(cluster, tmp_path, shared, "--collector-timeout", "2",
                   "--env", "GPUAUDIT_TIMEOUT=10", *_sim_env(host))  # fmt: skip
    log = _job_log(shared)
    assert job.returncode != 0, log  # a failed node fails the job
    assert "gpuaudit: 0 bundle(s), 1 failed node(s)" in log
    assert sorted(p.name for p in shared.iterdir() if not p.name.endswith(".log")) == [
        f"{NODE}.failed"
    ]
    marker = (shared / f"{NODE}.failed").read_text()
    assert marker.startswith(f"gpuaudit collection failed on node {NODE} (Slurm job ")
    assert "the collector did not finish within 2s (exit status 124)" in marker

    register = _report(tmp_path, shared)
    [entry] = register["hosts"]
    assert entry["name"] == NODE
    assert entry["status"] == "collection_failed"
    assert "the collector did not finish within 2s" in entry["status_detail"]
