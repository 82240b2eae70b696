"""The files a simulated host shows under its root directory.

The collector reads /etc/os-release, /proc/driver/nvidia/version, /proc/sys/… and lists
/dev/nvidia* under that root. These files are derived from the state and rewritten whenever a
tool changes what they show (a reboot loads another driver, ``sysctl -w`` sets a value).
Device nodes are plain empty files: their mode, owner and group come from the state, through
the simulated ``stat``, because an unprivileged simulator can neither create character
devices nor give files to root.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from gpuaudit.sim.oses import OS_RELEASES, driver_proc_version
from gpuaudit.sim.state import STATE_ENV, SimStateError, driver_answers

# Typing names for the checker only: importing typing costs each tool call milliseconds.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from gpuaudit.sim.state import State

_NODE_GLOBS = ("nvidia*", "kfd", "dri/*")
# Where the host's state lives, relative to its root: the state file locates the root.
STATE_FILE = "var/lib/gpuaudit-sim/state.json"
# What a command on the host sees of the simulator: where its state is, and no NVML probe.
INSIDE_ENV = {STATE_ENV: f"/{STATE_FILE}", "GPUAUDIT_NVML": "0"}
# The real tools behind the pass-through shims (stat, uname, hostname), inside the root.
REAL_TOOLS_DIR = "var/lib/gpuaudit-sim/real"
# Changes at every boot; what a caller reads to tell that a host it reaches again rebooted.
BOOT_ID = "proc/sys/kernel/random/boot_id"
PROC_STAT = "proc/stat"
# When a host not rebooted since it was built booted (2024-06-01T00:00:00Z).
DEFAULT_BOOT_TIME = 1717200000
# The skeleton every isolated root is built on carries this file at its top.
_ISOLATED_MARKER = "/.gpuaudit-base"


class NotASimulatedRoot(SimStateError):
    """A state file outside a simulated host's root: its tools must not write there."""


def host_root(state_path: Path) -> Path:
    """The root directory of the host whose state file is ``state_path``: ``/`` inside the
    host's isolated root, its upper directory when a tool runs from outside."""
    path = Path(os.path.abspath(state_path))
    if path.as_posix().endswith("/" + STATE_FILE):
        root = Path(path.as_posix()[: -len(STATE_FILE) - 1] or "/")
        # This machine's own / is a root only from inside an isolated host.
        if root != Path("/") or os.path.exists(_ISOLATED_MARKER):
            return root
    raise NotASimulatedRoot(f"{state_path} is not the state file of a simulated host's root")


# Directories and files a fresh Ubuntu host has where remediation writes: written once, when
# the host is built, so that what a command later removes stays removed.
_SKELETON_DIRS = (
    "etc/sysctl.d", "etc/apt/preferences.d", "etc/apt/sources.list.d", "etc/apt/apt.conf.d",
    "etc/modprobe.d", "etc/systemd/system", "etc/default", "var/log", "var/tmp", "usr/local/bin",
)  # fmt: skip
_SYSCTL_CONF = """\
#
# /etc/sysctl.conf - Configuration file for setting system variables
# See /etc/sysctl.d/ for additional system variables.
# See sysctl.conf (5) for information.
#
"""
_SYSCTL_README = """\
Directory for system-wide sysctl settings, read by systemd-sysctl and sysctl --system:
files ending in .conf, in the order of their names; /etc/sysctl.conf is read last.
"""


def populate_skeleton(root: Path) -> None:
    for directory in _SKELETON_DIRS:
        (root / directory).mkdir(parents=True, exist_ok=True)
    _write(root / "etc/sysctl.conf", _SYSCTL_CONF)
    _write(root / "etc/sysctl.d/README.sysctl", _SYSCTL_README)
    link = root / "etc/sysctl.d/99-sysctl.conf"
    if not link.is_symlink():
        link.symlink_to("../sysctl.conf")
    _write(root / "etc/environment", 'PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"\n')


def sync_root(state: State, root: Path) -> None:
    if Path(root) == Path("/") and not os.path.exists(_ISOLATED_MARKER):
        raise NotASimulatedRoot("refusing to write this machine's root for a simulated host")
    _write(root / "etc/os-release", OS_RELEASES[state["os"]])
    _write(root / "etc/hostname", state["hostname"] + "\n")
    version_file = root / "proc/driver/nvidia/version"
    if "nvidia" in state and driver_answers(state):
        _write(version_file, driver_proc_version(state["nvidia"]["driver"]["loaded"]))
    elif version_file.exists():
        shutil.rmtree(root / "proc/driver/nvidia")
    from gpuaudit.sim.modules import PROC_MODULES, proc_modules

    _write(root / PROC_MODULES, proc_modules(state))
    _write(root / BOOT_ID, boot_id(state) + "\n")
    _write(root / PROC_STAT, f"btime {boot_time(state)}\n")
    for key, value in state.get("sysctls", {}).items():
        _write(sysctl_path(root, key), f"{value}\n")
    _sync_device_nodes(state, root / "dev")
    from gpuaudit.sim.exporter import sync_exporter

    sync_exporter(state, root)
    if "slurm" in state:
        from gpuaudit.sim.slurm import write_slurm_files

        write_slurm_files(state, root)


def boot_time(state: State) -> int:
    """When the current boot began, seconds since the epoch (``btime`` in /proc/stat): set at
    every reboot (rehearsal.after_reboot), DEFAULT_BOOT_TIME before the first."""
    return int(state.get("boot_time") or DEFAULT_BOOT_TIME)


def boot_id(state: State) -> str:
    """The current boot's id: a new one at every reboot (rehearsal.after_reboot); a host not
    rebooted since it was built has one derived from its name."""
    if state.get("boot_id"):
        return str(state["boot_id"])
    import uuid

    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"gpuaudit-sim:{state['name']}"))


def sysctl_path(root: Path, key: str) -> Path:
    if not key or key.startswith(".") or "/" in key or ".." in key:
        raise ValueError(f"bad sysctl key {key!r}")
    return root / "proc/sys" / key.replace(".", "/")


def _sync_device_nodes(state: State, dev: Path) -> None:
    dev.mkdir(parents=True, exist_ok=True)
    wanted = state.get("device_nodes", {})
    for pattern in _NODE_GLOBS:
        for path in dev.glob(pattern):
            if path.is_file() and path.relative_to(dev).as_posix() not in wanted:
                path.unlink()
    dri = dev / "dri"
    if dri.is_dir() and not any(dri.iterdir()):
        dri.rmdir()
    for node, info in wanted.items():
        path = dev / node
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
        os.chmod(path, int(info["mode"], 8))


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
