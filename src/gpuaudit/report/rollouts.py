"""Driver rollouts the audit register points at: those still running, halted or paused.

``gpuaudit upgrade`` writes ``<reports dir>/upgrades/<rollout-id>/rollout.json``; an audit run
in the same reports directory lists every rollout that is not completed in its register
(``rollouts``) and at the top of its page, so nobody reads a register as the fleet's settled
state while a rollout stands half done. A rollout.json that cannot be read is listed with the
problem rather than left out.
"""

from __future__ import annotations

import json
from pathlib import Path

from gpuaudit.report.register_types import RolloutSummary

OPEN_STATUSES = ("running", "halted", "paused")
_MAX_TEXT = 500


def open_rollouts(reports_dir: Path) -> list[RolloutSummary]:
    """Summaries of the rollouts under ``reports_dir/upgrades`` that are not completed, the
    most recently updated first."""
    found = []
    for path in sorted((Path(reports_dir) / "upgrades").glob("*/rollout.json")):
        found.append(_summary(path))
    found = [r for r in found if r.status in (*OPEN_STATUSES, "unreadable")]
    return sorted(found, key=lambda r: r.updated_at, reverse=True)


def _summary(path: Path) -> RolloutSummary:
    rollout_id = path.parent.name
    link = f"../upgrades/{rollout_id}/index.html"
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(document, dict):
            raise ValueError("not a JSON object")
        hosts = document.get("hosts") or []
        outcomes: dict[str, int] = {}
        for host in hosts if isinstance(hosts, list) else []:
            outcome = str(host.get("outcome")) if isinstance(host, dict) else "?"
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
        return RolloutSummary(
            rollout_id=rollout_id,
            status=str(document.get("status") or "unreadable"),
            reason=str(document.get("reason") or "")[:_MAX_TEXT],
            target_version=str(document.get("target_version") or "")[:_MAX_TEXT],
            updated_at=str(document.get("updated_at") or "")[:_MAX_TEXT],
            outcomes=dict(sorted(outcomes.items())),
            report=link,
        )
    except (OSError, ValueError) as exc:
        return RolloutSummary(
            rollout_id=rollout_id,
            status="unreadable",
            reason=f"rollout.json could not be read: {exc}"[:_MAX_TEXT],
            target_version="",
            updated_at="",
            outcomes={},
            report=link,
        )
