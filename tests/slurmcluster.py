"""A real Slurm for the tests: munged, slurmctld and slurmd (Debian's slurm-wlm and munge,
installed by `make test`) started on this machine, on ports of their own, with their state,
key, socket and logs in a temporary directory, and stopped at the end.

Used by the drain hook's tests (tests/upgrade) and the collector's Slurm sections' tests
(tests/integration); each says which node it configures and with what.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class SlurmCluster:
    root: Path  # the temporary directory everything lives in
    conf: Path  # slurm.conf
    node: str
    env: dict[str, str]  # os.environ with SLURM_CONF

    def scontrol(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["scontrol", *args], env=self.env, capture_output=True, text=True, timeout=30
        )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for(predicate: Callable[[], bool], what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@contextlib.contextmanager
def running_slurm(
    node: str,
    *,
    prefix: str = "gpuaudit-slurm-",
    node_options: str = "",
    conf_lines: str = "",
    prepare: Callable[[Path], None] | None = None,
) -> Iterator[SlurmCluster]:
    """A one-node cluster: ``node`` (with ``node_options`` on its NodeName line, for example
    ``Gres=gpu:a100:8``) in partition ``gpu``, ``conf_lines`` added to slurm.conf, and
    ``prepare(root)`` run before the daemons start (to write gres.conf, device nodes, ...).
    It yields once the node is IDLE."""
    missing = [t for t in ("munged", "slurmctld", "slurmd", "scontrol") if not shutil.which(t)]
    assert not missing, f"install slurm-wlm and munge (make system-deps): missing {missing}"
    assert os.geteuid() == 0, "the Slurm daemons of these tests run as root"
    # munged wants every directory above its socket open to all: not pytest's private tmp.
    root = Path(tempfile.mkdtemp(prefix=prefix))
    root.chmod(0o755)
    for name in ("state", "spool", "log", "run"):
        (root / name).mkdir()
    key = root / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    socket_path = root / "run" / "munge.socket"
    conf = root / "slurm.conf"
    node_line = f"NodeName={node} NodeHostname=localhost NodeAddr=127.0.0.1 CPUs=1 "
    node_line += f"{node_options} State=UNKNOWN".lstrip()
    conf.write_text(
        f"""ClusterName=gpuaudit-test
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
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
{conf_lines}{node_line}
PartitionName=gpu Nodes={node} Default=YES MaxTime=INFINITE State=UP
"""
    )
    if prepare is not None:
        prepare(root)
    cluster = SlurmCluster(root, conf, node, {**os.environ, "SLURM_CONF": str(conf)})
    daemons = [
        ["munged", f"--key-file={key}", f"--socket={socket_path}",
         f"--pid-file={root}/run/munged.pid", f"--log-file={root}/log/munged.log",
         f"--seed-file={root}/run/munge.seed"],
        ["slurmctld", "-f", str(conf)],
        ["slurmd", "-f", str(conf), "-N", node],
    ]  # fmt: skip
    try:
        for command in daemons:
            subprocess.run(command, env=cluster.env, check=True, capture_output=True, timeout=60)
            if command[0] == "munged":
                wait_for(socket_path.exists, "munged")
        wait_for(lambda: cluster.scontrol("ping").returncode == 0, "scontrol ping")
        wait_for(
            lambda: "State=IDLE " in cluster.scontrol("show", "node", "-o", node).stdout,
            "the node to come up IDLE",
        )
        yield cluster
    finally:
        for name in ("slurmd", "slurmctld", "munged"):
            stop_daemon(root / "run" / f"{name}.pid")
        shutil.rmtree(root, ignore_errors=True)


def stop_daemon(pid_file: Path) -> None:
    """Stop the daemon whose pid file this is, and wait (5 s at most) until it is gone."""
    if not pid_file.exists():
        return
    with contextlib.suppress(ProcessLookupError, ValueError):
        pid = int(pid_file.read_text().strip())
        os.kill(pid, 15)
        for _ in range(50):
            os.kill(pid, 0)  # ProcessLookupError once it is gone
            time.sleep(0.1)
