"""MIG listings: `nvidia-smi mig -lgi/-lci` (instances), `-lgip/-lcip` (profiles), `-L`, tables.

The box-drawn tables change width and columns between drivers (``-lci`` gained a Placement
column; ``-lgip`` gained ``+me`` profiles), so rows are read by pattern, not by column position.
Profile names are stored without the ``MIG`` prefix (``1g.10gb``), the spelling mig-parted
configs and ``nvidia.com/mig-1g.10gb`` resources use.

A GPU without MIG answers with a sentence instead of a table ("No MIG-enabled devices found.",
"No GPU instances found: Not Found"); those mean "no instances", not a parse failure.

Two more kinds: ``mig -lgipp`` lists where each GPU instance profile may be placed
(:func:`parse_mig_placements`), and the transcripts of ``mig -cgi`` / ``-cci`` / ``-dgi`` /
``-dci`` and ``-mig 0|1`` that failed ("Unable to destroy compute instance ... : In use by
another client") are read into :class:`MigFailure` records (:func:`parse_mig_failures`), so a
GPU held busy by another client can become a finding. Lines that neither reader can place are
parse warnings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gpuaudit.model.snapshot import MigDevice, MigInstance, MigPlacement
from gpuaudit.parsers.errors import ParseError
from gpuaudit.parsers.values import parse_float, split_gpu_header
from gpuaudit.parsers.warnings import warn

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
_CREATED_CI = re.compile(
    r"Successfully created compute instance ID\s+(\d+) on GPU\s+(\d+) GPU instance ID\s+(\d+) "
    r"using profile MIG (\S+) \(ID\s+(\d+)\)"
)
# `mig -lgipp`: "GPU  0 Profile ID 19 Placements: {0,1,2,3,4,5,6}:1" ("Placement :" for one).
_PLACEMENT = re.compile(
    r"^GPU\s+(\d+)\s+Profile ID\s+(\d+)\s+Placements?\s*:\s*\{([\d,\s]*)\}:(\d+)\s*$"
)
# "Unable to create a GPU instance on GPU  0 using profile 20: In use by another client"
# "Unable to destroy compute instance ID  0 from GPU  0 GPU instance ID  7: In use by ..."
# (DCGM's issue tracker shows the same sentence lower-cased, hence IGNORECASE.)
_UNABLE_INSTANCE = re.compile(
    r"^Unable to (?P<verb>create|destroy) (?:a |an )?(?P<kind>GPU|compute) instance"
    r"(?: ID\s+(?P<id>\d+))? (?:on|from) GPU\s+(?P<gpu>\d+)"
    r"(?: GPU instance ID\s+(?P<gi>\d+))?(?: using profile (?P<profile>[^:]+?))?"
    r"\s*:\s*(?P<reason>.*\S)",
    re.IGNORECASE,
)
# "Unable to disable MIG Mode for GPU 00000009:01:00.0: In use by another client"
_UNABLE_MODE = re.compile(
    r"^Unable to (?P<verb>enable|disable) MIG Mode for GPU (?P<bus>[0-9A-Fa-f:.]+)"
    r":\s*(?P<reason>.*\S)",
    re.IGNORECASE,
)
# The summary nvidia-smi prints after the per-instance lines.
_FAILED_SUMMARY = re.compile(
    r"^Failed to (?P<verb>create|destroy) (?P<kind>GPU|compute) instances\s*:\s*(?P<reason>.*\S)",
    re.IGNORECASE,
)
_KNOWN_TRAILER = re.compile(
    r"^(?:Successfully (?:created|destroyed) .*|Terminating early due to previous errors\.?"
    r"|All done\.?|Warning: .*)$",
    re.IGNORECASE,
)
BUSY = "in use by another client"
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
class MigFailure:
    """A MIG operation that nvidia-smi refused, as its transcript says.

    ``operation`` is one of "create gpu instance", "create compute instance", "destroy gpu
    instance", "destroy compute instance", "enable mig mode", "disable mig mode". ``reason``
    is the driver's words ("In use by another client", "Insufficient Resources", "Not
    Supported", "Invalid Argument"). ``gpu`` is None where the line names the GPU by PCI bus
    (``pci_bus_id``) or not at all (a summary line alone).
    """

    operation: str
    reason: str
    gpu: int | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    profile: str | None = None  # as given to -cgi / -cci: an id ("20") or a name
    pci_bus_id: str | None = None

    @property
    def busy(self) -> bool:
        """The GPU or instance is held by another client (a process, DCGM, a monitor)."""
        return self.reason.strip().lower() == BUSY


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
    """The confirmation lines of `nvidia-smi mig -cgi` (and `-cgi ... -C` / `-cci`): the GPU
    instances it made and, with a ``gpu_instance_id``, the compute instances."""
    created: list[MigInstance] = []
    for line in (text or "").splitlines():
        gi = _CREATED.search(line)
        ci = _CREATED_CI.search(line) if not gi else None
        if gi:
            created.append(
                MigInstance(
                    gpu=int(gi.group(2)),
                    profile_name=gi.group(3),
                    profile_id=int(gi.group(4)),
                    instance_id=int(gi.group(1)),
                )
            )
        elif ci:
            created.append(
                MigInstance(
                    gpu=int(ci.group(2)),
                    profile_name=ci.group(4),
                    profile_id=int(ci.group(5)),
                    instance_id=int(ci.group(1)),
                    gpu_instance_id=int(ci.group(3)),
                )
            )
        elif line.strip() and not _KNOWN_TRAILER.match(line.strip()):
            warn("nvidia-smi mig -cgi", "line is not a creation confirmation", text=line.strip())
    if not created and (text or "").strip():
        raise ParseError("nvidia-smi mig -cgi", "no 'Successfully created' lines", text)
    return tuple(created)


def parse_mig_placements(text: str) -> tuple[MigPlacement, ...]:
    """`nvidia-smi mig -lgipp`: the possible placements of each GPU instance profile.

    A GPU without MIG answers with a sentence ("No MIG-enabled devices found."): no
    placements. Text with no placement line and no such sentence is a :class:`ParseError`.
    """
    what = "nvidia-smi mig -lgipp"
    placements: list[MigPlacement] = []
    for line in (text or "").splitlines():
        match = _PLACEMENT.match(line.strip())
        if match:
            starts = tuple(int(n) for n in re.findall(r"\d+", match.group(3)))
            placements.append(
                MigPlacement(int(match.group(1)), int(match.group(2)), starts, int(match.group(4)))
            )
        elif line.strip() and placements:
            warn(what, "line is not a placement", text=line.strip())
    if not placements:
        _nothing_or_raise(text, what)
    return tuple(placements)


def parse_mig_failures(text: str) -> tuple[MigFailure, ...]:
    """The refusals in a `mig -cgi/-cci/-dgi/-dci` or `-mig 0|1` transcript, in order.

    Each "Unable to ..." line is one failure; a "Failed to ... instances: <reason>" summary
    adds one (GPU unknown) only when no per-instance line came before it. Success lines are
    skipped; an empty tuple means nothing was refused. Other lines are parse warnings.
    """
    what = "nvidia-smi mig (operation transcript)"
    failures: list[MigFailure] = []
    pending_summary = False
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line:
            continue
        instance = _UNABLE_INSTANCE.match(line)
        mode = _UNABLE_MODE.match(line) if not instance else None
        summary = _FAILED_SUMMARY.match(line) if not (instance or mode) else None
        if instance:
            kind = instance["kind"].lower()
            own = int(instance["id"]) if instance["id"] else None
            failures.append(
                MigFailure(
                    operation=f"{instance['verb'].lower()} {kind} instance",
                    reason=instance["reason"],
                    gpu=int(instance["gpu"]),
                    gpu_instance_id=(
                        int(instance["gi"]) if instance["gi"] else (own if kind == "gpu" else None)
                    ),
                    compute_instance_id=own if kind == "compute" else None,
                    profile=instance["profile"].strip() if instance["profile"] else None,
                )
            )
            pending_summary = True
        elif mode:
            failures.append(
                MigFailure(
                    operation=f"{mode['verb'].lower()} mig mode",
                    reason=mode["reason"],
                    pci_bus_id=mode["bus"],
                )
            )
        elif summary:
            if not pending_summary:
                failures.append(
                    MigFailure(
                        operation=f"{summary['verb'].lower()} {summary['kind'].lower()} instance",
                        reason=summary["reason"],
                    )
                )
            pending_summary = False
        elif not _KNOWN_TRAILER.match(line):
            warn(what, "line is neither a refusal nor a confirmation", text=line)
    return tuple(failures)


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


def says_none_found(text: str) -> bool:
    """Whether a MIG listing is nvidia-smi's sentence for "nothing to list" (which it prints
    with a non-zero exit status), as against an error or a table."""
    text = text or ""
    return bool(_NOTHING.search(text)) and not any(
        _DATA_LINE.match(line) for line in text.splitlines()
    )


def _nothing_or_raise(text: str, what: str) -> None:
    if not (text or "").strip() or _NOTHING.search(text):
        return
    raise ParseError(what, "neither a MIG table nor a 'none found' message", text)
