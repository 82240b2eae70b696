"""Readiness checklists: the pre-production and production-readiness lists, scored.

The lists and what gpuaudit verifies of each item are documented in
docs/field-guide/readiness-checklists.md (each checklist's ``reference``); every item is mapped
to the rule codes whose **open** findings fail it. An item no rule can check (SLOs,
autoscaling, runbooks, cost limits: facts that live outside the hosts) is listed with
``checked: false`` and never counts as passed: the register must not turn "not looked at" into
"fine". Waived findings do not fail an item.

Scores are per host (items passed / items checked) and for the fleet (host × item checks passed
/ made). A host that could not be audited (unreachable, collection failed) fails every checked
item: nothing about it was verified.

Codes are stable and never reused, so this map stays valid as the catalogue grows; a new rule
that verifies an item is added to the item's ``rules``. Item ids are stable too, so scores and
failed items compare from one run's register to the next.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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
                (),
                NOT_CHECKED + ": SLOs live outside hosts",
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
                (),
                NOT_CHECKED + ": runbooks and routing live outside hosts",
            ),
            ChecklistItem(
                "PR4",
                "Cost and quota limits are enforced.",
                (),
                NOT_CHECKED + ": billing and quotas are not collected",
            ),
        ),
        GUIDE_PRODUCTION,
    ),
)


def build_checklists(
    hosts: Iterable[tuple[str, bool]], findings: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """Score every checklist.

    ``hosts`` are (name, audited) pairs; ``findings`` are register finding entries, whose
    ``status`` says whether they are open.
    """
    audited = dict(sorted(hosts))
    open_rules: dict[str, set[str]] = {}
    for finding in findings:
        if finding.get("status", "open") == "open":
            open_rules.setdefault(finding["host"], set()).add(finding["rule"])
    return {c.key: _score(c, audited, open_rules) for c in CHECKLISTS}


def _score(
    checklist: Checklist, audited: Mapping[str, bool], open_rules: Mapping[str, set[str]]
) -> dict[str, Any]:
    checked = [item for item in checklist.items if item.rules]
    failed: dict[str, list[str]] = {}  # item id -> hosts
    per_host = {}
    for host, was_audited in audited.items():
        rules = open_rules.get(host, set())
        failed_items = [
            item.id for item in checked if not was_audited or rules.intersection(item.rules)
        ]
        for item_id in failed_items:
            failed.setdefault(item_id, []).append(host)
        per_host[host] = _tally(len(checked) - len(failed_items), len(checked))
        per_host[host]["failed_items"] = failed_items
    total_checks = len(checked) * len(audited)
    total_failed = sum(len(hosts) for hosts in failed.values())
    return {
        "title": checklist.title,
        "reference": checklist.reference,
        "items": [
            {
                "id": item.id,
                "text": item.text,
                "rules": list(item.rules),
                "checked": bool(item.rules),
                "note": item.note,
                "failed_hosts": failed.get(item.id, []),
            }
            for item in checklist.items
        ],
        "fleet": _tally(total_checks - total_failed, total_checks),
        "hosts": per_host,
    }


def _tally(passed: int, checked: int) -> dict[str, Any]:
    # None, not 0 or 100, when nothing could be checked: there is no score to give.
    pct = round(100 * passed / checked, 1) if checked else None
    return {"passed": passed, "checked": checked, "score_pct": pct}
