"""Trends: what changed since the previous audit of the same hosts.

Like is compared with like. Only hosts that both runs hold are compared: a host this run holds
and the previous one did not is a new host (its risks are ``risks_on_new_hosts``, never "new"),
and a host the previous run held that is not in this run's scope (a ``--limit`` run, a host
taken out of the inventory, a bundle run of one machine) is "not in scope" (its risks are
``risks_not_in_scope``, never "resolved"). A risk is new only where the previous run looked for
it: a risk on hosts the previous run held but did not audit (unreachable, an interrupted run),
or whose rule did not judge them then (disabled by its policy, its data missing), is
``risks_not_judged_before``; and one gone where this run did not look is ``unverified``.

The previous run is the one given (``--previous reports/<run>``, ``GPUAUDIT_PREVIOUS``; this run
itself, by whatever path, is refused: pipeline.assemble_register) or, by default, chosen by
:func:`find_previous` among the earlier run directories next to this one that hold a
``register.json``: runs of a comparable scope (provenance.Scope: the same inventory; for a
bundle run, any run) that hold at least one of this run's hosts; of those, a run that audited
at least half as many hosts as it holds of this run's (counted from the head of its register: a
run during an outage holds every host's snapshot without having looked at them) before one
that did not, then the one that holds most of them, then the newest. A full run is then
compared with the last full run, not with a ``--limit`` run in between nor with a run that
could reach few of its hosts, and a run with no comparable predecessor has no trends. "Earlier"
is read from run ids when they are the UTC timestamps gpuaudit makes (``20261129T161000Z``,
``…-2``): then only such runs are candidates, so a hand-named run next to them
(``reports/example``) is never mistaken for the last audit. A run with a hand-chosen id is
compared with sibling runs by when its snapshots were written: the modification time of its
``hosts/`` directory, which rebuilding its report leaves alone (of the run directory, which every
report written changes, only when it has no ``hosts/``).

Snapshots are the source of truth here too: hosts, drivers and counters come from the previous
run's ``hosts/`` (so trends work from snapshots alone), read from its ``trend-basis.json``
(trend_basis.py: those values of each snapshot, written with its register) while that file
still matches the snapshot files, else from the snapshots themselves. Risk ids, and the rules
that did not judge each host (its hosts' outcomes), come from its ``register.json`` (``risks``,
else regrouped ``findings``), as trend-basis.json keeps them while register.json is still the
file they were taken from; with no readable register the rules are run on the previous
snapshots with the previous run's own ``policy.yaml`` when it kept one.

Counters compared per GPU (host + UUID where both runs know it, so a GPU moved to another slot
is compared with itself; else host + PCI bus id, which survives re-enumeration of GPU indexes):
ECC volatile/aggregate corrected/uncorrected, remapped rows, retired pages and XID events from
the kernel log. A slot that holds a GPU of another UUID than before (an RMA swap) is not
compared: the new board's counters are its own history; a note names it. Only growth is
reported, never a drop. Volatile ECC counts reset with the driver and the kernel log with a
reboot: where both runs know the host's boot time (OsInfo.boot_time) and it changed, those
count from zero after it (all they count now is growth) and a note names the hosts rebooted;
the aggregate counts, remapped rows and retired pages outlive a reboot and are compared as
they are. Where either run does not know the boot time, a reset reads as no growth.

Shape (``register["trends"]``, None without a previous run): ``previous_run_id``,
``previous_generated_at``, ``previous_scope`` (its provenance scope, None when not recorded),
``compared_hosts`` (how many hosts both runs hold), ``new`` and ``persisting`` (risk ids on
compared hosts, in register order), ``resolved`` ([{id, title, severity, affected_hosts,
status: "resolved"}]: gone from the compared hosts), ``unverified`` (same entries without
status: gone only because a host they were on could not be audited this time, or because their
rule did not judge it this time, its data missing or the policy turning the rule off, so not
counted as resolved), ``risks_not_judged_before`` (ids: risks that are not on any compared host
the previous run judged by their rule, so not counted as new), ``risks_on_new_hosts`` (ids),
``risks_not_in_scope`` (entries like ``unverified``), ``fleet_not_compared`` (ids of fleet-rule
risks, GA7xx, that came or went while the two runs audited different hosts, holding different
ones or reaching different ones: those rules judge a host against the others, so their verdict
changed with the peers audited, not necessarily with the host),
``hosts_added`` (new hosts), ``hosts_removed`` (hosts not in this run's scope),
``driver_changes`` ([{host, from, to}]), ``growth`` ([{host, gpu, pci_bus_id, metric, before,
after}]) and ``notes`` (what a reader should know about the comparison, as sentences).
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from gpuaudit.model.snapshot import HostSnapshot
from gpuaudit.model.status import NOT_COLLECTED
from gpuaudit.report.provenance import Scope, read_provenance
from gpuaudit.report.register_types import CounterGrowth, DriverChange, Risk, RiskBrief, Trends
from gpuaudit.report.risks import build_risks
from gpuaudit.report.trend_basis import (
    GPU_COUNTERS,
    NOT_JUDGED,
    GpuCounters,
    HostCounters,
    host_counters,
    read_trend_basis,
)
from gpuaudit.rules.base import Finding, RuleOutcome

if TYPE_CHECKING:
    from gpuaudit.policy import Policy

__all__ = ["GPU_COUNTERS", "PreviousRun", "build_trends", "find_previous", "load_previous"]

XID_METRIC = "xid_events"
_METRIC_ORDER = {name: i for i, name in enumerate((*GPU_COUNTERS, XID_METRIC))}

# A host as trends compare it: this run's snapshot, or what the previous run kept of one.
_Host = TypeVar("_Host", HostSnapshot, HostCounters)

_TIMESTAMP_ID = re.compile(r"^(\d{8}T\d{6}Z)(?:-(\d+))?$")


@dataclass(frozen=True)
class PreviousRun:
    """What trends need of the previous run."""

    run_id: str
    generated_at: str | None
    hosts: tuple[HostCounters, ...]  # what trends compare of each of its snapshots
    risks: tuple[RiskBrief, ...]  # id, title, severity, affected_hosts of each risk
    scope: Scope | None = None  # what it covered, when it recorded that (provenance.py)
    notes: tuple[str, ...] = ()
    # Host → the rules that did not judge it there (trend_basis.unjudged_rules); a host not
    # named was judged by every rule, or not audited at all (its status says which).
    unjudged: Mapping[str, frozenset[str]] = field(default_factory=dict)


def _run_order(path: Path) -> tuple[bool, datetime, int]:
    """(has a timestamp id, when, suffix) for ordering run directories."""
    match = _TIMESTAMP_ID.match(path.name)
    if match:
        when = datetime.strptime(match.group(1), "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc)
        return True, when, int(match.group(2) or 1)
    try:
        hosts = path / "hosts"
        mtime = (hosts if hosts.is_dir() else path).stat().st_mtime
    except OSError:
        mtime = 0.0
    return False, datetime.fromtimestamp(mtime, timezone.utc), 0


def find_previous(
    run_path: str | os.PathLike[str],
    hosts: Iterable[str] | None = None,
    scope: Scope | None = None,
) -> Path | None:
    """The earlier run next to ``run_path`` this run is best compared with (module docstring).

    ``hosts`` are this run's hosts (None or empty: any earlier run holds them) and ``scope``
    its recorded scope (None: every earlier run is of a comparable scope).
    """
    from gpuaudit.report.run import safe_host_filename  # run.py imports this module

    current = Path(run_path).resolve()
    if not current.parent.is_dir():
        return None
    stamped, when, suffix = _run_order(current)
    # Compared by snapshot file name: a candidate's hosts are known without reading its files.
    wanted = {safe_host_filename(h) for h in hosts or ()}
    best: tuple[tuple[bool, int, datetime, int, str], Path] | None = None
    for sibling in current.parent.iterdir():
        if sibling.resolve() == current or not (sibling / "register.json").is_file():
            continue
        order = _run_order(sibling)
        if (stamped and not order[0]) or (order[1], order[2]) >= (when, suffix):
            continue
        if scope is not None:
            recorded = read_provenance(sibling)
            if not scope.comparable_with(recorded.scope if recorded else None):
                continue
        shared = len(wanted & _snapshot_names(sibling)) if wanted else 0
        if wanted and not shared:
            continue
        # A run that reached fewer than half of the hosts it holds (an outage) is taken only
        # where no run that reached more is there to compare with.
        audited = _audited_count(sibling)
        reached = audited is None or (audited * 2 >= shared if wanted else audited > 0)
        key = (reached, shared, order[1], order[2], sibling.name)
        if best is None or key > best[0]:
            best = (key, sibling)
    return best[1] if best else None


# The register's summary is its fourth line (register.json is written an entry a line).
_SUMMARY_LINE = ' "summary": '
_SUMMARY_WITHIN = 8  # lines read at most to find it


def _audited_count(run_path: Path) -> int | None:
    """How many hosts a run audited (collected), from its register's summary, read from the
    head of register.json without parsing the rest; None where it cannot be told."""
    try:
        with (run_path / "register.json").open(encoding="utf-8") as handle:
            for _ in range(_SUMMARY_WITHIN):
                line = handle.readline()
                if line.startswith(_SUMMARY_LINE):
                    summary = json.loads(line[len(_SUMMARY_LINE) :].rstrip().rstrip(","))
                    break
            else:
                return None
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    statuses = summary.get("hosts_by_status") if isinstance(summary, dict) else None
    if not isinstance(statuses, dict):
        return None
    not_collected = {status.value for status in NOT_COLLECTED}
    return sum(
        count
        for status, count in statuses.items()
        if status not in not_collected and isinstance(count, int)
    )


def _snapshot_names(run_path: Path) -> set[str]:
    try:
        return {p.name for p in (run_path / "hosts").iterdir()}
    except OSError:
        return set()


def load_previous(path: str | os.PathLike[str]) -> PreviousRun:
    """Read a previous run; FileNotFoundError when it is not a run directory."""
    from gpuaudit.report.run import RunDir  # run.py imports this module

    run = RunDir(path)
    if not run.hosts_dir.is_dir():
        raise FileNotFoundError(f"previous run {run.path} holds no hosts/ directory")
    recorded = read_provenance(run.path)
    scope = recorded.scope if recorded else None
    basis = read_trend_basis(run.path)
    seal = basis.register if basis is not None else None
    if basis is not None and seal is not None and seal.matches(run.register_path):
        # All from trend-basis.json: register.json is still the file its risks were taken from.
        return PreviousRun(
            run.run_id, seal.generated_at, basis.hosts, seal.risks, scope, (), seal.unjudged
        )
    register = _read_register(run.register_path)
    notes: list[str] = []
    # The counters from trend-basis.json when it still matches the snapshots, and the risks
    # from register.json: then no snapshot is read. Otherwise the snapshots, as ever.
    hosts = basis.hosts if basis is not None and register is not None else None
    risks = _register_risks(register) if hosts is not None else None
    if hosts is None or risks is None:
        snapshots = tuple(run.load_snapshots())
        hosts = tuple(host_counters(s) for s in snapshots)
        risks, unjudged = _previous_risks(register, snapshots, run.path, notes)
    else:
        unjudged = _register_unjudged(register)
    generated_at = register.get("generated_at") if register else None
    if not isinstance(generated_at, str):
        generated_at = max((h.collected_at for h in hosts), default=None)
    return PreviousRun(run.run_id, generated_at, hosts, tuple(risks), scope, tuple(notes), unjudged)


def _read_register(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _register_risks(register: Mapping[str, Any] | None) -> list[RiskBrief] | None:
    """The risks a previous register.json names (``risks``, else its ``findings`` regrouped);
    None when it names neither readably."""
    risks = register.get("risks") if register else None
    if isinstance(risks, list) and all(isinstance(r, dict) and "id" in r for r in risks):
        return [_risk_brief(r) for r in risks]
    if register and isinstance(register.get("findings"), list):
        try:
            findings = [Finding.from_dict(f) for f in register["findings"]]
        except (KeyError, TypeError, ValueError):
            return None  # a damaged register: the snapshots decide
        return _briefs(findings)
    return None


_NOT_JUDGED_VALUES = frozenset(o.value for o in NOT_JUDGED)
_NOT_AUDITED_VALUES = frozenset(s.value for s in NOT_COLLECTED)


def _register_unjudged(register: Mapping[str, Any] | None) -> dict[str, frozenset[str]]:
    """trend_basis.unjudged_rules of a previous register.json's hosts, from its JSON as read
    (none where it kept no outcomes: then every rule is taken to have judged every host)."""
    hosts = register.get("hosts") if register else None
    shared: dict[frozenset[str], frozenset[str]] = {}
    unjudged = {}
    for host in hosts if isinstance(hosts, list) else ():
        outcomes = host.get("outcomes") if isinstance(host, dict) else None
        if not isinstance(outcomes, dict) or host.get("status") in _NOT_AUDITED_VALUES:
            continue
        rules = frozenset(
            str(rule)
            for rule, entry in outcomes.items()
            if isinstance(entry, dict) and entry.get("outcome") in _NOT_JUDGED_VALUES
        )
        if rules:
            unjudged[str(host.get("name"))] = shared.setdefault(rules, rules)
    return unjudged


def _briefs(findings: Sequence[Finding]) -> list[RiskBrief]:
    return [
        RiskBrief(r.id, r.title, r.severity.value, r.affected_hosts) for r in build_risks(findings)
    ]


def _previous_risks(
    register: Mapping[str, Any] | None,
    snapshots: Sequence[HostSnapshot],
    run_path: Path,
    notes: list[str],
) -> tuple[list[RiskBrief], dict[str, frozenset[str]]]:
    """The previous run's risks and the rules that did not judge its hosts: from its register,
    else from its snapshots judged again."""
    from_register = _register_risks(register)
    if from_register is not None:
        return from_register, _register_unjudged(register)
    from gpuaudit.rules import assess

    judged = assess(snapshots, policy=_own_policy(run_path, notes))
    audited = {s.host for s in snapshots if s.status not in NOT_COLLECTED}
    unjudged: dict[str, set[str]] = {}
    for outcome in judged.outcomes:
        if outcome.outcome in NOT_JUDGED and outcome.host in audited:
            unjudged.setdefault(outcome.host, set()).add(outcome.rule)
    return _briefs(judged.findings), {h: frozenset(rules) for h, rules in unjudged.items()}


def _own_policy(run_path: Path, notes: list[str]) -> Policy | None:
    """The policy a run kept (policy.yaml), which its snapshots are judged by again."""
    from gpuaudit.policy import POLICY_FILE, PolicyError, load_policy  # it imports the rules

    path = run_path / POLICY_FILE
    if not path.is_file():
        return None
    try:
        return load_policy(path)
    except PolicyError as error:
        notes.append(
            f"The previous run's {POLICY_FILE} does not load ({error}); its snapshots were "
            "judged by the built-in defaults."
        )
        return None


def _risk_brief(risk: Mapping[str, Any]) -> RiskBrief:
    """A risk of a previous register.json, as trends name it."""
    return RiskBrief(
        str(risk["id"]),
        str(risk.get("title") or ""),
        str(risk.get("severity") or ""),
        tuple(sorted(str(h) for h in risk.get("affected_hosts") or ())),
    )


def build_trends(
    snapshots: Sequence[HostSnapshot],
    risks: Sequence[Risk],
    previous: PreviousRun | None,
    outcomes: Sequence[RuleOutcome] | None = None,
) -> Trends | None:
    """Compare this run (its snapshots and risks, in register order) with the previous one,
    on the hosts both runs hold (module docstring). ``outcomes`` are the rules' outcomes on
    this run's hosts: a risk gone from a host its rule did not judge this time is unverified,
    not resolved (None: only the hosts' status tells)."""
    if previous is None:
        return None
    now = _latest_by_host(snapshots)
    before = _latest_by_host(previous.hosts)
    shared = set(now) & set(before)
    audited = {h for h in shared if now[h].status not in NOT_COLLECTED}
    audited_before = {h for h in shared if before[h].status not in NOT_COLLECTED}
    previous_by_id = {r.id: r for r in previous.risks}
    unjudged_before = previous.unjudged

    def judged_before(rule: str, hosts: Iterable[str]) -> bool:
        """Whether the previous run judged any of ``hosts`` by ``rule``: audited it, and the
        rule was neither off there nor without its data."""
        return any(h in audited_before and rule not in unjudged_before.get(h, ()) for h in hosts)

    def compared(hosts: Iterable[Any] | None) -> set[str] | None:
        """The compared hosts among a risk's; None for a risk tied to no host."""
        names = {str(h) for h in hosts or ()}
        return names & shared if names else None

    # A fleet rule judges each host against the others it audited: between runs that audited
    # different hosts (held different ones, or could not reach the same ones) its verdict
    # changes with the peers, not with the host.
    peers_differ = _collected(now) != _collected(before)
    fleet_rules = _fleet_rules() if peers_differ else frozenset()
    new, persisting, on_new_hosts, not_judged_before, fleet_not_compared = [], [], [], [], []
    for risk in risks:
        rid = risk.id
        hosts_now = compared(risk.affected_hosts)
        earlier = previous_by_id.get(rid)
        if hosts_now is not None and not hosts_now:
            on_new_hosts.append(rid)  # only on hosts the previous run did not hold
        elif earlier is not None and compared(earlier.affected_hosts) != set():
            persisting.append(rid)
        elif _rule_of(rid) in fleet_rules:
            fleet_not_compared.append(rid)
        elif hosts_now and not judged_before(_rule_of(rid), hosts_now):
            not_judged_before.append(rid)  # the previous run did not look for it there
        else:
            new.append(rid)
    current_ids = {r.id for r in risks}
    gone = sorted(set(previous_by_id) - current_ids)
    unjudged = _unjudged(outcomes) if gone else frozenset()
    resolved, unverified, not_in_scope = [], [], []
    for rid in gone:
        brief = previous_by_id[rid]
        hosts_before = compared(brief.affected_hosts)
        if hosts_before is not None and not hosts_before:
            not_in_scope.append(brief)  # this run did not look at those hosts
        elif hosts_before and (
            hosts_before - audited or any((_rule_of(rid), h) in unjudged for h in hosts_before)
        ):
            # Gone only because its host, or its rule, did not look this time is not resolved.
            unverified.append(brief)
        elif _rule_of(rid) in fleet_rules:
            fleet_not_compared.append(rid)
        else:
            resolved.append(brief)
    # Counters and drivers are only compared where both audits saw the host: an unreachable
    # host has no counters, and "none before" would read as growth.
    both = sorted(audited & audited_before)
    notes: list[str] = []
    rebooted = []
    growth = []
    for host in both:
        counters_now = host_counters(now[host])
        restarted = _rebooted(before[host], counters_now)
        if restarted:
            rebooted.append(host)
        growth += _growth(host, before[host], counters_now, notes, restarted)
    if rebooted:
        notes.append(_reboot_note(rebooted))
    return Trends(
        previous_run_id=previous.run_id,
        previous_generated_at=previous.generated_at,
        previous_scope=previous.scope,
        compared_hosts=len(shared),
        new=tuple(new),
        resolved=tuple(resolved),
        unverified=tuple(unverified),
        persisting=tuple(persisting),
        risks_on_new_hosts=tuple(on_new_hosts),
        risks_not_judged_before=tuple(not_judged_before),
        risks_not_in_scope=tuple(not_in_scope),
        fleet_not_compared=tuple(fleet_not_compared),
        hosts_added=tuple(sorted(set(now) - set(before))),
        hosts_removed=tuple(sorted(set(before) - set(now))),
        driver_changes=tuple(_driver_changes(both, before, now)),
        growth=tuple(growth),
        notes=(*previous.notes, *notes),
    )


def _unjudged(outcomes: Iterable[RuleOutcome] | None) -> frozenset[tuple[str, str]]:
    """(rule, host) where the rule did not judge the host (trend_basis.NOT_JUDGED): its data
    did not arrive, or the policy turned it off."""
    return frozenset((o.rule, o.host) for o in outcomes or () if o.outcome in NOT_JUDGED)


def _rule_of(risk_id: str) -> str:
    """A risk id is its rule's code, or the code and the risk's subject: ``GA601:<sysctl>``."""
    return risk_id.partition(":")[0]


def _collected(hosts: Mapping[str, HostSnapshot] | Mapping[str, HostCounters]) -> set[str]:
    return {name for name, host in hosts.items() if host.status not in NOT_COLLECTED}


@functools.lru_cache(maxsize=1)
def _fleet_rules() -> frozenset[str]:
    """The codes of the rules that compare hosts with each other (GA7xx)."""
    from gpuaudit.rules import all_rules  # the report package is usable without the rules

    return frozenset(r.code for r in all_rules() if r.check_fleet is not None)


def _latest_by_host(snapshots: Iterable[_Host]) -> dict[str, _Host]:
    latest: dict[str, _Host] = {}
    for snap in sorted(snapshots, key=lambda s: (s.host, s.collected_at)):
        latest[snap.host] = snap
    return latest


def _driver(snap: HostSnapshot | HostCounters) -> str | None:
    if isinstance(snap, HostCounters):
        return snap.driver
    return snap.driver_version or snap.driver_version_proc


def _driver_changes(
    hosts: Sequence[str], before: Mapping[str, HostCounters], now: Mapping[str, HostSnapshot]
) -> list[DriverChange]:
    changes = []
    for host in hosts:
        old, new = _driver(before[host]), _driver(now[host])
        # An unknown version (driver not answering) is GA101's news, not a change of driver.
        if old and new and old != new:
            changes.append(DriverChange(host, old, new))
    return changes


# Within a minute, two boot times are one boot: the kernel derives it from the clock, so two
# readings of one boot can be a second or so apart.
_SAME_BOOT_S = 60
_BOOT_TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"  # OsInfo.boot_time
# Counted since the driver loaded: a reboot starts them again from zero, as it does the
# kernel log's XIDs. The aggregate counts, remapped rows and retired pages outlive it.
_SINCE_BOOT = frozenset(
    n for n, metric in enumerate(GPU_COUNTERS) if metric.startswith("ecc_volatile.")
)
# How many of the rebooted hosts the note names.
_REBOOTS_NAMED = 20


def _rebooted(before: HostCounters, now: HostCounters) -> bool:
    """Whether the host booted again between the runs, as both runs' boot times tell (False
    where either run does not know it)."""
    if before.boot_time is None or now.boot_time is None or before.boot_time == now.boot_time:
        return False
    try:
        then = datetime.strptime(before.boot_time, _BOOT_TIME_FORMAT)
        since = datetime.strptime(now.boot_time, _BOOT_TIME_FORMAT)
    except ValueError:
        return False
    return abs((since - then).total_seconds()) >= _SAME_BOOT_S


def _reboot_note(hosts: Sequence[str]) -> str:
    named = ", ".join(hosts[:_REBOOTS_NAMED])
    if len(hosts) > _REBOOTS_NAMED:
        named += f" and {len(hosts) - _REBOOTS_NAMED} more"
    return (
        f"Rebooted since the previous run (booted at another time than before): {named}. "
        "Their volatile ECC counts and kernel-log XIDs started again from zero at the reboot: "
        "all they count now is counted as growth."
    )


def _since_boot(counts: tuple[int | None, ...]) -> tuple[int | None, ...]:
    """A GPU's counters before a reboot, as the counts that it reset start again: from zero."""
    return tuple(0 if n in _SINCE_BOOT else count for n, count in enumerate(counts))


def _growth(
    host: str, before: HostCounters, now: HostCounters, notes: list[str], rebooted: bool = False
) -> list[CounterGrowth]:
    """The counters of ``host`` that grew between the runs; where it ``rebooted`` between
    them, those a reboot resets grew by all they count now."""
    pairs, replaced = _same_gpus(before.gpus, now.gpus)
    for gpu, earlier in replaced:
        notes.append(
            f"{host}: the GPU at {gpu.pci_bus_id} is {gpu.uuid}, not {earlier.uuid} as in the "
            "previous run (replaced or moved): its counters were not compared."
        )
    rows: list[tuple[GpuCounters | None, str, str, int | None, int | None]] = []
    old_bus_of: dict[str, str | None] = {}
    for old, new in pairs:
        bus = new.pci_bus_id or ""
        old_bus_of[bus] = old.pci_bus_id
        baseline = _since_boot(old.counters) if rebooted else old.counters
        for number, metric in enumerate(GPU_COUNTERS):
            rows.append((new, bus, metric, baseline[number], new.counters[number]))
    # Kernel-log XIDs are named by bus id: a moved GPU's earlier events are at its old one.
    skipped = {gpu.pci_bus_id for gpu, _ in replaced}
    by_bus = {g.pci_bus_id: g for g in now.gpus if g.pci_bus_id}
    old_xids, new_xids = {} if rebooted else before.xids, now.xids
    for bus in sorted(set(new_xids) - skipped):
        earlier_bus = old_bus_of.get(bus, bus)
        old_count = old_xids.get(earlier_bus, 0) if earlier_bus else 0
        rows.append((by_bus.get(bus), bus, XID_METRIC, old_count, new_xids[bus]))
    old_by_bus = {g.pci_bus_id: g for g in before.gpus if g.pci_bus_id}
    growth = []
    for board, bus, metric, old_value, new_value in rows:
        if old_value is None or new_value is None or new_value <= old_value:
            continue
        shown = board or old_by_bus.get(bus)
        growth.append(
            CounterGrowth(host, shown.index if shown else None, bus, metric, old_value, new_value)
        )
    return sorted(growth, key=lambda g: (g.pci_bus_id, _METRIC_ORDER[g.metric]))


def _same_gpus(
    before: Sequence[GpuCounters], now: Sequence[GpuCounters]
) -> tuple[list[tuple[GpuCounters, GpuCounters]], list[tuple[GpuCounters, GpuCounters]]]:
    """(previous, this run's) for each GPU both runs saw, and (this run's, previous) for each
    slot that holds another GPU than before.

    A GPU is the one of the same UUID, wherever it sits now; where either run knows no UUID, the
    one at the same PCI bus id. A GPU whose UUID the previous run saw at no slot, in a slot
    that held a GPU of another UUID, is a replacement (an RMA swap, a board moved in from
    elsewhere): its counters are the board's own history, never growth on the host.
    """
    by_uuid = {g.uuid: g for g in before if g.uuid}
    by_bus = {g.pci_bus_id: g for g in before if g.pci_bus_id}
    pairs, replaced = [], []
    for gpu in now:
        if not gpu.pci_bus_id:
            continue
        earlier = by_uuid.get(gpu.uuid) if gpu.uuid else None
        if earlier is None:
            earlier = by_bus.get(gpu.pci_bus_id)
            if earlier is not None and gpu.uuid and earlier.uuid and earlier.uuid != gpu.uuid:
                replaced.append((gpu, earlier))
                continue
        if earlier is not None:
            pairs.append((earlier, gpu))
    return pairs, replaced
