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

from gpuaudit.model.snapshot import Gpu, bus_key
from gpuaudit.parsers.errors import ParseError
from gpuaudit.parsers.nvidia_common import (
    NvidiaSmiLog,
    active_reasons,
    ecc_counts,
    gpu_status,
    remapped_rows,
    retired_pages,
)
from gpuaudit.parsers.values import FieldReader, clean, first_present, parse_int

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
    "Power Readings/Enforced Power Limit",
    "Power Readings/Power Limit",
)
_LINK = "PCI/GPU Link Info"


def _norm(label: str) -> str:
    return " ".join(label.split()).lower()


@dataclass(frozen=True)
class Entry:
    """One line of the tree: label, value (``None`` for a bare heading) and the lines under it."""

    label: str
    value: str | None = None
    children: tuple[Entry, ...] = ()

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
    children: list[_Open] = field(default_factory=list)

    def close(self) -> Entry:
        return Entry(self.label, self.value, tuple(c.close() for c in self.children))


def read_tree(text: str) -> Entry:
    """Build the indentation tree of ``Label : value`` text; the root entry has no label."""
    root = _Open(-1, "", None)
    stack = [root]
    for raw_line in text.splitlines():
        line = raw_line.expandtabs().rstrip()
        stripped = line.strip()
        if not stripped or stripped == _ELIDED or _BANNER.match(stripped):
            continue
        indent = len(line) - len(line.lstrip())
        label, value = _split(stripped)
        while stack[-1].indent >= indent:
            stack.pop()
        entry = _Open(indent, label, value)
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
    root = read_tree(text)
    if not any(e.value is not None for e in root.walk()):
        raise ParseError(WHAT, "no 'Label : value' lines", text)
    driver = clean(root.get("Driver Version"))
    cuda = clean(root.get("CUDA Version"))
    sections = [(m.group(1), e) for e in root.children if (m := _GPU_HEADING.match(e.label))]
    if not sections:
        # An excerpt without its "GPU <bus id>" heading: the blocks describe one GPU.
        sections = [(None, root)]
    gpus = tuple(
        _gpu(index, bus, entry, driver, cuda) for index, (bus, entry) in enumerate(sections)
    )
    if all(_empty(g) for g in gpus):
        raise ParseError(WHAT, "no GPU fields found", text)
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
        persistence_mode=r.as_flag("persistence_mode", g.get("Persistence Mode")),
        reset_required=r.as_flag("reset_required", g.get("GPU Reset Status/Reset Required")),
        drain_and_reset_recommended=r.as_flag(
            "drain_and_reset_recommended", g.get("GPU Reset Status/Drain and Reset Recommended")
        ),
        recovery_action=g.get("GPU Recovery Action"),
        unavailable=dict(r.unavailable),
    )


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
