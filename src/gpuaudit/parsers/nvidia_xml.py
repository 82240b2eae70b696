"""`nvidia-smi -q -x`: the richest view of an NVIDIA host, one ``<gpu>`` element per device.

The XML changes between driver branches (DTD v10 → v13): element names move
(``clocks_throttle_reasons`` → ``clocks_event_reasons``, ``power_readings`` →
``gpu_power_readings``, ``power_draw`` → ``instant_power_draw``), ECC counters switch from
single/double-bit totals to SRAM/DRAM, and any value may read ``N/A``, ``[Not Supported]`` or
``Unknown Error``. Each lookup below therefore tries the known spellings in turn; a value that
is not one becomes ``None``, with the reason kept in ``Gpu.unavailable``.

The text comes from the host, so it is parsed safely: the ``<!DOCTYPE nvidia_smi_log SYSTEM
"nvsmi_device_v12.dtd">`` line nvidia-smi always prints is accepted (nothing is fetched), but
entity declarations — the building block of entity-expansion attacks — are refused. A document
without the text ``<!ENTITY`` anywhere declares no entity and has nothing to expand or fetch: it
is read by the standard library's C parser (which never loads an external DTD or entity). Any
other document is read by defusedxml, which refuses the declarations.
"""

from __future__ import annotations

from collections.abc import Mapping
from xml.etree.ElementTree import Element
from xml.etree.ElementTree import ParseError as XmlSyntaxError
from xml.etree.ElementTree import fromstring as c_fromstring

import defusedxml.ElementTree as SafeET
from defusedxml import DefusedXmlException

from gpuaudit.model.snapshot import EccCounts, Gpu, MigDevice, bus_key
from gpuaudit.parsers.errors import ParseError
from gpuaudit.parsers.nvidia_common import (
    ECC_SPLIT,
    NvidiaSmiLog,
    active_reasons,
    attach_notices,
    classify_field,
    ecc_counts,
    gpu_status,
    mig_device,
    notice,
    remapped_rows,
    retired_pages,
)

# Re-exported: other parsers and tests import the value helpers from here.
from gpuaudit.parsers.values import FieldReader, clean, first_present, parse_float, parse_int
from gpuaudit.parsers.warnings import warn

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
_END = "</nvidia_smi_log>"

# Elements under <gpu> gpuaudit reads no value from (see _READ for those it does): a known one
# is passed over, any other is warned about once per document. Blocks in _IGNORED are read as a
# whole (clock event reasons) or not at all.
_KNOWN_ROOT = frozenset({"timestamp", "driver_version", "cuda_version", "attached_gpus", "gpu"})
_KNOWN = frozenset(
    [
        "product_brand", "display_mode", "display_attached", "display_active", "addressing_mode",
        "accounting_mode", "accounting_mode_buffer_size", "pdi", "minor_number", "multigpu_board",
        "board_id", "board_part_number", "gpu_part_number", "gpu_fru_part_number",
        "gpu_module_id", "c2c_mode", "gsp_firmware_version", "fan_speed", "performance_state",
        "sparse_operation_mode", "compute_mode", "edpp_multiplier",
        "inforom_version/oem_object", "inforom_version/ecc_object", "inforom_version/pwr_object",
        "pci/pci_bus", "pci/pci_device", "pci/pci_domain", "pci/pci_device_id",
        "pci/pci_sub_system_id", "pci/pci_base_class", "pci/pci_sub_class",
        "pci/replay_rollover_counter", "pci/tx_util", "pci/rx_util", "pci/atomic_caps_inbound",
        "pci/atomic_caps_outbound", f"{_LINK}/pcie_gen/device_current_link_gen",
        f"{_LINK}/pcie_gen/max_device_link_gen", f"{_LINK}/pcie_gen/max_host_link_gen",
        "fb_memory_usage/reserved", "fb_memory_usage/free",
        "retired_pages/multiple_single_bit_retirement/retired_pagelist",
        "retired_pages/double_bit_retirement/retired_pagelist",
        "remapped_rows/remapped_row_corr_inactive", "remapped_rows/remapped_row_unc_inactive",
        "temperature/gpu_target_temperature", "temperature/gpu_temp_max_gpu_threshold",
        "temperature/gpu_temp_max_gpu_tlimit_threshold", "temperature/gpu_temp_max_mem_threshold",
        "temperature/gpu_temp_max_mem_tlimit_threshold", "temperature/gpu_temp_max_threshold",
        "temperature/gpu_temp_max_tlimit_threshold", "temperature/gpu_temp_slow_tlimit_threshold",
        "temperature/gpu_temp_tlimit", "temperature/memory_temp",
        "power_readings/power_state", "power_readings/power_management",
        "power_readings/default_power_limit", "power_readings/min_power_limit",
        "power_readings/max_power_limit", "gpu_power_readings/power_state",
        "gpu_power_readings/default_power_limit", "gpu_power_readings/min_power_limit",
        "gpu_power_readings/max_power_limit", "gpu_power_readings/requested_power_limit",
        "utilization/memory_util", "utilization/encoder_util", "utilization/decoder_util",
        "utilization/jpeg_util", "utilization/ofa_util",
        "mig_devices/mig_device/fb_memory_usage/used",
        "mig_devices/mig_device/fb_memory_usage/free",
        "mig_devices/mig_device/fb_memory_usage/reserved",
    ]
)  # fmt: skip
_IGNORED = frozenset(
    [
        "driver_model", "platformInfo", "inforom_bbx_flush", "gpu_operation_mode",
        "gpu_virtualization_mode", "ibmnpu", "bar1_memory_usage", "cc_protected_memory_usage",
        "encoder_stats", "fbc_stats", "clocks", "applications_clocks",
        "default_applications_clocks", "deferred_clocks", "max_clocks",
        "max_customer_boost_clocks", "clock_policy", "supported_clocks", "voltage", "fabric",
        "processes", "accounted_processes", "capabilities", "clocks_event_reasons_counters",
        "gpu_memory_power_readings", "module_power_readings", "dram_encryption_mode",
        "power_profiles", "power_smoothing", "supported_gpu_target_temp", "pci/pci_bridge_chip",
        "ecc_errors/aggregate_uncorrectable_sram_sources", "remapped_rows/row_remapper_histogram",
        "clocks_event_reasons", "clocks_throttle_reasons",
        "mig_devices/mig_device/device_attributes", "mig_devices/mig_device/ecc_error_count",
        "mig_devices/mig_device/bar1_memory_usage",
    ]
    + [f"ecc_errors/{s}/{b}_bit" for s in ("volatile", "aggregate") for b in ("single", "double")]
)  # fmt: skip


def parse_nvidia_smi_xml(text: str) -> NvidiaSmiLog:
    """Parse ``nvidia-smi -q -x`` output. Raises :class:`ParseError` on anything unreadable."""
    root, outside = _parse_root(text)
    driver = _text(root, "driver_version")
    cuda = _text(root, "cuda_version")
    gpus = tuple(
        _parse_gpu_safely(index, element, driver, cuda)
        for index, element in enumerate(root.findall("gpu"))
    )
    _warn_unplaced(root)
    notices = []
    for line in outside.splitlines():
        found = notice(line)
        if found is not None:
            notices.append(found)
        elif line.strip():
            warn(WHAT, "text outside the XML document", line)
    gpus = attach_notices(gpus, notices, WHAT)
    return NvidiaSmiLog(
        driver_version=driver,
        cuda_version=cuda,
        timestamp=_text(root, "timestamp"),
        attached_gpus=parse_int(_text(root, "attached_gpus")),
        gpus=gpus,
    )


def _parse_root(text: str) -> tuple[Element, str]:
    """The document's root element, and the text printed before and after the document
    (warnings nvidia-smi wrote to the same stream)."""
    if not text or not text.strip():
        raise ParseError(WHAT, "empty output")
    start = _document_start(text)
    if start < 0:
        raise ParseError(WHAT, "no XML in the output", text)
    end = text.rfind(_END)
    end = len(text) if end < start else end + len(_END)
    outside = text[:start] + "\n" + text[end:]
    try:
        root = _fromstring_unread_left_out(text[start:end])
    except DefusedXmlException as exc:
        # nvidia-smi never declares entities: such output is refused whole, nothing expanded.
        raise ParseError(WHAT, f"refused unsafe XML, nothing expanded: {exc}", text) from exc
    except XmlSyntaxError as exc:
        # The usual cause is output cut short (a hung nvidia-smi killed by timeout).
        raise ParseError(WHAT, f"malformed or truncated XML: {exc}", text) from exc
    if root.tag != "nvidia_smi_log":
        raise ParseError(WHAT, f"root element is <{root.tag}>, not <nvidia_smi_log>", text)
    return root, outside


_ENTITY_DECLARATION = "<!ENTITY"
# Elements nothing reads that are most of what nvidia-smi prints: each GPU's table of supported
# clock pairs is half to four fifths of its entry.
_UNREAD_BLOCKS = (("<supported_clocks>", "</supported_clocks>"),)


def _fromstring_unread_left_out(document: str) -> Element:
    """The document's root, parsed without the blocks nothing reads (_UNREAD_BLOCKS, each in
    _IGNORED); the text as printed when that does not parse, so that an error, or any
    document the cut would change the meaning of, is judged on what the host printed."""
    shorter = _without_blocks(document)
    if shorter is not document:
        try:
            return _safe_fromstring(shorter)
        except (DefusedXmlException, XmlSyntaxError):
            pass
    return _safe_fromstring(document)


def _without_blocks(document: str) -> str:
    """``document`` without each complete _UNREAD_BLOCKS element (``document`` itself when it
    has none)."""
    for opening, closing in _UNREAD_BLOCKS:
        if opening not in document:
            continue
        kept: list[str] = []
        position = 0
        while (begin := document.find(opening, position)) >= 0:
            finish = document.find(closing, begin)
            if finish < 0:
                break
            kept.append(document[position:begin])
            position = finish + len(closing)
        kept.append(document[position:])
        document = "".join(kept)
    return document


def _safe_fromstring(document: str) -> Element:
    """The document's root: by the C parser where no entity can be declared (the text
    ``<!ENTITY`` is nowhere in it, as in everything nvidia-smi prints), by defusedxml, which
    refuses entity declarations and external references, otherwise."""
    if _ENTITY_DECLARATION not in document:
        return c_fromstring(document)
    return SafeET.fromstring(document, forbid_dtd=False, forbid_entities=True, forbid_external=True)


def _document_start(text: str) -> int:
    """Where the XML starts: the first line that begins with ``<`` (so that a warning line
    printed before the document is not read as XML), else the first ``<``."""
    content = text.lstrip()
    if content.startswith("<"):
        # The usual case, without splitting the whole output into lines: every line break is
        # white space, so the first line that is not blank holds the first such character.
        return len(text) - len(content)
    position = 0
    for line in text.splitlines(keepends=True):
        if line.lstrip().startswith("<"):
            return position + len(line) - len(line.lstrip())
        position += len(line)
    return text.find("<")


def _paths(node: Element, prefix: str) -> list[tuple[str, Element]]:
    return [(f"{prefix}{child.tag}", child) for child in node]


# Memory repair and the SRAM error threshold: Gpu field -> element path (newer drivers).
_REPAIR = {
    "channel_repair_pending": "ecc_errors/channel_repair_pending",
    "tpc_repair_pending": "ecc_errors/tpc_repair_pending",
    "unrepairable_memory": "ecc_errors/unrepairable_memory",
    "sram_threshold_exceeded": "ecc_errors/aggregate/sram_threshold_exceeded",
}

# The element paths under <gpu> that _parse_gpu reads.
_READ = frozenset(
    [
        *_CORE_FIELDS, *_POWER_DRAW, *_POWER_LIMIT, "serial", "product_architecture",
        "vbios_version", "inforom_version/img_version", "fb_memory_usage/used",
        "ecc_mode/current_ecc", "ecc_mode/pending_ecc", "temperature/gpu_temp_slow_threshold",
        "utilization/gpu_util", "pci/replay_counter", "mig_mode/current_mig",
        "mig_mode/pending_mig", "persistence_mode", "gpu_reset_status/reset_required",
        "gpu_reset_status/drain_and_reset_recommended", "gpu_recovery_action",
        *_REPAIR.values(),
        f"{_LINK}/pcie_gen/current_link_gen", f"{_LINK}/pcie_gen/max_link_gen",
        f"{_LINK}/link_widths/current_link_width", f"{_LINK}/link_widths/max_link_width",
        *(f"ecc_errors/{s}/{p}" for s in ("volatile", "aggregate") for p in _ECC_PATHS.values()),
        *(f"retired_pages/{p}" for options in _RETIRED_PATHS.values() for p in options),
        *(f"remapped_rows/{p}" for options in _REMAPPED_PATHS.values() for p in options),
        *(f"mig_devices/mig_device/{p}" for p in (
            "index", "gpu_instance_id", "compute_instance_id", "fb_memory_usage/total",
            "device_attributes/shared/multiprocessor_count",
        )),
    ]
)  # fmt: skip
_PLACED = frozenset(
    "/".join(p.split("/")[:i]) for p in _READ | _KNOWN for i in range(1, p.count("/") + 2)
)


def field_status(path: str) -> str:
    """How the parser treats the element at ``path`` under ``<gpu>``: ``read``, ``known``,
    ``ignored`` (inside a block read whole or not at all) or ``unknown``."""
    return classify_field(path, _READ, _IGNORED, _PLACED)


def _warn_unplaced(root: Element) -> None:
    """One parse warning per element path nothing reads or recognises."""
    seen: set[str] = set()
    # The GPUs of a document share their paths: each is judged once.
    status_of: dict[str, str] = {}
    for child in root:
        if child.tag not in _KNOWN_ROOT and child.tag not in seen:
            seen.add(child.tag)
            warn(WHAT, f"unknown element <{child.tag}>: its value is not read", _show(child))
    shapes: set[tuple[tuple[str, int], ...]] = set()
    for gpu in root.findall("gpu"):
        # Each element's tag and child count, in document order, is the GPU's tree: one whose
        # tree was judged already has only paths judged already, and is not walked again.
        shape = tuple([(element.tag, len(element)) for element in gpu.iter()])
        if shape in shapes:
            continue
        shapes.add(shape)
        stack = _paths(gpu, "")
        while stack:
            path, element = stack.pop()
            status = status_of.get(path)
            if status is None:
                status = status_of[path] = field_status(path)
            if status == "unknown" and f"gpu/{path}" not in seen:
                seen.add(f"gpu/{path}")
                warn(WHAT, f"unknown element <gpu>/{path}: its value is not read", _show(element))
            elif status in ("known", "read"):
                stack.extend(_paths(element, f"{path}/"))


def _show(element: Element) -> str:
    text = (element.text or "").strip()
    return f"<{element.tag}>{text}</{element.tag}>" if text else f"<{element.tag}>"


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
    at = _Elements(g)
    # "GPU is lost" in any element's text marks the GPU as failed; most GPUs say it nowhere,
    # which one look at all of their text together shows.
    lost = "gpu is lost" in "".join(g.itertext()).lower()
    status, detail = gpu_status(
        {path: at.raw(path) for path in _CORE_FIELDS}, (e.text for e in g.iter()) if lost else ()
    )
    r = FieldReader()

    def raw(*paths: str) -> str | None:
        return first_present(*(at.raw(path) for path in paths))

    return Gpu(
        index=index,
        vendor="nvidia",
        status=status,
        status_detail=detail,
        name=r.as_text("name", raw("product_name")),
        uuid=r.as_text("uuid", raw("uuid")),
        serial=r.as_text("serial", raw("serial")),
        pci_bus_id=bus_key(clean(at.raw("pci/pci_bus_id")) or g.get("id")),
        architecture=r.as_text("architecture", raw("product_architecture")),
        vbios_version=r.as_text("vbios_version", raw("vbios_version")),
        inforom_image=r.as_text("inforom_image", raw("inforom_version/img_version")),
        driver_version=driver,
        cuda_version=cuda,
        memory_total_mib=r.as_int("memory_total_mib", raw("fb_memory_usage/total")),
        memory_used_mib=r.as_int("memory_used_mib", raw("fb_memory_usage/used")),
        ecc_mode_current=r.as_text("ecc_mode_current", raw("ecc_mode/current_ecc")),
        ecc_mode_pending=r.as_text("ecc_mode_pending", raw("ecc_mode/pending_ecc")),
        ecc_volatile=_ecc(at.element("ecc_errors/volatile"), r, "ecc_volatile"),
        ecc_aggregate=_ecc(at.element("ecc_errors/aggregate"), r, "ecc_aggregate"),
        retired_pages=retired_pages(*_block(at, "retired_pages", _RETIRED_PATHS), reader=r),
        remapped_rows=remapped_rows(*_block(at, "remapped_rows", _REMAPPED_PATHS), reader=r),
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
        mig_devices=_mig_devices(at.element("mig_devices")),
        persistence_mode=r.as_flag("persistence_mode", raw("persistence_mode")),
        reset_required=r.as_flag("reset_required", raw("gpu_reset_status/reset_required")),
        drain_and_reset_recommended=r.as_flag(
            "drain_and_reset_recommended", raw("gpu_reset_status/drain_and_reset_recommended")
        ),
        recovery_action=at.raw("gpu_recovery_action"),
        **{name: r.as_flag(name, raw(path)) for name, path in _REPAIR.items()},
        unavailable=dict(r.unavailable),
    )


def _ecc(node: Element | None, r: FieldReader, field: str) -> EccCounts:
    if node is None:
        return EccCounts()
    return ecc_counts({key: _raw(node, path) for key, path in _ECC_PATHS.items()}, r, field)


def _block(
    at: _Elements, path: str, paths: Mapping[str, tuple[str, ...]]
) -> tuple[dict[str, str | None], str | None]:
    """A block's counters by canonical key, and its own text when it holds none (``N/A``)."""
    node = at.element(path)
    if node is None:
        return {}, None
    if len(node) == 0:
        return {}, at.raw(path)
    return {
        key: first_present(*(_raw(node, p) for p in options)) for key, options in paths.items()
    }, None


def _mig_devices(node: Element | None) -> tuple[MigDevice, ...]:
    if node is None:
        return ()
    return tuple(
        mig_device(
            _raw(d, "index"),
            _raw(d, "gpu_instance_id"),
            _raw(d, "compute_instance_id"),
            _raw(d, "fb_memory_usage/total"),
            _raw(d, "device_attributes/shared/multiprocessor_count"),
        )
        for d in node.findall("mig_device")
    )


# Where _Elements looks elements up: every path _parse_gpu reads, and the blocks above them.
_INDEXED = frozenset("/".join(p.split("/")[:i]) for p in _READ for i in range(1, p.count("/") + 2))
# The paths with something to read below them.
_INNER = frozenset(p.rpartition("/")[0] for p in _INDEXED if "/" in p)


class _Elements:
    """The elements under one ``<gpu>``, by path, each as ``gpu.find(path)`` finds it (the first
    in document order), from one walk of the elements on the way to a path that is read,
    instead of a search per path."""

    def __init__(self, node: Element) -> None:
        self.node = node
        self.first: dict[str, Element] = {}
        stack = [("", iter(node))]
        while stack:
            prefix, children = stack[-1]
            for child in children:
                path = prefix + child.tag
                if path not in _INDEXED:
                    continue
                if path not in self.first:
                    self.first[path] = child
                if path in _INNER and len(child):
                    stack.append((path + "/", iter(child)))
                    break
            else:
                stack.pop()

    def element(self, path: str) -> Element | None:
        if path not in _INDEXED:
            return self.node.find(path)
        return self.first.get(path)

    def raw(self, path: str) -> str | None:
        found = self.element(path)
        if found is None or found.text is None:
            return None
        return found.text.strip()


def _raw(node: Element, path: str) -> str | None:
    found = node.find(path)
    if found is None or found.text is None:
        return None
    return found.text.strip()


def _text(node: Element, path: str) -> str | None:
    return clean(_raw(node, path))
