"""`nvidia-smi --query-gpu=... --format=csv`, `--query-retired-pages`, and the field list.

The CSV has one header row naming the queried fields, with the unit in brackets when the field
has one (``memory.total [MiB]``), then one row per GPU. With ``--format=csv`` the values carry
their unit (``81559 MiB``); with ``nounits`` they do not; the header keeps it either way. Cells
that hold no value read ``[N/A]``, ``[Not Supported]`` or ``[Requested functionality has been
deprecated]`` and become ``None`` with the reason in ``Gpu.unavailable``.

Fields are mapped by name (gpustat and nvitop key their data the same way), so any subset of
fields in any order is read, and fields gpuaudit does not model are ignored. A row whose cell
count does not match the header (nvidia-smi printing an error for one GPU) becomes a GPU with
status ``error`` instead of sinking the others.

``--help-query-gpu`` prints the field list; :func:`parse_query_help` reads it, and the CSV
parsers refuse it with a message that says what it is.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Mapping
from dataclasses import dataclass

from gpuaudit.model.snapshot import Gpu, RetiredPages, bus_key
from gpuaudit.parsers.errors import ParseError
from gpuaudit.parsers.nvidia_common import (
    NvidiaSmiLog,
    active_reasons,
    ecc_counts,
    remapped_rows,
    retired_pages,
    version,
)
from gpuaudit.parsers.values import FieldReader, clean, first_present, parse_int

WHAT = "nvidia-smi --query-gpu"
WHAT_RETIRED = "nvidia-smi --query-retired-pages"
WHAT_HELP = "nvidia-smi --help-query-gpu"

_HEADER_CELL = re.compile(r"^(?P<name>[A-Za-z][A-Za-z0-9_.]*)(?:\s*\[[^\]]*\])?$")
_HELP_TITLE = re.compile(r'List of valid properties to query for the switch "(--query-[a-z-]+)="')
_HELP_FIELD = re.compile(r'^"([^"]+)"((?:\s+or\s+"[^"]+")*)\s*$')
# The field names nvidia-smi accepts as synonyms, mapped to the one used below.
_ALIASES = {
    "gpu_name": "name",
    "gpu_serial": "serial",
    "gpu_uuid": "uuid",
    "gpu_bus_id": "pci.bus_id",
    "inforom.image": "inforom.img",
    "retired_pages.sbe": "retired_pages.single_bit_ecc.count",
    "retired_pages.dbe": "retired_pages.double_bit.count",
}
_REASON_GROUPS = ("clocks_event_reasons.", "clocks_throttle_reasons.")
_REASON_BITMASKS = ("supported", "active")
_RETIRED_FIELDS = ("retired_pages.address", "retired_pages.cause")


@dataclass(frozen=True)
class QueryField:
    """One queryable field of ``--help-query-*``: its names (first the main one) and meaning."""

    names: tuple[str, ...]
    description: str


@dataclass(frozen=True)
class RetiredPage:
    address: str  # as printed, e.g. "0x000000000001a2b3"
    timestamp: str | None
    cause: str | None  # "Single Bit ECC" | "Double Bit ECC"


@dataclass(frozen=True)
class GpuRetiredPages:
    """The retired pages `--query-retired-pages` lists for one GPU (none is a valid answer)."""

    pci_bus_id: str | None  # normalised, see bus_key()
    uuid: str | None
    name: str | None
    serial: str | None
    pages: tuple[RetiredPage, ...] = ()

    def counts(self) -> RetiredPages:
        """Page counts by cause, in the snapshot's terms (pending is not in this listing)."""
        causes = [(p.cause or "").lower() for p in self.pages]
        return RetiredPages(
            single_bit=sum(1 for c in causes if c.startswith("single")),
            double_bit=sum(1 for c in causes if c.startswith("double")),
        )


def parse_query_gpu_csv(text: str) -> NvidiaSmiLog:
    """Parse ``--query-gpu`` CSV with a header row. Raises :class:`ParseError` otherwise."""
    header, rows = _read(text, WHAT)
    if any(name in header for name in _RETIRED_FIELDS):
        raise ParseError(WHAT, "this is --query-retired-pages output", text)
    known = {"name", "uuid", "pci.bus_id", "index", "memory.total", "driver_version", "kmd_version"}
    if not known & set(header):
        raise ParseError(WHAT, "the header names none of the GPU identity fields", text)
    records = [_record(header, row) for row in rows]
    gpus = tuple(
        _gpu(position, record, row)
        for position, (record, row) in enumerate(zip(records, rows, strict=True))
    )
    first = next((r for r in records if r is not None), {})
    return NvidiaSmiLog(
        # 610 drivers add "kmd_version" beside the deprecated "driver_version".
        driver_version=version(first.get("kmd_version"), first.get("driver_version")),
        cuda_version=None,
        timestamp=clean(first.get("timestamp")),
        attached_gpus=parse_int(first.get("count")),
        gpus=gpus,
    )


def parse_retired_pages_csv(text: str) -> tuple[GpuRetiredPages, ...]:
    """Parse ``--query-retired-pages`` CSV into one entry per GPU, in order of appearance."""
    header, rows = _read(text, WHAT_RETIRED)
    if "retired_pages.address" not in header:
        raise ParseError(WHAT_RETIRED, "the header has no retired_pages.address field", text)
    found: dict[str, GpuRetiredPages] = {}
    for row in rows:
        record = _record(header, row)
        if record is None:
            raise ParseError(WHAT_RETIRED, f"row does not match the header: {row!r}", text)
        bus = bus_key(clean(record.get("pci.bus_id")))
        uuid = clean(record.get("uuid"))
        key = bus or uuid or str(len(found))
        entry = found.get(key) or GpuRetiredPages(
            pci_bus_id=bus,
            uuid=uuid,
            name=clean(record.get("name")),
            serial=clean(record.get("serial")),
        )
        address = clean(record.get("retired_pages.address"))
        if address is not None:  # nvidia-smi lists each cause with N/A when none is retired
            page = RetiredPage(
                address=address,
                timestamp=clean(record.get("retired_pages.timestamp")),
                cause=clean(record.get("retired_pages.cause")),
            )
            entry = GpuRetiredPages(
                entry.pci_bus_id, entry.uuid, entry.name, entry.serial, (*entry.pages, page)
            )
        found[key] = entry
    return tuple(found.values())


def parse_query_help(text: str) -> tuple[QueryField, ...]:
    """Parse ``nvidia-smi --help-query-gpu`` (or another ``--help-query-*``) into its fields."""
    if not _HELP_TITLE.search(text or ""):
        raise ParseError(WHAT_HELP, "no 'List of valid properties to query' title", text)
    fields: list[QueryField] = []
    names: tuple[str, ...] | None = None
    description: list[str] = []
    for line in [*text.splitlines(), ""]:
        match = _HELP_FIELD.match(line.strip())
        if match:
            names = (match.group(1), *re.findall(r'"([^"]+)"', match.group(2)))
            description = []
        elif line.strip() and names is not None:
            description.append(line.strip())
        elif not line.strip() and names is not None:
            fields.append(QueryField(names, " ".join(description)))
            names = None
    if not fields:
        raise ParseError(WHAT_HELP, "no field names in the list", text)
    return tuple(fields)


def _read(text: str, what: str) -> tuple[list[str], list[list[str]]]:
    if not text or not text.strip():
        raise ParseError(what, "empty output")
    if _HELP_TITLE.search(text):
        raise ParseError(what, "this is the --help-query-gpu field list, not query output", text)
    if "\x00" in text:  # the csv module rejects NUL bytes on some Python versions only
        raise ParseError(what, "NUL bytes in the output", text)
    try:
        rows = [row for row in csv.reader(io.StringIO(text), skipinitialspace=True) if row]
    except csv.Error as exc:
        raise ParseError(what, f"not CSV: {exc}", text) from exc
    cells = [cell.strip() for cell in rows[0]] if rows else []
    matches = [_HEADER_CELL.match(cell) for cell in cells]
    if not cells or not all(matches):
        raise ParseError(what, "the first line is not a header of field names", text)
    header = [_canonical(m["name"]) for m in matches if m]
    return header, rows[1:]


def _canonical(name: str) -> str:
    return _ALIASES.get(name, name)


def _record(header: list[str], row: list[str]) -> dict[str, str] | None:
    if len(row) != len(header):
        return None
    return {name: cell.strip() for name, cell in zip(header, row, strict=True)}


def _ecc_raw(get: Mapping[str, str], counters: str) -> dict[str, str | None]:
    corrected, uncorrected = (
        f"ecc.errors.corrected.{counters}",
        f"ecc.errors.uncorrected.{counters}",
    )
    return {
        "single_bit_total": get.get(f"{corrected}.total"),
        "double_bit_total": get.get(f"{uncorrected}.total"),
        "sram_correctable": get.get(f"{corrected}.sram"),
        "dram_correctable": get.get(f"{corrected}.dram"),
        "sram_uncorrectable": get.get(f"{uncorrected}.sram"),
        "sram_uncorrectable_parity": get.get(f"{uncorrected}.sram.parity"),
        "sram_uncorrectable_secded": get.get(f"{uncorrected}.sram.secded"),
        "dram_uncorrectable": get.get(f"{uncorrected}.dram"),
    }


def _gpu(position: int, record: dict[str, str] | None, row: list[str]) -> Gpu:
    if record is None:
        return Gpu(
            index=position,
            status="error",
            status_detail=f"nvidia-smi printed a row that does not match the header: "
            f"{', '.join(row)[:200]}",
        )
    v = record.get
    r = FieldReader()
    index = parse_int(v("index"))
    return Gpu(
        index=position if index is None else index,
        vendor="nvidia",
        name=r.as_text("name", v("name")),
        uuid=r.as_text("uuid", v("uuid")),
        serial=r.as_text("serial", v("serial")),
        pci_bus_id=bus_key(clean(v("pci.bus_id"))),
        vbios_version=r.as_text("vbios_version", v("vbios_version")),
        inforom_image=r.as_text("inforom_image", v("inforom.img")),
        driver_version=version(v("kmd_version"), v("driver_version")),
        memory_total_mib=r.as_int("memory_total_mib", v("memory.total")),
        memory_used_mib=r.as_int("memory_used_mib", v("memory.used")),
        ecc_mode_current=r.as_text("ecc_mode_current", v("ecc.mode.current")),
        ecc_mode_pending=r.as_text("ecc_mode_pending", v("ecc.mode.pending")),
        ecc_volatile=ecc_counts(_ecc_raw(record, "volatile"), r, "ecc_volatile"),
        ecc_aggregate=ecc_counts(_ecc_raw(record, "aggregate"), r, "ecc_aggregate"),
        retired_pages=retired_pages(
            {
                "single_bit": v("retired_pages.single_bit_ecc.count"),
                "double_bit": v("retired_pages.double_bit.count"),
                "pending": v("retired_pages.pending"),
            },
            None,
            r,
        ),
        remapped_rows=remapped_rows(
            {
                key: v(f"remapped_rows.{key}")
                for key in ("correctable", "uncorrectable", "pending", "failure")
            },
            None,
            r,
        ),
        temperature_c=r.as_float("temperature_c", v("temperature.gpu")),
        power_draw_w=r.as_float(
            "power_draw_w",
            first_present(v("power.draw"), v("power.draw.instant"), v("power.draw.average")),
        ),
        power_limit_w=r.as_float(
            "power_limit_w", first_present(v("power.limit"), v("enforced.power.limit"))
        ),
        utilization_gpu_pct=r.as_float("utilization_gpu_pct", v("utilization.gpu")),
        clock_event_reasons=active_reasons(
            (name, value)
            for name, value in record.items()
            if name.startswith(_REASON_GROUPS) and name.split(".", 1)[1] not in _REASON_BITMASKS
        ),
        pcie_gen_current=r.as_int("pcie_gen_current", v("pcie.link.gen.current")),
        pcie_gen_max=r.as_int("pcie_gen_max", v("pcie.link.gen.max")),
        pcie_width_current=r.as_int("pcie_width_current", v("pcie.link.width.current")),
        pcie_width_max=r.as_int("pcie_width_max", v("pcie.link.width.max")),
        mig_mode_current=r.as_text("mig_mode_current", v("mig.mode.current")),
        mig_mode_pending=r.as_text("mig_mode_pending", v("mig.mode.pending")),
        persistence_mode=r.as_flag("persistence_mode", v("persistence_mode")),
        recovery_action=v("gpu_recovery_action"),
        unavailable=dict(r.unavailable),
    )
