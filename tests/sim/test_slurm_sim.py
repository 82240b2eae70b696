"""The demo fleet's Slurm view: simulated scontrol and slurmd answering from real captures."""

from __future__ import annotations

from pathlib import Path

from simhelpers import collect, run_on

from gpuaudit.assemble.build import build_snapshot
from gpuaudit.rules import evaluate
from gpuaudit.sim.host import materialize


def test_the_demo_host_with_a_lost_gpu_is_a_slurm_node_configured_for_eight(
    tmp_path: Path,
) -> None:
    host = materialize("a100-hgx-05", "a100-hgx-05", tmp_path)
    snap = build_snapshot("a100-hgx-05", collect(host))
    view = snap.slurm
    assert view is not None and view.node is not None
    assert view.node.name == "a100-hgx-05"
    assert view.node.state == "IDLE"
    assert [(g.type, g.count) for g in view.node.gres] == [("a100", 8)]
    assert view.node.reason is None
    assert view.node.fields["NodeHostName"] == "a100-hgx-05"
    assert view.gres_conf is not None and view.gres_conf.path == "/etc/slurm/gres.conf"
    assert [line.type for line in view.gres_conf.lines] == ["a100"] * 8
    assert view.slurmd_gres is not None and len(view.slurmd_gres) == 8
    assert view.slurmd_gres[5].file == "/dev/nvidia5"
    assert view.slurmd_hardware is not None
    assert view.slurmd_hardware.node_name == "a100-hgx-05"
    assert len(snap.gpus) == 7
    rules = {f.rule for f in evaluate([snap])}
    assert {"GA911", "GA916"} <= rules


def test_the_driverless_demo_host_was_drained_by_slurmctld(tmp_path: Path) -> None:
    host = materialize("v100-02", "v100-02", tmp_path)
    snap = build_snapshot("v100-02", collect(host))
    assert snap.slurm is not None and snap.slurm.node is not None
    assert snap.slurm.node.state == "IDLE+DRAIN"
    assert snap.slurm.node.reason_user == "slurm"
    findings = [f for f in evaluate([snap]) if f.rule == "GA913"]
    assert findings and "(0 < 2)" in findings[0].message


def test_a_host_without_slurm_in_its_profile_has_no_slurm_tools(tmp_path: Path) -> None:
    host = materialize("t4-01", "t4-01", tmp_path)
    assert run_on(host, "sh", "-c", "command -v scontrol || command -v slurmd").returncode != 0
    snap = build_snapshot("t4-01", collect(host))
    assert snap.slurm is None
    assert not any(name.startswith("slurm") for name in snap.sections)


def test_simulated_scontrol_names_only_its_own_node(tmp_path: Path) -> None:
    host = materialize("a100-hgx-05", "a100-hgx-05", tmp_path)
    other = run_on(host, "scontrol", "show", "node", "-o", "gpu-99")
    assert other.returncode == 1 and other.stderr.strip() == "Node gpu-99 not found"
    ping = run_on(host, "scontrol", "ping")
    assert ping.stdout.strip() == "Slurmctld(primary) at a100-hgx-05 is UP"
    own = run_on(host, "scontrol", "show", "node", "-o", "a100-hgx-05")
    assert own.returncode == 0 and len(own.stdout.splitlines()) == 1
