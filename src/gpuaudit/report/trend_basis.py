"""What trends compare of a run's hosts, kept beside its register: ``trend-basis.json``.

Trends (trends.py) compare a run with the previous one on each host's status, collection time
and driver, and per GPU (by PCI bus id) on its error counters and its XID events from the
kernel log. register.json does not hold the counters, so a previous run used to be read back
from its snapshots, which costs as much as loading this run's. The report writes those values,
a few per GPU, into ``trend-basis.json`` beside register.json; the next run's trends read them
from there.

The file is trusted only while the snapshots it was made from are the run's snapshots: it
names each snapshot file with its size and modification time, and :func:`read_basis` gives
None (trends then load the snapshots, as without the file) when ``hosts/`` holds another set
of files or any of them changed since. A report of snapshots that are not the run's files
(two snapshots of one host, snapshots never written there) writes no such file.

Shape: ``{"version": 1, "hosts": [{"file", "size", "mtime_ns", "host", "collected_at",
"status", "driver", "gpus": [[index, pci_bus_id, [counter, …]], …], "xids": {bus: count}}]}``,
the counters in :data:`GPU_COUNTERS` order.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuaudit.model.snapshot import Gpu, HostSnapshot, HostStatus, bus_key

BASIS_FILE = "trend-basis.json"
BASIS_VERSION = 1

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


@dataclass(frozen=True)
class GpuCounters:
    """One GPU's counters, in :data:`GPU_COUNTERS` order (None: not reported)."""

    index: int
    pci_bus_id: str | None
    counters: tuple[int | None, ...]


@dataclass(frozen=True)
class HostCounters:
    """What trends compare of one host (a snapshot's part of it)."""

    host: str
    collected_at: str
    status: HostStatus
    driver: str | None
    gpus: tuple[GpuCounters, ...]
    xids: Mapping[str, int]  # XID events per PCI bus id


# GPU_COUNTERS' paths split once: counters() reads them for every GPU of the fleet.
_COUNTER_PATHS = tuple(tuple(path.split(".")) for path in GPU_COUNTERS)


def counters(gpu: Gpu) -> tuple[int | None, ...]:
    """The GPU's counters in GPU_COUNTERS order: each an int, or None where it has none."""
    values = []
    for path in _COUNTER_PATHS:
        value: Any = gpu
        for part in path:
            value = getattr(value, part, None)
        values.append(value if isinstance(value, int) and not isinstance(value, bool) else None)
    return tuple(values)


def xid_counts(snap: HostSnapshot) -> Counter[str]:
    """XID events per PCI bus id; a GPU that fell off the bus keeps its count by bus id."""
    by_index = {g.index: g.pci_bus_id for g in snap.gpus}
    counts: Counter[str] = Counter()
    for event in snap.xid_events:
        if event.kind not in ("xid", "fallen_off_bus"):  # SXids and failed starts: no XID
            continue
        bus = bus_key(event.pci_bus_id)
        if bus is None and event.gpu_index is not None:
            bus = by_index.get(event.gpu_index)
        if bus:
            counts[bus] += 1
    return counts


def host_counters(snap: HostSnapshot) -> HostCounters:
    return HostCounters(
        snap.host,
        snap.collected_at,
        snap.status,
        snap.driver_version or snap.driver_version_proc,
        tuple(GpuCounters(g.index, g.pci_bus_id, counters(g)) for g in snap.gpus),
        dict(xid_counts(snap)),
    )


def _stat(path: Path) -> tuple[int, int] | None:
    try:
        status = path.stat()
    except OSError:
        return None
    return status.st_size, status.st_mtime_ns


def basis_chunks(run_path: Path, snapshots: Sequence[HostSnapshot]) -> Iterator[str] | None:
    """trend-basis.json's text for ``snapshots`` in pieces, a host a line; None when they are
    not exactly the snapshot files of the run at ``run_path`` (one each)."""
    from gpuaudit.report.run import RunDir  # run.py imports the trends

    run = RunDir(run_path)
    files = {p.name: p for p in run.snapshot_files()}
    named = [(run.snapshot_path(s.host).name, s) for s in snapshots]
    if len(named) != len(files) or {name for name, _ in named} != set(files):
        return None
    stats = {name: _stat(path) for name, path in files.items()}
    if any(stat is None for stat in stats.values()):
        return None

    def pieces() -> Iterator[str]:
        yield f'{{"version": {BASIS_VERSION}, "hosts": ['
        for number, (name, snap) in enumerate(named):
            size, mtime_ns = stats[name] or (0, 0)
            entry = _entry(host_counters(snap))
            entry = {"file": name, "size": size, "mtime_ns": mtime_ns, **entry}
            yield ("\n " if number == 0 else ",\n ") + json.dumps(entry, ensure_ascii=False)
        yield "\n]}\n"

    return pieces()


def _entry(host: HostCounters) -> dict[str, Any]:
    return {
        "host": host.host,
        "collected_at": host.collected_at,
        "status": host.status.value,
        "driver": host.driver,
        "gpus": [[g.index, g.pci_bus_id, list(g.counters)] for g in host.gpus],
        "xids": dict(host.xids),
    }


def read_basis(run_path: str | os.PathLike[str]) -> tuple[HostCounters, ...] | None:
    """The run's hosts as trend-basis.json holds them; None when it is missing, unreadable,
    of another version, or no longer matches the run's snapshot files (module docstring)."""
    from gpuaudit.report.run import RunDir  # run.py imports the trends

    run = RunDir(run_path)
    try:
        data = json.loads((run.path / BASIS_FILE).read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("version") != BASIS_VERSION:
            return None
        entries = data["hosts"]
        files = {p.name: p for p in run.snapshot_files()}
        if len(entries) != len(files) or {e["file"] for e in entries} != set(files):
            return None
        hosts = []
        for entry in entries:
            if _stat(files[entry["file"]]) != (entry["size"], entry["mtime_ns"]):
                return None
            hosts.append(_host(entry))
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None
    return tuple(hosts)


def _host(entry: Mapping[str, Any]) -> HostCounters:
    driver = entry["driver"]
    gpus = tuple(
        GpuCounters(
            int(index),
            None if bus is None else str(bus),
            tuple(None if c is None else int(c) for c in counters),
        )
        for index, bus, counters in entry["gpus"]
    )
    if any(len(g.counters) != len(GPU_COUNTERS) for g in gpus):
        raise ValueError("a GPU's counters do not match this version's")
    return HostCounters(
        str(entry["host"]),
        str(entry["collected_at"]),
        HostStatus(entry["status"]),
        None if driver is None else str(driver),
        gpus,
        {str(bus): int(n) for bus, n in entry["xids"].items()},
    )
