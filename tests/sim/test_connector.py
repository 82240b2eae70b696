"""pyinfra itself, through the @sim connector: connect, facts, the unreachable host."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all, disconnect_all
from pyinfra.api.facts import get_facts
from pyinfra.facts.server import Command, Hostname

from gpuaudit.sim.profiles import DEMO_FLEET, PROFILES, expected_gpu_count

INVENTORY = Path(__file__).resolve().parents[2] / "inventory" / "demo.py"


def _state(hosts: list) -> State:
    inventory = Inventory((hosts, {}))
    return State(inventory, Config())


def test_connect_facts_and_unreachable_host(sim_dir: Path) -> None:
    state = _state(
        [
            "@sim/t4-01",
            "@sim/a10g-02",  # unreachable
            ("@sim/gpu-node-7", {"sim_profile": "a100-hgx-05"}),
        ]
    )
    connect_all(state)
    names = {host.name for host in state.failed_hosts}
    assert names == {"@sim/a10g-02"}
    assert {host.name for host in state.activated_hosts} == {"@sim/t4-01", "@sim/gpu-node-7"}

    hostnames = {host.name: value for host, value in get_facts(state, Hostname).items()}
    assert hostnames == {"@sim/t4-01": "t4-01", "@sim/gpu-node-7": "gpu-node-7"}

    listed = {
        host.name: value
        for host, value in get_facts(state, Command, args=("nvidia-smi -L || true",)).items()
    }
    assert listed["@sim/t4-01"].startswith("GPU 0: Tesla T4 (UUID: GPU-")
    assert listed["@sim/gpu-node-7"].count("NVIDIA A100-SXM4-80GB") == 7  # GPU 5 is lost
    assert (sim_dir / "gpu-node-7" / "root/var/lib/gpuaudit-sim/state.json").exists()
    disconnect_all(state)


def test_sudo_is_dropped_and_files_stay_in_the_hosts_root(sim_dir: Path, tmp_path: Path) -> None:
    state = _state(["@sim/t4-01"])
    connect_all(state)
    host = state.inventory.get_host("@sim/t4-01")
    ok, output = host.run_shell_command("id -u >/dev/null && uname -n", _sudo=True)
    assert ok and output.stdout == "t4-01"
    source = tmp_path / "drop-in.conf"
    source.write_text("net.core.rmem_max = 134217728\n")
    assert host.put_file(str(source), "/etc/sysctl.d/99-gpuaudit.conf")
    landed = sim_dir / "t4-01" / "root" / "etc" / "sysctl.d" / "99-gpuaudit.conf"
    assert landed.read_text() == source.read_text()


def test_unknown_profile_fails_the_host_not_the_run(sim_dir: Path) -> None:
    state = _state(["@sim/t4-01", ("@sim/typo", {"sim_profile": "no-such-profile"})])
    connect_all(state)
    assert {host.name for host in state.failed_hosts} == {"@sim/typo"}


# Loaded in a child process, as the pyinfra CLI loads it: importing pyinfra_cli monkey-patches
# the whole interpreter for gevent, which must not happen inside the test run.
_LOAD_INVENTORY = """
import json, sys
from pyinfra.api import State
from pyinfra.context import ctx_state
from pyinfra_cli.inventory import make_inventory
with ctx_state.use(State()):
    inventory = make_inventory(sys.argv[1])
json.dump({
    "hosts": {
        host.name: {
            "sim_profile": host.data.get("sim_profile"),
            "expected_gpu_count": host.data.get("expected_gpu_count"),
            "gpu_model": host.data.get("gpu_model"),
            "groups": sorted(host.groups),
        }
        for host in inventory
    },
    "demo_group": len(inventory.get_group("demo")),
}, sys.stdout)
"""


def test_demo_inventory_matches_the_profiles() -> None:
    loaded = json.loads(
        subprocess.run(
            [sys.executable, "-c", _LOAD_INVENTORY, str(INVENTORY)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    hosts = loaded["hosts"]
    assert set(hosts) == {f"@sim/{name}" for name in DEMO_FLEET}
    assert loaded["demo_group"] == len(DEMO_FLEET)
    for name in DEMO_FLEET:
        host = hosts[f"@sim/{name}"]
        profile = PROFILES[host["sim_profile"] or name]
        assert host["expected_gpu_count"] == expected_gpu_count(profile), name
        assert host["gpu_model"] == profile["gpu_model"], name
        assert "@sim" in host["groups"]
        for group in profile["groups"]:
            assert group in host["groups"], (name, group)


@pytest.mark.parametrize("name", ["@sim", "@sim/"])
def test_a_simulated_host_needs_a_name(name: str) -> None:
    from pyinfra.api.exceptions import InventoryError

    with pytest.raises(InventoryError):
        Inventory(([name], {}))
