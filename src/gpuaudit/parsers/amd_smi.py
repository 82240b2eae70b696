"""`amd-smi static --json` and `amd-smi metric --json` → AMD :class:`Gpu` records.

amd-smi (ROCm 6 and later) succeeds rocm-smi. Its JSON is one object per GPU, keyed ``gpu``
(the index), with nested groups: ``asic``, ``bus``, ``vbios``, ``driver``, ``board``, ``limit``
and ``vram`` from ``static``; ``usage``, ``power``, ``temperature``, ``pcie``, ``ecc`` and
``mem_usage`` from ``metric``. Up to amd-smi 25 the GPU objects are the top-level list; from
26 they sit under ``{"gpu_data": [...]}``. Measured values are ``{"value": 16, "unit":
"GT/s"}`` objects, plain numbers, or the string ``"N/A"`` (also as the ``value`` of an object).

The collector prints the static and the metric document one after the other in one section,
so this parser reads any number of concatenated documents and merges each GPU's objects by
index: a host's static and metric views become one :class:`Gpu`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from gpuaudit.model.snapshot import EccCounts, Gpu, bus_key
from gpuaudit.parsers.errors import ParseError
from gpuaudit.parsers.rocm_smi import _GEN_BY_RATE as GEN_BY_RATE
from gpuaudit.parsers.values import UNREADABLE, FieldReader, clean, load_host_json
from gpuaudit.parsers.warnings import warn

WHAT = "amd-smi --json"
# (printed text, unit) of one value; (None, None) where the key is absent.
Raw = tuple[str | None, str | None]
_ABSENT: Raw = (None, None)
# amd-smi's "MB" are mebibytes: the library divides byte counts by 1024 * 1024.
_MIB_PER_UNIT = {"B": 1 / (1024 * 1024), "KB": 1 / 1024, "MB": 1, "MIB": 1, "GB": 1024, "GIB": 1024}
# Some releases print PCIe speeds in MT/s (16000) where others print GT/s (16).
_GT_PER_UNIT = {"GT/S": 1, "MT/S": 1 / 1000}


def parse_amd_smi_json(text: str) -> tuple[Gpu, ...]:
    """One :class:`Gpu` (vendor ``"amd"``) per GPU index found in the document(s), in order."""
    if not text or not text.strip():
        raise ParseError(WHAT, "empty output")
    merged: dict[int, dict[str, Any]] = {}
    for document in _documents(text):
        for entry in _entries(document, text):
            number = entry.get("gpu")
            if not isinstance(number, int) or isinstance(number, bool):
                raise ParseError(WHAT, "a GPU object has no integer 'gpu' index", text)
            _merge(merged.setdefault(number, {}), entry)
    if not merged:
        raise ParseError(WHAT, "no GPU objects", text)
    return tuple(_gpu(number, merged[number]) for number in sorted(merged))


# amd-smi prints some warnings on stdout before its JSON ("WARNING: User is missing the
# following required groups: render, video. ..."): lines before the first that opens a JSON
# value are not part of it.
_JSON_START = re.compile(r"^[ \t]*[\[{]", re.MULTILINE)


def _documents(text: str) -> list[Any]:
    documents = []
    first = _JSON_START.search(text)
    position = _skip_space(text, first.start() if first else 0)
    while position < len(text):
        try:
            document, position = load_host_json(text, position)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise ParseError(WHAT, f"not JSON: {exc}", text) from exc
        documents.append(document)
        position = _skip_space(text, position)
    return documents


def _skip_space(text: str, position: int) -> int:
    while position < len(text) and text[position].isspace():
        position += 1
    return position


def _entries(document: Any, text: str) -> list[dict[str, Any]]:
    if isinstance(document, dict) and "gpu_data" in document:
        document = document["gpu_data"]
    if not isinstance(document, list) or not all(isinstance(e, dict) for e in document):
        raise ParseError(WHAT, "not a list of GPU objects (nor one under 'gpu_data')", text)
    return document


def _merge(into: dict[str, Any], entry: dict[str, Any]) -> None:
    """Static and metric both have a ``clock`` group (levels vs current clocks): nested objects
    are merged key by key, and the first document's value wins where both have one."""
    for key, value in entry.items():
        mine = into.get(key)
        if isinstance(mine, dict) and isinstance(value, dict):
            _merge(mine, value)
        elif key not in into:
            into[key] = value


def _raw(obj: Any, *path: str) -> Raw:
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    unit = None
    if isinstance(obj, dict) and "value" in obj:
        unit, obj = obj.get("unit"), obj["value"]
    if obj is None or isinstance(obj, (dict, list)):
        return _ABSENT
    return str(obj), unit if isinstance(unit, str) else None


def _first(*raws: Raw) -> Raw:
    """The first real value; failing that, the first "no value" spelling (it says why)."""
    printed = [raw for raw in raws if raw[0] is not None and raw[0].strip()]
    return next(
        (raw for raw in printed if clean(raw[0]) is not None), printed[0] if printed else _ABSENT
    )


def _scaled(reader: FieldReader, field: str, raw: Raw, per_unit: dict[str, float]) -> float | None:
    amount = reader.as_float(field, raw[0])
    if amount is None:
        return None
    scale = per_unit.get((raw[1] or "").upper()) if raw[1] else 1
    if scale is None:  # a unit this parser does not know: the number alone would mislead
        warn(WHAT, f"unit {raw[1]!r} of {field} is not one this parser knows", text=raw[0] or "")
        reader.unavailable.setdefault(field, UNREADABLE)
        return None
    return amount * scale


def _mib(reader: FieldReader, field: str, raw: Raw) -> int | None:
    amount = _scaled(reader, field, raw, _MIB_PER_UNIT)
    return int(amount) if amount is not None else None


def _gen(reader: FieldReader, field: str, raw: Raw) -> int | None:
    rate = _scaled(reader, field, raw, _GT_PER_UNIT)
    if rate is None:
        return None
    gen = GEN_BY_RATE.get(rate)
    if gen is None:
        warn(WHAT, f"{field}: {rate:g} GT/s is no PCIe generation's rate", text=raw[0] or "")
        reader.unavailable.setdefault(field, UNREADABLE)
    return gen


def _gpu(number: int, entry: dict[str, Any]) -> Gpu:
    reader = FieldReader()
    # amd-smi 26 renamed the "vbios" group "ifwi".
    vbios = entry.get("vbios") if isinstance(entry.get("vbios"), dict) else entry.get("ifwi")
    ecc = EccCounts(
        corrected=reader.as_int(
            "ecc_volatile.corrected", _raw(entry, "ecc", "total_correctable_count")[0]
        ),
        uncorrected=reader.as_int(
            "ecc_volatile.uncorrected", _raw(entry, "ecc", "total_uncorrectable_count")[0]
        ),
    )
    return Gpu(
        index=number,
        vendor="amd",
        name=reader.as_text(
            "name",
            _first(_raw(entry, "asic", "market_name"), _raw(entry, "board", "product_name"))[0],
        ),
        serial=reader.as_text("serial", _raw(entry, "board", "product_serial")[0]),
        pci_bus_id=bus_key(reader.as_text("pci_bus_id", _raw(entry, "bus", "bdf")[0])),
        architecture=reader.as_text(
            "architecture", _raw(entry, "asic", "target_graphics_version")[0]
        ),
        # rocm-smi's "VBIOS version" and amdsmi's probe print the part number: the same value
        # keeps driver and firmware drift comparable whichever tool a host has.
        vbios_version=reader.as_text(
            "vbios_version", _first(_raw(vbios, "part_number"), _raw(vbios, "version"))[0]
        ),
        driver_version=reader.as_text("driver_version", _raw(entry, "driver", "version")[0]),
        memory_total_mib=_mib(
            reader,
            "memory_total_mib",
            _first(_raw(entry, "vram", "size"), _raw(entry, "mem_usage", "total_vram")),
        ),
        memory_used_mib=_mib(reader, "memory_used_mib", _raw(entry, "mem_usage", "used_vram")),
        ecc_volatile=ecc,
        temperature_c=reader.as_float(
            "temperature_c",
            _first(_raw(entry, "temperature", "edge"), _raw(entry, "temperature", "hotspot"))[0],
        ),
        temperature_slowdown_c=reader.as_float(
            "temperature_slowdown_c",
            _first(
                _raw(entry, "limit", "slowdown_edge_temperature"),
                _raw(entry, "limit", "slowdown_hotspot_temperature"),
            )[0],
        ),
        power_draw_w=reader.as_float("power_draw_w", _raw(entry, "power", "socket_power")[0]),
        # "socket_power" is the cap in force; "max_power" the most it may be set to.
        power_limit_w=reader.as_float(
            "power_limit_w",
            _first(_raw(entry, "limit", "socket_power"), _raw(entry, "limit", "max_power"))[0],
        ),
        utilization_gpu_pct=reader.as_float(
            "utilization_gpu_pct", _raw(entry, "usage", "gfx_activity")[0]
        ),
        pcie_gen_current=_gen(reader, "pcie_gen_current", _raw(entry, "pcie", "speed")),
        pcie_gen_max=_gen(reader, "pcie_gen_max", _raw(entry, "bus", "max_pcie_speed")),
        pcie_width_current=reader.as_int("pcie_width_current", _raw(entry, "pcie", "width")[0]),
        pcie_width_max=reader.as_int("pcie_width_max", _raw(entry, "bus", "max_pcie_width")[0]),
        pcie_replay_count=reader.as_int(
            "pcie_replay_count", _raw(entry, "pcie", "replay_count")[0]
        ),
        unavailable=reader.unavailable,
    )
