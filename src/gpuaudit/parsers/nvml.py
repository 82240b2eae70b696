"""The device probe's JSON (section ``nvml``) → the same :class:`Gpu` records the CLI parsers give.

The probe (``gpuaudit/collect/nvml_probe.py``) runs on the host and prints what pynvml or amdsmi
returned, in the library's units with the unit in the field name (``memory_total_bytes``,
``power_draw_mw``, ``power_limit_uw``) and enums as the library's numbers. This module does all
of the interpreting, so that an NVML reading and an ``nvidia-smi -q -x`` reading of the same GPU
give equal fields: the tests compare them field by field.

A failed call leaves its field ``None`` and the probe says why: ``Gpu.unavailable`` gets
``not_supported`` (NVML cannot tell "N/A" from "not supported": both arrive as
NVML_ERROR_NOT_SUPPORTED) or ``unreadable``, and the probe's own wording stays in the raw
section. A GPU is ``status="error"`` when it could not be opened, when any call said the GPU is
lost, or when a call for its identity, memory or temperature answered "Unknown Error" — the
line the XML parser draws at the same words in the same fields.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from gpuaudit.model.snapshot import EccCounts, Gpu, RemappedRows, RetiredPages, bus_key
from gpuaudit.parsers.errors import ParseError
from gpuaudit.parsers.nvidia_common import reason_name
from gpuaudit.parsers.rocm_smi import _GEN_BY_RATE as GEN_BY_TRANSFER_RATE_GTS
from gpuaudit.parsers.values import (
    GPU_ERRORS,
    NOT_SUPPORTED,
    UNREADABLE,
    bounded_int,
    clean,
    finite,
    load_host_json,
    parse_float,
    parse_int,
)

WHAT = "NVML probe"
PROBE_FORMAT = 1
_MIB = 1024 * 1024
# nvml.h nvmlClocksEventReason* bits with the label `nvidia-smi -q` prints for each, in the
# order nvidia-smi lists them; the shared normalisation turns labels into the XML names. Bits
# nvidia-smi has no label for (board limit, reliability) stay in the raw section only.
_CLOCK_EVENT_REASONS = tuple(
    (bit, reason_name(label))
    for bit, label in (
        (0x001, "Idle"),
        (0x002, "Applications Clocks Setting"),
        (0x004, "SW Power Cap"),
        (0x008, "HW Slowdown"),
        (0x040, "HW Thermal Slowdown"),
        (0x080, "HW Power Brake Slowdown"),
        (0x010, "Sync Boost"),
        (0x020, "SW Thermal Slowdown"),
        (0x100, "Display Clock Setting"),
    )
)
# nvmlDeviceArchitecture_t → nvidia-smi's product_architecture.
_ARCHITECTURES = {
    2: "Kepler",
    3: "Maxwell",
    4: "Pascal",
    5: "Volta",
    6: "Turing",
    7: "Ampere",
    8: "Ada Lovelace",
    9: "Hopper",
    10: "Blackwell",
}
_FEATURE_STATE = {0: "Disabled", 1: "Enabled"}
# Calls whose "Unknown Error" means the device is not answering, not a feature missing.
_CORE_CALLS = ("name", "uuid", "pci_bus_id", "memory", "temperature_c")
# The probe's call labels that are not snapshot field names (ECC counters are renamed by rule).
_FIELDS_OF_CALL = {
    "architecture_nvml": ("architecture",),
    "asic_info": ("name", "architecture"),
    "memory": ("memory_total_mib", "memory_used_mib"),
    "power_draw_mw": ("power_draw_w",),
    "power_limit_mw": ("power_limit_w",),
    "power_limit_uw": ("power_limit_w",),
    "utilization": ("utilization_gpu_pct",),
    "clocks_event_reasons": ("clock_event_reasons",),
    "ecc_mode": ("ecc_mode_current", "ecc_mode_pending"),
    "mig_mode": ("mig_mode_current", "mig_mode_pending"),
    "retired_pages_sbe": ("retired_pages.single_bit",),
    "retired_pages_dbe": ("retired_pages.double_bit",),
    "retired_pages_pending": ("retired_pages.pending",),
    "pcie": ("pcie_gen_current", "pcie_width_current", "pcie_width_max", "pcie_replay_count"),
}
_GPU_FIELDS = frozenset(f.name for f in dataclasses.fields(Gpu))


@dataclass(frozen=True)
class NvmlProbe:
    library: str | None  # "pynvml" | "amdsmi"; the library that answered (or failed to start)
    driver_version: str | None = None
    cuda_version: str | None = None  # "12.2", as nvidia-smi prints it
    nvml_version: str | None = None
    device_count: int | None = None
    gpus: tuple[Gpu, ...] = ()
    # Set when the library is installed but would not start (driver not loaded, no libnvidia-ml).
    init_error: str | None = None
    # GPU index → call → why it failed ("not_supported", "gpu_lost: GPU is lost", ...).
    gpu_errors: dict[int, dict[str, str]] = field(default_factory=dict)

    def gpus_of(self, vendor: str) -> tuple[Gpu, ...]:
        return tuple(g for g in self.gpus if g.vendor == vendor)


def parse_nvml_probe(text: str) -> NvmlProbe:
    """Parse the probe's document. Raises :class:`ParseError` on anything unreadable."""
    if not text or not text.strip():
        raise ParseError(WHAT, "empty output")
    try:
        data, end = load_host_json(text, len(text) - len(text.lstrip()))
        if text[end:].strip():
            raise json.JSONDecodeError("Extra data", text, end)
    except (ValueError, RecursionError) as exc:
        raise ParseError(WHAT, f"not JSON: {exc}", text) from exc
    if not isinstance(data, dict):
        raise ParseError(WHAT, "top level is not an object", text)
    if data.get("probe") != PROBE_FORMAT:
        raise ParseError(WHAT, f"unknown probe format {data.get('probe')!r}", text)
    listed = [] if data.get("gpus") is None else data["gpus"]
    if not isinstance(listed, list):
        raise ParseError(WHAT, "'gpus' is not a list", text)
    entries = [entry for entry in listed if isinstance(entry, dict)]
    driver = _str(data, "driver_version")
    cuda = _cuda_version(data.get("cuda_driver_version"))
    gpus = tuple(
        _gpu_safely(position, entry, driver, cuda) for position, entry in enumerate(entries)
    )
    return NvmlProbe(
        library=_str(data, "library"),
        driver_version=driver,
        cuda_version=cuda,
        nvml_version=_str(data, "nvml_version"),
        device_count=_int(data, "device_count"),
        gpus=gpus,
        init_error=_str(data, "init_error"),
        gpu_errors={
            gpu.index: _errors(entry)
            for gpu, entry in zip(gpus, entries, strict=True)
            if _errors(entry)
        },
    )


def fill_gaps(primary: tuple[Gpu, ...], secondary: tuple[Gpu, ...]) -> tuple[Gpu, ...]:
    """``primary`` with each ``None`` field (nested ones too) taken from the same GPU in
    ``secondary``, matched by PCI bus id, else by UUID. Neither adds nor drops GPUs, and a value
    ``primary`` has always wins; a field filled this way leaves ``unavailable``."""
    by_bus = {g.pci_bus_id: g for g in secondary if g.pci_bus_id}
    by_uuid = {g.uuid: g for g in secondary if g.uuid}
    merged = []
    for gpu in primary:
        match = by_bus.get(gpu.pci_bus_id) if gpu.pci_bus_id else None
        if match is None and gpu.uuid:
            match = by_uuid.get(gpu.uuid)
        if match is None:
            merged.append(gpu)
            continue
        combined, filled = _fill(gpu, match)
        # "remapped_rows" (the block printed N/A) goes too once one of its fields has a value.
        still = {
            name: why
            for name, why in gpu.unavailable.items()
            if not any(f == name or f.startswith(f"{name}.") for f in filled)
        }
        merged.append(dataclasses.replace(combined, unavailable=still))
    return tuple(merged)


def clock_event_reasons(mask: int | None) -> tuple[str, ...]:
    """NVML's clocks-event-reason bitmask → the active reasons by nvidia-smi's names."""
    if mask is None:
        return ()
    return tuple(name for bit, name in _CLOCK_EVENT_REASONS if mask & bit)


def _fill(primary: Any, secondary: Any, prefix: str = "") -> tuple[Any, list[str]]:
    """``primary`` with its ``None`` fields from ``secondary``, and the names of those filled
    (``ecc_volatile.sram_corrected`` inside objects, as ``Gpu.unavailable`` names them)."""
    changes: dict[str, Any] = {}
    filled: list[str] = []
    for f in dataclasses.fields(primary):
        mine, theirs = getattr(primary, f.name), getattr(secondary, f.name)
        if mine is None and theirs is not None:
            changes[f.name] = theirs
            filled.append(prefix + f.name)
        elif dataclasses.is_dataclass(mine) and type(mine) is type(theirs):
            changes[f.name], inner = _fill(mine, theirs, f"{prefix}{f.name}.")
            filled += inner
    return dataclasses.replace(primary, **changes), filled


def _gpu_safely(position: int, doc: dict[str, Any], driver: str | None, cuda: str | None) -> Gpu:
    index = _int(doc, "index")
    index = position if index is None else index
    # One GPU with a shape nobody has seen must not hide the others.
    try:
        return _gpu(index, doc, driver, cuda)
    except (ValueError, TypeError, AttributeError) as exc:
        return Gpu(
            index=index,
            vendor=_vendor(doc),
            status="error",
            status_detail=f"could not read this GPU's probe entry: {exc}",
        )


def _gpu(index: int, doc: dict[str, Any], driver: str | None, cuda: str | None) -> Gpu:
    vendor = _vendor(doc)
    if doc.get("handle_error"):
        return Gpu(
            index=index,
            vendor=vendor,
            status="error",
            status_detail=f"{_library_name(vendor)} could not open the GPU: {doc['handle_error']}",
        )
    errors = _errors(doc)
    status, detail = _status(vendor, errors)
    return Gpu(
        index=index,
        vendor=vendor,
        status=status,
        status_detail=detail,
        name=_str(doc, "name"),
        uuid=_str(doc, "uuid"),
        serial=_str(doc, "serial"),
        pci_bus_id=bus_key(_str(doc, "pci_bus_id")),
        architecture=_str(doc, "architecture")
        or _ARCHITECTURES.get(_int(doc, "architecture_nvml") or -1),
        vbios_version=_str(doc, "vbios_version"),
        inforom_image=_str(doc, "inforom_image"),
        driver_version=_str(doc, "driver_version") or driver,
        cuda_version=cuda if vendor == "nvidia" else None,
        memory_total_mib=_mib(doc, "memory_total"),
        memory_used_mib=_mib(doc, "memory_used"),
        ecc_mode_current=_feature(doc, "ecc_mode_current"),
        ecc_mode_pending=_feature(doc, "ecc_mode_pending"),
        ecc_volatile=_ecc(doc.get("ecc_volatile")),
        ecc_aggregate=_ecc(doc.get("ecc_aggregate")),
        retired_pages=RetiredPages(
            single_bit=_int(doc, "retired_pages_sbe"),
            double_bit=_int(doc, "retired_pages_dbe"),
            pending=_flag(doc, "retired_pages_pending"),
        ),
        remapped_rows=RemappedRows(
            correctable=_int(doc, "remapped_rows_correctable"),
            uncorrectable=_int(doc, "remapped_rows_uncorrectable"),
            pending=_flag(doc, "remapped_rows_pending"),
            failure=_flag(doc, "remapped_rows_failure"),
        ),
        temperature_c=_float(doc, "temperature_c"),
        temperature_slowdown_c=_float(doc, "temperature_slowdown_c"),
        power_draw_w=_watts(doc, "power_draw"),
        power_limit_w=_watts(doc, "power_limit"),
        utilization_gpu_pct=_float(doc, "utilization_gpu_pct"),
        clock_event_reasons=clock_event_reasons(_int(doc, "clocks_event_reasons")),
        pcie_gen_current=_int(doc, "pcie_gen_current") or _pcie_gen(doc, "pcie_speed_current_mts"),
        pcie_gen_max=_int(doc, "pcie_gen_max"),
        pcie_width_current=_int(doc, "pcie_width_current"),
        pcie_width_max=_int(doc, "pcie_width_max"),
        pcie_replay_count=_int(doc, "pcie_replay_count"),
        mig_mode_current=_feature(doc, "mig_mode_current"),
        mig_mode_pending=_feature(doc, "mig_mode_pending"),
        persistence_mode=_flag(doc, "persistence_mode"),
        unavailable=_unavailable(errors),
    )


def _status(vendor: str, errors: dict[str, str]) -> tuple[str, str]:
    said = {call: kind.partition(": ")[2] for call, kind in errors.items()}
    lost = [call for call, kind in errors.items() if kind.startswith("gpu_lost")]
    broken = [c for c in _CORE_CALLS if said.get(c, "").strip().lower() in GPU_ERRORS]
    failed = lost or broken
    if not failed:
        return "ok", ""
    return "error", f"{_library_name(vendor)} reported {said[failed[0]]!r} for {', '.join(failed)}"


def _unavailable(errors: dict[str, str]) -> dict[str, str]:
    """The probe's failed calls as ``Gpu.unavailable`` entries, by snapshot field name."""
    unavailable: dict[str, str] = {}
    for call, kind in errors.items():
        # The binding lacking a function is the installed software unable to say, like a driver.
        reason = (
            NOT_SUPPORTED if kind.startswith(("not_supported", "not_in_library")) else UNREADABLE
        )
        for name in _FIELDS_OF_CALL.get(call) or _field_names(call):
            unavailable.setdefault(name, reason)
    return unavailable


def _field_names(call: str) -> tuple[str, ...]:
    """``ecc_volatile_corrected`` → ``ecc_volatile.corrected``; ``ecc_aggregate_uncorrected_dram``
    → ``ecc_aggregate.dram_uncorrected``; a call named after a Gpu field → that field."""
    parts = call.split("_")
    if parts[0] == "ecc" and len(parts) in (3, 4) and parts[1] in ("volatile", "aggregate"):
        inner = parts[2] if len(parts) == 3 else f"{parts[3]}_{parts[2]}"
        return (f"ecc_{parts[1]}.{inner}",)
    return (call,) if call in _GPU_FIELDS else ()


def _ecc(counts: Any) -> EccCounts:
    if not isinstance(counts, dict):
        return EccCounts()
    return EccCounts(
        corrected=_int(counts, "corrected"),
        uncorrected=_int(counts, "uncorrected"),
        sram_corrected=_int(counts, "sram_corrected"),
        sram_uncorrected=_int(counts, "sram_uncorrected"),
        dram_corrected=_int(counts, "dram_corrected"),
        dram_uncorrected=_int(counts, "dram_uncorrected"),
    )


def _mib(doc: dict[str, Any], name: str) -> int | None:
    in_bytes = _int(doc, f"{name}_bytes")
    if in_bytes is not None:
        return in_bytes // _MIB
    # amdsmi's "MB" are mebibytes (the library divides the byte count by 1024 * 1024).
    return _int(doc, f"{name}_mb")


def _watts(doc: dict[str, Any], name: str) -> float | None:
    for suffix, per_watt in (("_w", 1), ("_mw", 1000), ("_uw", 1_000_000)):
        value = _float(doc, name + suffix)
        if value is not None:
            return value / per_watt
    return None


def _pcie_gen(doc: dict[str, Any], name: str) -> int | None:
    rate = _int(doc, name)
    return GEN_BY_TRANSFER_RATE_GTS.get(rate / 1000) if rate else None


def _cuda_version(value: Any) -> str | None:
    """``12020`` (CUDA_VERSION style) → ``"12.2"``, nvidia-smi's spelling."""
    number = parse_int(str(value)) if value is not None else None
    if not number:
        return None
    return f"{number // 1000}.{number % 1000 // 10}"


def _feature(doc: dict[str, Any], name: str) -> str | None:
    value = _int(doc, name)
    return _FEATURE_STATE.get(value) if value is not None else None


def _flag(doc: dict[str, Any], name: str) -> bool | None:
    value = _int(doc, name)
    return bool(value) if value is not None else None


def _str(doc: dict[str, Any], name: str) -> str | None:
    value = doc.get(name)
    return clean(str(value)) if value is not None else None


def _int(doc: dict[str, Any], name: str) -> int | None:
    value = doc.get(name)
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return bounded_int(value)
    return parse_int(str(value)) if value is not None else None


def _float(doc: dict[str, Any], name: str) -> float | None:
    value = doc.get(name)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return finite(value)
    return parse_float(str(value)) if value is not None else None


def _errors(doc: dict[str, Any]) -> dict[str, str]:
    errors = doc.get("errors")
    return {str(k): str(v) for k, v in errors.items()} if isinstance(errors, dict) else {}


def _vendor(doc: dict[str, Any]) -> str:
    return "amd" if doc.get("vendor") == "amd" else "nvidia"


def _library_name(vendor: str) -> str:
    return "amdsmi" if vendor == "amd" else "NVML"
