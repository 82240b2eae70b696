"""Materialise a simulated GPU host on the local disk.

A host is a directory under the simulator's base directory (see isolation.py for how its
commands are kept inside it)::

    <base>/<name>/root/     the host's own files, its "/" (the upper layer of its root overlay):
                            var/lib/gpuaudit-sim/state.json (the host, see state.py),
                            etc/os-release, proc/driver/nvidia/version, proc/sys/…, dev/nvidia*
    <base>/<name>/usr/      what the host changed in /usr: usr/bin holds its tools (nvidia-smi,
                            dmesg, systemctl … shims, #!/bin/sh + exec) and whiteouts hide this
                            machine's real ones that the host must not run
    <base>/<name>/work/, merged/   overlay work directories and the mount point
    <base>/<name>/sysbin/   links to this machine's other commands, for :meth:`SimHost.env`

Commands pyinfra runs go through the isolated root. ``SimHost.env()`` is the other way in,
used where no file may change (the read-only collector, tests of single tools, an sshd that
lets a simulated host be audited; one that lets it be changed runs :mod:`gpuaudit.sim.sshgate`):
``PATH=usr/bin:sysbin`` puts the host's tools first and leaves out the real ones named in
``tools.SIM_OWNED``, so a tool the host lacks is really missing (``command -v nvidia-smi`` fails
even on a machine that has one), and nothing it runs can reach this machine's systemctl,
package manager or reboot.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuaudit.sim.build import build_state
from gpuaudit.sim.isolation import BIN_DIRS, overlay_trees, prepare_host_dirs, upper_for, whiteout
from gpuaudit.sim.profiles import PROFILES, get_profile
from gpuaudit.sim.rootfs import (  # noqa: F401 (INSIDE_ENV: what the connector imports)
    INSIDE_ENV,
    REAL_TOOLS_DIR,
    STATE_FILE,
    populate_skeleton,
    sync_root,
)
from gpuaudit.sim.state import STATE_ENV, SimStateError, load_state, save_state
from gpuaudit.sim.tools import PASSTHROUGH, SIM_OWNED, TOOLS, shims_for

if TYPE_CHECKING:
    from gpuaudit.sim.state import State

SIM_DIR_ENV = "GPUAUDIT_SIM_DIR"
DEFAULT_SIM_DIR = ".gpuaudit-sim"
# Present in usr/bin and sysbin so that building a host from inside another simulated host's
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
        """Environment for commands run "on" the host from outside its isolated root (merge
        it over os.environ): only for reading, as the audit's collector does."""
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

    def upper(self, path: str) -> Path:
        """Where the host keeps its own copy of ``path`` (an absolute path on the host)."""
        return upper_for(self.host_dir, os.path.normpath(path).lstrip("/"))


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


def host_paths(name: str, base_dir: Path) -> SimHost:
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"bad simulated host name {name!r}")
    host_dir = Path(base_dir).resolve() / name
    return SimHost(
        name=name,
        host_dir=host_dir,
        bin_dir=upper_for(host_dir, "usr/bin"),
        sysbin_dir=host_dir / "sysbin",
        state_file=host_dir / "root" / STATE_FILE,
        root_dir=host_dir / "root",
    )


def materialize(
    name: str, profile: str | dict[str, Any], base_dir: Path, reset: bool = False
) -> SimHost:
    """Create or refresh the simulated host ``name``. An existing host keeps its state and
    its files (what earlier commands changed) unless ``reset``; shims and the files derived
    from the state are rewritten."""
    host = host_paths(name, base_dir)
    if reset and host.host_dir.exists():
        shutil.rmtree(host.host_dir)
    _drop_old_layout(host.host_dir)
    prepare_host_dirs(host.host_dir)
    host.state_file.parent.mkdir(parents=True, exist_ok=True)
    state: State | None = None
    if host.state_file.exists():
        try:
            state = load_state(host.state_file)
        except SimStateError:
            state = None  # from an older simulator: rebuild
    if state is None:
        state = build_state(name, resolve_profile(profile))
        save_state(host.state_file, state)
        populate_skeleton(host.root_dir)
    _write_shims(host, shims_for(state))
    _copy_passthrough_tools(host)
    _link_system_tools(host.sysbin_dir)
    sync_root(state, host.root_dir)
    return host


def _drop_old_layout(host_dir: Path) -> None:
    # Hosts from a simulator that kept state.json and bin/ beside the root are rebuilt.
    if (host_dir / "state.json").exists():
        shutil.rmtree(host_dir)


def _write_shims(host: SimHost, tools: list[str]) -> None:
    host.bin_dir.mkdir(parents=True, exist_ok=True)
    (host.bin_dir / _MARKER).touch()
    python = shlex.quote(sys.executable)
    for tool in sorted(SIM_OWNED | set(TOOLS)):
        path = host.bin_dir / tool
        if tool in tools:
            # -c rather than -m: runpy costs every call a few milliseconds.
            script = f'#!/bin/sh\nexec {python} -c "{_ENTRY}" {tool} "$@"\n'
            if not path.is_file() or path.read_text(encoding="utf-8") != script:
                tmp = path.with_name(f".{tool}.tmp")
                tmp.write_text(script, encoding="utf-8")
                tmp.chmod(0o755)
                tmp.replace(path)
        elif path.is_file() or path.is_symlink():
            path.unlink()
        _hide_real_tool(host, tool, keep_shim=tool in tools)


def _hide_real_tool(host: SimHost, tool: str, keep_shim: bool) -> None:
    """Whiteouts over this machine's ``tool`` in each directory of the host's PATH, so that
    not even an absolute path (/usr/sbin/sysctl) reaches the real one from inside."""
    trees = overlay_trees()
    for directory in BIN_DIRS:
        if directory.split("/", 1)[0] not in trees:
            continue  # a link into /usr on this machine: covered there
        if keep_shim and directory == "usr/bin":
            continue
        if os.path.lexists(f"/{directory}/{tool}"):
            try:
                whiteout(upper_for(host.host_dir, f"{directory}/{tool}"))
            except PermissionError:
                return  # a system that refuses them has no isolated roots either (read-only)


def _copy_passthrough_tools(host: SimHost) -> None:
    """The real tools the pass-through shims hand over to, copied into the host's root: the
    shim takes the real tool's name, so inside the host nothing else reaches it."""
    target = host.root_dir / REAL_TOOLS_DIR
    target.mkdir(parents=True, exist_ok=True)
    for tool in sorted(PASSTHROUGH):
        real = _real_tool(tool)
        copy = target / tool
        if real and not copy.exists():
            shutil.copy2(real, copy)


def _real_tool(tool: str) -> str | None:
    for directory in os.environ.get("PATH", os.defpath).split(os.pathsep):
        candidate = os.path.join(directory, tool)
        if (
            directory
            and not os.path.exists(os.path.join(directory, _MARKER))
            and os.path.isfile(candidate)
            and os.access(candidate, os.X_OK)
        ):
            return os.path.realpath(candidate)
    return None


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
