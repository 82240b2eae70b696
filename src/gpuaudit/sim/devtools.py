"""Simulated device-facing tools: lspci, rocm-smi, stat (for device nodes)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from gpuaudit.sim.fixtures import read_fixture
from gpuaudit.sim.state import hang_if_wedged, load_state

# Typing names for the checker only: importing typing costs each tool call milliseconds.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from gpuaudit.sim.state import State

# Device ids of the NVSwitch chips on HGX A100 boards and their usual bus ids.
_NVSWITCH_DEVICE = "1af1"
_NVSWITCH_BUSES = ("c4", "c5", "c6", "c7", "c8", "c9", "ca", "cb")
_CLASS_NAMES = {
    "0300": "VGA compatible controller",
    "0302": "3D controller",
    "0380": "Display controller",
    "0680": "Bridge",
}
_VENDOR_NAMES = {"10de": "NVIDIA Corporation", "1002": "Advanced Micro Devices, Inc. [AMD/ATI]"}
_GRAPHICS_BRANDS = ("GeForce", "Quadro", "NVIDIA RTX", "Titan", "TITAN")


def _pci_devices(state: State) -> list[dict[str, str]]:
    """What lspci finds on the bus: GPUs stay listed when the driver is not loaded, and a GPU
    fallen off the bus answers config reads with all ones (revision ff). The state's ``lspci``
    drops GPUs from the listing or adds ones the driver does not know."""
    devices = []
    nvidia = state.get("nvidia")
    if nvidia:
        device_id = nvidia["pci_device_id"][:4].lower()
        cls = "0300" if nvidia["brand"].startswith(_GRAPHICS_BRANDS) else "0302"
        listing = nvidia.get("lspci") or {}
        for gpu in nvidia["gpus"]:
            if gpu["index"] in listing.get("drop", ()):
                continue
            slot = _slot(gpu["bus_id"])
            rev = "ff" if gpu.get("lost") else "a1"
            devices.append(_device(slot, cls, "10de", device_id, rev))
        for bus_id in listing.get("add", ()):
            devices.append(_device(_slot(bus_id), cls, "10de", device_id, "a1"))
        for bus in _NVSWITCH_BUSES[: nvidia["nvswitches"]]:
            slot = f"0000:{bus}:00.0"
            devices.append(_device(slot, "0680", "10de", _NVSWITCH_DEVICE, "a1"))
    amd = state.get("amd")
    if amd:
        for bus_id in amd["bus_ids"]:
            devices.append(_device(_slot(bus_id), "0380", "1002", amd["device_id"], "01"))
    return sorted(devices, key=lambda d: d["slot"])


def _device(slot: str, cls: str, vendor: str, device: str, rev: str) -> dict[str, str]:
    return {"slot": slot, "class": cls, "vendor": vendor, "device": device, "rev": rev}


def _slot(bus_id: str) -> str:
    domain, bus, devfn = bus_id.split(":")
    return f"{domain[-4:]}:{bus}:{devfn}".lower()


def run_lspci(argv: list[str], state_path: Path) -> int:
    show_domain, numeric, vendor_filter, device_filter = False, 0, None, None
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg == "-D":
            show_domain = True
        elif arg in ("-n", "-nn"):
            numeric = len(arg) - 1
        elif arg == "-d" and args:
            spec = args.pop(0).lower()
            vendor, _, device = spec.partition(":")
            vendor_filter, device_filter = vendor or None, device or None
        else:
            print(f"lspci (gpuaudit simulator): option {arg} is not simulated", file=sys.stderr)
            return 2
    state = load_state(state_path)
    hang_if_wedged(state, "lspci")
    for dev in _pci_devices(state):
        if vendor_filter and dev["vendor"] != vendor_filter:
            continue
        if device_filter and dev["device"] != device_filter:
            continue
        slot = dev["slot"] if show_domain else dev["slot"][5:]
        ids = f"{dev['vendor']}:{dev['device']}"
        if numeric == 1:
            print(f"{slot} {dev['class']}: {ids} (rev {dev['rev']})")
            continue
        names = f"{_CLASS_NAMES[dev['class']]}"
        vendor_name = _VENDOR_NAMES[dev["vendor"]]
        if numeric == 2:
            print(
                f"{slot} {names} [{dev['class']}]: {vendor_name} Device [{ids}] (rev {dev['rev']})"
            )
        else:
            print(f"{slot} {names}: {vendor_name} Device {dev['device']} (rev {dev['rev']})")
    return 0


def run_rocm_smi(argv: list[str], state_path: Path) -> int:
    state = load_state(state_path)
    if "amd" not in state:
        print("rocm-smi: command not found", file=sys.stderr)
        return 127
    if "--json" not in argv:
        print("rocm-smi (gpuaudit simulator): only --json output is simulated", file=sys.stderr)
        return 2
    sys.stdout.write(read_fixture("rocm-smi", state["amd"]["rocm_json"]))
    return 0


def run_stat(argv: list[str], state_path: Path) -> int:
    """stat for device nodes under the simulated root (their owner and group are root and
    video there, which plain files cannot be); any other use runs the real stat."""
    fmt, paths = None, []
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg in ("-c", "--format", "--printf") and args:
            fmt = args.pop(0)
        elif arg.startswith(("--format=", "--printf=")):
            fmt = arg.split("=", 1)[1]
        elif arg.startswith("-"):
            fmt = None
            break
        else:
            paths.append(arg)
    from gpuaudit.sim.rootfs import REAL_TOOLS_DIR, host_root

    root = host_root(state_path)
    dev = str(root / "dev") + os.sep
    if fmt is None or not paths or not all(p.startswith(dev) for p in paths):
        real = root / REAL_TOOLS_DIR / "stat"
        os.execv(str(real), [str(real), *argv])
    nodes: dict[str, Any] = load_state(state_path).get("device_nodes", {})
    rc = 0
    for path in paths:
        info = nodes.get(path[len(dev) :])
        if info is None or not os.path.exists(path):
            print(f"stat: cannot statx '{path}': No such file or directory", file=sys.stderr)
            rc = 1
            continue
        print(_stat_format(fmt, path, info))
    return rc


def _stat_format(fmt: str, path: str, info: dict[str, str]) -> str:
    mode = int(info["mode"], 8)
    perms = "".join(ch if mode & (1 << (8 - i)) else "-" for i, ch in enumerate("rwxrwxrwx"))
    fields = {
        "a": info["mode"].lstrip("0") or "0",
        "U": info["owner"],
        "G": info["group"],
        "u": "0",
        "g": {"video": "44", "render": "109"}.get(info["group"], "0"),
        "n": path,
        "A": "c" + perms,
        "F": "character special file",
        "%": "%",
    }
    out, i = [], 0
    while i < len(fmt):
        if fmt[i] == "%" and i + 1 < len(fmt):
            out.append(fields.get(fmt[i + 1], "?"))
            i += 2
        else:
            out.append(fmt[i])
            i += 1
    return "".join(out)
