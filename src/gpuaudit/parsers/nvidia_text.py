"""`nvidia-smi -q`: the plain-text report, read into the same result as the XML.

The text is an indented tree of ``Label : value`` lines and bare headings (``ECC Errors``,
``GPU 00000000:19:00.0``); a heading may carry a value *and* children (``HW Slowdown : Active``
with ``HW Thermal Slowdown`` under it). It is read in two steps: a generic reader builds the
tree from indentation alone, then each :class:`Gpu` field is looked up by its label path. Labels
are compared case-insensitively with runs of spaces collapsed, because drivers print both ``Ecc
Mode`` and ``ECC Mode`` and leave trailing spaces after some headings.

Captures are often excerpts (``nvidia-smi -q -d PAGE_RETIREMENT``, or a block pasted into a
ticket with ``[...]`` where lines were cut): whatever blocks are present are read, and an
excerpt without a ``GPU <bus id>`` heading is read as one GPU.

Label paths follow the drivers seen in captures (460 → 595): ``Clocks Throttle Reasons`` became
``Clocks Event Reasons``, ``Power Readings`` became ``GPU Power Readings``, ``Power Draw`` split
into ``Average`` and ``Instantaneous Power Draw``, and ECC counters moved from single/double-bit
totals to SRAM/DRAM counts.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from gpuaudit.model.snapshot import Gpu, MigDevice, bus_key
from gpuaudit.parsers.errors import ParseError
from gpuaudit.parsers.nvidia_common import (
    Notice,
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
    version,
)
from gpuaudit.parsers.values import FieldReader, clean, first_present, parse_int
from gpuaudit.parsers.warnings import warn

WHAT = "nvidia-smi -q"

# "Label   : value"; the colon is preceded by padding, so bus ids ("GPU 0000:19:00.0") and
# timestamps in values never split a line in the wrong place. Searched for, not matched as a
# whole line, so that a long run of spaces costs linear time.
_SEPARATOR = re.compile(r"\s:(?=\s|$)")
_GPU_HEADING = re.compile(r"^GPU\s+([0-9A-Fa-f]+:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])$")
_BANNER = re.compile(r"^=+\s*NVSMI LOG\s*=+$")
_ELIDED = "[...]"
_CORE_FIELDS = (
    "Product Name",
    "GPU UUID",
    "PCI/Bus Id",
    "FB Memory Usage/Total",
    "Temperature/GPU Current Temp",
)
_ECC_LABELS = {
    "single_bit_total": "Single Bit/Total",
    "double_bit_total": "Double Bit/Total",
    "sram_correctable": "SRAM Correctable",
    "dram_correctable": "DRAM Correctable",
    "sram_uncorrectable": "SRAM Uncorrectable",
    "sram_uncorrectable_parity": "SRAM Uncorrectable Parity",
    "sram_uncorrectable_secded": "SRAM Uncorrectable SEC-DED",
    "dram_uncorrectable": "DRAM Uncorrectable",
}
_RETIRED_LABELS = {
    "single_bit": "Single Bit ECC",
    "double_bit": "Double Bit ECC",
    "pending": "Pending Page Blacklist",
}
_REMAPPED_LABELS = {
    "correctable": "Correctable Error",
    "uncorrectable": "Uncorrectable Error",
    "pending": "Pending",
    "failure": "Remapping Failure Occurred",
}
_POWER_DRAW = (
    "GPU Power Readings/Power Draw",
    "GPU Power Readings/Instantaneous Power Draw",
    "GPU Power Readings/Average Power Draw",
    "Power Readings/Power Draw",
)
_POWER_LIMIT = (
    "GPU Power Readings/Current Power Limit",
    # 610 drivers group the limits under "GPU Ceiling Power Limit" beside "GPU Base Power".
    "GPU Power Readings/GPU Ceiling Power Limit/Current Power Limit",
    "Power Readings/Enforced Power Limit",
    "Power Readings/Power Limit",
)
_LINK = "PCI/GPU Link Info"
_MIG_MEMORY = ("Shared FB Memory Usage/Total", "FB Memory Usage/Total")
_MIG_SMS = ("Device Attributes/Shared/Multiprocessor count",)

# What the report prints that gpuaudit reads no value from, by label path under the report
# (root) or under one GPU: a known field is passed over; any other field is warned about once
# per file, so that a renamed or new field is seen rather than read as missing.
_KNOWN_ROOT = frozenset({"timestamp", "attached gpus"})
_IGNORED_ROOT = frozenset({"vgpu driver capability"})
_KNOWN = frozenset(
    [
        "Product Brand", "Display Mode", "Display Attached", "Display Active", "Addressing Mode",
        "Accounting Mode", "Accounting Mode Buffer Size", "GPU PDI", "Minor Number",
        "MultiGPU Board", "Board ID", "Board Part Number", "GPU Part Number", "FRU Part Number",
        "Module ID", "GPU C2C Mode", "GSP Firmware Version", "Fan Speed", "Performance State",
        "Sparse Operation Mode", "Compute Mode", "EDPp Multiplier", "Power Smoothing",
        "Inforom Version/OEM Object", "Inforom Version/ECC Object",
        "Inforom Version/Power Management Object",
        "PCI/Bus", "PCI/Device", "PCI/Domain", "PCI/Device Id", "PCI/Sub System Id",
        "PCI/Base Classcode", "PCI/Sub Classcode", "PCI/Replay Number Rollovers",
        "PCI/Tx Throughput", "PCI/Rx Throughput", "PCI/Atomic Caps Outbound",
        "PCI/Atomic Caps Inbound", "PCI/GPU Link Info/PCIe Generation/Device Current",
        "PCI/GPU Link Info/PCIe Generation/Device Max",
        "PCI/GPU Link Info/PCIe Generation/Host Max",
        "FB Memory Usage/Reserved", "FB Memory Usage/Free",
        "Remapped Rows/Inactive Correctable Error", "Remapped Rows/Inactive Uncorrectable Error",
        "Temperature/GPU Shutdown Temp", "Temperature/GPU Max Operating Temp",
        "Temperature/Memory Current Temp", "Temperature/Memory Max Operating Temp",
        "Temperature/GPU T.Limit Temp", "Temperature/GPU Current T.Limit Temp",
        "Temperature/GPU Shutdown T.Limit Temp", "Temperature/GPU Slowdown T.Limit Temp",
        "Temperature/GPU Max Operating T.Limit Temp", "Temperature/GPU Target Temperature",
        "Temperature/GPU Target Temperature Specification",
        "Temperature/Memory Max Operating T.Limit Temp",
        "Power Readings/Power Management", "Power Readings/Default Power Limit",
        "Power Readings/Min Power Limit", "Power Readings/Max Power Limit",
        "GPU Power Readings/Default Power Limit", "GPU Power Readings/Min Power Limit",
        "GPU Power Readings/Max Power Limit", "GPU Power Readings/Requested Power Limit",
        "GPU Power Readings/GPU Ceiling Power Limit/Requested Power Limit",
        "GPU Power Readings/GPU Ceiling Power Limit/Default Power Limit",
        "Utilization/Memory", "Utilization/Encoder", "Utilization/Decoder", "Utilization/JPEG",
        "Utilization/OFA",
        "MIG Device/Shared FB Memory Usage/Reserved", "MIG Device/Shared FB Memory Usage/Used",
        "MIG Device/Shared FB Memory Usage/Free", "MIG Device/FB Memory Usage/Used",
        "MIG Device/FB Memory Usage/Free", "MIG Device/FB Memory Usage/Reserved",
    ]
)  # fmt: skip
# Blocks read as a whole or not at all: nothing under them is warned about.
_IGNORED = frozenset(
    [
        "Driver Model", "Platform Info", "Inforom BBX Object Flush", "Inforom Time Data",
        "GPU Operation Mode", "GPU Virtualization Mode", "IBMNPU", "BAR1 Memory Usage",
        "Conf Compute Protected Memory Usage", "Encoder Stats", "FBC Stats", "Clocks",
        "Applications Clocks", "Default Applications Clocks", "Deferred Clocks", "Max Clocks",
        "Max Customer Boost Clocks", "Clock Policy", "Supported Clocks", "Voltage", "Fabric",
        "Processes", "Accounted Processes", "Capabilities", "Clocks Event Reasons Counters",
        "GPU Memory Power Readings", "Module Power Readings", "DRAM Encryption Mode",
        "Workload Power Profiles", "PCI/Bridge Chip",
        "ECC Errors/Aggregate Uncorrectable SRAM Sources",
        "Remapped Rows/Bank Remap Availability Histogram", "GPU Power Readings/GPU Base Power",
        # Read by active_reasons: every reason, known or new, becomes a name when Active.
        "Clocks Event Reasons", "Clocks Throttle Reasons",
        "MIG Device/Device Attributes", "MIG Device/ECC Errors", "MIG Device/Shared BAR1 Memory",
        "MIG Device/BAR1 Memory Usage",
    ]
    + [f"ECC Errors/{s}/{b} Bit" for s in ("Volatile", "Aggregate") for b in ("Single", "Double")]
)  # fmt: skip


def _norm(label: str) -> str:
    return " ".join(label.split()).lower()


@dataclass(frozen=True)
class Entry:
    """One line of the tree: label, value (``None`` for a bare heading) and the lines under it."""

    label: str
    value: str | None = None
    children: tuple[Entry, ...] = ()
    line: int = 0  # 1-based line number in the text; 0 for the root

    def find(self, path: str) -> Entry | None:
        """The first entry at ``path`` (labels joined by ``/``), matched as :func:`_norm` does."""
        node = self
        for step in path.split("/"):
            wanted = _norm(step)
            found = next((c for c in node.children if _norm(c.label) == wanted), None)
            if found is None:
                return None
            node = found
        return node

    def get(self, *paths: str) -> str | None:
        """The printed value at the first path that has one (see :func:`first_present`)."""
        return first_present(*(e.value for p in paths if (e := self.find(p)) is not None))

    def walk(self) -> Iterator[Entry]:
        for child in self.children:
            yield child
            yield from child.walk()


@dataclass
class _Open:
    indent: int
    label: str
    value: str | None
    line: int = 0
    children: list[_Open] = field(default_factory=list)

    def close(self) -> Entry:
        return Entry(self.label, self.value, tuple(c.close() for c in self.children), self.line)


def read_tree(text: str, notices: list[Notice] | None = None) -> Entry:
    """Build the indentation tree of ``Label : value`` text; the root entry has no label.

    Warning and error lines nvidia-smi prints between report lines (see
    :func:`gpuaudit.parsers.nvidia_common.notice`) are left out of the tree and, when
    ``notices`` is given, appended to it.
    """
    root = _Open(-1, "", None)
    stack = [root]
    for number, raw_line in enumerate(text.splitlines(), start=1):
        line = raw_line.expandtabs().rstrip()
        stripped = line.strip()
        if not stripped or stripped == _ELIDED or _BANNER.match(stripped):
            continue
        found = notice(stripped) if _SEPARATOR.search(stripped) is None else None
        if found is not None:
            if notices is not None:
                notices.append(found)
            continue
        indent = len(line) - len(line.lstrip())
        label, value = _split(stripped)
        while stack[-1].indent >= indent:
            stack.pop()
        entry = _Open(indent, label, value, number)
        stack[-1].children.append(entry)
        stack.append(entry)
    return root.close()


def _split(line: str) -> tuple[str, str | None]:
    """``(label, value)`` of a stripped line; the value is ``None`` for a bare heading."""
    separator = _SEPARATOR.search(line)
    if separator is None:
        return line, None
    return line[: separator.start()].rstrip(), line[separator.end() :].strip()


def parse_nvidia_smi_text(text: str) -> NvidiaSmiLog:
    """Parse ``nvidia-smi -q`` text (whole or excerpt). Raises :class:`ParseError` otherwise."""
    if not text or not text.strip():
        raise ParseError(WHAT, "empty output")
    if text.lstrip().startswith("<"):
        raise ParseError(WHAT, "this is XML (nvidia-smi -q -x), not the text report", text)
    notices: list[Notice] = []
    root = read_tree(text, notices)
    if not any(e.value is not None for e in root.walk()):
        if any(n.failed and n.pci_bus_id for n in notices):
            # Nothing but "Unable to determine the device handle for GPU …" lines.
            return NvidiaSmiLog(None, None, None, None, attach_notices((), notices, WHAT))
        raise ParseError(WHAT, "no 'Label : value' lines", text)
    driver = version(root.get("KMD Version"), root.get("Driver Version"))
    cuda = version(root.get("CUDA UMD Version"), root.get("CUDA Version"))
    sections = [(m.group(1), e) for e in root.children if (m := _GPU_HEADING.match(e.label))]
    if not sections:
        # An excerpt without its "GPU <bus id>" heading: the blocks describe one GPU.
        sections = [(None, root)]
    gpus = tuple(
        _gpu(index, bus, entry, driver, cuda) for index, (bus, entry) in enumerate(sections)
    )
    if sections[0][0] is None and all(_empty(g) for g in gpus):
        # With "GPU <bus id>" headings the GPUs are there even when the excerpt (-d PERFORMANCE
        # with no reason active) holds no value gpuaudit models.
        raise ParseError(WHAT, "no GPU fields found", text)
    for line, path, _ in unplaced_fields(root):
        warn(WHAT, f"unknown field {path!r}: its value is not read", line)
    gpus = attach_notices(gpus, notices, WHAT)
    return NvidiaSmiLog(
        driver_version=driver,
        cuda_version=cuda,
        timestamp=clean(root.get("Timestamp")),
        attached_gpus=parse_int(root.get("Attached GPUs")),
        gpus=gpus,
    )


def _gpu(index: int, bus: str | None, g: Entry, driver: str | None, cuda: str | None) -> Gpu:
    status, detail = gpu_status(
        {label: g.get(label) for label in _CORE_FIELDS}, (e.value for e in g.walk())
    )
    r = FieldReader()
    return Gpu(
        index=index,
        vendor="nvidia",
        status=status,
        status_detail=detail,
        name=r.as_text("name", g.get("Product Name")),
        uuid=r.as_text("uuid", g.get("GPU UUID")),
        serial=r.as_text("serial", g.get("Serial Number")),
        pci_bus_id=bus_key(clean(g.get("PCI/Bus Id")) or bus),
        architecture=r.as_text("architecture", g.get("Product Architecture")),
        vbios_version=r.as_text("vbios_version", g.get("VBIOS Version")),
        inforom_image=r.as_text("inforom_image", g.get("Inforom Version/Image Version")),
        driver_version=driver,
        cuda_version=cuda,
        memory_total_mib=r.as_int("memory_total_mib", g.get("FB Memory Usage/Total")),
        memory_used_mib=r.as_int("memory_used_mib", g.get("FB Memory Usage/Used")),
        ecc_mode_current=r.as_text("ecc_mode_current", g.get("ECC Mode/Current")),
        ecc_mode_pending=r.as_text("ecc_mode_pending", g.get("ECC Mode/Pending")),
        ecc_volatile=ecc_counts(
            _block(g, "ECC Errors/Volatile", _ECC_LABELS)[0], r, "ecc_volatile"
        ),
        ecc_aggregate=ecc_counts(
            _block(g, "ECC Errors/Aggregate", _ECC_LABELS)[0], r, "ecc_aggregate"
        ),
        retired_pages=retired_pages(*_block(g, "Retired Pages", _RETIRED_LABELS), reader=r),
        remapped_rows=remapped_rows(*_block(g, "Remapped Rows", _REMAPPED_LABELS), reader=r),
        temperature_c=r.as_float("temperature_c", g.get("Temperature/GPU Current Temp")),
        # Only the absolute threshold: "GPU Slowdown T.Limit Temp" is a margin to T.Limit.
        temperature_slowdown_c=r.as_float(
            "temperature_slowdown_c", g.get("Temperature/GPU Slowdown Temp")
        ),
        power_draw_w=r.as_float("power_draw_w", g.get(*_POWER_DRAW)),
        power_limit_w=r.as_float("power_limit_w", g.get(*_POWER_LIMIT)),
        utilization_gpu_pct=r.as_float("utilization_gpu_pct", g.get("Utilization/GPU")),
        clock_event_reasons=active_reasons(
            (e.label, e.value)
            for heading in ("Clocks Event Reasons", "Clocks Throttle Reasons")
            if (block := g.find(heading)) is not None
            for e in block.walk()
        ),
        pcie_gen_current=r.as_int("pcie_gen_current", g.get(f"{_LINK}/PCIe Generation/Current")),
        pcie_gen_max=r.as_int("pcie_gen_max", g.get(f"{_LINK}/PCIe Generation/Max")),
        pcie_width_current=r.as_int("pcie_width_current", g.get(f"{_LINK}/Link Width/Current")),
        pcie_width_max=r.as_int("pcie_width_max", g.get(f"{_LINK}/Link Width/Max")),
        pcie_replay_count=r.as_int("pcie_replay_count", g.get("PCI/Replays Since Reset")),
        mig_mode_current=r.as_text("mig_mode_current", g.get("MIG Mode/Current")),
        mig_mode_pending=r.as_text("mig_mode_pending", g.get("MIG Mode/Pending")),
        mig_devices=_mig_devices(g),
        persistence_mode=r.as_flag("persistence_mode", g.get("Persistence Mode")),
        reset_required=r.as_flag("reset_required", g.get("GPU Reset Status/Reset Required")),
        drain_and_reset_recommended=r.as_flag(
            "drain_and_reset_recommended", g.get("GPU Reset Status/Drain and Reset Recommended")
        ),
        recovery_action=g.get("GPU Recovery Action"),
        **{name: r.as_flag(name, g.get(label)) for name, label in _REPAIR.items()},
        unavailable=dict(r.unavailable),
    )


def _mig_devices(g: Entry) -> tuple[MigDevice, ...]:
    """The ``MIG Device`` blocks of a GPU: directly under it (drivers 525+) or under a
    ``MIG Devices`` heading."""
    holders = [g, *(c for c in g.children if _norm(c.label) == "mig devices")]
    return tuple(
        mig_device(
            d.get("Index"),
            d.get("GPU Instance ID"),
            d.get("Compute Instance ID"),
            d.get(*_MIG_MEMORY),
            d.get(*_MIG_SMS),
        )
        for holder in holders
        for d in holder.children
        if _norm(d.label) == "mig device"
    )


_COUNTER_SETS = ("Volatile", "Aggregate")
_MIG_IDS = ("Index", "GPU Instance ID", "Compute Instance ID")
# The label paths :func:`_gpu` reads, for :func:`unplaced_fields`.
# Memory repair and the SRAM error threshold: Gpu field -> label path (newer drivers).
_REPAIR = {
    "channel_repair_pending": "ECC Errors/Channel Repair Pending",
    "tpc_repair_pending": "ECC Errors/TPC Repair Pending",
    "unrepairable_memory": "ECC Errors/Unrepairable Memory",
    "sram_threshold_exceeded": "ECC Errors/Aggregate/SRAM Threshold Exceeded",
}
_READ = frozenset(
    _norm(p)
    for p in (
        *_CORE_FIELDS, *_POWER_DRAW, *_POWER_LIMIT, "Serial Number", "Product Architecture",
        "VBIOS Version", "Inforom Version/Image Version", "FB Memory Usage/Used",
        "ECC Mode/Current", "ECC Mode/Pending", "Temperature/GPU Slowdown Temp",
        "Utilization/GPU", "PCI/Replays Since Reset", "MIG Mode/Current", "MIG Mode/Pending",
        "Persistence Mode", "GPU Reset Status/Reset Required",
        "GPU Reset Status/Drain and Reset Recommended", "GPU Recovery Action",
        *_REPAIR.values(),
        f"{_LINK}/PCIe Generation/Current", f"{_LINK}/PCIe Generation/Max",
        f"{_LINK}/Link Width/Current", f"{_LINK}/Link Width/Max",
        *(f"ECC Errors/{s}/{label}" for s in _COUNTER_SETS for label in _ECC_LABELS.values()),
        *(f"ECC Errors/{s}/{b} Bit/Total" for s in _COUNTER_SETS for b in ("Single", "Double")),
        *(f"Retired Pages/{label}" for label in _RETIRED_LABELS.values()),
        *(f"Remapped Rows/{label}" for label in _REMAPPED_LABELS.values()),
        *(f"MIG Device/{p}" for p in _MIG_IDS + _MIG_MEMORY + _MIG_SMS),
    )
)  # fmt: skip
_KNOWN_PATHS = frozenset(_norm(p) for p in _KNOWN)
_IGNORED_PATHS = frozenset(_norm(p) for p in _IGNORED)


def _with_parents(paths: frozenset[str]) -> frozenset[str]:
    return frozenset("/".join(p.split("/")[:i]) for p in paths for i in range(1, p.count("/") + 2))


# A heading is placed when something under it is.
_PLACED = _with_parents(_READ | _KNOWN_PATHS)


def field_status(path: str) -> str:
    """How the parser treats a GPU field at label ``path`` (labels joined by ``/``, any case):
    ``read`` (a Gpu field comes from it), ``known`` (recognised, no Gpu field),
    ``ignored`` (inside a block read as a whole or not at all) or ``unknown``."""
    key = _norm(path).removeprefix("mig devices/")
    return classify_field(key, _READ, _IGNORED_PATHS, _PLACED)


def unplaced_fields(root: Entry) -> Iterator[tuple[str, str, int]]:
    """``(line, label path, line number)`` of each field of the report nothing reads or
    recognises, each label path once (so a new field on 8 GPUs is one warning)."""
    seen: set[str] = set()
    for top in root.children:
        if _GPU_HEADING.match(top.label) is None:
            key = _norm(top.label)
            if key in _KNOWN_ROOT or key in _IGNORED_ROOT:
                continue
            if key in ("driver version", "cuda version", "kmd version", "cuda umd version"):
                continue
            # An excerpt without a GPU heading: its blocks are GPU blocks.
            yield from _unplaced(top, top.label, seen)
            continue
        for child in top.children:
            yield from _unplaced(child, child.label, seen)


def _unplaced(entry: Entry, path: str, seen: set[str]) -> Iterator[tuple[str, str, int]]:
    status = field_status(path)
    if status == "ignored":
        return
    key = _norm(path)
    if status == "unknown":
        if key not in seen:
            seen.add(key)
            line = entry.label if entry.value is None else f"{entry.label} : {entry.value}"
            yield line, " / ".join(p.strip() for p in path.split("/")), entry.line
        return
    for child in entry.children:
        yield from _unplaced(child, f"{path}/{child.label}", seen)


def _block(g: Entry, path: str, labels: dict[str, str]) -> tuple[dict[str, str | None], str | None]:
    """A block's printed counters by canonical key, and its own value when it has no children."""
    block = g.find(path)
    if block is None:
        return {}, None
    if not block.children:
        return {}, block.value
    return {key: block.get(label) for key, label in labels.items()}, None


def _empty(gpu: Gpu) -> bool:
    """True when nothing at all was read for this GPU (the text was not a -q report)."""
    blank = Gpu(
        index=gpu.index,
        pci_bus_id=gpu.pci_bus_id,
        driver_version=gpu.driver_version,
        cuda_version=gpu.cuda_version,
    )
    return gpu == blank
