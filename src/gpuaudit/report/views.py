"""What the HTML page shows, worked out in Python so the template only lays it out.

Everything here returns plain strings and dicts; escaping is left to the template (autoescape is
on for every value), so nothing in this module marks text as safe.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from gpuaudit.model.snapshot import Gpu, HostSnapshot, Topology, XidEvent

DASH = "—"
# A flood of XIDs (hundreds of identical lines) must not bury the rest of the page.
MAX_TIMELINE_EVENTS = 200

# CSS class names come from these fixed sets only, never from host data.
SEVERITY_CLASSES = frozenset({"critical", "high", "medium", "low", "info"})
STATUS_CLASSES = frozenset(
    {
        "ok",
        "degraded",
        "driver_not_responding",
        "no_gpu_tooling",
        "collection_failed",
        "timed_out",
        "auth_failed",
        "unreachable",
    }
)


def css_class(value: Any, allowed: frozenset[str]) -> str:
    return value if isinstance(value, str) and value in allowed else "unknown"


def show(value: Any) -> str:
    """Any evidence value as short text: None is a dash, containers are compact JSON."""
    if value is None or value == "":
        return DASH
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def _unit(value: float | int | None, unit: str, digits: int = 0) -> str:
    if value is None:
        return DASH
    return f"{value:.{digits}f} {unit}" if isinstance(value, float) else f"{value} {unit}"


def _on_off(value: bool | None) -> str:
    return DASH if value is None else ("On" if value else "Off")


def _pair(current: Any, maximum: Any, prefix: str = "") -> str:
    if current is None and maximum is None:
        return DASH
    return f"{prefix}{show(current)}/{show(maximum)}"


def _ecc_summary(gpu: Gpu) -> str:
    parts: list[str] = []
    if gpu.ecc_mode_current:
        mode = gpu.ecc_mode_current
        if gpu.ecc_mode_pending and gpu.ecc_mode_pending != mode:
            mode += f" (pending {gpu.ecc_mode_pending})"
        parts.append(f"ECC {mode}")
    vol, agg = gpu.ecc_volatile, gpu.ecc_aggregate
    if vol.corrected is not None or vol.uncorrected is not None:
        parts.append(f"vol CE {show(vol.corrected)} UE {show(vol.uncorrected)}")
    if agg.corrected is not None or agg.uncorrected is not None:
        parts.append(f"agg CE {show(agg.corrected)} UE {show(agg.uncorrected)}")
    rows = gpu.remapped_rows
    if rows.correctable is not None or rows.uncorrectable is not None:
        text = f"remap C {show(rows.correctable)} U {show(rows.uncorrectable)}"
        if rows.pending:
            text += " pending"
        if rows.failure:
            text += " FAILED"
        parts.append(text)
    pages = gpu.retired_pages
    if pages.single_bit is not None or pages.double_bit is not None:
        text = f"retired SBE {show(pages.single_bit)} DBE {show(pages.double_bit)}"
        if pages.pending:
            text += " pending"
        parts.append(text)
    return "; ".join(parts) or DASH


def _gpu_needs_attention(gpu: Gpu) -> bool:
    rows, agg = gpu.remapped_rows, gpu.ecc_aggregate
    return bool(
        gpu.status != "ok"
        or rows.pending
        or rows.failure
        or (rows.uncorrectable or 0) > 0
        or (agg.uncorrected or 0) > 0
        or gpu.retired_pages.pending
        or gpu.reset_required
        or gpu.drain_and_reset_recommended
    )


def gpu_row(gpu: Gpu) -> dict[str, Any]:
    mig = gpu.mig_mode_current or DASH
    if gpu.mig_mode_pending and gpu.mig_mode_pending != gpu.mig_mode_current:
        mig += f" (pending {gpu.mig_mode_pending})"
    if gpu.mig_devices:
        mig += f", {len(gpu.mig_devices)} instances"
    power = DASH
    if gpu.power_draw_w is not None or gpu.power_limit_w is not None:
        power = f"{show(gpu.power_draw_w)}/{show(gpu.power_limit_w)} W"
    width_down = (
        gpu.pcie_width_current is not None
        and gpu.pcie_width_max is not None
        and gpu.pcie_width_current < gpu.pcie_width_max
    )
    recovery = []
    if gpu.recovery_action and gpu.recovery_action.lower() != "none":
        recovery.append(f"driver asks: {gpu.recovery_action}")
    if gpu.reset_required:
        recovery.append("reset required")
    if gpu.drain_and_reset_recommended:
        recovery.append("drain and reset recommended")
    return {
        "index": gpu.index,
        "name": gpu.name or DASH,
        "uuid": gpu.uuid or "",
        "bus": gpu.pci_bus_id or DASH,
        "vbios": gpu.vbios_version or DASH,
        "memory": _unit(gpu.memory_total_mib, "MiB"),
        "temperature": _unit(gpu.temperature_c, "°C"),
        "power": power,
        "pcie_gen": _pair(gpu.pcie_gen_current, gpu.pcie_gen_max, "Gen "),
        "pcie_width": _pair(gpu.pcie_width_current, gpu.pcie_width_max, "x"),
        # A narrower link than the slot allows is a seating/riser fault; a lower gen is often
        # just idle power saving, so only the width is flagged.
        "pcie_width_down": width_down,
        "mig": mig,
        "persistence": _on_off(gpu.persistence_mode),
        "ecc": _ecc_summary(gpu),
        "status": gpu.status,
        "status_detail": gpu.status_detail,
        "recovery": "; ".join(recovery),
        "attention": _gpu_needs_attention(gpu),
    }


# --- topology -------------------------------------------------------------------------------


def _link_class(cell: str) -> str:
    cell = cell.strip().upper()
    if cell == "X":
        return "self"
    if cell.startswith("NV"):
        return "nvlink"
    return {"PIX": "near", "PXB": "near", "PHB": "mid", "NODE": "mid", "SYS": "far"}.get(
        cell, "other"
    )


def topology_view(topology: Topology | None) -> dict[str, Any] | None:
    if topology is None or not topology.devices:
        return None
    rows = []
    for i, device in enumerate(topology.devices):
        cells = topology.matrix[i] if i < len(topology.matrix) else ()
        rows.append(
            {
                "device": device,
                # [text, kind] pairs, not dicts: a large fleet embeds thousands of these.
                "cells": [[c, _link_class(c)] for c in cells],
                "cpu": topology.cpu_affinity.get(device, ""),
                "numa": topology.numa_affinity.get(device, ""),
            }
        )
    return {
        "columns": list(topology.columns),
        "rows": rows,
        "has_affinity": bool(topology.cpu_affinity or topology.numa_affinity),
        "legend": sorted(topology.legend.items()),
    }


# --- XID timeline ---------------------------------------------------------------------------

_ISO = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?\s*(Z|[+-]\d{2}:?\d{2})?"
)
_CTIME = re.compile(
    r"(?:[A-Z][a-z]{2}\s+)?([A-Z][a-z]{2})\s+(\d{1,2})\s+(\d{1,2}):(\d{2}):(\d{2})(?:\s+(\d{4}))?"
)
_UPTIME = re.compile(r"^\[?\s*(\d+(?:\.\d+)?)\s*\]?$")
_MONTHS = {
    month: number
    for number, month in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1
    )
}


def timestamp_key(stamp: str | None) -> tuple[int, float]:
    """Sort key for a kernel-log timestamp as printed.

    Kernel logs print wall-clock times (ISO, ctime), syslog times without a year, or seconds
    since boot. Only times of the same kind can be compared, so the key groups by kind first
    (wall clock, then syslog, then uptime, then none) and the caller's stable sort keeps log
    order wherever times cannot be told apart.
    """
    text = (stamp or "").strip()
    if not text:
        return (3, 0.0)
    if match := _ISO.search(text):
        year, month, day, hour, minute, second, frac, zone = match.groups()
        try:
            moment = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second))
        except ValueError:
            return (3, 0.0)
        offset = 0
        if zone and zone != "Z":
            digits = zone[1:].replace(":", "")
            offset = (int(digits[:2]) * 60 + int(digits[2:] or 0)) * 60
            offset = -offset if zone[0] == "-" else offset
        epoch = moment.replace(tzinfo=timezone.utc).timestamp() - offset
        return (0, epoch + float(f"0.{frac}" if frac else 0))
    if match := _UPTIME.match(text):
        return (2, float(match.group(1)))
    if (match := _CTIME.search(text)) and match.group(1) in _MONTHS:
        month, day, hour, minute, second, year = match.groups()
        month_no, day_no = _MONTHS[month], int(day)
        if not year:
            clock = (int(hour) * 60 + int(minute)) * 60 + int(second)
            return (1, float((month_no * 32 + day_no) * 86400 + clock))
        try:
            moment = datetime(int(year), month_no, day_no, int(hour), int(minute), int(second))
        except ValueError:
            return (3, 0.0)
        return (0, moment.replace(tzinfo=timezone.utc).timestamp())
    return (3, 0.0)


def _event_gpu(event: XidEvent) -> str:
    if event.gpu_index is not None:
        return f"GPU {event.gpu_index}"
    return event.pci_bus_id or DASH


def xid_view(events: Sequence[XidEvent]) -> dict[str, Any]:
    ordered = sorted(events, key=lambda e: timestamp_key(e.timestamp))
    by_code: dict[tuple[str, int | None], dict[str, Any]] = {}
    for event in ordered:
        entry = by_code.setdefault(
            (event.kind, event.code),
            {"kind": event.kind, "code": show(event.code), "count": 0, "gpus": set()},
        )
        entry["count"] += 1
        entry["gpus"].add(_event_gpu(event))
    summary = [
        {**entry, "gpus": ", ".join(sorted(entry["gpus"]))}
        for _key, entry in sorted(
            by_code.items(), key=lambda kv: (kv[0][0], -1 if kv[0][1] is None else kv[0][1])
        )
    ]
    shown = ordered[-MAX_TIMELINE_EVENTS:]
    return {
        "total": len(ordered),
        "omitted": len(ordered) - len(shown),
        "summary": summary,
        "events": [
            {
                "timestamp": e.timestamp or DASH,
                "kind": e.kind,
                "code": show(e.code),
                "gpu": _event_gpu(e),
                "message": e.message,
                "raw": e.raw,
            }
            for e in shown
        ],
    }


# --- hosts ---------------------------------------------------------------------------------

# The order of a GPU row's values in the page data: rows travel as lists (a 2,000-host fleet
# has 16,000 of them) and the page script looks each value up by this list.
GPU_COLUMNS = (
    "index",
    "name",
    "uuid",
    "bus",
    "vbios",
    "memory",
    "temperature",
    "power",
    "pcie_gen",
    "pcie_width",
    "pcie_width_down",
    "mig",
    "persistence",
    "ecc",
    "status",
    "status_detail",
    "recovery",
    "attention",
)


def gpu_models(gpus: Sequence[Gpu]) -> str:
    """ "8× NVIDIA A100-SXM4-80GB" style summary of a host's GPUs, most common model first."""
    counts: dict[str, int] = {}
    for gpu in gpus:
        counts[gpu.name or "unknown GPU"] = counts.get(gpu.name or "unknown GPU", 0) + 1
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{count}× {name}" for name, count in ordered)


def host_view(
    snapshot: HostSnapshot,
    anchor: str,
    finding_ids: Sequence[int],
    severities: Sequence[str],
    checklists: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """One host, as the page data the script draws its section from.

    ``finding_ids`` index the page's findings list; ``severities`` are those findings'
    severities, counted here for the section's one-line summary.
    """
    failed_sections = [
        {"name": name, "rc": show(section.rc), "stderr": section.stderr[:2000]}
        for name, section in sorted(snapshot.sections.items())
        if section.rc not in (0, None) or (section.rc is None and section.stderr)
    ]
    gpus = sorted(snapshot.gpus, key=lambda g: g.index)
    rows = [gpu_row(g) for g in gpus]
    counts = {s: severities.count(s) for s in dict.fromkeys(severities)}
    return {
        "name": snapshot.host,
        "anchor": anchor,
        "status": snapshot.status.value,
        "status_class": css_class(snapshot.status.value, STATUS_CLASSES),
        "status_detail": snapshot.status_detail,
        "collected_at": snapshot.collected_at,
        "driver": snapshot.driver_version or DASH,
        "facts": [
            ["Driver", snapshot.driver_version or DASH],
            ["CUDA", snapshot.cuda_version or DASH],
            ["OS", snapshot.os.pretty_name or DASH],
            ["Kernel", snapshot.os.kernel or DASH],
            ["Collected", snapshot.collected_at or DASH],
        ],
        "gpu_models": gpu_models(gpus),
        "gpu_count": len(gpus),
        "gpus": [[row[key] for key in GPU_COLUMNS] for row in rows],
        "gpus_attention": sum(1 for row in rows if row["attention"]),
        "expected_gpus": snapshot.host_data.get("expected_gpu_count"),
        "attached_gpus": snapshot.attached_gpus,
        "topology": topology_view(snapshot.topology),
        "xid": xid_view(snapshot.xid_events),
        "kernel_log_truncated": snapshot.kernel_log_truncated,
        "findings": list(finding_ids),
        "severity_counts": counts,
        "checklists": list(checklists),
        "parse_errors": [list(item) for item in sorted(snapshot.parse_errors.items())],
        "failed_sections": failed_sections,
    }
