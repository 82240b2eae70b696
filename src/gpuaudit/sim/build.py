"""Turn a host profile (a small declarative dict, see ``profiles.py``) into a full host state.

Profiles say only what differs from a healthy host of their model; everything a healthy
host has (persistence daemon, fabric manager on NVSwitch boards, held driver packages, the
network sysctl baseline, device nodes 0660 root:video) is filled in here, and the faults then
take things away. Unknown keys are refused, as mig-parted refuses unknown spec fields: a typo
must not silently give a healthy host.
"""

from __future__ import annotations

import copy
import json
import uuid
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING, Any

from gpuaudit.sim import mig as mig_model
from gpuaudit.sim.fixtures import read_fixture, rewrite_kernel_lines, topology_gpu_count
from gpuaudit.sim.oses import OS_RELEASES
from gpuaudit.sim.state import FAULTS, HANGING_TOOLS, SCHEMA_VERSION, sync_persistence

if TYPE_CHECKING:
    from gpuaudit.sim.state import State

PROFILE_KEYS = {
    "description", "vendor", "gpu_model", "xml", "gpu_count", "bus_ids", "driver", "cuda",
    "topology", "nvswitches", "dcgm", "gpu", "gpus", "kernel_log", "previous_kernel_log",
    "services", "packages_held",
    "sysctls", "device_nodes", "faults", "os", "kernel", "rocm_json", "hostname", "groups",
    "lspci", "nvlink", "repository", "xml_values", "slurm", "dcgm_exporter", "dcgm_diag",
}  # fmt: skip
GPU_KEYS = {
    "persistence_mode", "remapped_rows", "pcie", "clock_reasons", "utilization",
    "performance_state", "ecc", "xml_set", "lost", "unknown_error", "mig", "nvlink",
    "processes", "reset_unsupported",
}  # fmt: skip
PROCESS_KEYS = {"pid", "name", "gpu_instance"}
KERNEL_LOG_KEYS = {"fixture", "gpus", "lines", "xid"}

SYSCTL_BASELINE = {
    "net.core.rmem_max": "134217728",
    "net.core.wmem_max": "134217728",
    "net.core.netdev_max_backlog": "250000",
    "net.ipv4.tcp_rmem": "4096\t87380\t134217728",
    "net.ipv4.tcp_wmem": "4096\t65536\t134217728",
    "vm.swappiness": "10",
    "vm.overcommit_memory": "0",
    "kernel.numa_balancing": "0",
    "vm.max_map_count": "262144",
    "kernel.nmi_watchdog": "0",
}
_UUID_NAMESPACE = uuid.UUID("6f1c1b9e-7d0f-4c3e-9a57-2f0c5b8e1d42")
_XID_STORM_FIXTURE = "gpud-xid13-flood-629-lines-xid43.log"


class ProfileError(ValueError):
    """A profile that cannot describe a host (unknown key, fixture mismatch, bad MIG layout)."""


def build_state(name: str, profile: dict[str, Any]) -> State:
    _check_keys("profile", profile, PROFILE_KEYS)
    faults = dict(profile.get("faults", {}))
    for fault in faults:
        if fault not in FAULTS:
            raise ProfileError(f"{name}: unknown fault {fault!r} (known: {', '.join(FAULTS)})")
    hanging = (faults.get("hang") or {}).get("tool", "nvidia-smi")
    if "hang" in faults and hanging not in HANGING_TOOLS:
        raise ProfileError(
            f"{name}: hang names {hanging!r}; it can stop {', '.join(HANGING_TOOLS)}"
        )
    os_id = profile.get("os", "ubuntu-22.04")
    if os_id not in OS_RELEASES:
        raise ProfileError(f"{name}: unknown os {os_id!r}")
    vendor = profile.get("vendor", "nvidia")
    state: State = {
        "schema": SCHEMA_VERSION,
        "name": name,
        "hostname": profile.get("hostname", name),
        "vendor": vendor,
        "description": profile.get("description", ""),
        "os": os_id,
        "kernel_release": profile.get("kernel", "5.15.0-105-generic"),
        "faults": faults,
        "sysctls": {**SYSCTL_BASELINE, **profile.get("sysctls", {})},
        "kernel_log": [],
        "events": [],
    }
    if vendor == "nvidia":
        state["nvidia"] = _build_nvidia(name, profile, faults)
    elif vendor == "amd":
        state["amd"] = _build_amd(profile)
    else:
        raise ProfileError(f"{name}: unknown vendor {vendor!r}")
    state["services"] = _build_services(profile, state)
    from gpuaudit.sim.exporter import build_exporter

    try:
        state["dcgm_exporter"] = build_exporter(profile, state)
    except ValueError as exc:
        raise ProfileError(f"{name}: {exc}") from exc
    from gpuaudit.sim.dcgmi import build_answers, has_dcgm

    if has_dcgm(state):
        try:
            state["dcgm_diag"] = build_answers(name, profile.get("dcgm_diag"))
        except ValueError as exc:
            raise ProfileError(str(exc)) from exc
    elif "dcgm_diag" in profile:
        raise ProfileError(f"{name}: dcgm_diag needs DCGM (the nvidia-dcgm service)")
    state["packages"], state["holds"] = _build_packages(profile, state)
    state["repository"] = _build_repository(profile, state)
    state["device_nodes"] = _build_device_nodes(profile, state)
    state["kernel_log"] = _build_kernel_log(name, profile, state)
    # The boot before this one, as a persistent journal keeps it (journalctl -k -b -1).
    if "journal_volatile" not in faults:
        specs = profile.get("previous_kernel_log", [])
        state["previous_kernel_log"] = _kernel_log_lines(name, specs, state)
    if "slurm" in profile:
        from gpuaudit.sim.slurm import build_slurm

        try:
            state["slurm"] = build_slurm(state["hostname"], profile["slurm"])
        except ValueError as exc:
            raise ProfileError(str(exc)) from exc
    sync_persistence(state)
    for gpu in state.get("nvidia", {}).get("gpus", []):
        if "persistence_mode" in gpu.get("overrides", {}):
            gpu["persistence_mode"] = gpu["overrides"].pop("persistence_mode")
            gpu["persistence_pinned"] = True
    return state


def _check_keys(what: str, data: dict[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ProfileError(f"unknown {what} key(s): {', '.join(unknown)}")


def _build_nvidia(name: str, profile: dict[str, Any], faults: dict[str, Any]) -> dict[str, Any]:
    xml_name = profile["xml"]
    base = ET.fromstring(read_fixture("nvidia-smi-xml", xml_name)).find("gpu")
    if base is None:
        raise ProfileError(f"{xml_name}: no <gpu> element")
    xml_values = _xml_values(name, base, profile.get("xml_values"))
    product = (base.findtext("product_name") or "").strip()
    count = int(profile.get("gpu_count", 1))
    bus_ids = list(profile.get("bus_ids") or [])
    if not bus_ids and count == 1:
        bus_ids = [(base.findtext("pci/pci_bus_id") or "").strip()]
    if len(bus_ids) != count:
        raise ProfileError(f"{name}: {count} GPUs need {count} bus ids, got {len(bus_ids)}")
    base_serial = (base.findtext("serial") or "").strip()
    defaults = dict(profile.get("gpu", {}))
    per_gpu = {int(k): v for k, v in profile.get("gpus", {}).items()}
    gpus = []
    for index, bus_id in enumerate(bus_ids):
        overrides = copy.deepcopy(defaults)
        overrides.update(copy.deepcopy(per_gpu.get(index, {})))
        _check_keys(f"GPU {index}", overrides, GPU_KEYS)
        if xml_values:
            overrides["xml_set"] = {**xml_values, **overrides.get("xml_set", {})}
        gpus.append(_build_gpu(name, index, bus_id, base_serial, product, base, overrides))
    driver = profile["driver"]
    topology = profile.get("topology")
    if topology is not None:
        text = read_fixture("topo", topology["fixture"])
        if topology_gpu_count(text) != count:
            raise ProfileError(f"{name}: topology {topology['fixture']} is not a {count}-GPU one")
    return {
        "xml": xml_name,
        "product": product,
        "architecture": (base.findtext("product_architecture") or "").strip(),
        "brand": (base.findtext("product_brand") or "").strip(),
        "pci_device_id": _pci_device_id(base),
        "driver": {
            "loaded": None if "driver_not_loaded" in faults else driver,
            "installed": driver,
            "cuda": profile.get("cuda"),
        },
        "gpus": gpus,
        "topology": topology,
        "nvswitches": int(profile.get("nvswitches", 0)),
        "lspci": _build_lspci(name, profile, bus_ids),
        "nvlink": _build_nvlink(profile.get("nvlink")),
    }


def _xml_values(name: str, base: ET.Element, values: dict[str, Any] | None) -> dict[str, str]:
    """Values of another GPU model put into the captured ``<gpu>`` (element path → text), for
    a model whose captures are only plain ``nvidia-smi -q``: the XML layout stays the capture's,
    the values come from the other capture. Written into ``base`` too, so that the product,
    architecture and PCI id the rest of the state reads from it are the other model's."""
    values = {str(path): str(value) for path, value in (values or {}).items()}
    for path, value in values.items():
        element = base.find(path)
        if element is None or len(element):
            raise ProfileError(f"{name}: xml_values names {path!r}, not a value of the XML")
        element.text = value
    return values


def _build_nvlink(spec: dict[str, Any] | None) -> dict[str, Any]:
    """NVLinks per GPU and their speed (none: the GPUs have no NVLink); per-GPU faults are the
    GPU's ``nvlink`` override: ``inactive`` link numbers and ``errors`` {link: {counter: n}}."""
    spec = dict(spec or {})
    _check_keys("nvlink", spec, {"links", "speed_gb_s"})
    return {"links": int(spec.get("links", 0)), "speed_gb_s": float(spec.get("speed_gb_s", 0))}


def _pci_device_id(base: ET.Element) -> str:
    """The captured device id, as lspci prints it in hex; some publishers masked it
    ("[REDACTED]"), and lspci never prints anything but hex digits there."""
    captured = (base.findtext("pci/pci_device_id") or "").strip()
    if len(captured) == 8 and all(c in "0123456789abcdefABCDEF" for c in captured):
        return captured
    return "000010DE"


def _build_lspci(name: str, profile: dict[str, Any], bus_ids: list[str]) -> dict[str, Any]:
    """How the PCI bus listing differs from the GPUs the driver knows: GPUs it lacks (a
    container that hides part of /sys) and GPUs only it shows (bound to another driver, or
    failed to initialise)."""
    spec = dict(profile.get("lspci", {}))
    _check_keys("lspci", spec, {"drop", "add"})
    drop = sorted(int(i) for i in spec.get("drop", []))
    if any(i not in range(len(bus_ids)) for i in drop):
        raise ProfileError(f"{name}: lspci.drop names a GPU the host does not have")
    add = [str(bus_id).upper() for bus_id in spec.get("add", [])]
    known = {b.upper() for b in bus_ids}
    if any(len(b.split(":")) != 3 or b in known for b in add):
        raise ProfileError(f"{name}: lspci.add needs new bus ids like 00000000:C1:00.0")
    return {"drop": drop, "add": add}


def _build_gpu(
    host: str,
    index: int,
    bus_id: str,
    base_serial: str,
    product: str,
    base: ET.Element,
    overrides: dict[str, Any],
) -> dict[str, Any]:
    gpu_uuid = uuid.uuid5(_UUID_NAMESPACE, f"{host}/{index}")
    serial = base_serial
    if base_serial.isdigit() and base_serial.strip("0"):
        # Distinct per host and GPU, same width as the captured one.
        offset = uuid.uuid5(_UUID_NAMESPACE, host).int % 100000 * 16 + index
        serial = str(int(base_serial) + offset).zfill(len(base_serial))[-len(base_serial) :]
    gpu: dict[str, Any] = {
        "index": index,
        "bus_id": bus_id.upper(),
        "uuid": f"GPU-{gpu_uuid}",
        "serial": serial,
        "minor": index,
        "persistence_mode": "Disabled",
        "lost": bool(overrides.pop("lost", False)),
        "unknown_error": bool(overrides.pop("unknown_error", False)),
        "nvlink": dict(overrides.pop("nvlink", None) or {}),
        "mig": None,
        "processes": _build_processes(host, index, overrides.pop("processes", None)),
        "reset_unsupported": bool(overrides.pop("reset_unsupported", False)),
    }
    mig_spec = overrides.pop("mig", None)
    if mig_model.profiles_for(product):
        captured = (base.findtext("mig_mode/current_mig") or "").strip()
        gpu["mig"] = _build_mig(product, captured, mig_spec)
    elif mig_spec is not None:
        raise ProfileError(f"{host}: GPU {index} ({product}) does not support MIG")
    gpu["overrides"] = overrides
    return gpu


def _build_processes(host: str, index: int, spec: list[Any] | None) -> list[dict[str, Any]]:
    """Compute processes running on the GPU: ``[{pid, name}]``, with ``gpu_instance`` (a GPU
    instance id) for one that runs in a MIG device."""
    processes = []
    for entry in spec or []:
        entry = dict(entry)
        _check_keys(f"GPU {index} process", entry, PROCESS_KEYS)
        if not isinstance(entry.get("pid"), int) or not str(entry.get("name") or "").strip():
            raise ProfileError(f"{host}: GPU {index} processes need an integer pid and a name")
        process = {"pid": entry["pid"], "name": str(entry["name"])}
        if entry.get("gpu_instance") is not None:
            process["gpu_instance"] = int(entry["gpu_instance"])
        processes.append(process)
    return processes


def _build_mig(product: str, captured: str, spec: dict[str, Any] | None) -> dict[str, Any]:
    spec = dict(spec or {})
    _check_keys("mig", spec, {"current", "pending", "instances"})
    current = spec.get("current", "Disabled")
    state = {"current": current, "pending": spec.get("pending", current), "gpu_instances": []}
    for wanted in spec.get("instances", []):
        if current != "Enabled":
            raise ProfileError("MIG instances need MIG mode Enabled")
        try:
            gi = mig_model.create_gpu_instance(product, state, wanted)
        except mig_model.MigError as exc:
            raise ProfileError(f"MIG layout does not fit: {exc}") from exc
        mig_model.create_full_compute_instance(gi)
    return state


def _build_amd(profile: dict[str, Any]) -> dict[str, Any]:
    fixture = profile["rocm_json"]
    data = json.loads(read_fixture("rocm-smi", fixture))
    cards = [value for key, value in sorted(data.items()) if key.startswith("card")]
    return {
        "rocm_json": fixture,
        "driver": data.get("system", {}).get("Driver version"),
        "bus_ids": [card.get("PCI Bus", "") for card in cards],
        "device_id": cards[0].get("GPU ID", "0x0").lower().replace("0x", "") if cards else "",
    }


def _build_services(profile: dict[str, Any], state: State) -> dict[str, Any]:
    running = {"active": "active", "enabled": "enabled"}
    services: dict[str, Any] = {}
    if "nvidia" in state:
        services["nvidia-persistenced"] = dict(running)
        if state["nvidia"]["nvswitches"]:
            services["nvidia-fabricmanager"] = dict(running)
        if profile.get("dcgm", True):
            services["nvidia-dcgm"] = dict(running)
    for unit, value in profile.get("services", {}).items():
        if value is None:
            services.pop(unit, None)
        else:
            services[unit] = {**services.get(unit, running), **value}
    if "driver_not_loaded" in state["faults"]:
        # Every NVIDIA daemon fails to start without the kernel module.
        for unit in ("nvidia-persistenced", "nvidia-fabricmanager", "nvidia-dcgm"):
            if unit in services and services[unit]["enabled"] == "enabled":
                services[unit]["active"] = "failed"
    return services


def _build_packages(profile: dict[str, Any], state: State) -> tuple[list[Any], list[str]]:
    packages: list[dict[str, str]] = []
    held: list[str] = []
    if "nvidia" in state:
        version = state["nvidia"]["driver"]["installed"]
        branch = version.split(".")[0]
        names = [
            f"nvidia-driver-{branch}",
            f"nvidia-dkms-{branch}",
            f"nvidia-kernel-common-{branch}",
            f"nvidia-utils-{branch}",
            f"nvidia-compute-utils-{branch}",
            f"libnvidia-compute-{branch}",
        ]
        if "nvidia_smi_missing" in state["faults"]:
            names.remove(f"nvidia-utils-{branch}")
        if "nvidia-fabricmanager" in state["services"]:
            names += [f"nvidia-fabricmanager-{branch}", f"libnvidia-nscq-{branch}"]
        deb_version = f"{version}-0ubuntu1"
        packages = [{"name": n, "version": deb_version, "arch": "amd64"} for n in names]
        held = list(names)
        if "nvidia-dcgm" in state["services"]:
            packages.append(
                {"name": "datacenter-gpu-manager", "version": "1:3.3.5", "arch": "amd64"}
            )
    elif "amd" in state:
        driver = state["amd"]["driver"] or "6.2.4"
        packages = [
            {"name": "amdgpu-dkms", "version": f"1:{driver}.50701-1664922.22.04", "arch": "all"},
            {"name": "rocm-core", "version": "5.7.1.50701-98~22.04", "arch": "amd64"},
            {"name": "rocm-smi-lib", "version": "5.0.0.50701-98~22.04", "arch": "amd64"},
        ]
        held = ["amdgpu-dkms"]
    if not profile.get("packages_held", True):
        held = []
    return sorted(packages, key=lambda p: p["name"]), sorted(held)


def _build_repository(profile: dict[str, Any], state: State) -> dict[str, list[str]]:
    """What the host's apt sources offer: the NVIDIA packages the host was built with, at their
    versions (they stay offered once removed, so a rollback can return to them), and the
    ``repository`` list of driver versions, each offered for every NVIDIA driver package of its
    branch."""
    versions = profile.get("repository", [])
    if not isinstance(versions, list) or not all(isinstance(v, str) for v in versions):
        raise ProfileError(f"{state['name']}: repository must be a list of driver versions")
    offered: dict[str, list[str]] = {}
    nvidia = [p for p in state["packages"] if p["name"].startswith(("nvidia-", "libnv"))]
    for package in nvidia:
        offered.setdefault(package["name"], []).append(package["version"])
    installed = [p["name"] for p in nvidia]
    for version in versions:
        branch = version.split(".")[0]
        for name in installed:
            if name.rsplit("-", 1)[-1].isdigit():
                offered.setdefault(f"{name.rsplit('-', 1)[0]}-{branch}", []).append(
                    f"{version}-0ubuntu1"
                )
    return offered


def _build_device_nodes(profile: dict[str, Any], state: State) -> dict[str, Any]:
    spec = dict(profile.get("device_nodes", {}))
    _check_keys("device_nodes", spec, {"mode", "owner", "group", "modes"})
    names: list[str] = []
    group = "video"
    if "nvidia" in state:
        nvidia = state["nvidia"]
        if nvidia["driver"]["loaded"]:
            names = [f"nvidia{gpu['index']}" for gpu in nvidia["gpus"]]
            names += ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"]
            if nvidia["nvswitches"]:
                names.append("nvidia-nvswitchctl")
                names += [f"nvidia-nvswitch{i}" for i in range(nvidia["nvswitches"])]
    elif "amd" in state:
        group = "render"
        names = ["kfd"] + [f"dri/renderD{128 + i}" for i in range(len(state["amd"]["bus_ids"]))]
    mode = spec.get("mode", "660")
    nodes = {
        node: {"mode": mode, "owner": spec.get("owner", "root"), "group": spec.get("group", group)}
        for node in names
    }
    for node, node_mode in spec.get("modes", {}).items():
        if node not in nodes:
            raise ProfileError(f"device_nodes.modes names {node!r}, not a node of this host")
        nodes[node]["mode"] = node_mode
    return nodes


def _build_kernel_log(name: str, profile: dict[str, Any], state: State) -> list[str]:
    gpus = state.get("nvidia", {}).get("gpus", [])
    specs = list(profile.get("kernel_log", []))
    faults = state["faults"]
    # A huge log needs XIDs to sprinkle: a host with no log of its own gets the storm's.
    if "xid_storm" in faults or ("huge_kernel_log" in faults and not specs and gpus):
        gpu = int((faults.get("xid_storm") or {}).get("gpu", 0))
        specs.append({"fixture": _XID_STORM_FIXTURE, "gpus": [gpu]})
    return _kernel_log_lines(name, specs, state)


def _kernel_log_lines(name: str, specs: list[dict[str, Any]], state: State) -> list[str]:
    """Kernel-log lines from captured logs, each rewritten to name this host's GPUs."""
    gpus = state.get("nvidia", {}).get("gpus", [])
    lines: list[str] = []
    for spec in specs:
        _check_keys("kernel_log entry", spec, KERNEL_LOG_KEYS)
        captured = read_fixture("kernel-log", spec["fixture"]).splitlines()
        if "lines" in spec:
            first, last = spec["lines"]
            captured = captured[first - 1 : last]
        try:
            targets = [(gpus[i]["bus_id"], gpus[i]["uuid"]) for i in spec.get("gpus", [0])]
        except IndexError as exc:
            raise ProfileError(f"{name}: kernel_log names a GPU the host does not have") from exc
        lines += rewrite_kernel_lines(captured, targets, spec.get("xid"))
    return lines
