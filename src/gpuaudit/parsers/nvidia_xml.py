"""`nvidia-smi -q -x`: the richest view of an NVIDIA host, one ``<gpu>`` element per device.

The XML changes between driver branches (DTD v10 → v13): element names move
(``clocks_throttle_reasons`` → ``clocks_event_reasons``, ``power_readings`` →
``gpu_power_readings``, ``power_draw`` → ``instant_power_draw``), ECC counters switch from
single/double-bit totals to SRAM/DRAM, and any value may read ``N/A``, ``[Not Supported]`` or
``Unknown Error``. Each lookup below therefore tries the known spellings in turn and treats every
"no value" spelling as ``None``.

The text comes from the host, so it is parsed with defusedxml: the ``<!DOCTYPE nvidia_smi_log
SYSTEM "nvsmi_device_v12.dtd">`` line nvidia-smi always prints is accepted (nothing is fetched),
but entity declarations — the building block of entity-expansion attacks — are refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from xml.etree.ElementTree import Element
from xml.etree.ElementTree import ParseError as XmlSyntaxError

import defusedxml.ElementTree as SafeET
from defusedxml import DefusedXmlException

from gpuaudit.model.snapshot import EccCounts, Gpu, MigDevice, RemappedRows, RetiredPages, bus_key
from gpuaudit.parsers.errors import ParseError

WHAT = "nvidia-smi -q -x"

# Spellings nvidia-smi uses for "no value here" (unsupported, not applicable, not readable).
_NO_VALUE = frozenset(
    {
        "",
        "n/a",
        "[n/a]",
        "not supported",
        "[not supported]",
        "unknown error",
        "[unknown error]",
        "gpu is lost",
        "[gpu is lost]",
        "none",
        "requested functionality has been deprecated",
        "insufficient permissions",
        "[insufficient permissions]",
    }
)
# Values that mean the GPU itself failed to answer, not that a feature is missing.
_GPU_ERRORS = ("unknown error", "gpu is lost")
# Where an "Unknown Error" marks the device as broken rather than one exotic counter unreadable.
_CORE_FIELDS = (
    "product_name",
    "uuid",
    "pci/pci_bus_id",
    "fb_memory_usage/total",
    "temperature/gpu_temp",
)
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")
_REASON_PREFIX = re.compile(r"^clocks?_(?:event|throttle)_reasons?_")


@dataclass(frozen=True)
class NvidiaSmiLog:
    driver_version: str | None
    cuda_version: str | None
    timestamp: str | None
    attached_gpus: int | None
    gpus: tuple[Gpu, ...]


def parse_nvidia_smi_xml(text: str) -> NvidiaSmiLog:
    """Parse ``nvidia-smi -q -x`` output. Raises :class:`ParseError` on anything unreadable."""
    root = _parse_root(text)
    driver = _text(root, "driver_version")
    cuda = _text(root, "cuda_version")
    gpus = tuple(
        _parse_gpu_safely(index, element, driver, cuda)
        for index, element in enumerate(root.findall("gpu"))
    )
    return NvidiaSmiLog(
        driver_version=driver,
        cuda_version=cuda,
        timestamp=_text(root, "timestamp"),
        attached_gpus=parse_int(_text(root, "attached_gpus")),
        gpus=gpus,
    )


def _parse_root(text: str) -> Element:
    if not text or not text.strip():
        raise ParseError(WHAT, "empty output")
    start = text.find("<")
    if start < 0:
        raise ParseError(WHAT, "no XML in the output", text)
    try:
        root = SafeET.fromstring(
            text[start:], forbid_dtd=False, forbid_entities=True, forbid_external=True
        )
    except DefusedXmlException as exc:
        raise ParseError(WHAT, f"refused unsafe XML ({type(exc).__name__})", text) from exc
    except XmlSyntaxError as exc:
        # The usual cause is output cut short (a hung nvidia-smi killed by timeout).
        raise ParseError(WHAT, f"malformed or truncated XML: {exc}", text) from exc
    if root.tag != "nvidia_smi_log":
        raise ParseError(WHAT, f"root element is <{root.tag}>, not <nvidia_smi_log>", text)
    return root


def _parse_gpu_safely(index: int, element: Element, driver: str | None, cuda: str | None) -> Gpu:
    # One GPU with a shape nobody has seen must not hide the others.
    try:
        return _parse_gpu(index, element, driver, cuda)
    except (ValueError, TypeError, AttributeError) as exc:
        return Gpu(
            index=index,
            status="error",
            status_detail=f"could not read this GPU's entry: {exc}",
            pci_bus_id=bus_key(element.get("id")),
        )


def _parse_gpu(index: int, g: Element, driver: str | None, cuda: str | None) -> Gpu:
    status, detail = _gpu_status(g)
    return Gpu(
        index=index,
        vendor="nvidia",
        status=status,
        status_detail=detail,
        name=_text(g, "product_name"),
        uuid=_text(g, "uuid"),
        serial=_text(g, "serial"),
        pci_bus_id=bus_key(_text(g, "pci/pci_bus_id") or g.get("id")),
        architecture=_text(g, "product_architecture"),
        vbios_version=_text(g, "vbios_version"),
        inforom_image=_text(g, "inforom_version/img_version"),
        driver_version=driver,
        cuda_version=cuda,
        memory_total_mib=parse_int(_text(g, "fb_memory_usage/total")),
        memory_used_mib=parse_int(_text(g, "fb_memory_usage/used")),
        ecc_mode_current=_text(g, "ecc_mode/current_ecc"),
        ecc_mode_pending=_text(g, "ecc_mode/pending_ecc"),
        ecc_volatile=_ecc(g.find("ecc_errors/volatile")),
        ecc_aggregate=_ecc(g.find("ecc_errors/aggregate")),
        retired_pages=_retired_pages(g.find("retired_pages")),
        remapped_rows=_remapped_rows(g.find("remapped_rows")),
        temperature_c=parse_float(_text(g, "temperature/gpu_temp")),
        temperature_slowdown_c=parse_float(_text(g, "temperature/gpu_temp_slow_threshold")),
        power_draw_w=parse_float(
            _first(
                g,
                "gpu_power_readings/power_draw",
                "gpu_power_readings/instant_power_draw",
                "gpu_power_readings/average_power_draw",
                "power_readings/power_draw",
                "power_readings/instant_power_draw",
                "power_readings/average_power_draw",
            )
        ),
        power_limit_w=parse_float(
            _first(
                g,
                "gpu_power_readings/current_power_limit",
                "power_readings/enforced_power_limit",
                "power_readings/current_power_limit",
                "power_readings/power_limit",
            )
        ),
        utilization_gpu_pct=parse_float(_text(g, "utilization/gpu_util")),
        clock_event_reasons=_active_reasons(g),
        pcie_gen_current=parse_int(_text(g, "pci/pci_gpu_link_info/pcie_gen/current_link_gen")),
        pcie_gen_max=parse_int(_text(g, "pci/pci_gpu_link_info/pcie_gen/max_link_gen")),
        pcie_width_current=parse_int(
            _text(g, "pci/pci_gpu_link_info/link_widths/current_link_width")
        ),
        pcie_width_max=parse_int(_text(g, "pci/pci_gpu_link_info/link_widths/max_link_width")),
        pcie_replay_count=parse_int(_text(g, "pci/replay_counter")),
        mig_mode_current=_text(g, "mig_mode/current_mig"),
        mig_mode_pending=_text(g, "mig_mode/pending_mig"),
        mig_devices=_mig_devices(g.find("mig_devices")),
        persistence_mode=_yes(_text(g, "persistence_mode")),
        reset_required=_yes(_text(g, "gpu_reset_status/reset_required")),
        drain_and_reset_recommended=_yes(_text(g, "gpu_reset_status/drain_and_reset_recommended")),
        recovery_action=_raw(g, "gpu_recovery_action"),
    )


def _gpu_status(g: Element) -> tuple[str, str]:
    lost = [path for path in _CORE_FIELDS if (_raw(g, path) or "").lower() in _GPU_ERRORS]
    anywhere_lost = any((e.text or "").strip().lower() == "gpu is lost" for e in g.iter())
    if not lost and not anywhere_lost:
        return "ok", ""
    reason = "GPU is lost" if anywhere_lost else "Unknown Error"
    fields = ", ".join(lost) if lost else "some fields"
    return "error", f"nvidia-smi reported {reason!r} for {fields}"


def _ecc(node: Element | None) -> EccCounts:
    if node is None:
        return EccCounts()
    if node.find("single_bit") is not None or node.find("double_bit") is not None:
        # Pre-Ampere schema: per-unit counters with a total for each error class.
        return EccCounts(
            corrected=parse_int(_text(node, "single_bit/total")),
            uncorrected=parse_int(_text(node, "double_bit/total")),
        )
    sram_corr = parse_int(_text(node, "sram_correctable"))
    dram_corr = parse_int(_text(node, "dram_correctable"))
    dram_unc = parse_int(_text(node, "dram_uncorrectable"))
    # v13 splits SRAM uncorrectable errors by detection method; both are uncorrectable.
    sram_unc = _sum(
        parse_int(_text(node, "sram_uncorrectable")),
        parse_int(_text(node, "sram_uncorrectable_parity")),
        parse_int(_text(node, "sram_uncorrectable_secded")),
    )
    return EccCounts(
        corrected=_sum(sram_corr, dram_corr),
        uncorrected=_sum(sram_unc, dram_unc),
        sram_uncorrected=sram_unc,
        dram_uncorrected=dram_unc,
        sram_corrected=sram_corr,
        dram_corrected=dram_corr,
    )


def _retired_pages(node: Element | None) -> RetiredPages:
    if node is None:
        return RetiredPages()
    return RetiredPages(
        single_bit=parse_int(_text(node, "multiple_single_bit_retirement/retired_count")),
        double_bit=parse_int(_text(node, "double_bit_retirement/retired_count")),
        pending=_yes(_first(node, "pending_retirement", "pending_blacklist")),
    )


def _remapped_rows(node: Element | None) -> RemappedRows:
    if node is None:
        return RemappedRows()
    return RemappedRows(
        correctable=parse_int(_first(node, "remapped_row_corr", "correctable_rows")),
        uncorrectable=parse_int(_first(node, "remapped_row_unc", "uncorrectable_rows")),
        pending=_yes(_first(node, "remapped_row_pending", "pending")),
        failure=_yes(_first(node, "remapped_row_failure", "remapping_failure_occurred")),
    )


def _active_reasons(g: Element) -> tuple[str, ...]:
    reasons: list[str] = []
    for parent in ("clocks_event_reasons", "clocks_throttle_reasons"):
        node = g.find(parent)
        if node is None:
            continue
        for child in node:
            if (child.text or "").strip() == "Active":
                name = _REASON_PREFIX.sub("", child.tag)
                if name not in reasons:
                    reasons.append(name)
    return tuple(reasons)


def _mig_devices(node: Element | None) -> tuple[MigDevice, ...]:
    if node is None:
        return ()
    return tuple(
        MigDevice(
            index=parse_int(_text(d, "index")),
            gpu_instance_id=parse_int(_text(d, "gpu_instance_id")),
            compute_instance_id=parse_int(_text(d, "compute_instance_id")),
            memory_total_mib=parse_int(_text(d, "fb_memory_usage/total")),
            multiprocessor_count=parse_int(
                _text(d, "device_attributes/shared/multiprocessor_count")
            ),
        )
        for d in node.findall("mig_device")
    )


# --- value helpers (shared with the other parsers) ----------------------------------------------


def _raw(node: Element, path: str) -> str | None:
    found = node.find(path)
    if found is None or found.text is None:
        return None
    return found.text.strip()


def _text(node: Element, path: str) -> str | None:
    return clean(_raw(node, path))


def _first(node: Element, *paths: str) -> str | None:
    for path in paths:
        value = _text(node, path)
        if value is not None:
            return value
    return None


def clean(value: str | None) -> str | None:
    """A stripped value, or ``None`` for every spelling of "no value"."""
    if value is None:
        return None
    value = value.strip()
    return None if value.lower() in _NO_VALUE else value


def _number(value: str | None) -> str | None:
    value = clean(value)
    if value is None:
        return None
    match = _NUMBER.search(value.replace(",", ""))
    return match.group(0) if match else None


def parse_int(value: str | None) -> int | None:
    """``"80 MiB"`` → 80, ``"16x"`` → 16, ``"N/A"`` → None."""
    number = _number(value)
    if number is None:
        return None
    try:
        return int(float(number))
    except (ValueError, OverflowError):
        return None


def parse_float(value: str | None) -> float | None:
    """``"70.50 W"`` → 70.5, ``"45 C"`` → 45.0, ``"[Not Supported]"`` → None."""
    number = _number(value)
    return float(number) if number is not None else None


def _sum(*values: int | None) -> int | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def _yes(value: str | None) -> bool | None:
    if value is None:
        return None
    lowered = value.lower()
    if lowered in ("yes", "true", "enabled", "active"):
        return True
    if lowered in ("no", "false", "disabled", "not active"):
        return False
    return None


def _enabled(value: str | None) -> bool | None:
    return _yes(value)
