"""Materialise a simulated GPU host on the local disk.

A host is a directory under the simulator's base directory::

    <base>/<name>/state.json   the host (see state.py), kept across calls and runs
    <base>/<name>/bin/         executable shims: nvidia-smi, dmesg, systemctl, … (#!/bin/sh + exec)
    <base>/<name>/sysbin/      links to every other command of this machine's PATH
    <base>/<name>/root/        GPUAUDIT_ROOT: etc/os-release, proc/driver/nvidia/version,
                               proc/sys/…, dev/nvidia*

``SimHost.env()`` sets ``PATH=bin:sysbin``: the host's tools come first and the real ones
named in ``tools.SIM_OWNED`` are left out of sysbin. That way a tool the host lacks is really
missing (``command -v nvidia-smi`` fails even on a machine that has one), and a remediation
run against a simulated host cannot reach this machine's systemctl, package manager or reboot.
"""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuaudit.sim.build import build_state
from gpuaudit.sim.profiles import PROFILES, get_profile
from gpuaudit.sim.rootfs import sync_root
from gpuaudit.sim.state import STATE_ENV, SimStateError, load_state, save_state
from gpuaudit.sim.tools import SIM_OWNED, shims_for

if TYPE_CHECKING:
    from gpuaudit.sim.state import State

SIM_DIR_ENV = "GPUAUDIT_SIM_DIR"
DEFAULT_SIM_DIR = ".gpuaudit-sim"
# Present in bin/ and sysbin/ so that building a host from inside another simulated host's
# environment never links one host's shims into another.
_MARKER = ".gpuaudit-sim-bin"
_ENTRY = "import sys; from gpuaudit.sim.tools import main; sys.exit(main())"


@dataclass(frozen=True)
class SimHost:
    name: str
    host_dir: Path
    bin_dir: Path
    sysbin_dir: Path
    state_file: Path
    root_dir: Path

    def env(self) -> dict[str, str]:
        """Environment for commands run "on" the host (merge it over os.environ)."""
        return {
            "PATH": f"{self.bin_dir}{os.pathsep}{self.sysbin_dir}",
            STATE_ENV: str(self.state_file),
            "GPUAUDIT_ROOT": str(self.root_dir),
            # The machine's own python3 may have pynvml and real GPUs: a simulated host must
            # answer only from its state, so the collector's NVML probe stays off there.
            "GPUAUDIT_NVML": "0",
        }

    def state(self) -> State:
        return load_state(self.state_file)


def default_sim_dir() -> Path:
    return Path(os.environ.get(SIM_DIR_ENV) or Path.cwd() / DEFAULT_SIM_DIR)


def resolve_profile(profile: str | dict[str, Any]) -> dict[str, Any]:
    if isinstance(profile, dict):
        return profile
    try:
        return get_profile(profile)
    except KeyError:
        known = ", ".join(sorted(PROFILES))
        raise ValueError(f"unknown simulator profile {profile!r} (known: {known})") from None


def materialize(
    name: str, profile: str | dict[str, Any], base_dir: Path, reset: bool = False
) -> SimHost:
    """Create or refresh the simulated host ``name``. An existing host keeps its state (what
    earlier commands changed) unless ``reset``; shims, links and root files are rewritten."""
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"bad simulated host name {name!r}")
    host_dir = Path(base_dir).resolve() / name
    host = SimHost(
        name=name,
        host_dir=host_dir,
        bin_dir=host_dir / "bin",
        sysbin_dir=host_dir / "sysbin",
        state_file=host_dir / "state.json",
        root_dir=host_dir / "root",
    )
    host_dir.mkdir(parents=True, exist_ok=True)
    state: State | None = None
    if host.state_file.exists() and not reset:
        try:
            state = load_state(host.state_file)
        except SimStateError:
            state = None  # from an older simulator: rebuild
    if state is None:
        state = build_state(name, resolve_profile(profile))
        save_state(host.state_file, state)
    _write_shims(host.bin_dir, shims_for(state))
    _link_system_tools(host.sysbin_dir)
    sync_root(state, host.root_dir)
    return host


def _write_shims(bin_dir: Path, tools: list[str]) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / _MARKER).touch()
    python = shlex.quote(sys.executable)
    for existing in bin_dir.iterdir():
        if existing.name != _MARKER and existing.name not in tools:
            existing.unlink()
    for tool in tools:
        path = bin_dir / tool
        # -c rather than -m: runpy costs every call a few milliseconds.
        script = f'#!/bin/sh\nexec {python} -c "{_ENTRY}" {tool} "$@"\n'
        if not path.exists() or path.read_text(encoding="utf-8") != script:
            tmp = path.with_name(f".{tool}.tmp")
            tmp.write_text(script, encoding="utf-8")
            tmp.chmod(0o755)
            tmp.replace(path)


def _link_system_tools(sysbin: Path) -> None:
    sysbin.mkdir(parents=True, exist_ok=True)
    (sysbin / _MARKER).touch()
    wanted: dict[str, str] = {}
    for directory in os.environ.get("PATH", os.defpath).split(os.pathsep):
        if not directory or not os.path.isdir(directory):
            continue
        if os.path.exists(os.path.join(directory, _MARKER)):
            continue
        try:
            entries = sorted(os.listdir(directory))
        except OSError:
            continue
        for entry in entries:
            if entry in wanted or entry in SIM_OWNED or entry.startswith("."):
                continue
            target = os.path.join(directory, entry)
            if os.path.isfile(target) and os.access(target, os.X_OK):
                wanted[entry] = target
    for existing in sysbin.iterdir():
        if existing.name == _MARKER:
            continue
        if (
            not existing.is_symlink()
            or existing.name not in wanted
            or os.readlink(existing) != wanted[existing.name]
        ):
            existing.unlink()
    for entry, target in wanted.items():
        link = sysbin / entry
        if not link.is_symlink():
            link.symlink_to(target)
