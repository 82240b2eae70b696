"""Entry point of every simulated tool: ``python -m gpuaudit.sim.tools <tool> [args…]``.

The shims in a simulated host's ``bin/`` exec this with the tool name; the host's state file
comes from ``GPUAUDIT_SIM_STATE``. Only the module of the tool asked for is imported, and
nothing here imports pyinfra: the collector runs some thirty tool calls per host.
"""

from __future__ import annotations

import importlib
import os
import sys

from gpuaudit.sim.state import SimStateError, state_path_from_env

# Typing names for the checker only: importing typing costs each tool call milliseconds.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# tool → (module, function); each function takes (argv, state_path) and returns the exit code.
TOOLS: dict[str, tuple[str, str]] = {
    "nvidia-smi": ("gpuaudit.sim.nvidia_smi", "run"),
    "dmesg": ("gpuaudit.sim.systools", "run_dmesg"),
    "journalctl": ("gpuaudit.sim.systools", "run_journalctl"),
    "systemctl": ("gpuaudit.sim.systools", "run_systemctl"),
    "hostname": ("gpuaudit.sim.systools", "run_hostname"),
    "uname": ("gpuaudit.sim.systools", "run_uname"),
    "reboot": ("gpuaudit.sim.systools", "run_reboot"),
    "shutdown": ("gpuaudit.sim.systools", "run_shutdown"),
    "systemd-run": ("gpuaudit.sim.systools", "run_systemd_run"),
    "modprobe": ("gpuaudit.sim.kmod", "run_modprobe"),
    "rmmod": ("gpuaudit.sim.kmod", "run_rmmod"),
    "modinfo": ("gpuaudit.sim.kmod", "run_modinfo"),
    "dpkg-query": ("gpuaudit.sim.pkgtools", "run_dpkg_query"),
    "dpkg": ("gpuaudit.sim.pkgtools", "run_dpkg"),
    "apt-mark": ("gpuaudit.sim.pkgtools", "run_apt_mark"),
    "apt-get": ("gpuaudit.sim.apt", "run_apt_get"),
    "apt": ("gpuaudit.sim.apt", "run_apt_get"),
    "apt-cache": ("gpuaudit.sim.apt", "run_apt_cache"),
    "lspci": ("gpuaudit.sim.devtools", "run_lspci"),
    "rocm-smi": ("gpuaudit.sim.devtools", "run_rocm_smi"),
    "stat": ("gpuaudit.sim.devtools", "run_stat"),
    "sysctl": ("gpuaudit.sim.sysctl", "run_sysctl"),
    "scontrol": ("gpuaudit.sim.slurm", "run_scontrol"),
    "slurmd": ("gpuaudit.sim.slurm", "run_slurmd"),
    "dcgmi": ("gpuaudit.sim.dcgmi", "run"),
}

# Shims that hand uses they do not simulate to the real tool (stat of an ordinary file).
PASSTHROUGH: frozenset[str] = frozenset({"stat", "uname", "hostname"})
# Commands a simulated host never takes from the machine running the simulator, simulated or
# not: its GPU tooling, its package managers and anything that changes the machine itself.
# A name listed here without a shim is "not installed" on the simulated host.
SIM_OWNED: frozenset[str] = (frozenset(TOOLS) - PASSTHROUGH) | frozenset(
    {
        "amd-smi", "rpm", "dnf", "yum", "apt", "apt-get", "aptitude", "snap", "modprobe",
        "rmmod", "insmod", "nvidia-modprobe", "nvidia-persistenced", "nvidia-debugdump",
        "nvidia-bug-report.sh", "nv-hostengine", "dcgmi", "nvidia-ctk", "poweroff", "halt",
        "init", "telinit", "kexec", "systemd-run", "mknod", "udevadm",
        # Slurm: a simulated host is a Slurm node only where its profile says so.
        "sinfo", "squeue", "sbatch", "srun", "salloc", "sacct", "slurmctld", "munged",
    }
)  # fmt: skip


def shims_for(state: dict[str, Any]) -> list[str]:
    """The tools a simulated host has installed."""
    faults = state.get("faults") or {}
    names = set(TOOLS)
    if "nvidia" not in state or "nvidia_smi_missing" in faults:
        names.discard("nvidia-smi")
    if "amd" not in state:
        names.discard("rocm-smi")
    if "slurm" not in state:
        names -= {"scontrol", "slurmd"}
    # DCGM's CLI comes with its service (nvidia-dcgm): hosts without DCGM have no dcgmi.
    if "nvidia" not in state or "nvidia-dcgm" not in (state.get("services") or {}):
        names.discard("dcgmi")
    return sorted(names)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if not args or args[0] not in TOOLS:
        tool = args[0] if args else ""
        print(
            f"gpuaudit simulator: unknown tool {tool!r} (known: {', '.join(TOOLS)})",
            file=sys.stderr,
        )
        return 127
    tool, tool_args = args[0], args[1:]
    module_name, function = TOOLS[tool]
    try:
        state_path = state_path_from_env()
        handler = getattr(importlib.import_module(module_name), function)
        rc = int(handler(tool_args, state_path))
        sys.stdout.flush()
    except SimStateError as exc:
        print(f"{tool} (gpuaudit simulator): {exc}", file=sys.stderr)
        return 70
    except BrokenPipeError:
        # The reader went away (`nvidia-smi … | head`): exit quietly as a C tool would.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    return rc


if __name__ == "__main__":
    sys.exit(main())
