"""What the HTML page shows, worked out in Python so the template only lays it out.

Everything here returns plain strings and dicts; escaping is left to the template (autoescape is
on for every value), so nothing in this module marks text as safe.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from typing import Any

from gpuaudit.model.snapshot import Gpu, GpuNvLink, HostSnapshot, Topology
from gpuaudit.report.xid_timeline import DASH, xid_view

# CSS class names come from these fixed sets only, never from host data.
SEVERITY_CLASSES = frozenset({"critical", "high", "medium", "low", "info"})
GPU_STATUSES = ("ok", "attention", "error")
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
        "not_audited",
    }
)


def css_class(value: Any, allowed: frozenset[str]) -> str:
    return value if isinstance(value, str) and value in allowed else "unknown"


def show(value: Any) -> str:
    """Any evidence value as short text: None is a dash, containers are compact JSON."""
    kind = type(value)  # the common exact types first: called for every value on the page
    if kind is str:
        return value or DASH
    if kind is int or kind is float:
        return str(value)
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


def gpu_problems(gpu: Gpu) -> list[str]:
    """What about a GPU needs a person, in words: empty when nothing does.

    nvidia-smi's own status for a GPU only says whether it answered; a GPU that answers with a
    row remap pending, uncorrectable errors or a reset request is not "ok" on the page.
    """
    rows, agg, pages = gpu.remapped_rows, gpu.ecc_aggregate, gpu.retired_pages
    problems = []
    if rows.pending:
        problems.append("row remap pending: a GPU reset applies it")
    if rows.failure:
        problems.append("row remapping failed")
    if (rows.uncorrectable or 0) > 0:
        problems.append(f"{rows.uncorrectable} rows remapped for uncorrectable errors")
    if (agg.uncorrected or 0) > 0:
        problems.append(f"{agg.uncorrected} uncorrectable ECC errors (aggregate)")
    if pages.pending:
        problems.append("page retirement pending: a GPU reset applies it")
    if gpu.recovery_action and gpu.recovery_action.lower() != "none":
        problems.append(f"driver asks: {gpu.recovery_action}")
    if gpu.reset_required:
        problems.append("reset required")
    if gpu.drain_and_reset_recommended:
        problems.append("drain and reset recommended")
    return problems


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
    problems = gpu_problems(gpu)
    status = "error" if gpu.status != "ok" else ("attention" if problems else "ok")
    return {
        "index": gpu.index,
        "name": gpu.name or DASH,
        "uuid": gpu.uuid or "",
        "serial": gpu.serial or DASH,
        "bus": gpu.pci_bus_id or DASH,
        "vbios": gpu.vbios_version or DASH,
        "inforom": gpu.inforom_image or DASH,
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
        # One of GPU_STATUSES: the page styles the cell by it.
        "status": status,
        "status_detail": gpu.status_detail,
        "problems": problems,
        "attention": status != "ok",
    }


# --- topology -------------------------------------------------------------------------------


_LINK_CLASSES = {"PIX": "near", "PXB": "near", "PHB": "mid", "NODE": "mid", "SYS": "far"}


@functools.lru_cache(maxsize=1024)
def _link_class(cell: str) -> str:
    """How far apart a topology cell says two devices are (cached: a fleet repeats a handful of
    cell values across thousands of 8-GPU matrices)."""
    cell = cell.strip().upper()
    if cell == "X":
        return "self"
    if cell.startswith("NV"):
        return "nvlink"
    return _LINK_CLASSES.get(cell, "other")


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


# --- NVLink ---------------------------------------------------------------------------------

_NAMED_COUNTERS = ("replay", "recovery", "crc")


def _link_state(active: bool | None) -> str:
    return DASH if active is None else ("active" if active else "inactive")


def nvlink_view(nvlink: Sequence[GpuNvLink] | None) -> dict[str, Any] | None:
    """Every NVLink of every GPU, one row per link, with a one-line summary for the fleet view.

    Rows are [gpu, link, state, speed, replay, recovery, CRC, other counters]; a GPU whose links
    are all inactive is one row. None when the host listed no NVLink at all (PCIe-only GPUs).
    """
    rows: list[list[Any]] = []
    links = active = down = with_errors = 0
    inactive_gpus = []
    for gpu in nvlink or ():
        if gpu.all_inactive and not gpu.links:
            inactive_gpus.append(gpu.gpu)
            rows.append([gpu.gpu, DASH, "all links inactive", DASH, None, None, None, ""])
        for link in gpu.links:
            other = {
                name: count
                for name, count in sorted(link.counters.items())
                if not name.lower().startswith(_NAMED_COUNTERS)
            }
            counts = (link.replay_errors, link.recovery_errors, link.crc_errors, *other.values())
            links += 1
            active += link.active is True
            down += link.active is False
            with_errors += any((count or 0) > 0 for count in counts)
            speed = DASH if link.speed_gb_s is None else f"{link.speed_gb_s:g} GB/s"
            rows.append(
                [
                    gpu.gpu,
                    link.link,
                    _link_state(link.active),
                    speed,
                    link.replay_errors,
                    link.recovery_errors,
                    link.crc_errors,
                    ", ".join(f"{name} {count}" for name, count in other.items()),
                ]
            )
    if not rows:
        return None
    gpus = len({row[0] for row in rows if row[0] not in inactive_gpus})
    summary = f"{links} links on {gpus} GPU{'' if gpus == 1 else 's'}: {active} active, "
    summary += f"{with_errors} with errors" if with_errors else "none with errors"
    if inactive_gpus:
        summary += f"; all links inactive on GPU {', '.join(map(str, inactive_gpus))}"
    return {
        "summary": summary,
        "problem": bool(with_errors or inactive_gpus or down),
        "rows": rows,
    }


# --- hosts ---------------------------------------------------------------------------------

# The order of a GPU row's values in the page data: rows travel as lists (a 2,000-host fleet
# has 16,000 of them) and the page script looks each value up by this list.
GPU_COLUMNS = (
    "index",
    "name",
    "uuid",
    "serial",
    "bus",
    "vbios",
    "inforom",
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
    "problems",
    "attention",
)


def gpu_models(gpus: Sequence[Gpu]) -> str:
    """ "8× NVIDIA A100-SXM4-80GB" style summary of a host's GPUs, most common model first."""
    counts: dict[str, int] = {}
    for gpu in gpus:
        counts[gpu.name or "unknown GPU"] = counts.get(gpu.name or "unknown GPU", 0) + 1
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{count}× {name}" for name, count in ordered)


class HostViews:
    """:func:`host_view` for the hosts of one page: a board layout the fleet repeats gets one
    topology view, the same object for every host that has it (html.py then shares it by
    identity, without comparing its JSON text host after host)."""

    def __init__(self) -> None:
        self._topologies: dict[Any, dict[str, Any] | None] = {}

    def topology(self, topology: Topology | None) -> dict[str, Any] | None:
        if topology is None or not topology.devices:
            return None
        key = (
            topology.devices,
            topology.columns,
            topology.matrix,
            tuple(topology.cpu_affinity.items()),
            tuple(topology.numa_affinity.items()),
            tuple(topology.legend.items()),
        )
        try:
            if key in self._topologies:
                return self._topologies[key]
        except TypeError:  # a value that cannot be hashed: no sharing
            return topology_view(topology)
        view = self._topologies[key] = topology_view(topology)
        return view

    def host(
        self,
        snapshot: HostSnapshot,
        anchor: str,
        finding_ids: Sequence[int],
        severities: Sequence[str],
        checklists: Sequence[dict[str, Any]] = (),
    ) -> dict[str, Any]:
        return host_view(snapshot, anchor, finding_ids, severities, checklists, self.topology)


def host_view(
    snapshot: HostSnapshot,
    anchor: str,
    finding_ids: Sequence[int],
    severities: Sequence[str],
    checklists: Sequence[dict[str, Any]] = (),
    topology_of: Callable[[Topology | None], dict[str, Any] | None] = topology_view,
) -> dict[str, Any]:
    """One host, as the page data the script draws its section from.

    ``finding_ids`` index the page's findings list; ``severities`` are those findings'
    severities, counted here for the section's one-line summary; ``topology_of`` makes the
    topology's view (:class:`HostViews` shares one between hosts).
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
            ["Loaded driver module", snapshot.driver_version_proc or DASH],
            ["Collected", snapshot.collected_at or DASH],
        ],
        "gpu_models": gpu_models(gpus),
        "gpu_count": len(gpus),
        "gpus": [[row[key] for key in GPU_COLUMNS] for row in rows],
        "gpus_attention": sum(1 for row in rows if row["attention"]),
        "expected_gpus": snapshot.host_data.get("expected_gpu_count"),
        "attached_gpus": snapshot.attached_gpus,
        "topology": topology_of(snapshot.topology),
        "nvlink": nvlink_view(snapshot.nvlink),
        # Lists a fleet mostly shares (html.py keeps each distinct one once); None when empty.
        "packages": [
            [p.name, p.version, p.held] for p in sorted(snapshot.packages, key=lambda p: p.name)
        ]
        or None,
        "services": [[s.name, s.active, s.enabled] for s in snapshot.services] or None,
        "sysctls": [[key, value] for key, value in sorted(snapshot.sysctls.items())] or None,
        "device_nodes": [[d.path, d.mode, d.owner, d.group] for d in snapshot.device_nodes] or None,
        "xid": xid_view(
            snapshot.xid_events,
            snapshot.os.boot_time,
            snapshot.previous_boot_xid_events,
            snapshot.previous_boot_log_truncated,
        ),
        "kernel_log_truncated": snapshot.kernel_log_truncated,
        "findings": list(finding_ids),
        "severity_counts": counts,
        "checklists": list(checklists),
        "parse_errors": [list(item) for item in sorted(snapshot.parse_errors.items())],
        # [source, GPU or None, message, text as printed]: what the parsers could not place.
        "parse_warnings": [[w.source, w.gpu, w.message, w.text] for w in snapshot.parse_warnings],
        "failed_sections": failed_sections,
    }
