"""Readiness checklists: the pre-production and production-readiness lists, scored.

The lists and what gpuaudit verifies of each item are documented in
docs/field-guide/readiness-checklists.md (each checklist's ``reference``); every item is mapped
to the rule codes that verify it, and read from those rules' **outcomes** on each host
(``rules.assess``), never from the mere absence of findings:

- **failed**: one of its rules has an open finding above info there (waived findings and
  informational ones do not fail an item);
- **passed**: every one of its rules looked and passed (or failed only on waived or
  informational findings);
- **unknown**: otherwise — a rule was not evaluated (its data was missing), is disabled by the
  policy, or has no outcome in the register; ``unknown_reasons`` says which and why.

An item no rule can check (facts that live outside the hosts) is listed with ``checked: false``
and never counts as passed. Scores are per host (items passed / items checked) and for the
fleet (host × item checks passed / made): an unknown item counts as not passed, so a host
whose driver is dead or that has no GPU tool cannot score high. A host that could not be
audited (unreachable, collection failed) fails every checked item: nothing about it was
verified.

Codes are stable and never reused, so this map stays valid as the catalogue grows; a new rule
that verifies an item is added to the item's ``rules``. Item ids are stable too, so scores and
failed items compare from one run's register to the next.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gpuaudit.report.register_types import (
    ChecklistScore,
    HostChecklist,
    ItemScore,
    RegisterFinding,
    Tally,
)
from gpuaudit.rules.base import Outcome, RuleOutcome
from gpuaudit.rules.refs import GUIDE_PREPRODUCTION, GUIDE_PRODUCTION

NOT_CHECKED = "not checked by gpuaudit"


@dataclass(frozen=True)
class ChecklistItem:
    id: str
    text: str  # as docs/field-guide/readiness-checklists.md states it
    rules: tuple[str, ...]
    note: str  # what the rules verify of the item, or why it cannot be checked


@dataclass(frozen=True)
class Checklist:
    key: str
    title: str
    items: tuple[ChecklistItem, ...]
    reference: str  # the docs section that explains the list and its items


CHECKLISTS: tuple[Checklist, ...] = (
    Checklist(
        "pre_production",
        "Pre-production checklist",
        (
            ChecklistItem(
                "PP1",
                "Every model to be served fits in the GPU memory of its hosts.",
                ("GA102", "GA201", "GA202"),
                "the GPU memory a model is sized for is there: every expected GPU visible, MIG "
                "layouts settled and instantiated; whether a given model fits is GA802's "
                "finding, which this item does not count",
            ),
            ChecklistItem(
                "PP2",
                "The driver and the CUDA runtime are tested to work together.",
                ("GA101", "GA104", "GA107", "GA701"),
                "the driver is loaded and answers, its tools are installed, it is the desired "
                "version and the one its peers run; CUDA workloads themselves are not run",
            ),
            ChecklistItem(
                "PP3",
                "Basic GPU monitoring and alerting are in place.",
                ("GA104", "GA105"),
                "the sources GPU alerts read are there: nvidia-smi / rocm-smi and a readable "
                "kernel log for XIDs; the monitoring agent is GA403's finding, which this item "
                "does not count, and alert rules are not checked",
            ),
            ChecklistItem(
                "PP4",
                "A deployment can be rolled back.",
                ("GA106",),
                "driver packages are held, so the driver only changes through a deliberate, "
                "reversible upgrade; the rollback itself is not exercised",
            ),
        ),
        GUIDE_PREPRODUCTION,
    ),
    Checklist(
        "production_readiness",
        "Production readiness checklist",
        (
            ChecklistItem(
                "PR1",
                "Service level objectives are defined and measured.",
                ("GA403",),
                "the GPU metrics objectives are measured with are recorded on the host: a DCGM "
                "monitoring agent runs (or the policy says dcgm-exporter runs elsewhere); the "
                "objectives themselves are checked by hand",
            ),
            ChecklistItem(
                "PR2",
                "Autoscaling and eviction policies are configured.",
                (),
                NOT_CHECKED + ": scheduler configuration is not collected",
            ),
            ChecklistItem(
                "PR3",
                "Runbooks exist and on-call routing is set up.",
                ("GA104", "GA105"),
                "what a runbook's first steps read on the host is there: nvidia-smi / rocm-smi "
                "and a readable kernel log; the runbooks and the routing are checked by hand",
            ),
            ChecklistItem(
                "PR4",
                "Cost and quota limits are enforced.",
                ("GA602",),
                "no local user can take GPUs around the scheduler's quotas: the GPU device "
                "nodes are not world-writable; quotas and billing are checked by hand",
            ),
        ),
        GUIDE_PRODUCTION,
    ),
)

PASSED = "passed"
FAILED = "failed"
UNKNOWN = "unknown"


@dataclass(frozen=True)
class HostFacts:
    """What the checklists read of one host: whether it was audited, the rules with open
    findings above info there, and every rule's outcome."""

    audited: bool
    open_rules: frozenset[str] = frozenset()
    outcomes: Mapping[str, RuleOutcome] = field(default_factory=dict)


def build_checklists(
    hosts: Iterable[tuple[str, bool]],
    findings: Sequence[RegisterFinding],
    outcomes: Iterable[RuleOutcome] = (),
) -> tuple[ChecklistScore, ...]:
    """Score every checklist.

    ``hosts`` are (name, audited) pairs; ``findings`` are the register's findings, whose
    ``status`` says whether they are open; ``outcomes`` are the rules' outcomes on the hosts
    (without them every checked item of an audited host is unknown).
    """
    by_host: dict[str, dict[str, RuleOutcome]] = {}
    for outcome in outcomes:
        by_host.setdefault(outcome.host, {})[outcome.rule] = outcome
    open_rules: dict[str, set[str]] = {}
    for finding in findings:
        if finding.is_open_risk:
            open_rules.setdefault(finding.host, set()).add(finding.rule)
    facts = {
        name: HostFacts(audited, frozenset(open_rules.get(name, ())), by_host.get(name, {}))
        for name, audited in sorted(hosts)
    }
    return tuple(_score(c, facts) for c in CHECKLISTS)


def item_state(item: ChecklistItem, host: HostFacts) -> tuple[str, list[str]]:
    """(PASSED | FAILED | UNKNOWN, why unknown: one line per rule that did not pass)."""
    if not host.audited or host.open_rules.intersection(item.rules):
        return FAILED, []
    why = []
    for code in item.rules:
        outcome = host.outcomes.get(code)
        if outcome is None:
            why.append(f"{code}: no outcome recorded")
        elif outcome.outcome not in (Outcome.PASS, Outcome.FAIL):
            # A failed rule without open findings above info failed only on accepted risks.
            detail = f": {outcome.reason}" if outcome.reason else ""
            why.append(f"{code} {outcome.outcome.value.replace('_', ' ')}{detail}")
    return (UNKNOWN, why) if why else (PASSED, [])


def _score(checklist: Checklist, hosts: Mapping[str, HostFacts]) -> ChecklistScore:
    checked = [item for item in checklist.items if item.rules]
    states: dict[str, dict[str, list[str]]] = {FAILED: {}, UNKNOWN: {}}  # state -> item -> hosts
    per_host = {}
    for name, host in hosts.items():
        judged = {item.id: item_state(item, host) for item in checked}
        failed = [i for i, (state, _) in judged.items() if state == FAILED]
        unknown = {i: tuple(why) for i, (state, why) in judged.items() if state == UNKNOWN}
        for item_id in failed:
            states[FAILED].setdefault(item_id, []).append(name)
        for item_id in unknown:
            states[UNKNOWN].setdefault(item_id, []).append(name)
        passed = len(checked) - len(failed) - len(unknown)
        per_host[name] = HostChecklist(
            Tally(passed, len(checked), len(unknown)), tuple(failed), unknown
        )
    total_checks = len(checked) * len(hosts)
    total_failed = sum(len(h) for h in states[FAILED].values())
    total_unknown = sum(len(h) for h in states[UNKNOWN].values())
    return ChecklistScore(
        key=checklist.key,
        title=checklist.title,
        reference=checklist.reference,
        items=tuple(
            ItemScore(
                item.id,
                item.text,
                item.rules,
                item.note,
                tuple(states[FAILED].get(item.id, ())),
                tuple(states[UNKNOWN].get(item.id, ())),
            )
            for item in checklist.items
        ),
        fleet=Tally(total_checks - total_failed - total_unknown, total_checks, total_unknown),
        hosts=per_host,
    )
