"""The simulated tools a driver-upgrade rehearsal drives: modprobe / rmmod / modinfo, the reboot
paths (systemctl reboot, systemd-run) with their down time, apt's branch change and downgrade
refusal, and the inventory's upgrade faults as the connector takes them."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all
from simhelpers import run_on

from gpuaudit.sim.host import SimHost
from gpuaudit.sim.profiles import get_profile
from gpuaudit.sim.rehearsal import FaultError, arm, down_reason
from gpuaudit.sim.state import edit_state

NEW = "550.127.05"
UNLOAD = ("modprobe", "-r", "nvidia_uvm", "nvidia_modeset", "nvidia")


def _t4(make_host: Callable[..., SimHost], **changes: Any) -> SimHost:
    profile = {**get_profile("t4-01"), "repository": [NEW], **changes}
    return make_host("kmod-host", profile)


def _modules(host: SimHost) -> list[str]:
    text = (host.root_dir / "proc/modules").read_text()
    return [line.split()[0] for line in text.splitlines()]


def test_modprobe_refuses_while_a_daemon_holds_the_gpus(make_host: Callable[..., SimHost]) -> None:
    host = _t4(make_host)
    refused = run_on(host, *UNLOAD)
    assert refused.returncode == 1
    assert refused.stderr == "modprobe: FATAL: Module nvidia is in use.\n"
    assert _modules(host) == ["nvidia_modeset", "nvidia_uvm", "nvidia"]  # nothing unloaded
    rmmod = run_on(host, "rmmod", "nvidia_uvm", "nvidia_modeset", "nvidia")
    assert rmmod.returncode == 1 and rmmod.stderr == "rmmod: ERROR: Module nvidia is in use\n"

    assert run_on(host, "systemctl", "stop", "nvidia-persistenced", "nvidia-dcgm").returncode == 0
    done = run_on(host, *UNLOAD)
    assert done.returncode == 0, done.stderr
    assert _modules(host) == []
    assert not (host.root_dir / "proc/driver/nvidia/version").exists()
    assert run_on(host, "nvidia-smi", "-L").returncode == 9
    again = run_on(host, "modprobe", "-r", "nvidia")
    assert again.returncode == 1
    assert again.stderr == "modprobe: FATAL: Module nvidia is not in kernel.\n"


def test_modprobe_loads_the_installed_driver(make_host: Callable[..., SimHost]) -> None:
    host = _t4(make_host, services={"nvidia-persistenced": None}, dcgm=False)
    install = run_on(
        host, "apt-get", "install", "-y", "--allow-change-held-packages",
        f"nvidia-driver-550={NEW}-0ubuntu1", f"nvidia-dkms-550={NEW}-0ubuntu1",
    )  # fmt: skip
    assert install.returncode == 0, install.stderr
    assert "Remv nvidia-driver-515 [515.105.01-0ubuntu1]" in install.stdout
    assert run_on(host, "modinfo", "-F", "version", "nvidia").stdout == f"{NEW}\n"
    assert run_on(host, "nvidia-smi", "-L").returncode == 18  # version mismatch until loaded

    assert run_on(host, "modprobe", "nvidia").returncode == 0  # loaded already: nothing to do
    assert run_on(host, *UNLOAD).returncode == 0
    assert run_on(host, "modprobe", "-a", "nvidia", "nvidia_modeset", "nvidia_uvm").returncode == 0
    assert _modules(host) == ["nvidia_modeset", "nvidia_uvm", "nvidia"]
    assert NEW in (host.root_dir / "proc/driver/nvidia/version").read_text()
    assert run_on(host, "nvidia-smi", "-L").returncode == 0


def test_a_compute_process_and_nvidia_drm_hold_their_modules(
    make_host: Callable[..., SimHost],
) -> None:
    busy = _t4(
        make_host,
        services={"nvidia-persistenced": None},
        dcgm=False,
        gpus={0: {"processes": [{"pid": 7, "name": "python3"}]}},
    )
    refused = run_on(busy, *UNLOAD)
    assert refused.stderr.splitlines() == [
        "modprobe: FATAL: Module nvidia_uvm is in use.",
        "modprobe: FATAL: Module nvidia is in use.",
    ]
    drm = make_host(
        "drm-host",
        {**get_profile("t4-01"), "dcgm": False, "services": {"nvidia-persistenced": None},
         "faults": {"nvidia_drm_loaded": {}}},
    )  # fmt: skip
    held = run_on(drm, "modprobe", "-r", "nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia")
    assert "modprobe: FATAL: Module nvidia_drm is in use." in held.stderr
    assert "nvidia_drm" in _modules(drm)


def test_unsimulated_kmod_uses_fail_loudly(make_host: Callable[..., SimHost]) -> None:
    host = _t4(make_host, services={"nvidia-persistenced": None}, dcgm=False)
    part = run_on(host, "modprobe", "-r", "nvidia_uvm")
    assert part.returncode == 1 and "not simulated" in part.stderr
    assert "nvidia_uvm" in _modules(host)
    other = run_on(host, "modprobe", "br_netfilter")
    assert other.returncode == 1 and "loading br_netfilter is not simulated" in other.stderr
    assert run_on(host, "modinfo", "-F", "version", "ext4").returncode == 1
    dkms_failed = make_host("v100-02")  # DKMS did not build: no module for the running kernel
    missing = run_on(dkms_failed, "modprobe", "nvidia")
    assert missing.returncode == 1
    assert missing.stderr == (
        "modprobe: FATAL: Module nvidia not found in directory /lib/modules/5.4.0-187-generic\n"
    )


def test_every_reboot_path_starts_the_down_time(make_host: Callable[..., SimHost]) -> None:
    host = _t4(make_host)
    ids = set()
    for command in (
        ["reboot"],
        ["systemctl", "reboot"],
        ["shutdown", "-r", "now"],
        [
            "systemd-run",
            "--on-active=1",
            "--timer-property=AccuracySec=100ms",
            "systemctl",
            "reboot",
        ],
    ):
        before = time.time()
        done = run_on(host, *command)
        assert done.returncode == 0, (command, done.stderr)
        state = host.state()
        assert state["down_until"] >= before + 3  # the default reboot time
        assert down_reason(state) is not None
        assert down_reason(state, now=state["down_until"]) is None
        ids.add((host.root_dir / "proc/sys/kernel/random/boot_id").read_text())
    assert len(ids) == 4
    other = run_on(host, "systemd-run", "--on-active=5", "touch", "/tmp/x")
    assert other.returncode == 1 and "not simulated" in other.stderr


def test_apt_refuses_a_downgrade_under_y_without_allow_downgrades(
    make_host: Callable[..., SimHost],
) -> None:
    host = make_host("apt-down", {**get_profile("t4-02"), "repository": ["515.105.00"]})
    down = ["apt-get", "install", "-y", "--allow-change-held-packages"]
    refused = run_on(host, *down, "nvidia-utils-515=515.105.00-0ubuntu1")
    assert refused.returncode == 100
    assert "E: Packages were downgraded and -y was used without --allow-downgrades." in (
        refused.stderr
    )
    done = run_on(host, *down, "--allow-downgrades", "nvidia-utils-515=515.105.00-0ubuntu1")
    assert done.returncode == 0, done.stderr


def test_upgrade_faults_from_the_inventory(make_host: Callable[..., SimHost]) -> None:
    state = _t4(make_host).state()
    assert arm(state, {"install_fails": {}}, 1.5)
    assert state["upgrade_faults"] == {"install_fails": {}} and state["reboot_seconds"] == 1.5
    assert not arm(state, {"install_fails": {}}, 1.5)  # the same again: nothing changes
    with pytest.raises(FaultError, match="unknown simulated upgrade fault 'bogus'"):
        arm(state, {"bogus": {}}, None)
    with pytest.raises(FaultError, match="has no GPU 3"):
        arm(state, {"gpu_missing_after_reboot": {"gpu": 3}}, None)
    with pytest.raises(FaultError, match="xid 13"):
        arm(state, {"xid_after_upgrade": {"xid": 13}}, None)


def test_connector_refuses_unknown_faults_and_copies_known_ones(
    sim_dir: Any, make_host: Callable[..., SimHost]
) -> None:
    profile = {**get_profile("t4-01"), "repository": [NEW]}
    inventory = Inventory(
        (
            [
                (
                    "@sim/ok",
                    {"sim_profile": profile, "sim_upgrade_faults": {"never_comes_back": {}}},
                ),
                ("@sim/typo", {"sim_profile": profile, "sim_upgrade_faults": {"nevr": {}}}),
            ],
            {},
        )
    )
    state = State(inventory, Config())
    connect_all(state)
    assert {host.name for host in state.failed_hosts} == {"@sim/typo"}
    ok = make_host("ok", profile)
    assert ok.state()["upgrade_faults"] == {"never_comes_back": {}}
    with edit_state(ok.state_file) as host_state:
        assert "stays_down" not in host_state  # waits for the next reboot
