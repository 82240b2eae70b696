"""The simulated ``nvidia-smi``: queries answered from real captures, changes kept in the state.

Simulated: ``-q -x`` (``-i``), ``-L``, ``--query-gpu=… --format=csv[,noheader][,nounits]``,
``--query-compute-apps=…``, ``topo -m``, ``mig -lgi | -lci | -lgipp | -cgi … [-C] | -cci |
-dci | -dgi``,
``-pm 0|1``, ``-mig 0|1``, ``-r``. Anything else exits 2 with a message naming the simulator, so
a test that needs more fails loudly instead of parsing a made-up answer. Messages are the
driver's own words.

A GPU reset is refused while anything holds the GPU: a compute process on it, persistence mode
(nvidia-persistenced, or ``-pm 1``), a monitoring daemon (DCGM, nvsm), the ``nvidia_drm``
module (fault ``nvidia_drm_loaded``), or a platform that does not allow resets (GPU override
``reset_unsupported``, as under passthrough). On Ampere a MIG mode change takes effect through
a reset the driver tries itself, so it stays pending while the GPU is held; Hopper and later
apply it at once, unless a compute process runs on the GPU.
"""

from __future__ import annotations

import sys
from pathlib import Path

from gpuaudit.sim.fixtures import render_topology
from gpuaudit.sim.state import (
    driver_answers,
    edit_state,
    fault_param,
    gpu_reset,
    hang_if_wedged,
    has_fault,
    load_state,
    mig_mode_needs_reset,
    record_event,
    select_gpus,
    visible_gpus,
)

# Typing names for the checker only: importing typing costs each tool call milliseconds.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from gpuaudit.sim.state import State

DRIVER_NOT_LOADED = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running."
)
INVALID_ARGS = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help."
RC_INVALID, RC_NOT_SUPPORTED, RC_NOT_FOUND, RC_DRIVER, RC_GPU_LOST, RC_MISMATCH = 2, 3, 6, 9, 15, 18
RC_UNKNOWN = 255
# Daemons that keep a handle open on every GPU, so a GPU reset (and an Ampere MIG mode change)
# is refused while they run: NVIDIA's MIG user guide ("Driver Clients": nvsm, dcgm),
# NVIDIA/gpu-operator#118 (nvidia-persistenced), mig-parted's hooks (dcgm-exporter).
GPU_HOLDERS = ("nvidia-persistenced", "nvidia-dcgm", "dcgm", "dcgm-exporter", "nvsm")
IN_USE = "In use by another client"

_VALUE_OPTIONS = {
    "-i": "id", "--id": "id", "-pm": "pm", "--persistence-mode": "pm", "-mig": "mig",
    "--multi-instance-gpu": "mig", "--query-gpu": "query_gpu", "--format": "format",
    "-cgi": "cgi", "--create-gpu-instance": "cgi", "-cci": "cci",
    "--create-compute-instance": "cci", "-gi": "gi", "--gpu-instance-id": "gi",
    "-ci": "ci", "--compute-instance-id": "ci", "-d": "display", "--display": "display",
    "-f": "filename", "--filename": "filename", "--query-compute-apps": "query_apps",
}  # fmt: skip
_FLAG_OPTIONS = {
    "-q": "query", "--query": "query", "-x": "xml", "--xml-format": "xml", "-L": "list",
    "--list-gpus": "list", "-r": "reset", "--gpu-reset": "reset", "-m": "matrix",
    "--matrix": "matrix", "-lgi": "lgi", "--list-gpu-instances": "lgi", "-lci": "lci",
    "-lgipp": "lgipp", "--list-gpu-instance-possible-placements": "lgipp",
    "--list-compute-instances": "lci", "-C": "default_ci", "--default-compute-instance":
    "default_ci", "-dci": "dci", "--destroy-compute-instance": "dci", "-dgi": "dgi",
    "--destroy-gpu-instance": "dgi", "-h": "help", "--help": "help", "-s": "status",
    "--status": "status", "-e": "errorcounters", "--errorcounters": "errorcounters",
}  # fmt: skip


class Usage(Exception):
    """Arguments the simulator cannot answer; the message goes to stderr."""

    def __init__(self, message: str = INVALID_ARGS, rc: int = RC_INVALID) -> None:
        super().__init__(message)
        self.rc = rc


def run(argv: list[str], state_path: Path) -> int:
    try:
        command, opts = _parse(argv)
    except Usage as exc:
        print(str(exc), file=sys.stderr)
        return exc.rc
    state = load_state(state_path)
    if not state.get("nvidia") or not driver_answers(state):
        print(DRIVER_NOT_LOADED)
        return RC_DRIVER
    hang_if_wedged(state, "nvidia-smi")
    driver = state["nvidia"]["driver"]
    if driver["installed"] != driver["loaded"]:
        print("Failed to initialize NVML: Driver/library version mismatch")
        print("NVML library version: " + ".".join(driver["installed"].split(".")[:2]))
        return RC_MISMATCH
    try:
        return _dispatch(command, opts, state, state_path)
    except Usage as exc:
        print(str(exc), file=sys.stderr)
        return exc.rc


def _parse(argv: list[str]) -> tuple[str, dict[str, Any]]:
    command = ""
    args = list(argv)
    if args and args[0] in ("topo", "mig", "nvlink"):
        command = args.pop(0)
    opts: dict[str, Any] = {}
    while args:
        arg = args.pop(0)
        name, eq, inline = arg.partition("=")
        if name in _VALUE_OPTIONS:
            if not eq:
                if not args:
                    raise Usage()
                inline = args.pop(0)
            opts[_VALUE_OPTIONS[name]] = inline
        elif arg in _FLAG_OPTIONS:
            opts[_FLAG_OPTIONS[arg]] = True
        else:
            raise Usage()
    return command, opts


def _not_simulated(argv_hint: str) -> Usage:
    return Usage(f"nvidia-smi (gpuaudit simulator): {argv_hint} is not simulated", RC_INVALID)


def _dispatch(command: str, opts: dict[str, Any], state: State, state_path: Path) -> int:
    if command == "topo":
        if opts.keys() != {"matrix"}:
            raise _not_simulated("this topo query")
        topology = state["nvidia"].get("topology")
        if not topology:
            raise _not_simulated("topo -m for this host")
        count = len(state["nvidia"]["gpus"])
        sys.stdout.write(render_topology(topology["fixture"], count, topology.get("replace")))
        return 0
    if command == "nvlink":
        return _nvlink(opts, state)
    if command == "mig":
        from gpuaudit.sim.nvidia_smi_mig import run_mig

        return run_mig(opts, state, state_path)
    if opts.get("help") or "display" in opts or "filename" in opts:
        raise _not_simulated("this option")
    if "pm" in opts or "mig" in opts or opts.get("reset"):
        return _change(opts, state_path)
    gpus = _selected(state, opts.get("id"))
    if opts.keys() <= {"query", "xml", "id"} and opts.get("query") and opts.get("xml"):
        from gpuaudit.sim.nvxml import faulty_output, render_xml

        sys.stdout.flush()
        sys.stdout.buffer.write(faulty_output(state, render_xml(state, gpus)))
        if has_fault(state, "truncated_xml"):
            return int(fault_param(state, "truncated_xml", "rc", 0))
        # A GPU answering "Unknown Error" still gets its element, but the query failed.
        failed = any(gpu.get("unknown_error") and not gpu.get("lost") for gpu in gpus)
        return _report_lost(gpus) or (RC_UNKNOWN if failed else 0)
    if opts.keys() <= {"list", "id"} and opts.get("list"):
        _list_gpus(state, gpus)
        return _report_lost(gpus)
    if "query_gpu" in opts:
        from gpuaudit.sim.nvidia_smi_query import query_gpu

        rc = query_gpu(state, gpus, opts["query_gpu"], opts.get("format", ""))
        return rc or _report_lost(gpus)
    if "query_apps" in opts and opts.keys() <= {"query_apps", "format", "id"}:
        from gpuaudit.sim.nvidia_smi_apps import query_compute_apps

        return query_compute_apps(state, gpus, opts["query_apps"], opts.get("format", ""))
    raise _not_simulated("this invocation")


def _nvlink(opts: dict[str, Any], state: State) -> int:
    """``nvlink -s`` (link speeds, ``<inactive>``) and ``nvlink -e`` (per-link error counters),
    in nvidia-smi's layout: a ``GPU n:`` header, then one tab-indented line per link value."""
    if not (opts.keys() - {"id"}) or not opts.keys() <= {"status", "errorcounters", "id"}:
        raise _not_simulated("this nvlink query")
    links = state["nvidia"].get("nvlink") or {"links": 0, "speed_gb_s": 0.0}
    product = state["nvidia"]["product"]
    gpus = _selected(state, opts.get("id"))
    for gpu in gpus:
        if gpu.get("lost"):
            continue
        print(f"GPU {gpu['index']}: {product} (UUID: {gpu['uuid']})")
        faults = gpu.get("nvlink") or {}
        inactive = {int(n) for n in faults.get("inactive", [])}
        errors = {int(k): v for k, v in (faults.get("errors") or {}).items()}
        for link in range(links["links"]):
            if opts.get("status"):
                speed = "<inactive>" if link in inactive else f"{links['speed_gb_s']:g} GB/s"
                print(f"\t Link {link}: {speed}")
            if opts.get("errorcounters"):
                counts = errors.get(link, {})
                for counter in ("Replay", "Recovery", "CRC"):
                    print(f"\t Link {link}: {counter} Errors: {int(counts.get(counter, 0))}")
    return _report_lost(gpus)


def _selected(state: State, selector: str | None) -> list[dict[str, Any]]:
    try:
        return select_gpus(state, selector)
    except LookupError as exc:
        raise Usage(f"No devices were found matching {exc}", RC_NOT_FOUND) from exc


def _report_lost(gpus: list[dict[str, Any]]) -> int:
    lost = [gpu for gpu in gpus if gpu.get("lost")]
    for gpu in lost:
        bus = gpu["bus_id"][4:]
        print(f"Unable to determine the device handle for GPU{bus}: Unknown Error", file=sys.stderr)
    return RC_GPU_LOST if lost else 0


def _list_gpus(state: State, gpus: list[dict[str, Any]]) -> None:
    product = state["nvidia"]["product"]
    for gpu in gpus:
        if gpu.get("lost"):
            continue
        print(f"GPU {gpu['index']}: {product} (UUID: {gpu['uuid']})")
        mig = gpu.get("mig")
        if not mig or mig["current"] != "Enabled":
            continue
        device = 0
        for gi in mig["gpu_instances"]:
            for ci in gi["compute_instances"]:
                mig_uuid = _mig_uuid(gpu["uuid"], gi["id"], ci["id"])
                print(f"  MIG {gi['profile']:<11} Device {device:>2}: (UUID: {mig_uuid})")
                device += 1


def _mig_uuid(gpu_uuid: str, gi: int, ci: int) -> str:
    import uuid

    return "MIG-" + str(uuid.uuid5(uuid.UUID(gpu_uuid[4:]), f"{gi}/{ci}"))


def reset_blockers(state: State, gpu: dict[str, Any]) -> list[str]:
    """What holds the GPU so that a reset of it would be refused (empty: it can be reset)."""
    services = state.get("services", {})
    held = [f"{unit} is running" for unit in GPU_HOLDERS
            if services.get(unit, {}).get("active") == "active"]  # fmt: skip
    if has_fault(state, "nvidia_drm_loaded"):
        held.append("nvidia_drm is loaded")
    if gpu.get("persistence_mode") == "Enabled":
        held.append("persistence mode is on")
    if gpu.get("processes"):
        held.append(f"{len(gpu['processes'])} compute process(es)")
    return held


def _change(opts: dict[str, Any], state_path: Path) -> int:
    with edit_state(state_path) as state:
        gpus = _selected(state, opts.get("id"))
        if "pm" in opts:
            return _set_persistence(state, gpus, _on_off(opts["pm"]))
        if "mig" in opts:
            return _set_mig_mode(state, gpus, _on_off(opts["mig"]))
        return _reset(state, gpus)


def _on_off(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("1", "enabled", "enable"):
        return True
    if lowered in ("0", "disabled", "disable"):
        return False
    raise Usage()


def _set_persistence(state: State, gpus: list[dict[str, Any]], enable: bool) -> int:
    word = "Enabled" if enable else "Disabled"
    for gpu in visible_gpus(state):
        if gpu not in gpus:
            continue
        if gpu["persistence_mode"] == word:
            print(f"Persistence mode is already {word} for GPU {gpu['bus_id']}.")
        else:
            print(f"{word} persistence mode for GPU {gpu['bus_id']}.")
        gpu["persistence_mode"] = word
        gpu["persistence_pinned"] = True
    record_event(state, f"nvidia-smi -pm {int(enable)} ({len(gpus)} GPUs)")
    print("All done.")
    return 0


def _set_mig_mode(state: State, gpus: list[dict[str, Any]], enable: bool) -> int:
    word, verb = ("Enabled", "enable") if enable else ("Disabled", "disable")
    needs_reset = mig_mode_needs_reset(state)
    for gpu in gpus:
        mig = gpu.get("mig")
        bus = gpu["bus_id"]
        if mig is None or gpu.get("lost"):
            print(f"Unable to {verb} MIG Mode for GPU {bus}: Not Supported")
            print("Terminating early due to previous errors.")
            return RC_NOT_SUPPORTED
        if not enable and mig["gpu_instances"]:
            print(f"Unable to {verb} MIG Mode for GPU {bus}: {IN_USE}")
            print("Terminating early due to previous errors.")
            return RC_UNKNOWN
        mig["pending"] = word
        record_event(state, f"nvidia-smi -i {gpu['index']} -mig {int(enable)}")
        if mig["current"] == word:
            print(f"{word} MIG Mode for GPU {bus}")
            continue
        if needs_reset and gpu.get("reset_unsupported"):
            # The driver's own reset is refused by the platform (MIG user guide, passthrough).
            print(f"Warning: MIG mode is in pending {verb} state for GPU {bus}:Not Supported")
            print(
                f"Reboot the system or try nvidia-smi --gpu-reset to make MIG mode effective "
                f"on GPU {bus}"
            )
        elif reset_blockers(state, gpu) if needs_reset else gpu.get("processes"):
            print(f"Warning: MIG mode is in pending {verb} state for GPU {bus}:{IN_USE}")
            print(
                f"{bus} is currently being used by one or more other processes (e.g. "
                "CUDA application or a monitoring application such as another instance of "
                "nvidia-smi). Please first kill all processes using the device and retry the "
                "command or reboot the system to make MIG mode effective."
            )
        else:
            print(f"{word} MIG Mode for GPU {bus}")
            mig["current"] = word
            mig["gpu_instances"] = []
    print("All done.")
    return 0


def _reset(state: State, gpus: list[dict[str, Any]]) -> int:
    unsupported = [gpu for gpu in gpus if gpu.get("reset_unsupported")]
    if unsupported:
        print(f"Resetting GPU {unsupported[0]['bus_id']} is not supported.")
        return RC_NOT_SUPPORTED
    held = [gpu for gpu in gpus if reset_blockers(state, gpu)]
    if held:
        # The wording of drivers 450-535 (NVIDIA/gpu-operator#118, NVIDIA/mig-parted#181).
        for gpu in held:
            print(f"GPU {gpu['bus_id']} is currently in use by another process.")
        print()
        devices, these = (
            ("1 device is", "this device") if len(held) == 1
            else (f"{len(held)} devices are", "these devices")
        )  # fmt: skip
        print(
            f"{devices} currently being used by one or more other processes (e.g., Fabric "
            "Manager, CUDA application, graphics application such as an X server, or a "
            f"monitoring application such as another instance of nvidia-smi). Please first kill "
            f"all processes using {these} and all compute applications running in the system."
        )
        record_event(state, f"nvidia-smi -r refused ({len(held)} GPUs held)")
        return RC_UNKNOWN
    for gpu in gpus:
        gpu_reset(gpu)
        print(f"GPU {gpu['bus_id']} was successfully reset.")
        record_event(state, f"nvidia-smi -i {gpu['index']} -r")
    print("All done.")
    return 0


def mig_gpus(state: State, selector: str | None) -> list[dict[str, Any]]:
    """GPUs a ``mig`` subcommand acts on: the selected ones whose MIG mode is on."""
    return [
        gpu
        for gpu in _selected(state, selector)
        if gpu.get("mig") and gpu["mig"]["current"] == "Enabled" and not gpu.get("lost")
    ]
