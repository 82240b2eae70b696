"""What trends compare of a run's hosts, kept beside its register: ``trend-basis.json``.

Trends (trends.py) compare a run with the previous one on each host's status, collection time,
boot time and driver, and per GPU (by UUID, else by PCI bus id) on its error counters and its
XID events from the kernel log. register.json does not hold the counters, so a previous run
used to be read back from its snapshots, which costs as much as loading this run's. The report
writes those values, a few per GPU, into ``trend-basis.json`` beside register.json; the next
run's trends read them from there.

The file is trusted only while the snapshots it was made from are the run's snapshots: it
names each snapshot file with its size and modification time, and :func:`read_basis` gives
None (trends then load the snapshots, as without the file) when ``hosts/`` holds another set
of files or any of them changed since. A report of snapshots that are not the run's files
(two snapshots of one host, snapshots never written there) writes no such file.

Trends also name the previous run's risks, the rules that did not judge each of its audited
hosts (not evaluated there, or disabled by the policy: a risk of theirs found now is not new)
and when its register was made, which register.json holds among everything else: at 10,000
hosts reading it back costs more than the rest of the comparison. The file keeps those too
(:class:`RegisterSeal`), with the size and SHA-256 of the register.json written beside it; they
are used only while register.json is still those bytes (hashing it costs a fiftieth of parsing
it), else register.json is read as before.

Shape: ``{"version": 2, "hosts": [{"file", "size", "mtime_ns", "host", "collected_at",
"status", "driver", "boot_time", "gpus": [[index, pci_bus_id, [counter, …], uuid], …],
"xids": {bus: count}}], "register": {"size", "sha256", "generated_at", "risks": [[id, title,
severity, [host, …]], …], "unjudged": [[[rule, …], [host, …]], …]}}``, the counters in
:data:`GPU_COUNTERS` order, ``unjudged`` the hosts that one set of rules did not judge, for
each such set. ``register`` is absent from a report without register.json. Version 1 kept no
GPU UUIDs: such a file is not used (the snapshots are read), as a replaced GPU could not be
told from the old one in its slot. Nor are the hosts of a version 2 file written before it
kept ``boot_time`` (the snapshots are read), nor its register's part written before it kept
``unjudged`` (register.json is read).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuaudit.model.snapshot import Gpu, HostSnapshot, HostStatus, bus_key
from gpuaudit.model.status import NOT_COLLECTED
from gpuaudit.report.layout import file_stamp
from gpuaudit.report.register_types import HostEntry, Register, RiskBrief
from gpuaudit.rules.base import Outcome

BASIS_FILE = "trend-basis.json"
BASIS_VERSION = 2

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
    uuid: str | None = None  # tells a GPU from the one it replaced in the same slot


@dataclass(frozen=True)
class HostCounters:
    """What trends compare of one host (a snapshot's part of it)."""

    host: str
    collected_at: str
    status: HostStatus
    driver: str | None
    gpus: tuple[GpuCounters, ...]
    xids: Mapping[str, int]  # XID events per PCI bus id
    boot_time: str | None = None  # ISO 8601 UTC (OsInfo.boot_time); None: the host did not say


@dataclass(frozen=True)
class RegisterSeal:
    """What trends take of a run's register.json (when it was made, its risks as
    :class:`RiskBrief`, and :func:`unjudged_rules` of its hosts), with the size and SHA-256 of
    that file as it was written."""

    size: int
    sha256: str
    generated_at: str
    risks: tuple[RiskBrief, ...]
    unjudged: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def matches(self, path: Path) -> bool:
        """Whether the file at ``path`` is still the register these were taken from."""
        try:
            if path.stat().st_size != self.size:
                return False
            digest = hashlib.sha256()
            with path.open("rb") as handle:  # in blocks: a 10,000-host register is 125 MiB
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
            return digest.hexdigest() == self.sha256
        except OSError:
            return False


@dataclass(frozen=True)
class Basis:
    """What trend-basis.json holds: the hosts, and the register's part when it was kept."""

    hosts: tuple[HostCounters, ...]
    register: RegisterSeal | None


class TextDigest:
    """The size and SHA-256 of a file's text (UTF-8) as its pieces pass through
    :meth:`track` on their way to the file."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self._size = 0
        self._done = False

    def track(self, pieces: Iterable[str]) -> Iterator[str]:
        for piece in pieces:
            data = piece.encode("utf-8")
            self._hash.update(data)
            self._size += len(data)
            yield piece
        self._done = True

    def seal(self, register: Register) -> RegisterSeal | None:
        """``register``'s seal, for the text tracked; None until all of it has passed."""
        if not self._done:
            return None
        risks = tuple(
            RiskBrief(r.id, r.title, r.severity.value, tuple(sorted(r.affected_hosts)))
            for r in register.risks
        )
        unjudged = unjudged_rules(register.hosts)
        return RegisterSeal(
            self._size, self._hash.hexdigest(), register.generated_at, risks, unjudged
        )


# A rule that did not judge a host: its data did not arrive, or the policy turned it off. One
# not applicable to a host did judge it: the thing it checks is not there.
NOT_JUDGED = frozenset((Outcome.NOT_EVALUATED, Outcome.DISABLED))
_NOT_AUDITED = frozenset(status.value for status in NOT_COLLECTED)


def unjudged_rules(hosts: Iterable[HostEntry]) -> dict[str, frozenset[str]]:
    """Host → the rules that did not judge it (:data:`NOT_JUDGED`), for each audited host with
    any. A host not audited was judged by no rule but GA001: its status says so. Hosts with the
    same rules share one set (most hosts of a run have the same few)."""
    shared: dict[frozenset[str], frozenset[str]] = {}
    unjudged = {}
    for host in hosts:
        if host.status in _NOT_AUDITED:
            continue
        rules = frozenset(o.rule for o in host.outcomes if o.outcome in NOT_JUDGED)
        if rules:
            unjudged[host.name] = shared.setdefault(rules, rules)
    return unjudged


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
        tuple(GpuCounters(g.index, g.pci_bus_id, counters(g), g.uuid) for g in snap.gpus),
        dict(xid_counts(snap)),
        snap.os.boot_time,
    )


def basis_chunks(
    run_path: Path,
    snapshots: Sequence[HostSnapshot],
    seal: Callable[[], RegisterSeal | None] | None = None,
) -> Iterator[str] | None:
    """trend-basis.json's text for ``snapshots`` in pieces, a host a line; None when they are
    not exactly the snapshot files of the run at ``run_path`` (one each). ``seal`` gives the
    register's part (asked for once the hosts are written: the register written beside it is
    complete by then); without one, or when it gives None, the file has none."""
    from gpuaudit.report.run import RunDir  # run.py imports the trends

    run = RunDir(run_path)
    files = {p.name: p for p in run.snapshot_files()}
    named = [(run.snapshot_path(s.host).name, s) for s in snapshots]
    if len(named) != len(files) or {name for name, _ in named} != set(files):
        return None
    stats = {name: file_stamp(path) for name, path in files.items()}
    if any(stat is None for stat in stats.values()):
        return None

    def pieces() -> Iterator[str]:
        yield f'{{"version": {BASIS_VERSION}, "hosts": ['
        for number, (name, snap) in enumerate(named):
            size, mtime_ns = stats[name] or (0, 0)
            entry = _entry(host_counters(snap))
            entry = {"file": name, "size": size, "mtime_ns": mtime_ns, **entry}
            yield ("\n " if number == 0 else ",\n ") + json.dumps(entry, ensure_ascii=False)
        register = seal() if seal is not None else None
        if register is None:
            yield "\n]}\n"
            return
        kept = {
            "size": register.size,
            "sha256": register.sha256,
            "generated_at": register.generated_at,
            "risks": [[r.id, r.title, r.severity, list(r.affected_hosts)] for r in register.risks],
            "unjudged": _by_rules(register.unjudged),
        }
        yield '\n], "register": ' + json.dumps(kept, ensure_ascii=False) + "}\n"

    return pieces()


def _by_rules(unjudged: Mapping[str, frozenset[str]]) -> list[list[list[str]]]:
    """[[rules, hosts], …]: each set of rules once, with the hosts it did not judge."""
    hosts: dict[frozenset[str], list[str]] = {}
    for host, rules in unjudged.items():
        hosts.setdefault(rules, []).append(host)
    return [[sorted(rules), names] for rules, names in hosts.items()]


def _entry(host: HostCounters) -> dict[str, Any]:
    return {
        "host": host.host,
        "collected_at": host.collected_at,
        "status": host.status.value,
        "driver": host.driver,
        "boot_time": host.boot_time,
        "gpus": [[g.index, g.pci_bus_id, list(g.counters), g.uuid] for g in host.gpus],
        "xids": dict(host.xids),
    }


def read_basis(run_path: str | os.PathLike[str]) -> tuple[HostCounters, ...] | None:
    """The run's hosts as trend-basis.json holds them; None when it is missing, unreadable,
    of another version, or no longer matches the run's snapshot files (module docstring)."""
    basis = read_trend_basis(run_path)
    return basis.hosts if basis is not None else None


def read_trend_basis(run_path: str | os.PathLike[str]) -> Basis | None:
    """:func:`read_basis`, with the register's part the file keeps (None when it keeps none
    or keeps it damaged: then register.json is read)."""
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
            if file_stamp(files[entry["file"]]) != (entry["size"], entry["mtime_ns"]):
                return None
            hosts.append(_host(entry))
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None
    try:
        register = _register_seal(data["register"]) if "register" in data else None
    except (ValueError, KeyError, TypeError):
        register = None
    return Basis(tuple(hosts), register)


def _register_seal(kept: Mapping[str, Any]) -> RegisterSeal:
    size, sha256, generated_at = kept["size"], kept["sha256"], kept["generated_at"]
    if not (isinstance(size, int) and isinstance(sha256, str) and isinstance(generated_at, str)):
        raise TypeError("the register's size, digest or time is not of its type")
    risks = []
    for risk_id, title, severity, hosts in kept["risks"]:
        texts = (risk_id, title, severity, *hosts)
        if not isinstance(hosts, list) or not all(isinstance(text, str) for text in texts):
            raise TypeError("a risk's id, title, severity or host is not text")
        risks.append(RiskBrief(risk_id, title, severity, tuple(hosts)))
    unjudged = {}
    for rules, hosts in kept["unjudged"]:
        lists = isinstance(rules, list) and isinstance(hosts, list)
        if not lists or not all(isinstance(text, str) for text in (*rules, *hosts)):
            raise TypeError("a rule or a host that it did not judge is not text")
        unjudged.update(dict.fromkeys(hosts, frozenset(rules)))
    return RegisterSeal(size, sha256, generated_at, tuple(risks), unjudged)


def _host(entry: Mapping[str, Any]) -> HostCounters:
    driver, boot_time = entry["driver"], entry["boot_time"]
    gpus = tuple(
        GpuCounters(
            int(index),
            None if bus is None else str(bus),
            tuple(None if c is None else int(c) for c in counters),
            None if uuid is None else str(uuid),
        )
        for index, bus, counters, uuid in entry["gpus"]
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
        None if boot_time is None else str(boot_time),
    )
