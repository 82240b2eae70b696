"""Simulated kmod tools for the NVIDIA kernel modules: ``modprobe`` (load, ``-a``, ``-r``),
``rmmod`` and ``modinfo -F``.

The simulator keeps the NVIDIA module stack whole: ``nvidia``, ``nvidia_modeset`` and
``nvidia_uvm`` (``modules.loaded_modules``, plus ``nvidia_drm`` with the ``nvidia_drm_loaded``
fault) are loaded while the state's ``driver.loaded`` names a version, and none is otherwise.

- Unloading (``modprobe -r``, ``rmmod``) goes through the modules in the order named, as kmod
  does, and refuses one whose reference count is not zero, with kmod's words ("modprobe: FATAL:
  Module nvidia is in use."): ``nvidia_uvm`` and ``nvidia`` while a compute process runs on a
  GPU; ``nvidia`` while a daemon that keeps the GPUs open runs (nvidia-persistenced, fabric
  manager, DCGM, dcgm-exporter, nvsm) or while a module using it (``nvidia_uvm``,
  ``nvidia_modeset``) stays loaded; ``nvidia_modeset`` while ``nvidia_drm`` does; ``nvidia_drm``
  always (the display stack holds it). When any module is refused nothing is unloaded (kmod
  would have removed the ones before it; a rehearsal then reboots either way). A command that
  would leave part of the stack loaded is not simulated and says so.
- Loading any module of the stack (``modprobe nvidia``) loads the installed driver:
  ``driver.loaded`` becomes ``driver.installed``, so the version mismatch after a package
  upgrade ends without a reboot. Each GPU is re-initialised as on a reset (a pending MIG mode
  applies); Hopper and later GPUs come back with MIG disabled, as the driver keeps their MIG
  mode only while it is loaded. A GPU fallen off the bus stays lost until a reboot.
- ``modinfo -F version nvidia`` is the installed driver's version, what ``modprobe`` would load.

Other modules are not simulated; those uses exit 1 with a message naming the simulator.
"""

from __future__ import annotations

import sys
from pathlib import Path

from gpuaudit.sim.modules import loaded_modules
from gpuaudit.sim.state import (
    edit_state,
    gpu_reset,
    has_fault,
    load_state,
    mig_mode_needs_reset,
    record_event,
    sync_persistence,
)

# Typing names for the checker only: importing typing costs each tool call milliseconds.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from gpuaudit.sim.state import State

STACK = ("nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia")
# Daemons that keep /dev/nvidia* open while they run, so the nvidia module cannot go.
HOLDER_UNITS = (
    "nvidia-persistenced", "nvidia-fabricmanager", "nvidia-dcgm", "dcgm", "nv-hostengine",
    "dcgm-exporter", "nvsm",
)  # fmt: skip
_NOT_SIMULATED = "{tool} (gpuaudit simulator): {what} is not simulated"


def _module(name: str) -> str:
    # kmod treats "-" and "_" in module names alike.
    return name.replace("-", "_")


def run_modprobe(argv: list[str], state_path: Path) -> int:
    remove = all_names = dry = quiet = False
    names: list[str] = []
    for arg in argv:
        if arg in ("-r", "--remove"):
            remove = True
        elif arg in ("-a", "--all"):
            all_names = True
        elif arg in ("-n", "--dry-run", "--show"):
            dry = True
        elif arg in ("-q", "--quiet"):
            quiet = True
        elif arg in ("-v", "--verbose", "-b", "--use-blacklist"):
            continue
        elif arg.startswith("-"):
            print(f"modprobe: unrecognized option '{arg}'", file=sys.stderr)
            return 1
        else:
            names.append(_module(arg))
    if not names:
        print("modprobe: ERROR: missing parameters. See -h.", file=sys.stderr)
        return 1
    if remove:
        return _unload("modprobe", names, state_path, dry)
    # Without -a only the first name is a module; the rest are its parameters.
    return _load(names if all_names else names[:1], state_path, dry, quiet)


def run_rmmod(argv: list[str], state_path: Path) -> int:
    names = [_module(arg) for arg in argv if not arg.startswith("-")]
    if any(arg in ("-f", "--force") for arg in argv):
        print(_NOT_SIMULATED.format(tool="rmmod", what="forced removal"), file=sys.stderr)
        return 1
    if not names:
        print("rmmod: ERROR: missing module name.", file=sys.stderr)
        return 1
    return _unload("rmmod", names, state_path, dry=False)


def run_modinfo(argv: list[str], state_path: Path) -> int:
    field, names = None, []
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg in ("-F", "--field") and args:
            field = args.pop(0)
        elif arg.startswith("--field="):
            field = arg.split("=", 1)[1]
        elif arg.startswith("-"):
            print(_NOT_SIMULATED.format(tool="modinfo", what=f"option {arg}"), file=sys.stderr)
            return 1
        else:
            names.append(_module(arg))
    state = load_state(state_path)
    installed = installed_module(state)
    rc = 0
    for name in names:
        if name not in STACK or not installed:
            print(f"modinfo: ERROR: Module {name} not found.", file=sys.stderr)
            rc = 1
            continue
        values = {
            "filename": f"/lib/modules/{state['kernel_release']}/updates/dkms/{name}.ko",
            "version": installed,
            "license": "Dual MIT/GPL" if name != "nvidia" else "NVIDIA",
            "name": name,
        }
        if field is None:
            print("".join(f"{key + ':':<16}{value}\n" for key, value in values.items()), end="")
        elif field in values:
            print(values[field])
        else:
            print(_NOT_SIMULATED.format(tool="modinfo", what=f"field {field}"), file=sys.stderr)
            return 1
    return rc


def installed_module(state: State) -> str | None:
    """The version of the NVIDIA module on disk for the running kernel (None: none built, as
    with the ``driver_not_loaded`` fault, whose DKMS build failed)."""
    if has_fault(state, "driver_not_loaded"):
        return None
    installed: str | None = (state.get("nvidia") or {}).get("driver", {}).get("installed")
    return installed


def _load(names: list[str], state_path: Path, dry: bool, quiet: bool) -> int:
    with edit_state(state_path) as state:
        modules_dir = f"/lib/modules/{state['kernel_release']}"
        for name in names:
            if name not in STACK:
                print(
                    _NOT_SIMULATED.format(tool="modprobe", what=f"loading {name}"), file=sys.stderr
                )
                return 1
            if not installed_module(state):
                if not quiet:
                    print(
                        f"modprobe: FATAL: Module {name} not found in directory {modules_dir}",
                        file=sys.stderr,
                    )
                return 1
        if dry:
            return 0
        loaded_before = bool(loaded_modules(state))
        if not loaded_before:
            load_driver(state)
        if "nvidia_drm" in names and not has_fault(state, "nvidia_drm_loaded"):
            state.setdefault("faults", {})["nvidia_drm_loaded"] = {}
            record_event(state, "modprobe nvidia_drm")
        _sync(state, state_path)
    return 0


def _unload(tool: str, names: list[str], state_path: Path, dry: bool) -> int:
    with edit_state(state_path) as state:
        loaded = {name: users for name, users in loaded_modules(state)}
        remaining = set(loaded)
        refused, missing = [], []
        for name in names:
            if name not in remaining:
                missing.append(name)
                continue
            if _holders(state, name, remaining):
                refused.append(name)
                continue
            remaining.discard(name)
        for name in missing:
            if name in STACK or tool == "rmmod":
                _say_not_loaded(tool, name)
            else:
                print(_NOT_SIMULATED.format(tool=tool, what=f"unloading {name}"), file=sys.stderr)
        for name in refused:
            if tool == "rmmod":
                print(f"rmmod: ERROR: Module {name} is in use", file=sys.stderr)
            else:
                print(f"modprobe: FATAL: Module {name} is in use.", file=sys.stderr)
        if refused:
            record_event(state, f"{tool} -r {' '.join(names)} (refused: in use)")
            return 1
        if remaining and remaining != set(loaded):
            left = ", ".join(sorted(remaining))
            what = f"unloading part of the NVIDIA module stack ({left} would stay loaded)"
            print(_NOT_SIMULATED.format(tool=tool, what=what), file=sys.stderr)
            return 1
        if loaded and not remaining and not dry:
            unload_driver(state)
            record_event(state, f"{tool} -r {' '.join(names)}")
            _sync(state, state_path)
    return 1 if missing else 0


def _say_not_loaded(tool: str, name: str) -> None:
    if tool == "rmmod":
        print(f"rmmod: ERROR: Module {name} is not currently loaded", file=sys.stderr)
    else:
        print(f"modprobe: FATAL: Module {name} is not in kernel.", file=sys.stderr)


def _holders(state: State, name: str, remaining: set[str]) -> list[str]:
    """What keeps ``name`` loaded, given the modules still loaded at that point."""
    users = dict(loaded_modules(state)).get(name, [])
    holders = sorted(set(users) & remaining)
    if name == "nvidia_drm":
        holders.append("display")
    if name in ("nvidia", "nvidia_uvm"):
        holders += [
            f"pid {p['pid']}" for gpu in state["nvidia"]["gpus"] for p in gpu.get("processes", [])
        ]
    if name == "nvidia":
        services = state.get("services", {})
        holders += [u for u in HOLDER_UNITS if services.get(u, {}).get("active") == "active"]
    return holders


def unload_driver(state: State) -> None:
    """No NVIDIA module loaded: what the GPUs lose with the driver."""
    nvidia = state["nvidia"]
    driver = nvidia["driver"]
    driver["last_loaded"] = driver.get("loaded")
    driver["loaded"] = None
    keeps_mig_mode = mig_mode_needs_reset(state)
    for gpu in nvidia["gpus"]:
        gpu.pop("persistence_pinned", None)
        mig = gpu.get("mig")
        if mig is not None:
            mig["gpu_instances"] = []
            if not keeps_mig_mode:
                mig.update(current="Disabled", pending="Disabled")
    sync_persistence(state)


def load_driver(state: State) -> None:
    """The installed driver loads and initialises every GPU it can reach."""
    from gpuaudit.sim.rehearsal import after_driver_loaded

    driver = state["nvidia"]["driver"]
    previous = driver.get("last_loaded")
    driver["loaded"] = driver.get("installed")
    for gpu in state["nvidia"]["gpus"]:
        if not gpu.get("lost"):
            gpu_reset(gpu)
    sync_persistence(state)
    record_event(state, f"modprobe nvidia (driver {driver['loaded']} loaded)")
    after_driver_loaded(state, previous)


def _sync(state: State, state_path: Path) -> None:
    from gpuaudit.sim.rootfs import host_root, sync_root

    sync_root(state, host_root(state_path))
