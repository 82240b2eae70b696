"""The rollout report: ``<rollout dir>/index.html``, one self-contained page per rollout.

It shows where the rollout stands (completed, halted and why, paused and why, running), each
stage's hosts with their outcome, each host's timeline of journal events, the health gates'
checks with their evidence, what was rolled back, and the driver versions across the fleet
before and after.

Host names, event details and gate evidence come from hosts and from commands run on them, so
they are untrusted: the jinja2 environment escapes every value, CSS classes come only from the
fixed maps below, and the page carries a Content-Security-Policy that allows no script and no
network load at all (the page needs neither: timelines fold with ``<details>``). The audit page's
stylesheet is inlined, so the two pages look alike and this one still loads nothing.
"""

from __future__ import annotations

import functools
import json
import os
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup

from gpuaudit import __version__
from gpuaudit.report.run import atomic_write_text
from gpuaudit.report.template_cache import cache_templates
from gpuaudit.upgrade.journal import (
    Event,
    HostOutcome,
    HostState,
    RecordedGate,
    RolloutMeta,
    RolloutState,
    Step,
    host_reason,
)

TEMPLATES = Path(__file__).parent / "templates"
AUDIT_CSS = Path(__file__).parent.parent / "report" / "templates" / "report.css"
PAGE_TEMPLATE = "rollout.html.j2"
REPORT_FILE = "index.html"

# No script-src: default-src 'none' forbids every script, inline or not.
CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
    "base-uri 'none'; form-action 'none'"
)
_STATUS_CLASSES = {"completed": "good", "halted": "bad", "paused": "warn", "running": "info"}
_OUTCOME_CLASSES = {outcome.value: outcome.value for outcome in HostOutcome}
_EVENT_CLASSES = {s: s for s in ("started", "done", "failed", "skipped", "info")}
_GATE_CLASSES = {"pass": "pass", "fail": "fail", "inconclusive": "inconclusive",
                 "not_checked": "other"}  # fmt: skip
NOT_RECORDED = "not recorded"


def _css_class(value: str, classes: Mapping[str, str]) -> str:
    return classes.get(str(value).lower(), "other")


@functools.lru_cache(maxsize=1)
def environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=True,  # for every template, whatever its name
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["outcome_class"] = lambda v: _css_class(v, _OUTCOME_CLASSES)
    env.filters["event_class"] = lambda v: _css_class(v, _EVENT_CLASSES)
    env.filters["gate_class"] = lambda v: _css_class(v, _GATE_CLASSES)
    env.filters["status_class"] = lambda v: _css_class(v, _STATUS_CLASSES)
    return cache_templates(env, TEMPLATES)


def _evidence_text(evidence: Any) -> str:
    if evidence is None:
        return ""
    if isinstance(evidence, str):
        return evidence
    return json.dumps(evidence, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def _event_view(event: Event) -> dict[str, Any]:
    return {
        "at": event.at,
        "step": event.step.value,
        "status": event.status.value,
        "detail": event.detail,
    }


def _gate_view(gate: RecordedGate) -> dict[str, Any]:
    return {
        "outcome": gate.outcome,
        "at": gate.at,
        "detail": gate.detail,
        "checks": [
            {
                "name": check.name,
                "outcome": check.outcome,
                "detail": check.detail,
                "evidence": _evidence_text(check.evidence),
            }
            for check in gate.checks
        ],
    }


def _host_view(
    state: RolloutState, host: HostState, stage: str | None, anchor: str
) -> dict[str, Any]:
    return {
        "name": host.name,
        "anchor": anchor,
        "stage": stage,
        "outcome": host.outcome.value,
        "reason": host_reason(state, host),
        "before": host.version_before,
        "pin_before": host.pin_before,
        "after": host.version_after,
        "in_progress": host.in_progress.value if host.in_progress else None,
        "events": [_event_view(event) for event in host.events],
        "gates": [_gate_view(gate) for gate in host.gates],
        "rollback_events": [
            _event_view(event) for event in host.events if event.step is Step.ROLLBACK
        ],
    }


def _fleet_versions(hosts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Hosts per driver version, before the rollout and now (a host never changed keeps its
    version from before)."""
    before = Counter(h["before"] or NOT_RECORDED for h in hosts)
    after = Counter(h["after"] or h["before"] or NOT_RECORDED for h in hosts)
    versions = sorted(set(before) | set(after), key=lambda v: (v == NOT_RECORDED, v))
    return [{"version": v, "before": before[v], "after": after[v]} for v in versions]


def build_context(state: RolloutState, meta: RolloutMeta | Mapping[str, Any]) -> dict[str, Any]:
    """Everything the page template needs."""
    meta = RolloutMeta.coerce(meta)
    hosts = [
        _host_view(state, state.host(name), stage, f"host-{number}")
        for number, (name, stage) in enumerate(meta.hosts_in_order(state), 1)
    ]
    stage_names: list[str | None] = list(meta.stages)
    if any(h["stage"] is None for h in hosts):
        stage_names.append(None)  # hosts the journal names outside the rollout's stages
    stages = [
        {"name": name, "hosts": [h for h in hosts if h["stage"] == name]} for name in stage_names
    ]
    counts = Counter(h["outcome"] for h in hosts)
    return {
        "rollout_id": meta.rollout_id,
        "target_version": meta.target_version,
        "status": state.status.value,
        "reason": state.reason,
        "started_at": state.started_at,
        "updated_at": state.updated_at,
        "outcome_counts": [
            {"outcome": o.value, "count": counts[o.value]} for o in HostOutcome if counts[o.value]
        ],
        "stages": stages,
        "hosts": hosts,
        "rolled_back": [h for h in hosts if h["outcome"] == HostOutcome.ROLLED_BACK.value],
        "fleet_versions": _fleet_versions(hosts),
        "rollout_events": [_event_view(e) for e in state.events if e.host is None],
        "warnings": list(state.warnings),
        "css": Markup(AUDIT_CSS.read_text(encoding="utf-8")),
        "csp": CSP,
        "version": __version__,
    }


def render_rollout_html(state: RolloutState, meta: RolloutMeta | Mapping[str, Any]) -> str:
    """The rollout page as one string that loads nothing from anywhere."""
    return environment().get_template(PAGE_TEMPLATE).render(build_context(state, meta))


def write_rollout_report(
    directory: str | os.PathLike[str],
    state: RolloutState,
    meta: RolloutMeta | Mapping[str, Any],
) -> Path:
    """Write ``<directory>/index.html`` atomically and return its path."""
    path = Path(directory) / REPORT_FILE
    atomic_write_text(path, render_rollout_html(state, meta))
    return path
