"""MIG listings: `nvidia-smi mig -lgi/-lci` (instances), `-lgip/-lcip` (profiles), `-L`, tables.

The box-drawn tables change width and columns between drivers (``-lci`` gained a Placement
column; ``-lgip`` gained ``+me`` profiles), so rows are read by pattern, not by column position.
Profile names are stored without the ``MIG`` prefix (``1g.10gb``), the spelling mig-parted
configs and ``nvidia.com/mig-1g.10gb`` resources use.

A GPU without MIG answers with a sentence instead of a table ("No MIG-enabled devices found.",
"No GPU instances found: Not Found"); those mean "no instances", not a parse failure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gpuaudit.model.snapshot import MigDevice, MigInstance
from gpuaudit.parsers.errors import ParseError
from gpuaudit.parsers.values import parse_float, split_gpu_header

_GI_ROW = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+(?:MIG\s+)?(?P<name>\S+)\s+(?P<profile>\d+)\s+(?P<id>\d+)"
    r"\s+(?P<placement>\d+:\d+)\s*\|"
)
_CI_ROW = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+(?P<gi>\d+)\s+(?:MIG\s+)?(?P<name>\S+)\s+(?P<profile>\d+)\*?"
    r"\s+(?P<id>\d+)(?:\s+(?P<placement>\d+:\d+))?\s*\|"
)
_GIP_ROW = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+(?:MIG\s+)?(?P<name>\S+)\s+(?P<profile>\d+)\s+(?P<free>\d+)/(?P<total>\d+)"
    r"\s+(?P<memory>[\d.]+)\s+(?P<p2p>\S+)\s+(?P<sm>\d+)"
)
_CIP_ROW = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+(?P<gi>\d+)\s+(?:MIG\s+)?(?P<name>\S+)\s+(?P<profile>\d+)(?P<default>\*?)"
    r"\s+(?P<free>\d+)/(?P<total>\d+)\s+(?P<sm>\d+)"
)
_LIST_MIG = re.compile(r"^\s+MIG (\S+)\s+Device\s+(\d+): \(UUID: ([^)]+)\)\s*$")
_TABLE_MIG_ROW = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+(?P<gi>\d+)\s+(?P<ci>\d+)\s+(?P<dev>\d+)\s*\|"
    r"\s*(?P<used>\d+)MiB\s*/\s*(?P<total>\d+)MiB\s*\|\s*(?P<sm>\d+)"
)
_CREATED = re.compile(
    r"Successfully created GPU instance ID\s+(\d+) on GPU\s+(\d+) "
    r"using profile MIG (\S+) \(ID\s+(\d+)\)"
)
_DATA_LINE = re.compile(r"^\|\s*\d+\s")
_NOTHING = re.compile(
    r"No (?:GPU|compute) instances? (?:were )?found|No MIG-(?:enabled|supported) devices found"
    r"|No devices (?:were )?found|does not support MIG|Not Supported",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class MigProfile:
    """One row of `-lgip` (GPU instance profile) or `-lcip` (compute instance profile)."""

    gpu: int
    name: str  # e.g. "1g.10gb", "1g.6gb+me", "1c.3g.20gb"
    profile_id: int
    free: int
    total: int
    multiprocessor_count: int | None = None
    memory_gib: float | None = None  # -lgip only
    gpu_instance_id: int | None = None  # -lcip only: the parent GPU instance
    default: bool = False  # -lcip marks the default compute profile with "*"


@dataclass(frozen=True)
class ListedMigDevice:
    profile: str
    device: int
    uuid: str


@dataclass(frozen=True)
class ListedGpu:
    """One ``GPU n:`` entry of `nvidia-smi -L`, with its MIG devices."""

    index: int
    name: str
    uuid: str
    mig_devices: tuple[ListedMigDevice, ...] = ()


def parse_mig_instances(text: str) -> tuple[MigInstance, ...]:
    """GPU instances (`mig -lgi`) or compute instances (`mig -lci`), told apart by the title."""
    what = "nvidia-smi mig -lgi/-lci"
    text = text or ""
    lines = text.splitlines()
    if "Compute instances:" in text:
        rows = _rows(_CI_ROW, lines, what, text)
        return tuple(
            MigInstance(
                gpu=int(m["gpu"]),
                profile_name=m["name"],
                profile_id=int(m["profile"]),
                instance_id=int(m["id"]),
                placement=m["placement"],
                gpu_instance_id=int(m["gi"]),
            )
            for m in rows
        )
    if "GPU instances:" in text:
        rows = _rows(_GI_ROW, lines, what, text)
        return tuple(
            MigInstance(
                gpu=int(m["gpu"]),
                profile_name=m["name"],
                profile_id=int(m["profile"]),
                instance_id=int(m["id"]),
                placement=m["placement"],
            )
            for m in rows
        )
    _nothing_or_raise(text, what)
    return ()


def parse_mig_profiles(text: str) -> tuple[MigProfile, ...]:
    """GPU instance profiles (`mig -lgip`) or compute instance profiles (`mig -lcip`)."""
    text = text or ""
    if "Compute instance profiles:" in text:
        row, extra = _CIP_ROW, _compute_profile_fields
    elif "GPU instance profiles:" in text:
        row, extra = _GIP_ROW, _gpu_profile_fields
    else:
        _nothing_or_raise(text, "nvidia-smi mig -lgip/-lcip")
        return ()
    return tuple(
        MigProfile(
            gpu=int(m["gpu"]),
            name=m["name"],
            profile_id=int(m["profile"]),
            free=int(m["free"]),
            total=int(m["total"]),
            multiprocessor_count=int(m["sm"]),
            **extra(m),
        )
        for m in map(row.match, text.splitlines())
        if m
    )


def _compute_profile_fields(m: re.Match[str]) -> dict[str, Any]:
    return {"gpu_instance_id": int(m["gi"]), "default": m["default"] == "*"}


def _gpu_profile_fields(m: re.Match[str]) -> dict[str, Any]:
    return {"memory_gib": parse_float(m["memory"])}


def parse_mig_list_devices(text: str) -> tuple[ListedGpu, ...]:
    """`nvidia-smi -L`: GPUs and, indented under each, its MIG devices."""
    what = "nvidia-smi -L"
    gpus: list[ListedGpu] = []
    migs: list[ListedMigDevice] = []
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        gpu = split_gpu_header(line) if not line[:1].isspace() else None
        mig = _LIST_MIG.match(line)
        if gpu and gpu[2] is not None:
            _close_gpu(gpus, migs)
            gpus.append(ListedGpu(gpu[0], gpu[1], gpu[2]))
            migs = []
        elif mig and gpus:
            migs.append(ListedMigDevice(mig.group(1), int(mig.group(2)), mig.group(3)))
        else:
            raise ParseError(what, f"unexpected line {line.strip()!r}", text)
    _close_gpu(gpus, migs)
    return tuple(gpus)


def parse_mig_table_devices(text: str) -> dict[int, tuple[MigDevice, ...]]:
    """The "MIG devices:" block of the default `nvidia-smi` table, per GPU index."""
    what = "nvidia-smi (MIG devices table)"
    if "MIG devices:" not in (text or ""):
        raise ParseError(what, "no 'MIG devices:' block", text)
    found: dict[int, list[MigDevice]] = {}
    for match in map(_TABLE_MIG_ROW.match, text.splitlines()):
        if match:
            found.setdefault(int(match["gpu"]), []).append(
                MigDevice(
                    index=int(match["dev"]),
                    gpu_instance_id=int(match["gi"]),
                    compute_instance_id=int(match["ci"]),
                    memory_total_mib=int(match["total"]),
                    multiprocessor_count=int(match["sm"]),
                )
            )
    return {gpu: tuple(devices) for gpu, devices in found.items()}


def parse_mig_created(text: str) -> tuple[MigInstance, ...]:
    """The confirmation lines of `nvidia-smi mig -cgi`: the GPU instances it made."""
    created = tuple(
        MigInstance(
            gpu=int(m.group(2)),
            profile_name=m.group(3),
            profile_id=int(m.group(4)),
            instance_id=int(m.group(1)),
        )
        for m in map(_CREATED.search, (text or "").splitlines())
        if m
    )
    if not created and (text or "").strip():
        raise ParseError("nvidia-smi mig -cgi", "no 'Successfully created' lines", text)
    return created


def _rows(pattern: re.Pattern[str], lines: list[str], what: str, text: str) -> list[re.Match[str]]:
    """Every table row, insisting that each line that looks like a row is one."""
    rows = []
    for line in lines:
        match = pattern.match(line)
        if match:
            rows.append(match)
        elif _DATA_LINE.match(line):
            raise ParseError(what, f"unreadable row {line.strip()!r}", text)
    return rows


def _close_gpu(gpus: list[ListedGpu], migs: list[ListedMigDevice]) -> None:
    if gpus and migs:
        last = gpus[-1]
        gpus[-1] = ListedGpu(last.index, last.name, last.uuid, tuple(migs))


def _nothing_or_raise(text: str, what: str) -> None:
    if not (text or "").strip() or _NOTHING.search(text):
        return
    raise ParseError(what, "neither a MIG table nor a 'none found' message", text)
