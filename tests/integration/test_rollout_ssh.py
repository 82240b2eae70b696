"""``gpuaudit upgrade`` over real SSH: pyinfra's @ssh connector, a real sshd on 127.0.0.1, three
simulated hosts (a canary and two waves) each behind a key whose forced command runs what it is
sent inside that host's isolated root (gpuaudit.sim.sshgate), and a port per host that refuses
connections while the host reboots (sshgate.PowerSwitch).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import pytest

from gpuaudit.sim.host import materialize
from gpuaudit.sim.isolation import ensure_base
from gpuaudit.sim.profiles import get_profile
from gpuaudit.sim.rehearsal import arm
from gpuaudit.sim.sshgate import PowerSwitch, gate_command
from gpuaudit.sim.state import edit_state

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sim"))
from simhelpers import machine_fingerprint

REPO = Path(__file__).resolve().parents[2]
OLD, TARGET = "515.105.01", "535.161.08"
STAGES = {"ssh-canary-01": "canary", "ssh-wave1-01": "wave1", "ssh-wave2-01": "wave2"}

pytestmark = pytest.mark.slow

# Files of this machine a driver upgrade would change if it ran here (and its package list).
WATCHED = (
    "/var/lib/dpkg/status",
    "/etc/apt/preferences.d",
    "/etc/modprobe.d",
    "/etc/sysctl.d",
)


def key_fingerprint(key: Path) -> str:
    done = subprocess.run(
        ["ssh-keygen", "-l", "-f", f"{key}.pub"], capture_output=True, text=True, check=True
    )
    return done.stdout.split()[1]


def test_a_rollout_over_real_ssh_upgrades_three_hosts_and_rides_out_a_reboot(
    tmp_path: Path, start_sshd, ssh_keygen
) -> None:
    sims = tmp_path / "sim"
    ensure_base(sims)
    home = tmp_path / "home"  # the login's HOME: empty, no rc files
    home.mkdir()
    keys_dir = tmp_path / "keys"
    keys_dir.mkdir()
    hosts, keys = {}, {}
    for name in STAGES:
        profile = {**get_profile("t4-01"), "repository": [TARGET]}
        if name == "ssh-canary-01":  # a process holds the GPU: the reload is refused, it reboots
            profile["gpus"] = {0: {"processes": [{"pid": 4242, "name": "python3"}]}}
        hosts[name] = materialize(name, profile, sims)
        with edit_state(hosts[name].state_file) as state:
            arm(state, None, 1.0)  # a reboot keeps the host down for a second
        keys[name] = ssh_keygen(keys_dir / name)
    boot_before = hosts["ssh-canary-01"].state().get("boot_id")

    sshd = start_sshd(
        {keys[name]: {"HOME": str(home)} for name in STAGES},
        {keys[name]: gate_command(sims, name) for name in STAGES},
    )
    machine_before = machine_fingerprint(WATCHED, dpkg=True)
    with ExitStack() as stack:
        switches = {
            name: stack.enter_context(PowerSwitch(hosts[name].state_file, sshd.port))
            for name in STAGES
        }
        known = tmp_path / "known_hosts"
        inventory_hosts = [
            (
                name,
                {
                    "ssh_hostname": "127.0.0.1",
                    "ssh_port": switches[name].port,
                    "ssh_user": sshd.user,
                    "ssh_key": str(keys[name]),
                    "ssh_known_hosts_file": str(known),
                    "ssh_allow_agent": False,
                    "ssh_look_for_keys": False,
                    "rollout_stage": stage,
                    "expected_gpu_count": 1,
                    "gpu_model": "Tesla T4",
                    "gpuaudit_reboot_delay": 0.5,
                    "gpuaudit_reboot_interval": 0.3,
                    "gpuaudit_reboot_timeout": 120,
                },
            )
            for name, stage in STAGES.items()
        ]
        inventory = tmp_path / "inventory.py"
        inventory.write_text(f"gpu_hosts = {inventory_hosts!r}\n")
        policy = tmp_path / "policy.yaml"
        policy.write_text(
            "version: 1\nupgrade:\n  stages: [canary, wave1, wave2]\n  max_parallel: 1\n"
            "  max_unavailable: 1\n  reboot: auto\n"
            "  gate:\n    command: test -s /etc/os-release\n"
        )
        env = {k: v for k, v in os.environ.items() if k not in ("GPUAUDIT_POLICY",)}
        env["GPUAUDIT_SIM_DIR"] = str(tmp_path / "unused-sim")  # no @sim host in this run
        done = subprocess.run(
            [sys.executable, "-m", "gpuaudit.cli", "upgrade", str(inventory), "--to", TARGET,
             "--policy", str(policy), "--reports-dir", str(tmp_path / "reports"),
             "--rollout-id", "over-ssh"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        down_polls = switches["ssh-canary-01"].down_polls
    output = done.stdout + done.stderr
    assert done.returncode == 0, (
        output[-6000:] + "\nsshd's log ends:\n" + sshd.log.read_text()[-3000:]
    )

    rollout = tmp_path / "reports/upgrades/over-ssh"
    document = json.loads((rollout / "rollout.json").read_text())
    assert document["status"] == "completed"
    by_name = {h["name"]: h for h in document["hosts"]}
    outcomes = {n: (h["outcome"], h["before"], h["after"]) for n, h in by_name.items()}
    assert outcomes == dict.fromkeys(STAGES, ("upgraded", OLD, TARGET))
    for name, host in hosts.items():
        state = host.state()
        assert state["nvidia"]["driver"]["loaded"] == TARGET, name
        pin = host.upper("/etc/apt/preferences.d/gpuaudit-nvidia-driver")
        assert f"Pin: version {TARGET}*" in pin.read_text(), name

    # The canary's reload was refused and it rebooted: its port refused connections meanwhile
    # and it came back in a new boot.
    canary_steps = [(e["step"], e["status"]) for e in by_name["ssh-canary-01"]["events"]]
    assert ("reboot", "done") in canary_steps, canary_steps
    assert down_polls > 0
    assert hosts["ssh-canary-01"].state().get("boot_id") != boot_before
    for wave in ("ssh-wave1-01", "ssh-wave2-01"):
        assert "reboot" not in {e["step"] for e in by_name[wave]["events"]}

    # Every host was reached through sshd with its own key, many times (audits and steps).
    log = sshd.log.read_text()
    for name in STAGES:
        assert log.count(key_fingerprint(keys[name])) >= 5, name
    assert "subsystem request for sftp" in log or "request exec" in log
    # Nothing of this machine changed.
    assert machine_fingerprint(WATCHED, dpkg=True) == machine_before
