"""gpuaudit.operations.mig.apply against simulated A100 and H100 hosts: its facts run their real
commands on the host, the commands it yields run in order (stopping at the first failure, as
pyinfra does), and the layout is read back with the project's parsers."""

from __future__ import annotations

import subprocess
from collections import Counter
from collections.abc import Callable
from typing import Any

from pyinfra.api import StringCommand
from pyinfra.context import ctx_host
from simhelpers import run_on

from gpuaudit.operations import mig
from gpuaudit.parsers.mig import parse_mig_instances, parse_mig_list_devices
from gpuaudit.sim.host import SimHost
from gpuaudit.sim.modules import PROC_MODULES, proc_modules
from gpuaudit.sim.profiles import get_profile

MakeHost = Callable[..., SimHost]
HALF = {"half": [{"devices": [0, 1], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}]}
ALL_1G = {"all-1g.10gb": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]}


def sh(host: SimHost, command: str) -> subprocess.CompletedProcess:
    return run_on(host, "sh", "-c", command, timeout=120)


class SimFactHost:
    """Stands in for pyinfra's host: each fact runs its own command on the simulated host."""

    def __init__(self, sim: SimHost, data: dict[str, Any]) -> None:
        self.sim, self.data, self.noops = sim, data, []
        self.name, self.groups = f"@sim/{sim.name}", []

    def get_fact(self, cls: type, *args: Any, **kwargs: Any) -> Any:
        fact = cls()
        command = fact.command(*args, **kwargs)
        text = command.get_raw_value() if isinstance(command, StringCommand) else command
        return fact.process(sh(self.sim, text).stdout.splitlines())

    def noop(self, description: str) -> None:
        self.noops.append(description)


def apply_on(sim: SimHost, configs: dict[str, Any], name: str, **kwargs: Any):
    """The operation's commands, each run until one fails; and its noop reasons."""
    # The host's /proc/modules, as its root will carry it (sim/modules.py).
    (sim.root_dir / PROC_MODULES).parent.mkdir(parents=True, exist_ok=True)
    (sim.root_dir / PROC_MODULES).write_text(proc_modules(sim.state()))
    host = SimFactHost(sim, {"mig_config_name": name, "mig_configs": configs})
    with ctx_host.use(host):
        commands = [str(c) for c in mig.apply._inner(**kwargs)]
    ran = []
    for command in commands:
        ran.append((command, sh(sim, command)))
        if ran[-1][1].returncode != 0:
            break
    return ran, host.noops


def refused_on(sim: SimHost, configs: dict[str, Any], name: str, **kwargs: Any) -> str:
    """The reason the operation refused the host: its one command failed (status 1) with the
    reason on stderr."""
    ran, noops = apply_on(sim, configs, name, **kwargs)
    assert len(ran) == 1 and noops == [], ran
    done = ran[0][1]
    assert (done.returncode, done.stdout) == (1, ""), done
    assert done.stderr.startswith("refused: MIG config "), done.stderr
    return done.stderr


def layout(sim: SimHost) -> dict[int, dict[str, int]]:
    listing = run_on(sim, "nvidia-smi", "mig", "-lgi").stdout
    found: dict[int, Counter[str]] = {}
    for gi in parse_mig_instances(listing):
        found.setdefault(gi.gpu, Counter())[gi.profile_name] += 1
    return {gpu: dict(counts) for gpu, counts in found.items()}


def mig_modes(sim: SimHost) -> list[str]:
    query = ["--query-gpu=mig.mode.current", "--format=csv,noheader"]
    return run_on(sim, "nvidia-smi", *query).stdout.split()


def test_a100_only_its_gpus_change_with_the_daemons_stopped_around(make_host: MakeHost) -> None:
    sim = make_host("a100-hgx-01")
    said = refused_on(sim, HALF, "half")
    assert "nvidia-dcgm.service, nvidia-persistenced.service" in said
    assert sim.state()["events"] == []  # refused before any change

    ran, noops = apply_on(sim, HALF, "half", stop_services=True)
    assert [done.returncode for _, done in ran] == [0] * len(ran) and noops == []
    # dcgm-exporter (which needs nvidia-dcgm) holds the GPUs too.
    # One command from stopping the daemons to starting them again, then the read-back.
    assert len(ran) == 2
    assert ran[0][0].splitlines()[2] == (
        "systemctl stop dcgm-exporter.service nvidia-dcgm.service nvidia-persistenced.service"
    )
    assert (
        "systemctl start nvidia-persistenced.service nvidia-dcgm.service "
        "dcgm-exporter.service || ga_undo=1"
    ) in ran[0][0].splitlines()
    assert layout(sim) == {0: {"3g.40gb": 2}, 1: {"3g.40gb": 2}}
    assert mig_modes(sim) == ["Enabled", "Enabled"] + ["Disabled"] * 6
    # Nothing held the GPUs any more: the driver's own reset applied the mode, none was issued.
    assert not any(event.endswith(" -r") for event in sim.state()["events"])
    for unit in ("dcgm-exporter", "nvidia-dcgm", "nvidia-persistenced"):
        assert run_on(sim, "systemctl", "is-active", unit).stdout == "active\n"

    again, noops = apply_on(sim, HALF, "half", stop_services=True)
    assert again == [] and noops == ["MIG layout half already applied on GPUs 0, 1"]
    _, noops = apply_on(sim, HALF, "half", assert_only=True)
    assert noops == ["MIG layout half already applied on GPUs 0, 1"]


def test_h100_enables_mig_without_a_reset_or_stopping_anything(make_host: MakeHost) -> None:
    sim = make_host("h100-01")
    ran, _ = apply_on(sim, ALL_1G, "all-1g.10gb")
    commands = [command for command, _ in ran]
    assert [done.returncode for _, done in ran] == [0] * len(ran)
    # Each GPU is named by the PCI bus id the fact read, never by its index.
    buses = ["19", "3B", "4C", "5D", "9B", "BB", "CB", "DB"]
    assert commands[0] == f"nvidia-smi -i {','.join(f'00000000:{b}:00.0' for b in buses)} -mig 1"
    assert not any("systemctl" in c or "-r -i" in c for c in commands)
    listed = parse_mig_list_devices(run_on(sim, "nvidia-smi", "-L").stdout)
    assert [[d.profile for d in gpu.mig_devices] for gpu in listed] == [["1g.10gb"] * 7] * 8
    assert run_on(sim, "systemctl", "is-active", "nvidia-persistenced").stdout == "active\n"
    # Hopper keeps MIG mode only while the driver is loaded: after a reboot it is off again.
    assert run_on(sim, "reboot").returncode == 0
    said = refused_on(sim, ALL_1G, "all-1g.10gb", assert_only=True)
    assert "GPU 0: MIG mode Disabled, wanted Enabled" in said


def test_compute_processes_block_their_gpu(make_host: MakeHost) -> None:
    profile = get_profile("h100-01")
    profile["gpus"] = {2: {"processes": [{"pid": 4242, "name": "python3"}]}}
    sim = make_host("h100-busy", profile)
    assert "GPU 2 (NVIDIA H100 80GB HBM3) runs compute" in refused_on(sim, ALL_1G, "all-1g.10gb")
    assert sim.state()["events"] == []


def test_nvidia_drm_blocks_an_ampere_mode_change(make_host: MakeHost) -> None:
    profile = get_profile("a100-hgx-01")
    profile["faults"] = {"nvidia_drm_loaded": {}}
    sim = make_host("a100-drm", profile)
    said = refused_on(sim, HALF, "half", stop_services=True)
    assert "nvidia_drm is loaded and holds the GPUs" in said
    assert sim.state()["events"] == []


def test_passthrough_gpu_waits_for_a_reboot_then_gets_its_partitions(make_host: MakeHost) -> None:
    profile = get_profile("a100-hgx-01")
    profile["gpu"]["reset_unsupported"] = True
    sim = make_host("a100-vm", profile)
    ran, _ = apply_on(sim, HALF, "half", stop_services=True)
    command, failed = ran[-1]
    assert "|| nvidia-smi -r -i 00000000:07:00.0\n" in command and failed.returncode == 3
    # The mode change's warning, then the refused reset, which ends the steps.
    assert failed.stdout.splitlines()[0].startswith("Warning: MIG mode is in pending enable")
    assert failed.stdout.endswith("All done.\nResetting GPU 00000000:07:00.0 is not supported.\n")
    assert failed.stderr.splitlines()[-1] == (
        "a MIG step failed (status 3); the daemons and persistence mode it had stopped were "
        "started again"
    )
    assert layout(sim) == {}  # no partitions, and no success reported
    # The refused reset left nothing stopped: the daemons run again.
    for unit in ("dcgm-exporter", "nvidia-dcgm", "nvidia-persistenced"):
        assert run_on(sim, "systemctl", "is-active", unit).stdout == "active\n"
    # Ampere keeps the pending mode across the reboot; then only the partitions are missing.
    assert run_on(sim, "reboot").returncode == 0
    assert mig_modes(sim)[:2] == ["Enabled", "Enabled"]
    ran, _ = apply_on(sim, HALF, "half")
    assert [done.returncode for _, done in ran] == [0] * len(ran)
    assert layout(sim) == {0: {"3g.40gb": 2}, 1: {"3g.40gb": 2}}


def test_the_last_command_fails_when_partitions_are_missing(make_host: MakeHost) -> None:
    sim = make_host("h100-01")
    ran, _ = apply_on(sim, ALL_1G, "all-1g.10gb")
    check = ran[-1][0]
    assert sh(sim, check).returncode == 0
    assert run_on(sim, "nvidia-smi", "mig", "-dci", "-i", "3", "-gi", "7").returncode == 0
    assert run_on(sim, "nvidia-smi", "mig", "-dgi", "-i", "3", "-gi", "7").returncode == 0
    missing = sh(sim, check)
    assert missing.returncode == 1
    assert missing.stderr.splitlines() == [
        "GPU 3: GPU instances [" + " ".join(["1g.10gb"] * 6) + "] and 6 compute instance(s), "
        "wanted [" + " ".join(["1g.10gb"] * 7) + "] and 7",
        "MIG config all-1g.10gb is not in place on the GPUs above",
    ]
