"""Profiles and the pieces that turn them into hosts (no tool processes here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuaudit.sim.build import ProfileError, build_state
from gpuaudit.sim.fixtures import read_fixture, render_topology, rewrite_kernel_lines
from gpuaudit.sim.host import materialize
from gpuaudit.sim.profiles import DEMO_FLEET, PROFILES, get_profile
from gpuaudit.sim.state import SCHEMA_VERSION

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_every_profile_builds_a_json_state(name: str) -> None:
    state = build_state(name, get_profile(name))
    assert state["schema"] == SCHEMA_VERSION
    assert json.loads(json.dumps(state)) == state


def test_demo_fleet_covers_models_and_faults() -> None:
    assert len(DEMO_FLEET) >= 9
    models = {PROFILES[name]["gpu_model"] for name in DEMO_FLEET}
    assert len(models) >= 8
    faults = {fault for name in DEMO_FLEET for fault in PROFILES[name].get("faults", {})}
    assert {"driver_not_loaded", "unreachable", "nvidia_smi_missing", "xid_storm"} <= faults


def test_packaged_data_are_byte_copies_of_the_fixtures() -> None:
    data = Path(__file__).resolve().parents[2] / "src" / "gpuaudit" / "sim" / "data"
    # The demo's Kubernetes view is derived from the profiles, not copied (tests/sim hold it
    # to what sim/kubernetes.py makes); every other packaged file is a capture's copy.
    derived = {"kubernetes-nodes.json"}
    copies = [p for p in data.rglob("*") if p.is_file() and p.name not in ("README.md", *derived)]
    assert copies
    for copy in copies:
        original = FIXTURES / copy.relative_to(data)
        if not original.exists():  # a capture kept in a folder of its kind (slurm/gres-conf/)
            (original,) = FIXTURES.glob(f"{copy.parent.name}/*/{copy.name}")
        assert copy.read_bytes() == original.read_bytes(), copy.name
        assert copy.name in (data / "README.md").read_text()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"gpu_cuont": 8}, "unknown profile key"),
        ({"faults": {"gpu_on_fire": {}}}, "unknown fault"),
        ({"gpus": {0: {"persistance_mode": "Enabled"}}}, "unknown GPU 0 key"),
        ({"gpu_count": 2}, "bus ids"),
        ({"gpus": {0: {"mig": {"current": "Enabled"}}}}, "does not support MIG"),
    ],
)
def test_bad_profiles_are_refused(change: dict, message: str) -> None:
    profile = get_profile("t4-01")
    profile.update(change)
    with pytest.raises(ProfileError, match=message):
        build_state("bad", profile)


def test_mig_layout_that_does_not_fit_is_refused() -> None:
    profile = get_profile("a100-hgx-04")
    profile["gpus"][0] = {"mig": {"current": "Enabled", "instances": ["4g.40gb", "4g.40gb"]}}
    with pytest.raises(ProfileError, match="does not fit"):
        build_state("bad", profile)


def test_kernel_lines_move_to_the_target_gpu_and_xid_code() -> None:
    lines = read_fixture(
        "kernel-log", "issue-chia-gigahorse-301-xid31-ce2-priv-violation-xid62-xid45-dmesg.log"
    ).splitlines()[:3]
    moved = rewrite_kernel_lines(
        lines,
        [("00000000:3B:00.0", "GPU-11111111-2222-3333-4444-555555555555")],
        {"from": 62, "to": 79, "message": "GPU has fallen off the bus."},
    )
    assert moved[0] == (
        "[14328.198496] NVRM: GPU at PCI:0000:3b:00: GPU-11111111-2222-3333-4444-555555555555"
    )
    assert moved[1].startswith("[14328.198504] NVRM: Xid (PCI:0000:3b:00): 31, pid=13332,")
    assert moved[2] == (
        "[14370.687545] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
        "GPU has fallen off the bus."
    )


def test_topology_relabels_whole_cells_only() -> None:
    text = render_topology("mleng-8x-h100-nv18-ht-cpu-affinity.txt", 8, {"NV18": "NV12"})
    assert text.count("NV12") == 56 and "NV18" not in text
    with pytest.raises(ValueError, match="shows 8 GPUs"):
        render_topology("mleng-8x-h100-nv18-ht-cpu-affinity.txt", 4)


def test_materialize_writes_root_and_shims(tmp_path: Path) -> None:
    host = materialize("node", "v100-02", tmp_path)
    assert (host.bin_dir / "nvidia-smi").read_text().startswith("#!/bin/sh\nexec ")
    assert not (host.sysbin_dir / "nvidia-smi").exists()
    assert (host.root_dir / "etc/os-release").read_text().startswith('NAME="Ubuntu"')
    assert not (host.root_dir / "proc/driver/nvidia/version").exists()  # driver not loaded
    assert not list((host.root_dir / "dev").glob("nvidia*"))
    p100 = materialize("p100", "p100-01", tmp_path)
    node = p100.root_dir / "dev" / "nvidia0"
    assert oct(node.stat().st_mode & 0o777) == "0o666"
    with pytest.raises(ValueError, match="unknown simulator profile"):
        materialize("x", "no-such-profile", tmp_path)
