"""`nvidia-smi -q -x`: the richest view of an NVIDIA host, one ``<gpu>`` element per device.

The XML changes between driver branches (DTD v10 → v13): element names move
(``clocks_throttle_reasons`` → ``clocks_event_reasons``, ``power_readings`` →
``gpu_power_readings``, ``power_draw`` → ``instant_power_draw``), ECC counters switch from
single/double-bit totals to SRAM/DRAM, and any value may read ``N/A``, ``[Not Supported]`` or
``Unknown Error``. Each lookup below therefore tries the known spellings in turn; a value that
is not one becomes ``None``, with the reason kept in ``Gpu.unavailable``.

The text comes from the host, so it is parsed with defusedxml: the ``<!DOCTYPE nvidia_smi_log
SYSTEM "nvsmi_device_v12.dtd">`` line nvidia-smi always prints is accepted (nothing is fetched),
but entity declarations — the building block of entity-expansion attacks — are refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from xml.etree.ElementTree import Element
from xml.etree.ElementTree import ParseError as XmlSyntaxError

import defusedxml.ElementTree as SafeET
from defusedxml import DefusedXmlException

from gpuaudit.model.snapshot import EccCounts, Gpu, MigDevice, bus_key
from gpuaudit.parsers.errors import ParseError
from gpuaudit.parsers.nvidia_common import (
    ECC_SPLIT,
    NvidiaSmiLog,
    active_reasons,
    ecc_counts,
    gpu_status,
    remapped_rows,
    retired_pages,
)

# Re-exported: other parsers and tests import the value helpers from here.
from gpuaudit.parsers.values import FieldReader, clean, first_present, parse_float, parse_int

__all__ = ["NvidiaSmiLog", "clean", "parse_float", "parse_int", "parse_nvidia_smi_xml"]

WHAT = "nvidia-smi -q -x"

# Where an "Unknown Error" marks the device as broken rather than one exotic counter unreadable.
_CORE_FIELDS = (
    "product_name",
    "uuid",
    "pci/pci_bus_id",
    "fb_memory_usage/total",
    "temperature/gpu_temp",
)
_ECC_PATHS = {
    "single_bit_total": "single_bit/total",
    "double_bit_total": "double_bit/total",
    **{key: key for key in ECC_SPLIT},
}
_RETIRED_PATHS = {
    "single_bit": ("multiple_single_bit_retirement/retired_count",),
    "double_bit": ("double_bit_retirement/retired_count",),
    "pending": ("pending_retirement", "pending_blacklist"),
}
_REMAPPED_PATHS = {
    "correctable": ("remapped_row_corr", "correctable_rows"),
    "uncorrectable": ("remapped_row_unc", "uncorrectable_rows"),
    "pending": ("remapped_row_pending", "pending"),
    "failure": ("remapped_row_failure", "remapping_failure_occurred"),
}
_POWER_DRAW = (
    "gpu_power_readings/power_draw",
    "gpu_power_readings/instant_power_draw",
    "gpu_power_readings/average_power_draw",
    "power_readings/power_draw",
    "power_readings/instant_power_draw",
    "power_readings/average_power_draw",
)
_POWER_LIMIT = (
    "gpu_power_readings/current_power_limit",
    "power_readings/enforced_power_limit",
    "power_readings/current_power_limit",
    "power_readings/power_limit",
)
_LINK = "pci/pci_gpu_link_info"


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
        # nvidia-smi never declares entities: such output is refused whole, nothing expanded.
        raise ParseError(WHAT, f"refused unsafe XML, nothing expanded: {exc}", text) from exc
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
    status, detail = gpu_status(
        {path: _raw(g, path) for path in _CORE_FIELDS}, (e.text for e in g.iter())
    )
    r = FieldReader()

    def raw(*paths: str) -> str | None:
        return first_present(*(_raw(g, path) for path in paths))

    return Gpu(
        index=index,
        vendor="nvidia",
        status=status,
        status_detail=detail,
        name=r.as_text("name", raw("product_name")),
        uuid=r.as_text("uuid", raw("uuid")),
        serial=r.as_text("serial", raw("serial")),
        pci_bus_id=bus_key(_text(g, "pci/pci_bus_id") or g.get("id")),
        architecture=r.as_text("architecture", raw("product_architecture")),
        vbios_version=r.as_text("vbios_version", raw("vbios_version")),
        inforom_image=r.as_text("inforom_image", raw("inforom_version/img_version")),
        driver_version=driver,
        cuda_version=cuda,
        memory_total_mib=r.as_int("memory_total_mib", raw("fb_memory_usage/total")),
        memory_used_mib=r.as_int("memory_used_mib", raw("fb_memory_usage/used")),
        ecc_mode_current=r.as_text("ecc_mode_current", raw("ecc_mode/current_ecc")),
        ecc_mode_pending=r.as_text("ecc_mode_pending", raw("ecc_mode/pending_ecc")),
        ecc_volatile=_ecc(g.find("ecc_errors/volatile"), r, "ecc_volatile"),
        ecc_aggregate=_ecc(g.find("ecc_errors/aggregate"), r, "ecc_aggregate"),
        retired_pages=retired_pages(*_block(g, "retired_pages", _RETIRED_PATHS), reader=r),
        remapped_rows=remapped_rows(*_block(g, "remapped_rows", _REMAPPED_PATHS), reader=r),
        temperature_c=r.as_float("temperature_c", raw("temperature/gpu_temp")),
        temperature_slowdown_c=r.as_float(
            "temperature_slowdown_c", raw("temperature/gpu_temp_slow_threshold")
        ),
        power_draw_w=r.as_float("power_draw_w", raw(*_POWER_DRAW)),
        power_limit_w=r.as_float("power_limit_w", raw(*_POWER_LIMIT)),
        utilization_gpu_pct=r.as_float("utilization_gpu_pct", raw("utilization/gpu_util")),
        clock_event_reasons=active_reasons(
            (child.tag, child.text)
            for parent in ("clocks_event_reasons", "clocks_throttle_reasons")
            for child in g.findall(f"{parent}/*")
        ),
        pcie_gen_current=r.as_int("pcie_gen_current", raw(f"{_LINK}/pcie_gen/current_link_gen")),
        pcie_gen_max=r.as_int("pcie_gen_max", raw(f"{_LINK}/pcie_gen/max_link_gen")),
        pcie_width_current=r.as_int(
            "pcie_width_current", raw(f"{_LINK}/link_widths/current_link_width")
        ),
        pcie_width_max=r.as_int("pcie_width_max", raw(f"{_LINK}/link_widths/max_link_width")),
        pcie_replay_count=r.as_int("pcie_replay_count", raw("pci/replay_counter")),
        mig_mode_current=r.as_text("mig_mode_current", raw("mig_mode/current_mig")),
        mig_mode_pending=r.as_text("mig_mode_pending", raw("mig_mode/pending_mig")),
        mig_devices=_mig_devices(g.find("mig_devices")),
        persistence_mode=r.as_flag("persistence_mode", raw("persistence_mode")),
        reset_required=r.as_flag("reset_required", raw("gpu_reset_status/reset_required")),
        drain_and_reset_recommended=r.as_flag(
            "drain_and_reset_recommended", raw("gpu_reset_status/drain_and_reset_recommended")
        ),
        recovery_action=_raw(g, "gpu_recovery_action"),
        unavailable=dict(r.unavailable),
    )


def _ecc(node: Element | None, r: FieldReader, field: str) -> EccCounts:
    if node is None:
        return EccCounts()
    return ecc_counts({key: _raw(node, path) for key, path in _ECC_PATHS.items()}, r, field)


def _block(
    g: Element, path: str, paths: Mapping[str, tuple[str, ...]]
) -> tuple[dict[str, str | None], str | None]:
    """A block's counters by canonical key, and its own text when it holds none (``N/A``)."""
    node = g.find(path)
    if node is None:
        return {}, None
    if len(node) == 0:
        return {}, _raw(g, path)
    return {
        key: first_present(*(_raw(node, p) for p in options)) for key, options in paths.items()
    }, None


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


def _raw(node: Element, path: str) -> str | None:
    found = node.find(path)
    if found is None or found.text is None:
        return None
    return found.text.strip()


def _text(node: Element, path: str) -> str | None:
    return clean(_raw(node, path))
