"""Trends: what changed since the previous audit of the fleet.

The previous run is the one given (``--previous reports/<run>``, ``GPUAUDIT_PREVIOUS``) or, by
default, the newest earlier run directory next to this one that holds a ``register.json``.
"Earlier" is read from run ids when they are the UTC timestamps gpuaudit makes
(``20261129T161000Z``, ``…-2``): then only such runs are candidates, so a hand-named run next to
them (``reports/example``) is never mistaken for the last audit. A run with a hand-chosen id is
compared with sibling runs by directory modification time.

Snapshots are the source of truth here too: hosts, drivers and counters come from the previous
run's ``hosts/`` (so trends work from snapshots alone). Risk ids come from its ``register.json``
(``risks``, else regrouped ``findings``); with no readable register the current rules are run
on the previous snapshots.

Counters compared per GPU (host + PCI bus id, which survives re-enumeration of GPU indexes):
ECC volatile/aggregate corrected/uncorrected, remapped rows, retired pages and XID events from
the kernel log. Volatile ECC counts reset with the driver and the kernel log with a reboot, so
only growth is reported, never a drop.

Shape (``register["trends"]``, None without a previous run): ``previous_run_id``,
``previous_generated_at``, ``new`` and ``persisting`` (risk ids, in register order),
``resolved`` ([{id, title, severity, affected_hosts, status: "resolved"}]), ``unverified``
(same entries without status: gone only because a host they were on could not be audited this
time, so not counted as resolved), ``hosts_added``, ``hosts_removed``, ``driver_changes``
([{host, from, to}]) and ``growth`` ([{host, gpu, pci_bus_id, metric, before, after}]).
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpuaudit.model.snapshot import Gpu, HostSnapshot, bus_key
from gpuaudit.report.risks import RESOLVED, build_risks
from gpuaudit.rules.audit import NOT_COLLECTED
from gpuaudit.rules.base import Finding

# Counters compared between runs, as attribute paths on Gpu; the path is the metric's name.
GPU_COUNTERS = (
    "ecc_volatile.uncorrected",
    "ecc_volatile.corrected",
    "ecc_aggregate.uncorrected",
    "ecc_aggregate.corrected",
    "remapped_rows.uncorrectable",
    "remapped_rows.correctable",
    "retired_pages.double_bit",
    "retired_pages.single_bit",
)
XID_METRIC = "xid_events"
_METRIC_ORDER = {name: i for i, name in enumerate((*GPU_COUNTERS, XID_METRIC))}

_TIMESTAMP_ID = re.compile(r"^(\d{8}T\d{6}Z)(?:-(\d+))?$")


@dataclass(frozen=True)
class PreviousRun:
    """What trends need of the previous run."""

    run_id: str
    generated_at: str | None
    snapshots: tuple[HostSnapshot, ...]
    risks: tuple[dict[str, Any], ...]  # id, title, severity, affected_hosts of each risk


def _run_order(path: Path) -> tuple[bool, datetime, int]:
    """(has a timestamp id, when, suffix) for ordering run directories."""
    match = _TIMESTAMP_ID.match(path.name)
    if match:
        when = datetime.strptime(match.group(1), "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc)
        return True, when, int(match.group(2) or 1)
    try:
        mtime = path.stat().st_mtime
    except OSError:
        mtime = 0.0
    return False, datetime.fromtimestamp(mtime, timezone.utc), 0


def find_previous(run_path: str | os.PathLike[str]) -> Path | None:
    """The newest run directory next to ``run_path`` that is earlier and has a register."""
    current = Path(run_path).resolve()
    if not current.parent.is_dir():
        return None
    stamped, when, suffix = _run_order(current)
    candidates = []
    for sibling in current.parent.iterdir():
        if sibling.resolve() == current or not (sibling / "register.json").is_file():
            continue
        order = _run_order(sibling)
        if stamped and not order[0]:
            continue
        if (order[1], order[2]) < (when, suffix):
            candidates.append(((order[1], order[2], sibling.name), sibling))
    return max(candidates, key=lambda c: c[0])[1] if candidates else None


def load_previous(path: str | os.PathLike[str]) -> PreviousRun:
    """Read a previous run; FileNotFoundError when it is not a run directory."""
    from gpuaudit.report.run import RunDir  # run.py imports this module

    run = RunDir(path)
    if not run.hosts_dir.is_dir():
        raise FileNotFoundError(f"previous run {run.path} holds no hosts/ directory")
    snapshots = tuple(run.load_snapshots())
    register = _read_register(run.register_path)
    generated_at = register.get("generated_at") if register else None
    if not isinstance(generated_at, str):
        generated_at = max((s.collected_at for s in snapshots), default=None)
    return PreviousRun(
        run.run_id, generated_at, snapshots, tuple(_previous_risks(register, snapshots))
    )


def _read_register(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _previous_risks(
    register: Mapping[str, Any] | None, snapshots: Sequence[HostSnapshot]
) -> list[dict[str, Any]]:
    risks = register.get("risks") if register else None
    if isinstance(risks, list) and all(isinstance(r, dict) and "id" in r for r in risks):
        return [_risk_brief(r) for r in risks]
    findings: list[Finding] | None = None
    if register and isinstance(register.get("findings"), list):
        try:
            findings = [Finding.from_dict(f) for f in register["findings"]]
        except (KeyError, TypeError, ValueError):
            findings = None  # a damaged register: fall back to the snapshots
    if findings is None:
        from gpuaudit.rules import evaluate

        findings = list(evaluate(snapshots))
    return [_risk_brief(r) for r in build_risks(findings)]


def _risk_brief(risk: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "id": str(risk["id"]),
        "title": risk.get("title"),
        "severity": risk.get("severity"),
        "affected_hosts": sorted(str(h) for h in risk.get("affected_hosts") or ()),
    }


def build_trends(
    snapshots: Sequence[HostSnapshot],
    risks: Sequence[Mapping[str, Any]],
    previous: PreviousRun | None,
) -> dict[str, Any] | None:
    """Compare this run (its snapshots and risks, in register order) with the previous one."""
    if previous is None:
        return None
    now = _latest_by_host(snapshots)
    before = _latest_by_host(previous.snapshots)
    current_ids = [r["id"] for r in risks]
    previous_by_id = {r["id"]: r for r in previous.risks}
    audited = {h for h, s in now.items() if s.status not in NOT_COLLECTED}
    resolved, unverified = [], []
    for rid in sorted(set(previous_by_id) - set(current_ids)):
        brief = previous_by_id[rid]
        # Gone only because its host could not be looked at this time is not resolved.
        if any(h in now and h not in audited for h in brief["affected_hosts"]):
            unverified.append(brief)
        else:
            resolved.append({**brief, "status": RESOLVED})
    # Counters and drivers are only compared where both audits saw the host: an unreachable
    # host has no counters, and "none before" would read as growth.
    both = sorted(
        h for h in set(now) & set(before) & audited if before[h].status not in NOT_COLLECTED
    )
    return {
        "previous_run_id": previous.run_id,
        "previous_generated_at": previous.generated_at,
        "new": [rid for rid in current_ids if rid not in previous_by_id],
        "resolved": resolved,
        "unverified": unverified,
        "persisting": [rid for rid in current_ids if rid in previous_by_id],
        "hosts_added": sorted(set(now) - set(before)),
        "hosts_removed": sorted(set(before) - set(now)),
        "driver_changes": _driver_changes(both, before, now),
        "growth": [g for host in both for g in _growth(host, before[host], now[host])],
    }


def _latest_by_host(snapshots: Iterable[HostSnapshot]) -> dict[str, HostSnapshot]:
    latest: dict[str, HostSnapshot] = {}
    for snap in sorted(snapshots, key=lambda s: (s.host, s.collected_at)):
        latest[snap.host] = snap
    return latest


def _driver(snap: HostSnapshot) -> str | None:
    return snap.driver_version or snap.driver_version_proc


def _driver_changes(
    hosts: Sequence[str], before: Mapping[str, HostSnapshot], now: Mapping[str, HostSnapshot]
) -> list[dict[str, Any]]:
    changes = []
    for host in hosts:
        old, new = _driver(before[host]), _driver(now[host])
        # An unknown version (driver not answering) is GA101's news, not a change of driver.
        if old and new and old != new:
            changes.append({"host": host, "from": old, "to": new})
    return changes


def _counter(gpu: Gpu, path: str) -> int | None:
    value: Any = gpu
    for part in path.split("."):
        value = getattr(value, part, None)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _xid_counts(snap: HostSnapshot) -> Counter[str]:
    """XID events per PCI bus id; a GPU that fell off the bus keeps its count by bus id."""
    by_index = {g.index: g.pci_bus_id for g in snap.gpus}
    counts: Counter[str] = Counter()
    for event in snap.xid_events:
        if event.kind == "sxid":
            continue
        bus = bus_key(event.pci_bus_id)
        if bus is None and event.gpu_index is not None:
            bus = by_index.get(event.gpu_index)
        if bus:
            counts[bus] += 1
    return counts


def _growth(host: str, before: HostSnapshot, now: HostSnapshot) -> list[dict[str, Any]]:
    old_gpus = {g.pci_bus_id: g for g in before.gpus if g.pci_bus_id}
    new_gpus = {g.pci_bus_id: g for g in now.gpus if g.pci_bus_id}
    rows = []
    for bus in sorted(set(old_gpus) & set(new_gpus)):
        for metric in GPU_COUNTERS:
            rows.append(
                (bus, metric, _counter(old_gpus[bus], metric), _counter(new_gpus[bus], metric))
            )
    old_xids, new_xids = _xid_counts(before), _xid_counts(now)
    for bus in sorted(set(new_xids)):
        rows.append((bus, XID_METRIC, old_xids.get(bus, 0), new_xids[bus]))
    growth = []
    for bus, metric, old, new in rows:
        if old is None or new is None or new <= old:
            continue
        gpu = new_gpus.get(bus) or old_gpus.get(bus)
        growth.append(
            {
                "host": host,
                "gpu": gpu.index if gpu else None,
                "pci_bus_id": bus,
                "metric": metric,
                "before": old,
                "after": new,
            }
        )
    return sorted(growth, key=lambda g: (g["pci_bus_id"], _METRIC_ORDER[g["metric"]]))
