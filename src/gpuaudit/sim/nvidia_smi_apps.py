"""``nvidia-smi --query-compute-apps=… --format=csv`` for a simulated host: the compute
processes of the state's GPUs (a GPU's ``processes``), one CSV row each.

No process, no row: the header alone with ``csv``, nothing with ``csv,noheader``.
"""

from __future__ import annotations

from gpuaudit.sim.nvidia_smi import RC_INVALID

# Typing names for the checker only: importing typing costs each tool call milliseconds.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from gpuaudit.sim.state import State

# Field names nvidia-smi accepts here (``--help-query-compute-apps``), the synonyms mapped to one.
_ALIASES = {"name": "process_name", "used_memory": "used_gpu_memory"}
FIELDS = ("gpu_name", "gpu_bus_id", "gpu_serial", "gpu_uuid", "pid", "process_name",
          "used_gpu_memory")  # fmt: skip


def query_compute_apps(state: State, gpus: list[dict[str, Any]], fields_arg: str, fmt: str) -> int:
    from gpuaudit.sim.nvidia_smi_query import csv_query

    query = csv_query(fields_arg, fmt, lambda f: _ALIASES.get(f, f) in FIELDS)
    if query is None:
        return RC_INVALID
    fields, options = query
    if "noheader" not in options:
        print(", ".join(_header(field, "nounits" in options) for field in fields))
    product = state["nvidia"]["product"]
    for gpu in gpus:
        if gpu.get("lost"):
            continue
        for process in gpu.get("processes") or []:
            print(", ".join(_value(_ALIASES.get(f, f), gpu, process, product) for f in fields))
    return 0


def _header(field: str, nounits: bool) -> str:
    memory = _ALIASES.get(field, field) == "used_gpu_memory"
    return f"{field} [MiB]" if memory and not nounits else field


def _value(field: str, gpu: dict[str, Any], process: dict[str, Any], product: str) -> str:
    values = {
        "gpu_name": product,
        "gpu_bus_id": gpu["bus_id"],
        "gpu_serial": gpu["serial"],
        "gpu_uuid": gpu["uuid"],
        "pid": str(process["pid"]),
        "process_name": process["name"],
        # What a process on a MIG device shows; no capture of a whole-GPU value is packaged.
        "used_gpu_memory": "[N/A]",
    }
    return values[field]
