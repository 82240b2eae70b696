"""The files a simulated host shows under its root directory (``GPUAUDIT_ROOT``).

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
from gpuaudit.sim.state import driver_answers

# Typing names for the checker only: importing typing costs each tool call milliseconds.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from gpuaudit.sim.state import State

_NODE_GLOBS = ("nvidia*", "kfd", "dri/*")


def sync_root(state: State, root: Path) -> None:
    _write(root / "etc/os-release", OS_RELEASES[state["os"]])
    _write(root / "etc/hostname", state["hostname"] + "\n")
    version_file = root / "proc/driver/nvidia/version"
    if "nvidia" in state and driver_answers(state):
        _write(version_file, driver_proc_version(state["nvidia"]["driver"]["loaded"]))
    elif version_file.exists():
        shutil.rmtree(root / "proc/driver/nvidia")
    for key, value in state.get("sysctls", {}).items():
        _write(sysctl_path(root, key), f"{value}\n")
    _sync_device_nodes(state, root / "dev")


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
