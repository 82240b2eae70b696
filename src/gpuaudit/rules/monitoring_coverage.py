"""What monitoring must see for the register's risks: the dcgm-exporter fields each risk
needs (GA922) and the alert classes a GPU fleet needs (GA924, ``gpuaudit alerts``).

An alert covers a class when its expression reads one of the class's metrics: a DCGM field
as dcgm-exporter exports it (``DCGM_FI_DEV_GPU_TEMP``), or gpuaudit's own textfile metric
``gpuaudit_risk`` filtered on one of the class's rule codes (report/outputs.py
``render_prometheus``). Recording rules are followed: an alert on a recorded series covers
what the recording rule's expression reads. The GPU-count class is covered by an alert that
counts (``count``, ``absent``) a DCGM series, or by one on the GPU-count rules' findings.
See docs/field-guide/monitoring.md#alert-coverage.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpuaudit.model.snapshot import CountersFile, HostSnapshot
from gpuaudit.parsers.prometheus_rules import PromRule


@dataclass(frozen=True)
class FieldClass:
    """A risk the register tracks and the dcgm-exporter fields that let monitoring see it
    between audits. ``needs_all``: every field (else any one of them is enough)."""

    key: str
    title: str
    fields: tuple[str, ...]
    rules: tuple[str, ...]  # the register's rules about that risk
    needs_all: bool = False


XID = ("DCGM_FI_DEV_XID_ERRORS", "DCGM_EXP_XID_ERRORS_COUNT")
ECC_DBE = ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL")
ECC_SBE = ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL")
RETIRED = ("DCGM_FI_DEV_RETIRED_SBE", "DCGM_FI_DEV_RETIRED_DBE", "DCGM_FI_DEV_RETIRED_PENDING")
REMAPS = (
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
)
NVLINK_ERRORS = (
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
)
TEMPERATURE = ("DCGM_FI_DEV_GPU_TEMP",)
MEMORY = ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE")
POWER = ("DCGM_FI_DEV_POWER_USAGE",)
# The clock-event bitmask under its DCGM 3.2+ and older names, dcgm-exporter's own event
# counter, and the throttle-duration counters.
CLOCK_REASONS = (
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
    "DCGM_EXP_CLOCK_EVENTS_COUNT",
    "DCGM_FI_DEV_THERMAL_VIOLATION",
    "DCGM_FI_DEV_POWER_VIOLATION",
)

FIELD_CLASSES: tuple[FieldClass, ...] = (
    FieldClass("xid", "XID errors", XID, ("GA301",)),
    FieldClass("ecc_uncorrectable", "uncorrectable (DBE) ECC errors", ECC_DBE, ("GA303",)),
    FieldClass("ecc_correctable", "correctable (SBE) ECC errors", ECC_SBE, ("GA308",)),
    FieldClass("retired_pages", "retired memory pages", RETIRED, ("GA307",), needs_all=True),
    FieldClass("remapped_rows", "remapped rows", REMAPS, ("GA304", "GA305", "GA306"), True),
    FieldClass("nvlink_errors", "NVLink error counters", NVLINK_ERRORS, ("GA511",), True),
    FieldClass("temperature", "GPU temperature", TEMPERATURE, ("GA321",)),
    FieldClass("memory", "GPU memory used and free", MEMORY, ("GA330",), needs_all=True),
    FieldClass("power", "power draw", POWER, ("GA320",)),
    FieldClass("clock_reasons", "clock event (throttle) reasons", CLOCK_REASONS, ("GA320",)),
)
# What a missing field class costs most: these are page-worthy failures.
CRITICAL_FIELD_CLASSES = frozenset({"xid", "ecc_uncorrectable", "remapped_rows"})


@dataclass(frozen=True)
class FieldGap:
    """A field class a counters file does not cover: none of its fields (``unwatched``) or
    only some of those it needs (``missing`` names the rest)."""

    cls: FieldClass
    missing: tuple[str, ...]
    commented: tuple[str, ...]  # the missing fields the file has commented out
    unwatched: bool


def field_classes_for(snap: HostSnapshot) -> tuple[FieldClass, ...]:
    """The field classes that apply to the host: retired pages only where a GPU reports
    page retirement, remapped rows only where one reports row remapping (Ampere and later
    replaced the first with the second), NVLink errors only where the host has NVLinks. A
    host whose GPUs say nothing either way gets every class."""
    gpus = [g for g in snap.gpus if g.vendor == "nvidia"]
    retired = any(
        v is not None
        for g in gpus
        for v in (g.retired_pages.single_bit, g.retired_pages.double_bit, g.retired_pages.pending)
    )
    remapped = any(
        v is not None
        for g in gpus
        for v in (g.remapped_rows.uncorrectable, g.remapped_rows.pending, g.remapped_rows.failure)
    )
    nvlink = bool(snap.nvlink and any(link.links for link in snap.nvlink)) or bool(
        snap.topology
        and any(re.fullmatch(r"NV\d+", c) for row in snap.topology.matrix for c in row)
    )
    skip: set[str] = set()
    if gpus and (retired or remapped):
        if not retired:
            skip.add("retired_pages")
        if not remapped:
            skip.add("remapped_rows")
    if not nvlink:
        skip.add("nvlink_errors")
    return tuple(c for c in FIELD_CLASSES if c.key not in skip)


def field_gaps(counters: CountersFile, classes: Iterable[FieldClass]) -> list[FieldGap]:
    exported = {f.field for f in counters.fields}
    commented = set(counters.commented)
    gaps = []
    for cls in classes:
        have = [f for f in cls.fields if f in exported]
        if have and (not cls.needs_all or len(have) == len(cls.fields)):
            continue
        missing = tuple(f for f in cls.fields if f not in exported)
        gaps.append(FieldGap(cls, missing, tuple(f for f in missing if f in commented), not have))
    return gaps


@dataclass(frozen=True)
class AlertClass:
    """A failure a GPU fleet must be alerted on, the metrics an alert on it reads, and the
    register's rules whose gpuaudit_risk series stand for it."""

    key: str
    title: str
    metrics: tuple[str, ...]
    rules: tuple[str, ...]


ALERT_CLASSES: tuple[AlertClass, ...] = (
    AlertClass("temperature", "GPU temperature", TEMPERATURE, ("GA321",)),
    AlertClass("memory_pressure", "GPU memory pressure", MEMORY, ("GA330",)),
    AlertClass("xid", "XID errors", XID, ("GA301", "GA311")),
    AlertClass("ecc", "ECC errors", ECC_DBE + ECC_SBE, ("GA303", "GA308")),
    AlertClass(
        "row_remaps",
        "row remaps and retired pages",
        REMAPS + RETIRED,
        ("GA304", "GA305", "GA306", "GA307"),
    ),
    AlertClass("gpu_count", "GPU count drop", (), ("GA102", "GA108")),
)

_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_COUNTING = re.compile(r"\b(?:count|absent|absent_over_time)\s*(?:by\s*\([^)]*\)\s*)?\(")
_RULE_CODE = re.compile(r"GA\d{3}")


def _names(expr: str, recorded: Mapping[str, str], depth: int = 0) -> set[str]:
    """The identifiers an expression reads, recorded series replaced by what they read."""
    found = set(_NAME.findall(expr))
    if depth < 8:
        for name in list(found):
            if name in recorded:
                found |= _names(recorded[name], recorded, depth + 1)
    return found


def _codes(expr: str, recorded: Mapping[str, str]) -> set[str]:
    texts = [expr, *(recorded[n] for n in _names(expr, recorded) if n in recorded)]
    return {code for text in texts if "gpuaudit_risk" in text for code in _RULE_CODE.findall(text)}


def alert_covers(cls: AlertClass, expr: str, recorded: Mapping[str, str]) -> bool:
    names = _names(expr, recorded)
    if set(cls.rules) & _codes(expr, recorded):
        return True
    if cls.key == "gpu_count":
        texts = [expr, *(recorded[n] for n in names if n in recorded)]
        return any(
            _COUNTING.search(text) and any(n.startswith("DCGM_") for n in _NAME.findall(text))
            for text in texts
        )
    return bool(names & set(cls.metrics))


def alert_coverage(rules: Sequence[PromRule]) -> dict[str, tuple[str, ...]]:
    """Each alert class → the alerts that cover it (empty: none does)."""
    recorded = {r.record: r.expr for r in rules if r.record}
    alerts = [r for r in rules if r.alert]
    return {
        cls.key: tuple(a.alert or "" for a in alerts if alert_covers(cls, a.expr, recorded))
        for cls in ALERT_CLASSES
    }
