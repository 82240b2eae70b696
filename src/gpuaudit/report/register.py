"""The register stage: snapshots and the rules' evaluation → the typed :class:`Register`.

Every renderer reads the one :class:`~gpuaudit.report.register_types.Register` built here; its
``to_dict()`` is ``register.json``, the versioned document outside tools read. Its shape::

    schema_version  "1.5" (major bumps on breaking changes; minors only add keys or values)
    generated_at    ISO 8601 UTC
    run_id          e.g. "20261129T161000Z" (None when the register is not tied to a run)
    summary         counts: findings by severity / category / owner, hosts by status, GPUs,
                    risks by status and open risks by severity (an info finding is not an
                    open risk: ``info_risk_count``), rule outcomes host by host
    hosts           one entry per snapshot, unreachable and failed hosts included; "outcomes":
                    rule code -> {"outcome": "fail" | "pass" | "not_evaluated" | "disabled" |
                    "not_applicable" (schema 1.4),
                    "reason" (why not evaluated or disabled), "findings" (how many, when it
                    failed), "gpus" (outcome -> GPU indexes, for rules that judge GPUs one
                    by one) and "gpu_reasons" (GPU index -> why)}
    rules           rule code -> title, for every rule with an outcome or a finding
    risks           findings grouped across hosts by rule and subject (risks.py), open first
    findings        Finding.to_dict() each, most severe first, plus "risk" (its risk id),
                    "status" ("open" | "waived"), "waiver" and "waiver_expired"
    checklists      the readiness checklists scored per host and fleet, each with the docs
                    section that explains it in "reference" (checklists.py)
    trends          comparison with the previous run (trends.py), None without one;
                    "risks_not_judged_before" (schema 1.5)
    provenance      scope, policy file and sha256, versions, operator and command line
                    (provenance.py; written by RunDir.write_report, absent when not given)
    rollouts        driver rollouts beside the run that are running, halted or paused
                    (rollouts.py; written by RunDir.write_report, absent from a bare register)

Every count map lists all known keys (zeros included) so consumers never need ``.get``;
ordering is fully deterministic so two registers of the same input compare equal byte for byte.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import date, datetime, timezone
from operator import attrgetter
from typing import Any

from gpuaudit.model.snapshot import Gpu, HostSnapshot, HostStatus
from gpuaudit.model.status import NOT_COLLECTED
from gpuaudit.report.checklists import build_checklists
from gpuaudit.report.layout import utc_now_iso
from gpuaudit.report.provenance import Provenance
from gpuaudit.report.register_types import (
    OPEN,
    WAIVED,
    GpuEntry,
    HostEntry,
    Register,
    RegisterFinding,
    Risk,
    Summary,
    at_or_above,
    is_risk_severity,
)
from gpuaudit.report.risks import build_risks, check_waivers, register_finding
from gpuaudit.report.trends import PreviousRun, build_trends
from gpuaudit.rules.base import REGISTRY, Finding, Outcome, Owner, RuleOutcome, Severity

__all__ = ["Register", "at_or_above", "build_register", "is_risk_severity"]

REGISTER_SCHEMA_VERSION = "1.5"

# Most severe first: the order counts and findings are presented in everywhere.
SEVERITY_ORDER: tuple[Severity, ...] = tuple(sorted(Severity, key=lambda s: -s.rank))


def finding_sort_key(finding: Finding) -> tuple[Any, ...]:
    """Most severe first, then highest risk score, then stable by rule, host, GPU and text."""
    return (
        -finding.severity.rank,
        -finding.score,
        finding.rule,
        finding.host,
        -1 if finding.gpu is None else finding.gpu,
        finding.message,
        finding.evidence.fact,
    )


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    return sorted(findings, key=finding_sort_key)


def sort_snapshots(snapshots: Iterable[HostSnapshot]) -> list[HostSnapshot]:
    return sorted(snapshots, key=lambda s: (s.host, s.collected_at))


def gpu_entry(gpu: Gpu) -> GpuEntry:
    return GpuEntry(
        gpu.index,
        gpu.name,
        gpu.uuid,
        gpu.pci_bus_id,
        gpu.vbios_version,
        gpu.memory_total_mib,
        gpu.status,
    )


def host_entry(
    snapshot: HostSnapshot,
    by_severity: Counter[Severity],
    outcomes: Iterable[RuleOutcome] = (),
) -> HostEntry:
    """One host row; ``by_severity`` counts the findings on this host, ``outcomes`` are the
    rules' outcomes on it."""
    return HostEntry(
        name=snapshot.host,
        status=snapshot.status.value,
        status_detail=snapshot.status_detail,
        collected_at=snapshot.collected_at,
        snapshot_schema_version=snapshot.schema_version,
        driver_version=snapshot.driver_version,
        cuda_version=snapshot.cuda_version,
        os=snapshot.os.pretty_name,
        kernel=snapshot.os.kernel,
        gpus=tuple(gpu_entry(g) for g in sorted(snapshot.gpus, key=lambda g: g.index)),
        finding_count=sum(by_severity.values()),
        findings_by_severity={s.value: by_severity.get(s, 0) for s in SEVERITY_ORDER},
        outcomes=tuple(sorted(outcomes, key=_RULE_OF)),
    )


def build_summary(
    snapshots: Sequence[HostSnapshot],
    findings: Sequence[Finding],
    risks: Sequence[Risk] = (),
    outcomes: Sequence[RuleOutcome] = (),
) -> Summary:
    severities = Counter(f.severity for f in findings)
    results = Counter(map(_OUTCOME_OF, outcomes))
    categories = Counter(f.category for f in findings)
    owners = Counter(f.owner for f in findings)
    statuses = Counter(s.status for s in snapshots)
    return Summary(
        host_count=len(snapshots),
        gpu_count=sum(len(s.gpus) for s in snapshots),
        finding_count=len(findings),
        findings_by_severity={s.value: severities.get(s, 0) for s in SEVERITY_ORDER},
        # Categories are open-ended (rules name them): list the ones present, by name.
        findings_by_category={c: categories[c] for c in sorted(categories)},
        findings_by_owner={o.value: owners.get(o, 0) for o in Owner},
        hosts_by_status={st.value: statuses.get(st, 0) for st in HostStatus},
        # Hosts the audit could not fully see: the first thing a reader must know.
        hosts_not_ok=tuple(sorted({s.host for s in snapshots if s.status is not HostStatus.OK})),
        risk_count=len(risks),
        # Info risks are neither open nor waived: they are counted on their own.
        risks_by_status={
            OPEN: sum(1 for r in risks if r.is_open),
            WAIVED: sum(1 for r in risks if r.status == WAIVED),
        },
        info_risk_count=sum(
            1 for r in risks if r.status == OPEN and not is_risk_severity(r.severity)
        ),
        open_risks_by_severity={
            s.value: sum(1 for r in risks if r.is_open and r.severity is s) for s in SEVERITY_ORDER
        },
        # Host × rule: how many rules failed, passed, could not look, or are turned off.
        outcomes={o.value: results.get(o, 0) for o in Outcome},
    )


def rule_titles(outcomes: Iterable[RuleOutcome], findings: Iterable[Finding]) -> dict[str, str]:
    """Code -> title of every rule the register names (the catalogue's, else a finding's)."""
    titles = {f.rule: f.title for f in findings}
    for code in dict.fromkeys(map(_RULE_OF, outcomes)):  # each code once, in order
        known = REGISTRY.get(code)
        titles.setdefault(code, known.title if known else code)
    return dict(sorted(titles.items()))


# A host has an outcome for every rule: read in C, not through a lambda each.
_RULE_OF = attrgetter("rule")
_OUTCOME_OF = attrgetter("outcome")


def build_register(
    snapshots: Sequence[HostSnapshot],
    findings: Sequence[Finding],
    *,
    generated_at: str | None = None,
    run_id: str | None = None,
    policy: object | None = None,
    previous: PreviousRun | None = None,
    provenance: Provenance | None = None,
    outcomes: Sequence[RuleOutcome] | None = None,
) -> Register:
    """The register of snapshots and the findings on them.

    ``policy`` supplies waivers when it has ``waiver_status`` (see risks.py); they are judged
    on the day of ``generated_at``, so rebuilding an old run gives the same answer. ``previous``
    (trends.load_previous) adds the trends. ``outcomes`` are the rules' outcomes on the hosts
    (``rules.assess``); without them the register knows only what the findings say, and claims
    no rule passed anywhere.
    """
    generated_at = generated_at or utc_now_iso()
    ordered_snapshots = sort_snapshots(snapshots)
    ordered_findings = sort_findings(findings)
    checks = check_waivers(ordered_findings, policy, _day(generated_at))
    entries: list[RegisterFinding] = [
        register_finding(finding, check)
        for finding, check in zip(ordered_findings, checks, strict=True)
    ]
    risks = build_risks(ordered_findings, checks)
    per_host: dict[str, Counter[Severity]] = {}
    for finding in ordered_findings:
        per_host.setdefault(finding.host, Counter())[finding.severity] += 1
    audited = [(s.host, s.status not in NOT_COLLECTED) for s in ordered_snapshots]
    outcomes = list(outcomes or ())
    host_outcomes: dict[str, list[RuleOutcome]] = {}
    for outcome in outcomes:
        host_outcomes.setdefault(outcome.host, []).append(outcome)
    return Register(
        schema_version=REGISTER_SCHEMA_VERSION,
        generated_at=generated_at,
        run_id=run_id,
        summary=build_summary(ordered_snapshots, ordered_findings, risks, outcomes),
        hosts=tuple(
            host_entry(s, per_host.get(s.host, Counter()), host_outcomes.get(s.host, ()))
            for s in ordered_snapshots
        ),
        rules=rule_titles(outcomes, ordered_findings),
        risks=tuple(risks),
        findings=tuple(entries),
        checklists=build_checklists(audited, entries, outcomes),
        trends=build_trends(ordered_snapshots, risks, previous, outcomes or None),
        provenance=provenance,
    )


def open_risks_at_or_above(register: Register, threshold: str) -> list[Risk]:
    """The risks with an open finding at ``threshold`` or above (Register's method)."""
    return register.open_risks_at_or_above(threshold)


def _day(timestamp: str) -> date:
    try:
        return date.fromisoformat(timestamp[:10])
    except ValueError:
        return datetime.now(timezone.utc).date()
