"""``nvidia-smi --query-gpu=… --format=csv`` for a simulated host: a subset of the fields,
read from the same rendered XML as ``-q -x`` so both views always agree."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET

from gpuaudit.sim.nvidia_smi import RC_INVALID
from gpuaudit.sim.nvxml import render_xml

# Typing names for the checker only: importing typing costs each tool call milliseconds.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from gpuaudit.sim.state import State

_LINK = "pci/pci_gpu_link_info"
# field → (XML paths tried in order, unit shown in the header and after values)
FIELDS: dict[str, tuple[tuple[str, ...], str | None]] = {
    "name": (("product_name",), None),
    "uuid": (("uuid",), None),
    "serial": (("serial",), None),
    "pci.bus_id": (("pci/pci_bus_id",), None),
    "pci.device_id": (("pci/pci_device_id",), None),
    "vbios_version": (("vbios_version",), None),
    "persistence_mode": (("persistence_mode",), None),
    "pstate": (("performance_state",), None),
    "mig.mode.current": (("mig_mode/current_mig",), None),
    "mig.mode.pending": (("mig_mode/pending_mig",), None),
    "ecc.mode.current": (("ecc_mode/current_ecc",), None),
    "memory.total": (("fb_memory_usage/total",), "MiB"),
    "memory.used": (("fb_memory_usage/used",), "MiB"),
    "memory.free": (("fb_memory_usage/free",), "MiB"),
    "utilization.gpu": (("utilization/gpu_util",), "%"),
    "utilization.memory": (("utilization/memory_util",), "%"),
    "temperature.gpu": (("temperature/gpu_temp",), None),
    "power.draw": (("gpu_power_readings/power_draw", "power_readings/power_draw"), "W"),
    "pcie.link.gen.current": ((f"{_LINK}/pcie_gen/current_link_gen",), None),
    "pcie.link.gen.max": ((f"{_LINK}/pcie_gen/max_link_gen",), None),
    "pcie.link.width.current": ((f"{_LINK}/link_widths/current_link_width",), None),
    "pcie.link.width.max": ((f"{_LINK}/link_widths/max_link_width",), None),
    "clocks_event_reasons.hw_slowdown": (
        (
            "clocks_event_reasons/clocks_event_reason_hw_slowdown",
            "clocks_throttle_reasons/clocks_throttle_reason_hw_slowdown",
        ),
        None,
    ),
}
ALIASES = {
    "gpu_name": "name",
    "gpu_uuid": "uuid",
    "gpu_serial": "serial",
    "gpu_bus_id": "pci.bus_id",
}


def csv_query(
    fields_arg: str, fmt: str, known: Callable[[str], bool]
) -> tuple[list[str], set[str]] | None:
    """The fields and ``--format`` options of a ``--query-*`` call; None (after printing
    nvidia-smi's message) when the format is not CSV or a field is unknown."""
    options = {part.strip() for part in fmt.split(",")}
    if "csv" not in options:
        print('"--format" must include csv in the simulator', file=sys.stderr)
        return None
    fields = [field.strip() for field in fields_arg.split(",") if field.strip()]
    for field in fields:
        if not known(field):
            print(f'Field "{field}" is not a valid field to query.')
            return None
    return fields, options


def query_gpu(state: State, gpus: list[dict[str, Any]], fields_arg: str, fmt: str) -> int:
    query = csv_query(
        fields_arg,
        fmt,
        lambda f: f in ("index", "count", "driver_version") or ALIASES.get(f, f) in FIELDS,
    )
    if query is None:
        return RC_INVALID
    fields, options = query
    root = ET.fromstring(render_xml(state, gpus))
    if "noheader" not in options:
        print(", ".join(_header(field, "nounits" in options) for field in fields))
    shown = [gpu for gpu in gpus if not gpu.get("lost")]
    for gpu, element in zip(shown, root.findall("gpu"), strict=True):
        row = [_value(field, gpu, element, root, len(state["nvidia"]["gpus"])) for field in fields]
        if "nounits" in options:
            row = [_strip_unit(field, value) for field, value in zip(fields, row, strict=True)]
        print(", ".join(row))
    return 0


def _header(field: str, nounits: bool) -> str:
    unit = FIELDS.get(ALIASES.get(field, field), ((), None))[1]
    return f"{field} [{unit}]" if unit and not nounits else field


def _value(
    field: str, gpu: dict[str, Any], element: ET.Element, root: ET.Element, count: int
) -> str:
    if field == "index":
        return str(gpu["index"])
    if field == "count":
        return str(count)
    if field == "driver_version":
        return (root.findtext("driver_version") or "").strip()
    paths, _ = FIELDS[ALIASES.get(field, field)]
    for path in paths:
        found = element.find(path)
        if found is not None:
            text = (found.text or "").strip()
            if field.startswith("pcie.link.width"):
                text = text.rstrip("x")
            if field == "temperature.gpu":
                text = text.replace(" C", "")
            if field == "pci.device_id" and not text.startswith("0x"):
                text = f"0x{text}"  # the CSV spells it 0x20B210DE, the XML 20B210DE
            # The CSV brackets the "no value" spellings: [N/A], [Unknown Error].
            return f"[{text}]" if text in ("N/A", "Unknown Error") else text
    return "[N/A]"


def _strip_unit(field: str, value: str) -> str:
    unit = FIELDS.get(ALIASES.get(field, field), ((), None))[1]
    return value.removesuffix(f" {unit}") if unit else value
