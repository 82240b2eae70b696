"""The driver-upgrade steps (deploys/driver_upgrade.py) rehearsed on simulated hosts: real
pyinfra, one step per run as ``gpuaudit upgrade`` runs them, against a host whose repository
offers a newer driver; the reload refused while a process runs and the reboot after it; the
rollback; and each upgrade fault the inventory can inject."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all
from pyinfra.api.exceptions import ConnectError
from simhelpers import collect, run_on

from gpuaudit.assemble.build import build_snapshot
from gpuaudit.sim.host import SimHost, host_paths, materialize
from gpuaudit.sim.profiles import get_profile
from gpuaudit.sim.state import edit_state

REPO = Path(__file__).resolve().parents[2]
OLD, NEW = "515.105.01", "550.127.05"
NAME = "gpu-up-01"
UPGRADE = ("stop_services", "unpin", "install", "pin", "reload", "start_services")
# A reboot keeps the host down for a second; the step looks again every fifth of one.
FAST_REBOOT = {
    "sim_reboot_seconds": 1,
    "gpuaudit_reboot_delay": 0.2,
    "gpuaudit_reboot_interval": 0.2,
}


class Rehearsal:
    """One simulated host in an inventory file of its own, and the steps run against it."""

    def __init__(self, tmp_path: Path, profile: dict[str, Any], **data: Any) -> None:
        self.sim_dir = tmp_path / "sim"
        self.inventory = tmp_path / "inventory.py"
        self.profile = profile
        self.write_inventory(**data)

    def write_inventory(self, **data: Any) -> None:
        host_data = {"sim_profile": self.profile, **FAST_REBOOT, **data}
        self.inventory.write_text(f"hosts = [('@sim/{NAME}', {host_data!r})]\n")

    def step(self, step: str, **data: str) -> subprocess.CompletedProcess[str]:
        options = {"gpuaudit_step": step, "gpuaudit_target": NEW, **data}
        argv = [sys.executable, "-m", "pyinfra", "-y", "-v", "--limit", f"@sim/{NAME}"]
        argv += [str(self.inventory), "deploys/driver_upgrade.py"]
        for key, value in options.items():
            argv += ["--data", f"{key}={value}"]
        return subprocess.run(
            argv,
            cwd=REPO,
            env={**os.environ, "GPUAUDIT_SIM_DIR": str(self.sim_dir)},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def ok(self, step: str, **data: str) -> str:
        run = self.step(step, **data)
        assert run.returncode == 0, f"{step}:\n{run.stdout}{run.stderr}"
        return run.stdout + run.stderr

    @property
    def host(self) -> SimHost:
        return host_paths(NAME, self.sim_dir)

    def run(self, *command: str) -> subprocess.CompletedProcess[str]:
        return run_on(self.host, *command)


def t4(**changes: Any) -> dict[str, Any]:
    return {**get_profile("t4-01"), "repository": [NEW], **changes}


def loaded_driver(rehearsal: Rehearsal) -> str:
    done = rehearsal.run("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader")
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip()


def pins(rehearsal: Rehearsal, package: str) -> dict[str, int]:
    """Version → priority, from the host's ``apt-cache policy``."""
    text = rehearsal.run("apt-cache", "policy", package).stdout
    table = text.partition("Version table:")[2]
    return {v: int(p) for v, p in re.findall(r"^ (?:\*\*\*| {3}) (\S+) (\d+)$", table, re.M)}


def no_change(output: str, operation: str) -> bool:
    row = re.search(rf"^\s*{re.escape(operation)}\s{{2,}}1\s+-\s+-\s+1\s*$", output, re.M)
    return row is not None


def test_steps_upgrade_the_host_and_rollback_returns_it(tmp_path: Path) -> None:
    rehearsal = Rehearsal(tmp_path, t4())
    for step in UPGRADE:
        rehearsal.ok(step)

    assert loaded_driver(rehearsal) == NEW
    snapshot = build_snapshot(NAME, collect(rehearsal.host))
    assert (snapshot.driver_version, snapshot.driver_version_proc) == (NEW, NEW)
    assert pins(rehearsal, "nvidia-driver-550") == {f"{NEW}-0ubuntu1": 1001}
    state = rehearsal.host.state()
    assert state["holds"] == sorted(p["name"] for p in state["packages"] if "-550" in p["name"])
    assert not any("-515" in p["name"] for p in state["packages"])  # the old branch went
    assert {unit: s["active"] for unit, s in state["services"].items()} == {
        "dcgm-exporter": "active",
        "nvidia-dcgm": "active",
        "nvidia-persistenced": "active",
    }
    # A step the journal replays changes nothing.
    assert no_change(rehearsal.ok("install"), f"Install NVIDIA driver {NEW}")
    assert no_change(rehearsal.ok("reload"), "Load the NVIDIA driver")

    rehearsal.ok("rollback", gpuaudit_rollback_version=OLD)
    assert loaded_driver(rehearsal) == OLD
    assert pins(rehearsal, "nvidia-driver-515") == {f"{OLD}-0ubuntu1": 1001}
    state = rehearsal.host.state()
    assert all(p["name"].endswith("-515") for p in state["packages"] if "nvidia-" in p["name"])
    assert all(s["active"] == "active" for s in state["services"].values())


def test_reload_refused_while_a_process_runs_then_the_reboot_loads_the_driver(
    tmp_path: Path,
) -> None:
    busy = t4(gpus={0: {"processes": [{"pid": 4242, "name": "python3"}]}})
    rehearsal = Rehearsal(tmp_path, busy)
    for step in UPGRADE[:4]:
        rehearsal.ok(step)
    refused = rehearsal.step("reload")
    assert refused.returncode != 0
    assert "modprobe: FATAL: Module nvidia_uvm is in use." in refused.stdout + refused.stderr
    assert rehearsal.host.state()["nvidia"]["driver"]["loaded"] == OLD

    output = rehearsal.ok("reboot")
    # Down for its reboot time, then back in a new boot.
    assert "not back yet: Could not connect (Connection refused)" in output, output
    assert "back after the reboot" in output
    assert loaded_driver(rehearsal) == NEW
    assert rehearsal.host.state()["nvidia"]["gpus"][0]["processes"] == []
    # The reboot started the enabled services already.
    assert no_change(rehearsal.ok("start_services"), "Start the GPU services")


def test_a_rebooting_host_is_unreachable_until_its_reboot_time_passed(sim_dir: Path) -> None:
    inventory = Inventory(([(f"@sim/{NAME}", {"sim_profile": t4(), "sim_reboot_seconds": 60})], {}))
    state = State(inventory, Config())
    connect_all(state)
    host = state.inventory.get_host(f"@sim/{NAME}")
    boot = host.run_shell_command("cat /proc/sys/kernel/random/boot_id")[1].stdout
    ok, _ = host.run_shell_command("reboot")
    assert ok
    ok, output = host.run_shell_command("true")
    assert not ok and output.stderr.startswith("Connection refused (simulated host is rebooting")
    host.disconnect()
    with pytest.raises(
        ConnectError, match=r"Connection refused.*is rebooting \(back in \d+\.\d s\)"
    ):
        host.connect(raise_exceptions=True)

    simulated = host_paths(NAME, sim_dir)
    with edit_state(simulated.state_file) as host_state:
        host_state["down_until"] = time.time() - 1  # the reboot time has passed
    host.connect(raise_exceptions=True)
    ok, output = host.run_shell_command("cat /proc/sys/kernel/random/boot_id")
    assert ok and output.stdout != boot


def test_install_fails_in_dpkg_and_rollback_keeps_the_old_driver(tmp_path: Path) -> None:
    rehearsal = Rehearsal(tmp_path, t4(), sim_upgrade_faults={"install_fails": {}})
    failed = rehearsal.step("install")
    assert failed.returncode != 0
    output = failed.stdout + failed.stderr
    assert "dpkg: error processing package nvidia-dkms-550 (--configure):" in output
    assert (
        " installed nvidia-dkms-550 package post-installation script subprocess returned error "
        "exit status 10" in output
    )
    assert rehearsal.host.state()["nvidia"]["driver"]["installed"] == OLD

    rehearsal.ok("rollback", gpuaudit_rollback_version=OLD)
    assert loaded_driver(rehearsal) == OLD
    assert pins(rehearsal, "nvidia-driver-515") == {f"{OLD}-0ubuntu1": 1001}


def test_rollback_of_a_host_that_was_not_pinned_leaves_it_released(tmp_path: Path) -> None:
    rehearsal = Rehearsal(tmp_path, t4(packages_held=False))
    for step in UPGRADE:
        if step == "unpin":
            assert rehearsal.host.state()["holds"] == []
        rehearsal.ok(step)
    assert pins(rehearsal, "nvidia-driver-550") == {f"{NEW}-0ubuntu1": 1001}

    rehearsal.ok("rollback", gpuaudit_rollback_version=OLD, gpuaudit_rollback_pin="unpinned")
    assert loaded_driver(rehearsal) == OLD
    # Back as it was before the rollout: the old driver, no hold and no apt pin.
    assert rehearsal.host.state()["holds"] == []
    assert set(pins(rehearsal, "nvidia-driver-515").values()) == {500}
    assert not rehearsal.host.upper("/etc/apt/preferences.d/gpuaudit-nvidia-driver").exists()

    refused = rehearsal.step("rollback", gpuaudit_rollback_version=OLD, gpuaudit_rollback_pin="x")
    assert refused.returncode != 0
    assert "gpuaudit_rollback_pin is 'x'" in refused.stdout + refused.stderr


@pytest.mark.parametrize("xid", [119, 79])
def test_xid_after_the_new_driver_loads(tmp_path: Path, xid: int) -> None:
    # No daemon holds the GPU, so the new driver loads without stopping anything.
    quiet = t4(dcgm=False, services={"nvidia-persistenced": None})
    rehearsal = Rehearsal(tmp_path, quiet, sim_upgrade_faults={"xid_after_upgrade": {"xid": xid}})
    rehearsal.ok("install")
    assert "Xid" not in rehearsal.run("dmesg").stdout
    rehearsal.ok("reload")

    bus = rehearsal.host.state()["nvidia"]["gpus"][0]["bus_id"]  # 00000000:65:00.0 → 0000:65:00
    pci = f"PCI:{bus[4:].rsplit('.', 1)[0].lower()}"
    assert f"NVRM: Xid ({pci}): {xid}, " in rehearsal.run("dmesg").stdout
    snapshot = build_snapshot(NAME, collect(rehearsal.host))
    assert [event.code for event in snapshot.xid_events] == [xid]
    assert snapshot.driver_version_proc == NEW
    if xid == 79:  # fallen off the bus: the driver no longer lists the GPU
        assert snapshot.gpus == ()


def test_gpu_missing_after_the_next_reboot(tmp_path: Path) -> None:
    profile = {**get_profile("v100-01"), "repository": ["535.161.08"]}
    faults = {"gpu_missing_after_reboot": {"gpu": 1}}
    rehearsal = Rehearsal(tmp_path, profile, sim_upgrade_faults=faults)
    materialize(NAME, profile, rehearsal.sim_dir)
    assert rehearsal.run("nvidia-smi", "-L").stdout.count("Tesla V100") == 2
    rehearsal.ok("reboot")
    listed = rehearsal.run("nvidia-smi", "-L")
    assert listed.stdout.count("Tesla V100") == 1 and "GPU 0:" in listed.stdout
    snapshot = build_snapshot(NAME, collect(rehearsal.host))
    assert (len(snapshot.gpus), snapshot.attached_gpus) == (1, 2)
    rehearsal.ok("reboot")  # spent: the reboot after that brings the GPU back
    assert rehearsal.run("nvidia-smi", "-L").stdout.count("Tesla V100") == 2


def test_never_comes_back_until_the_fault_is_removed(tmp_path: Path) -> None:
    faults = {"never_comes_back": {}}
    rehearsal = Rehearsal(tmp_path, t4(), sim_upgrade_faults=faults, gpuaudit_reboot_timeout=1)
    lost = rehearsal.step("reboot")
    assert lost.returncode != 0
    assert "did not come back within 1 s of the reboot" in lost.stdout + lost.stderr
    later = rehearsal.step("start_services")
    assert later.returncode != 0
    assert "did not come back after its last reboot" in later.stdout + later.stderr

    rehearsal.write_inventory()  # the host was powered on again
    rehearsal.ok("start_services")
    events = json.loads(rehearsal.host.state_file.read_text())["events"]
    assert "powered on again (never_comes_back removed)" in events


def test_unknown_step_or_version_that_is_not_a_string_fails_with_the_reason(
    tmp_path: Path,
) -> None:
    rehearsal = Rehearsal(tmp_path, t4())
    unknown = rehearsal.step("upgrade_everything")
    assert unknown.returncode != 0
    assert "unknown gpuaudit_step 'upgrade_everything'; the steps are: stop_services" in (
        unknown.stdout + unknown.stderr
    )
    number = rehearsal.step("pin", gpuaudit_target="550.40")
    assert number.returncode != 0
    assert "gpuaudit_target was read as float 550.4, not a version" in number.stdout + number.stderr
    quoted = rehearsal.step("install", gpuaudit_target='"550.40"')
    assert "cannot install driver 550.40: the host's apt repositories offer no 550.40" in (
        quoted.stdout + quoted.stderr
    )
