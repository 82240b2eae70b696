"""The collector's Slurm sections against a real Slurm: munged, slurmctld and slurmd (Debian's
slurm-wlm and munge, installed by `make test`) started on this machine for these tests, on
ports of their own, with their state, keys and sockets in a temporary directory.

The node is this machine's short host name, configured with 8 GPUs (``Gres=gpu:a100:8``, a
static gres.conf naming 8 device nodes the test creates), while the simulated host the
collector runs "on" is an A100 HGX whose GPU 5 fell off the bus: 7 answer. slurmd accepts the
8 device files, so Slurm schedules a GPU that is not there; the register must say so.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuaudit.assemble.build import build_snapshot
from gpuaudit.model.findings import Finding, Outcome
from gpuaudit.model.snapshot import HostSnapshot
from gpuaudit.parsers.bundle import parse_bundle_text
from gpuaudit.rules import assess
from gpuaudit.sim.host import materialize
from gpuaudit.sim.profiles import get_profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sim"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from simhelpers import collector_output
from slurmcluster import running_slurm, stop_daemon, wait_for

pytestmark = pytest.mark.slow
NODE = socket.gethostname().split(".")[0]


def _gres_conf(root: Path, last: int) -> str:
    return f"NodeName={NODE} Name=gpu Type=a100 File={root}/dev/nvidia[0-{last}]\n"


def _prepare(root: Path) -> None:
    """8 device nodes (character devices 195:N) for gres.conf to name, gres.conf, and the
    real Slurm tools, put before the simulated host's own in the collector's PATH."""
    (root / "dev").mkdir()
    (root / "bin").mkdir()
    for i in range(8):
        os.mknod(root / f"dev/nvidia{i}", 0o600 | 0o020000, os.makedev(195, i))
    (root / "gres.conf").write_text(_gres_conf(root, 7))
    for tool in ("scontrol", "slurmd"):
        (root / "bin" / tool).symlink_to(shutil.which(tool) or tool)


@pytest.fixture(scope="module")
def slurm() -> Iterator[dict[str, str]]:
    with running_slurm(
        NODE,
        prefix="gpuaudit-slurm-collect-",
        node_options="Gres=gpu:a100:8",
        conf_lines="GresTypes=gpu\n",
        prepare=_prepare,
    ) as cluster:
        yield {
            "SLURM_CONF": str(cluster.conf),
            "GPUAUDIT_SLURM_NODE": NODE,
            "GPUAUDIT_TEST_SLURM_ROOT": str(cluster.root),
        }


def _scontrol(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["scontrol", *args], env=env, capture_output=True, text=True, timeout=30, check=False
    )


def _audit(
    slurm: dict[str, str], tmp_path: Path
) -> tuple[HostSnapshot, dict[str, Outcome], dict[str, list[Finding]]]:
    """The collector run "on" the simulated 7-of-8-GPU host, its Slurm tools the real ones."""
    profile = get_profile("a100-hgx-05")
    profile.pop("slurm", None)  # the host's Slurm is the real one here
    host = materialize("a100-hgx-05", profile, tmp_path / "sim")
    front = Path(slurm["GPUAUDIT_TEST_SLURM_ROOT"]) / "bin"
    extra = {k: v for k, v in slurm.items() if k != "GPUAUDIT_TEST_SLURM_ROOT"}
    text = collector_output(host, front=front, **extra)
    snap = build_snapshot("a100-hgx-05", parse_bundle_text(text))
    evaluation = assess([snap])
    by_rule = {o.rule: o.outcome for o in evaluation.outcomes if o.rule.startswith("GA91")}
    found: dict[str, list[Finding]] = {}
    for finding in evaluation.findings:
        found.setdefault(finding.rule, []).append(finding)
    return snap, by_rule, found


def test_slurm_schedules_eight_gpus_on_a_host_with_seven(
    slurm: dict[str, str], tmp_path: Path
) -> None:
    snap, by_rule, found = _audit(slurm, tmp_path)
    view = snap.slurm
    assert view is not None and view.node is not None, snap.parse_errors
    assert view.node_name == NODE
    node = view.node
    assert node.name == NODE
    assert node.state == "IDLE"
    assert [(g.name, g.type, g.count) for g in node.gres] == [("gpu", "a100", 8)]
    assert node.fields["NodeHostName"] == "localhost"
    assert node.version and node.version.split(".")[0].isdigit()
    assert node.reason is None
    # gres.conf beside SLURM_CONF, read as the test wrote it.
    assert view.gres_conf is not None
    [line] = view.gres_conf.lines
    assert (line.node_name, line.name, line.type, line.file_count) == (NODE, "gpu", "a100", 8)
    assert view.gres_conf.path == str(Path(slurm["SLURM_CONF"]).parent / "gres.conf")
    assert view.slurm_conf_lines is not None
    assert "GresTypes=gpu" in view.slurm_conf_lines
    # slurmd -G (as root) reports the 8 files; slurmd -C what slurmd finds of the machine.
    assert view.slurmd_gres is not None
    assert sum(g.count or 0 for g in view.slurmd_gres if g.name == "gpu") == 8
    assert view.slurmd_hardware is not None and view.slurmd_hardware.cpus
    assert len(snap.gpus) == 7
    # The register: Slurm schedules 8 on 7, and gres.conf's static lines do not follow.
    assert by_rule["GA911"] is Outcome.FAIL
    assert found["GA911"][0].evidence.actual == {"slurm_gres_gpu": 8, "healthy_gpus": 7}
    assert by_rule["GA916"] is Outcome.FAIL
    assert found["GA916"][0].evidence.actual == {"auto_detect": None, "gpu_files": 8}
    assert by_rule["GA914"] is Outcome.PASS  # slurmd and slurmctld agree with each other
    assert by_rule["GA913"] is Outcome.PASS
    assert by_rule["GA912"] is Outcome.PASS


def test_an_operator_drain_is_reported_with_its_reason_and_who(
    slurm: dict[str, str], tmp_path: Path
) -> None:
    env = {**os.environ, **slurm}
    done = _scontrol(env, "update", f"nodename={NODE}", "state=drain", "reason=GPU 5 off the bus")
    assert done.returncode == 0, done.stderr
    try:
        snap, by_rule, found = _audit(slurm, tmp_path)
        assert snap.slurm is not None and snap.slurm.node is not None
        node = snap.slurm.node
        assert "DRAIN" in node.state
        assert node.reason == "GPU 5 off the bus"
        assert node.reason_user == "root"
        assert node.reason_time and node.reason_time[:2] == "20"
        assert by_rule["GA913"] is Outcome.FAIL
        assert found["GA913"][0].evidence.actual["set_by"] == "root"
        assert by_rule["GA911"] is Outcome.PASS  # drained: nothing is scheduled on it
    finally:
        _scontrol(env, "update", f"nodename={NODE}", "state=resume")
        wait_for(lambda: "State=IDLE " in _scontrol(env, "show", "node", "-o", NODE).stdout, "IDLE")


def test_slurmctld_drains_the_node_when_slurmd_reports_fewer_gpus(
    slurm: dict[str, str], tmp_path: Path
) -> None:
    root = Path(slurm["GPUAUDIT_TEST_SLURM_ROOT"])
    env = {**os.environ, **slurm}
    (root / "gres.conf").write_text(_gres_conf(root, 1))  # 2 device files for 8 configured
    stop_daemon(root / "run" / "slurmd.pid")
    subprocess.run(
        ["slurmd", "-f", slurm["SLURM_CONF"], "-N", NODE], env=env, check=True, timeout=60
    )
    wait_for(
        lambda: "reported lower" in _scontrol(env, "show", "node", "-o", NODE).stdout,
        "slurmctld to drain the node",
    )
    snap, by_rule, found = _audit(slurm, tmp_path)
    assert snap.slurm is not None and snap.slurm.node is not None
    node = snap.slurm.node
    assert "DRAIN" in node.state
    assert node.reason == "gres/gpu count reported lower than configured (2 < 8)"
    assert found["GA913"][0].severity.value == "high"
    assert by_rule["GA914"] is Outcome.FAIL
    assert found["GA914"][0].evidence.actual["slurmd_reports"] == 2
    assert found["GA914"][0].evidence.expected == 8
