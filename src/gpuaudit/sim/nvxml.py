"""``nvidia-smi -q -x`` for a simulated host: a real captured XML with this host's values.

The base file is one packaged capture (trusted data shipped with gpuaudit, so the standard
library parser is fine here; host output is read elsewhere with defusedxml). Its first
``<gpu>`` element is the template: it is copied once per GPU of the host and each copy gets
the GPU's bus id, UUID, serial, minor number and the state's overrides (persistence mode,
MIG mode and devices, remapped rows, PCIe link, clock event reasons, ECC counts, any element
by path). Everything else (element order, names of the DTD version, whitespace) is the
capture's own.
"""

from __future__ import annotations

import copy
import itertools
import re
import time
import xml.etree.ElementTree as ET

from gpuaudit.sim import mig as mig_model
from gpuaudit.sim.fixtures import read_fixture
from gpuaudit.sim.state import fault_param, has_fault

# Typing names for the checker only: importing typing costs each tool call milliseconds.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from gpuaudit.sim.state import State

# Row remapping is reported by Ampere and later datacenter GPUs; captures made with MIG on
# print "N/A" for it. This capture's block (same driver generation) is grafted where needed.
_REMAP_TEMPLATE_FIXTURE = "telegraf-a10g-driver515.xml"
# A GPU whose NVML queries fail with NVML_ERROR_UNKNOWN (the table prints ERR!): what the driver
# caches (name, UUID, serial, bus id, minor number) still prints; every reading taken from the
# device prints "Unknown Error", in each leaf of these elements.
_UNKNOWN_ERROR_PATHS = (
    "product_brand", "fan_speed", "performance_state", "fb_memory_usage", "bar1_memory_usage",
    "utilization", "ecc_mode", "ecc_errors", "retired_pages", "remapped_rows", "temperature",
    "gpu_power_readings", "power_readings", "clocks", "clocks_event_reasons",
    "clocks_throttle_reasons", "pci/pci_gpu_link_info", "pci/replay_counter",
)  # fmt: skip
UNKNOWN_ERROR = "Unknown Error"
_DOCTYPE = re.compile(r"<!DOCTYPE[^>]*>")
# Ten entities each ten times the one before: expanding the last one would take 3 GB.
_ENTITY_NAMES = ["lol"] + [f"lol{i}" for i in range(1, 10)]
_ENTITY_BOMB = "\n".join(
    [
        "<!DOCTYPE nvidia_smi_log [",
        ' <!ENTITY lol "lol">',
        *(
            f' <!ENTITY {name} "{f"&{smaller};" * 10}">'
            for smaller, name in itertools.pairwise(_ENTITY_NAMES)
        ),
        "]>",
    ]
)


def render_xml(state: State, selected: list[dict[str, Any]] | None = None) -> str:
    nvidia = state["nvidia"]
    text = read_fixture("nvidia-smi-xml", nvidia["xml"])
    header = text[: text.index("<nvidia_smi_log")]
    root = ET.fromstring(text)
    templates = root.findall("gpu")
    template = templates[0]
    position = list(root).index(template)
    gpu_tail = template.tail
    for old in templates:
        root.remove(old)

    base_driver = _text(root, "driver_version")
    driver = nvidia["driver"]
    _set(root, "timestamp", time.strftime("%a %b %e %H:%M:%S %Y"))
    _set(root, "driver_version", driver["loaded"])
    if driver.get("cuda"):
        _set(root, "cuda_version", driver["cuda"])
    _set(root, "attached_gpus", str(len(nvidia["gpus"])))

    wanted = selected if selected is not None else nvidia["gpus"]
    shown = [gpu for gpu in wanted if not gpu.get("lost")]
    for offset, gpu in enumerate(shown):
        element = copy.deepcopy(template)
        element.tail = gpu_tail
        _apply_identity(element, gpu, len(nvidia["gpus"]))
        if base_driver and _text(element, "gsp_firmware_version") == base_driver:
            _set(element, "gsp_firmware_version", driver["loaded"])
        _apply_gpu_state(element, gpu)
        root.insert(position + offset, element)
    if shown:
        root[position + len(shown) - 1].tail = gpu_tail
    return header + ET.tostring(root, encoding="unicode") + "\n"


def _apply_identity(element: ET.Element, gpu: dict[str, Any], gpu_count: int) -> None:
    bus_id: str = gpu["bus_id"]
    domain, bus, devfn = bus_id.split(":")
    element.set("id", bus_id)
    _set(element, "pci/pci_bus_id", bus_id)
    _set(element, "pci/pci_bus", bus)
    _set(element, "pci/pci_device", devfn.split(".")[0])
    _set(element, "pci/pci_domain", domain[-4:])
    _set(element, "uuid", gpu["uuid"])
    _set(element, "serial", gpu["serial"])
    _set(element, "minor_number", str(gpu["minor"]))
    if gpu_count > 1 and element.find("gpu_module_id") is not None:
        _set(element, "gpu_module_id", str(gpu["index"] + 1))


def _apply_gpu_state(element: ET.Element, gpu: dict[str, Any]) -> None:
    _set(element, "persistence_mode", gpu["persistence_mode"])
    if gpu.get("mig") is not None:
        _apply_mig(element, gpu["mig"])
    overrides: dict[str, Any] = gpu.get("overrides", {})
    if "remapped_rows" in overrides:
        _apply_remapped_rows(element, overrides["remapped_rows"])
    if "pcie" in overrides:
        _apply_pcie(element, overrides["pcie"])
    for reason, value in overrides.get("clock_reasons", {}).items():
        _apply_clock_reason(element, reason, value)
    for key, value in overrides.get("utilization", {}).items():
        _set(element, f"utilization/{key}", value)
    if "performance_state" in overrides:
        _set(element, "performance_state", overrides["performance_state"])
        _set(element, "gpu_power_readings/power_state", overrides["performance_state"], True)
    for scope, counts in overrides.get("ecc", {}).items():
        for path, value in counts.items():
            _set(element, f"ecc_errors/{scope}/{path}", str(value))
    for path, value in overrides.get("xml_set", {}).items():
        _set(element, path, str(value))
    if gpu.get("unknown_error"):
        for path in _UNKNOWN_ERROR_PATHS:
            for block in element.findall(path):
                for leaf in block.iter():
                    if len(leaf) == 0:
                        leaf.text = UNKNOWN_ERROR


def faulty_output(state: State, text: str) -> bytes:
    """The bytes ``-q -x`` prints on a sick host, from the clean ``text``: entity declarations,
    a byte that is not UTF-8 in a GPU's name, then the cut a killed or crashed nvidia-smi
    leaves (in that order, as the faults stack)."""
    if has_fault(state, "xml_entities"):
        text = _DOCTYPE.sub("", text, count=1)
        head, _, body = text.partition("?>")
        text = f"{head}?>\n{_ENTITY_BOMB}{body}".replace(
            "<product_name>", "<product_name>&lol9;", 1
        )
    data = text.encode("utf-8")
    if has_fault(state, "non_utf8"):
        data = _latin1_in_product_name(data, int(fault_param(state, "non_utf8", "gpu", 0)))
    if has_fault(state, "truncated_xml"):
        fraction = float(fault_param(state, "truncated_xml", "fraction", 0.5))
        data = data[: int(len(data) * fraction)]
    return data


def _latin1_in_product_name(data: bytes, position: int) -> bytes:
    """A Latin-1 "®" (one byte, 0xAE) after the name of the GPU at ``position`` in the output,
    as a VBIOS string written in Latin-1 shows up."""
    at = -1
    for _ in range(position + 1):
        at = data.find(b"<product_name>", at + 1)
        if at < 0:
            return data
    end = data.find(b"</product_name>", at)
    return data[:end] + b"\xae" + data[end:]


def _apply_mig(element: ET.Element, mig: dict[str, Any]) -> None:
    _set(element, "mig_mode/current_mig", mig["current"])
    _set(element, "mig_mode/pending_mig", mig["pending"])
    devices = element.find("mig_devices")
    if devices is None:
        return
    template = devices.find("mig_device")
    # Keep the capture's indentation: the leading whitespace of the block's text is the
    # children's indent, the whitespace before the closing tag is the block's own.
    text = devices.text or ""
    inner = text[: len(text) - len(text.lstrip())]
    outer = devices[-1].tail if len(devices) else text[len(text.rstrip()) :]
    outer = outer or ""
    for child in list(devices):
        devices.remove(child)
    product = _text(element, "product_name") or ""
    rows = _mig_device_rows(product, mig) if mig["current"] == "Enabled" else []
    if not rows or template is None:
        devices.text = f"{inner}None{outer}"
        return
    devices.text = inner
    per_slice = _per_slice(template, product)
    for index, (gi, ci, profile) in enumerate(rows):
        device = copy.deepcopy(template)
        _set(device, "index", str(index))
        _set(device, "gpu_instance_id", str(gi["id"]))
        _set(device, "compute_instance_id", str(ci["id"]))
        sm, mem_mib = per_slice
        _set(
            device,
            "device_attributes/shared/multiprocessor_count",
            str(sm * profile.compute_slices),
        )
        total = mem_mib * profile.memory_slices
        used = int((_text(device, "fb_memory_usage/used") or "0 MiB").split()[0])
        _set(device, "fb_memory_usage/total", f"{total} MiB")
        _set(device, "fb_memory_usage/free", f"{total - used - 1} MiB", True)
        device.tail = inner
        devices.append(device)
    devices[-1].tail = outer


def _mig_device_rows(product: str, mig: dict[str, Any]) -> list[tuple[Any, Any, Any]]:
    rows: list[tuple[Any, Any, Any]] = []
    for gi in mig["gpu_instances"]:
        profile = mig_model.find_profile(product, gi["profile"])
        rows.extend((gi, ci, profile) for ci in gi["compute_instances"])
    return rows


def _per_slice(template: ET.Element, product: str) -> tuple[int, int]:
    """SMs per compute slice and MiB per memory slice, from the captured MIG device."""
    gi_id = int(_text(template, "gpu_instance_id") or "0")
    sm = int(_text(template, "device_attributes/shared/multiprocessor_count") or "0")
    total = int((_text(template, "fb_memory_usage/total") or "0 MiB").split()[0])
    for profile in mig_model.profiles_for(product):
        for start in profile.starts:
            if mig_model.gi_id_for(profile, start) == gi_id and profile.compute_slices == 1:
                return sm, total // profile.memory_slices
    return sm, total


def _apply_remapped_rows(element: ET.Element, remap: dict[str, Any]) -> None:
    block = element.find("remapped_rows")
    if block is None:
        return
    if len(block) == 0:
        donor = ET.fromstring(read_fixture("nvidia-smi-xml", _REMAP_TEMPLATE_FIXTURE))
        grafted = donor.find("gpu/remapped_rows")
        if grafted is None:
            return
        block.text, block[:] = grafted.text, list(grafted)
    fields = {
        "remapped_row_corr": remap.get("correctable", 0),
        "remapped_row_unc": remap.get("uncorrectable", 0),
        "remapped_row_pending": "Yes" if remap.get("pending") else "No",
        "remapped_row_failure": "Yes" if remap.get("failure") else "No",
    }
    for tag, value in fields.items():
        _set(block, tag, str(value), True)
    for level, banks in remap.get("histogram", {}).items():
        _set(
            block,
            f"row_remapper_histogram/row_remapper_histogram_{level}",
            f"{banks} bank(s)",
            True,
        )


def _apply_pcie(element: ET.Element, pcie: dict[str, Any]) -> None:
    link = "pci/pci_gpu_link_info"
    if "gen_current" in pcie:
        _set(element, f"{link}/pcie_gen/current_link_gen", str(pcie["gen_current"]))
        _set(element, f"{link}/pcie_gen/device_current_link_gen", str(pcie["gen_current"]), True)
    if "gen_max" in pcie:
        _set(element, f"{link}/pcie_gen/max_link_gen", str(pcie["gen_max"]))
    if "width_current" in pcie:
        _set(element, f"{link}/link_widths/current_link_width", f"{pcie['width_current']}x")
    if "width_max" in pcie:
        _set(element, f"{link}/link_widths/max_link_width", f"{pcie['width_max']}x")
    if "replay_counter" in pcie:
        _set(element, "pci/replay_counter", str(pcie["replay_counter"]))


def _apply_clock_reason(element: ET.Element, reason: str, value: str) -> None:
    # DTD v12+ says clocks_event_reasons, older ones clocks_throttle_reasons.
    for group, prefix in (
        ("clocks_event_reasons", "clocks_event_reason_"),
        ("clocks_throttle_reasons", "clocks_throttle_reason_"),
    ):
        target = element.find(f"{group}/{prefix}{reason}")
        if target is not None:
            target.text = value
            return
    raise KeyError(f"no clock reason {reason!r} in this XML")


def _text(element: ET.Element, path: str) -> str | None:
    found = element.find(path)
    return None if found is None else (found.text or "").strip()


def _set(element: ET.Element, path: str, value: str, optional: bool = False) -> None:
    found = element.find(path)
    if found is None:
        if optional:
            return
        raise KeyError(f"no element {path!r} in this XML")
    found.text = value
