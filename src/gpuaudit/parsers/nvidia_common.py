"""What every nvidia-smi output format shares once its own syntax has been read.

The XML (``-q -x``), the plain text (``-q``), the ``--query-gpu`` CSV and the default table all
print the same NVML values under different names. Each parser looks its names up and hands the
printed text to the functions here, so that ECC schemas, clock-event reason names and the "GPU
is lost" judgement are decided once, the same way for every format.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from gpuaudit.model.snapshot import EccCounts, Gpu, MigDevice, RemappedRows, RetiredPages, bus_key
from gpuaudit.parsers.values import (
    FieldReader,
    clean,
    first_present,
    is_gpu_error,
    parse_int,
    strip_note,
    total,
)
from gpuaudit.parsers.warnings import warn


@dataclass(frozen=True)
class NvidiaSmiLog:
    """One nvidia-smi report of a host: the driver and its GPUs, whatever format it came in."""

    driver_version: str | None
    cuda_version: str | None
    timestamp: str | None
    attached_gpus: int | None
    gpus: tuple[Gpu, ...]


# Canonical names of the ECC counters of one counter set (volatile or aggregate). Pre-Ampere
# GPUs report single/double-bit totals; newer ones split by memory kind, and v13-era drivers
# split SRAM uncorrectable errors further by how they were detected.
ECC_LEGACY = ("single_bit_total", "double_bit_total")
ECC_SPLIT = (
    "sram_correctable",
    "dram_correctable",
    "sram_uncorrectable",
    "sram_uncorrectable_parity",
    "sram_uncorrectable_secded",
    "dram_uncorrectable",
)
RETIRED_KEYS = ("single_bit", "double_bit", "pending")
REMAPPED_KEYS = ("correctable", "uncorrectable", "pending", "failure")

_REASON_PREFIX = re.compile(r"^clocks?_(?:event|throttle)_reasons?_")
# The -q text labels that do not turn into the XML element names by themselves.
_REASON_ALIASES = {"idle": "gpu_idle", "display_clock_setting": "display_clocks_setting"}


def reason_name(label: str) -> str:
    """``clocks_event_reason_hw_slowdown``, ``clocks_throttle_reasons.hw_slowdown`` and
    ``HW Slowdown`` all become ``hw_slowdown``; ``Idle`` becomes ``gpu_idle``."""
    name = re.sub(r"[^a-z0-9]+", "_", label.strip().lower()).strip("_")
    name = _REASON_PREFIX.sub("", name)
    return _REASON_ALIASES.get(name, name)


def active_reasons(states: Iterable[tuple[str, str | None]]) -> tuple[str, ...]:
    """The normalised names of the reasons whose state reads ``Active``, first seen first."""
    reasons: list[str] = []
    for label, state in states:
        name = reason_name(label)
        if (state or "").strip() == "Active" and name not in reasons:
            reasons.append(name)
    return tuple(reasons)


def ecc_counts(raw: Mapping[str, str | None], reader: FieldReader, field: str) -> EccCounts:
    """One counter set from its printed counters, keyed by :data:`ECC_LEGACY` / :data:`ECC_SPLIT`.

    ``field`` (``ecc_volatile`` / ``ecc_aggregate``) prefixes the names recorded in
    ``reader.unavailable``.
    """
    legacy_printed = any(raw.get(key) is not None for key in ECC_LEGACY)
    split_valued = any(clean(raw.get(key)) is not None for key in ECC_SPLIT)
    if legacy_printed and not split_valued:
        return EccCounts(
            corrected=reader.as_int(f"{field}.corrected", raw.get("single_bit_total")),
            uncorrected=reader.as_int(f"{field}.uncorrected", raw.get("double_bit_total")),
        )
    sram_corr = reader.as_int(f"{field}.sram_corrected", raw.get("sram_correctable"))
    dram_corr = reader.as_int(f"{field}.dram_corrected", raw.get("dram_correctable"))
    dram_unc = reader.as_int(f"{field}.dram_uncorrected", raw.get("dram_uncorrectable"))
    # Parity and SEC-DED detections are both uncorrectable SRAM errors; a plain total wins.
    sram_unc = parse_int(raw.get("sram_uncorrectable"))
    if sram_unc is None:
        sram_unc = total(
            parse_int(raw.get("sram_uncorrectable_parity")),
            parse_int(raw.get("sram_uncorrectable_secded")),
        )
    sram_unc_raw = first_present(
        raw.get("sram_uncorrectable"),
        raw.get("sram_uncorrectable_parity"),
        raw.get("sram_uncorrectable_secded"),
    )
    reader.note(f"{field}.sram_uncorrected", sram_unc_raw, sram_unc)
    corrected = {f"{field}.sram_corrected": sram_corr, f"{field}.dram_corrected": dram_corr}
    uncorrected = {f"{field}.sram_uncorrected": sram_unc, f"{field}.dram_uncorrected": dram_unc}
    return EccCounts(
        corrected=reader.total(f"{field}.corrected", corrected),
        uncorrected=reader.total(f"{field}.uncorrected", uncorrected),
        sram_uncorrected=sram_unc,
        dram_uncorrected=dram_unc,
        sram_corrected=sram_corr,
        dram_corrected=dram_corr,
    )


def retired_pages(
    raw: Mapping[str, str | None], block: str | None, reader: FieldReader
) -> RetiredPages:
    """Page retirement from its printed counters, keyed by :data:`RETIRED_KEYS`.

    ``block`` is what the whole block printed when it holds no counters (``N/A`` on GPUs that
    remap rows instead).
    """
    reader.note("retired_pages", block, None)
    return RetiredPages(
        single_bit=reader.as_int("retired_pages.single_bit", raw.get("single_bit")),
        double_bit=reader.as_int("retired_pages.double_bit", raw.get("double_bit")),
        pending=reader.as_flag("retired_pages.pending", raw.get("pending")),
    )


def remapped_rows(
    raw: Mapping[str, str | None], block: str | None, reader: FieldReader
) -> RemappedRows:
    """Row remapping from its printed counters, keyed by :data:`REMAPPED_KEYS`."""
    reader.note("remapped_rows", block, None)
    return RemappedRows(
        correctable=reader.as_int("remapped_rows.correctable", raw.get("correctable")),
        uncorrectable=reader.as_int("remapped_rows.uncorrectable", raw.get("uncorrectable")),
        pending=reader.as_flag("remapped_rows.pending", raw.get("pending")),
        failure=reader.as_flag("remapped_rows.failure", raw.get("failure")),
    )


def gpu_status(core: Mapping[str, str | None], everything: Iterable[str | None]) -> tuple[str, str]:
    """``("error", why)`` when the GPU itself failed to answer, else ``("ok", "")``.

    ``core`` maps the names of the fields that identify a working GPU (product name, UUID, bus
    id, memory, temperature) to their printed text: an ``Unknown Error`` there marks the device
    as broken rather than one exotic counter unreadable. ``GPU is lost`` anywhere does too.
    """
    lost = {name: value.strip() for name, value in core.items() if value and is_gpu_error(value)}
    anywhere_lost = any((value or "").strip().lower() == "gpu is lost" for value in everything)
    if not lost and not anywhere_lost:
        return "ok", ""
    reason = "GPU is lost" if anywhere_lost else next(iter(lost.values()))
    fields = ", ".join(lost) if lost else "some fields"
    return "error", f"nvidia-smi reported {reason!r} for {fields}"


def version(current: str | None, deprecated: str | None) -> str | None:
    """A version from its 610-branch label (``KMD Version``, ``CUDA UMD Version``) or, failing
    that, the older one (``Driver Version``, ``CUDA Version``), which 610 drivers still print
    with a ``[Deprecated; …]`` note after the number."""
    return clean(strip_note(current)) or clean(strip_note(deprecated))


def mig_device(
    index: str | None,
    gpu_instance: str | None,
    compute_instance: str | None,
    memory_total: str | None,
    multiprocessors: str | None,
    profile: str | None = None,
) -> MigDevice:
    """One MIG device from its printed fields (any of which may be missing)."""
    return MigDevice(
        index=parse_int(index),
        gpu_instance_id=parse_int(gpu_instance),
        compute_instance_id=parse_int(compute_instance),
        profile=clean(profile),
        memory_total_mib=parse_int(memory_total),
        multiprocessor_count=parse_int(multiprocessors),
    )


@dataclass(frozen=True)
class Notice:
    """A line nvidia-smi printed between (or instead of) its report lines: a warning or an
    error about one GPU (``WARNING: infoROM is corrupted at gpu 0000:3B:00.0``, ``Unable to
    determine the device handle for GPU 0000:09:00.0: Unknown Error``) or about all of them."""

    text: str
    pci_bus_id: str | None  # normalised; None when the line names no GPU
    # True when nvidia-smi could not reach the GPU at all: it is missing from the report.
    failed: bool


_BUS_ID = r"(?:[0-9A-Fa-f]{4,8}:)?[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]"
_NOTICE_BUS = re.compile(rf"(?:gpu|GPU)\s*(?P<bus>{_BUS_ID})")
# What nvidia-smi prints when it cannot get a GPU's handle or talk to the driver.
_FAILED = re.compile(
    r"^(?:Unable to determine the device handle for|Unable to detect the device handle for"
    r"|Failed to initialize NVML|NVIDIA-SMI has failed|No devices were found"
    r"|Unable to determine the number of GPUs|GPU access blocked)",
    re.IGNORECASE,
)
_NOTICE = re.compile(r"^(?:WARNING|Warning|ERROR|Error|Unable to|Failed to|NVIDIA-SMI has failed)")


def notice(line: str) -> Notice | None:
    """The :class:`Notice` a report line is, or None for an ordinary line."""
    text = line.strip()
    if not text or len(text) > 1000 or not (_NOTICE.match(text) or _FAILED.match(text)):
        return None
    bus = _NOTICE_BUS.search(text)
    return Notice(text, bus_key(bus["bus"]) if bus else None, bool(_FAILED.match(text)))


def attach_notices(gpus: tuple[Gpu, ...], notices: Iterable[Notice], what: str) -> tuple[Gpu, ...]:
    """``gpus`` with each notice attached to the GPU it names.

    A GPU nvidia-smi could not reach is absent from its report: it is added, with status
    ``error``, the bus id and the message. A warning about a GPU that is present goes into its
    ``status_detail``; one that marks a failure also sets its status to ``error``. Every
    notice is also recorded as a parse warning, so a warning about no GPU in particular (or
    about one the report does not list) is still shown.
    """
    result = list(gpus)
    for item in notices:
        position = next(
            (
                i
                for i, g in enumerate(result)
                if item.pci_bus_id and g.pci_bus_id == item.pci_bus_id
            ),
            None,
        )
        if position is None and item.failed and item.pci_bus_id:
            result.append(
                Gpu(
                    index=len(result),
                    status="error",
                    status_detail=f"nvidia-smi: {item.text}",
                    pci_bus_id=item.pci_bus_id,
                )
            )
            position = len(result) - 1
        elif position is not None:
            gpu = result[position]
            detail = "; ".join(d for d in (gpu.status_detail, f"nvidia-smi: {item.text}") if d)
            status = "error" if item.failed else gpu.status
            result[position] = dataclasses.replace(gpu, status=status, status_detail=detail)
        where = result[position].index if position is not None else None
        warn(what, "nvidia-smi printed a warning or error line", item.text, gpu=where)
    return tuple(result)


def classify_field(
    path: str,
    read: AbstractSet[str],
    ignored: AbstractSet[str],
    placed: AbstractSet[str],
) -> str:
    """How a parser treats the field at ``path`` (names joined by ``/``): ``read`` (a Gpu
    field comes from it), ``ignored`` (inside a block read whole or not at all), ``known``
    (recognised, no Gpu field) or ``unknown``."""
    if path in read:
        return "read"
    parts = path.split("/")
    if any("/".join(parts[:i]) in ignored for i in range(1, len(parts) + 1)):
        return "ignored"
    return "known" if path in placed else "unknown"
