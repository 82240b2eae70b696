"""What the HTML page shows of the register's risks, waivers, trends and checklists.

The page embeds its data as JSON, so these views read the register's document
(``Register.to_dict()``, what register.json holds) and return the page's own entries; a panel
whose part is empty is left out.

Like views.py, this module returns plain data and leaves escaping to the template and to the
page script (which only ever sets ``textContent``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence, Set
from typing import Any

from gpuaudit.report.provenance import Scope
from gpuaudit.report.references import reference_view
from gpuaudit.report.register import SEVERITY_ORDER
from gpuaudit.report.register_types import is_risk_severity

RISK_STATUSES = ("open", "waived", "resolved")
# Long lists in the summary panels are cut here: the page stays light on a large fleet and
# register.json holds every entry.
PANEL_LIST_LIMIT = 200
_SEVERITY_RANK = {s.value: s.rank for s in SEVERITY_ORDER}


def severity_rank(severity: Any) -> int:
    return _SEVERITY_RANK.get(severity, -1) if isinstance(severity, str) else -1


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else []


def _waiver_view(risk: Mapping[str, Any]) -> dict[str, Any] | None:
    waiver = risk.get("waiver")
    if not isinstance(waiver, Mapping):
        return None
    hosts = waiver.get("hosts")
    return {
        "reason": str(waiver.get("reason") or ""),
        "expires": str(waiver.get("expires") or ""),
        "owner": str(waiver.get("owner") or ""),
        # A host list, or one host pattern as written in the site policy.
        "hosts": [str(h) for h in _as_list(hosts)] if not isinstance(hosts, str) else [hosts],
        "expired": bool(risk.get("waiver_expired")),
    }


def risk_views(
    register: Mapping[str, Any], docs_pages: Set[str] = frozenset()
) -> list[dict[str, Any]]:
    """The register's risks (its document's), as the page shows them.

    ``docs_pages`` are the docs pages next to the page (references.py): references to them
    become links, like web addresses.
    """
    findings = _as_list(register.get("findings"))
    risks = _as_list(register.get("risks"))
    views = []
    for number, risk in enumerate(r for r in risks if isinstance(r, Mapping)):
        status = risk.get("status")
        hosts = [str(h) for h in _as_list(risk.get("affected_hosts"))]
        finding_ids = [
            i
            for i in _as_list(risk.get("findings"))
            if isinstance(i, int) and 0 <= i < len(findings)
        ]
        views.append(
            {
                "index": number,
                "id": str(risk.get("id") or risk.get("rule") or ""),
                "rule": str(risk.get("rule") or ""),
                "title": str(risk.get("title") or ""),
                "category": str(risk.get("category") or ""),
                "owner": str(risk.get("owner") or ""),
                "severity": str(risk.get("severity") or ""),
                "severity_rank": severity_rank(risk.get("severity")),
                "likelihood": risk.get("likelihood"),
                "impact": risk.get("impact"),
                "score": risk.get("score") if isinstance(risk.get("score"), int) else 0,
                "status": status if status in RISK_STATUSES else "open",
                "waiver": _waiver_view(risk),
                "affected_hosts": hosts,
                "gpu_count": len(_as_list(risk.get("affected_gpus"))),
                "finding_count": risk.get("finding_count", len(finding_ids)),
                "remediation": str(risk.get("remediation") or ""),
                "operation": str(risk.get("operation") or ""),
                # [text, is a link] pairs: the page script links only what is marked here.
                "references": [
                    reference_view(r, docs_pages) for r in _as_list(risk.get("references"))
                ],
                "findings": finding_ids,
            }
        )
    return views


def filter_options(risks: Sequence[Mapping[str, Any]]) -> dict[str, list[str]]:
    """The choices each filter offers: only values that occur, in a stable order."""
    statuses = {r["status"] for r in risks}
    return {
        "severity": [s.value for s in SEVERITY_ORDER],
        "category": sorted({r["category"] for r in risks if r["category"]}),
        "owner": sorted({r["owner"] for r in risks if r["owner"]}),
        "rule": sorted({r["rule"] for r in risks if r["rule"]}),
        "status": [s for s in RISK_STATUSES if s in statuses],
        "host": sorted({h for r in risks for h in r["affected_hosts"]}),
    }


def status_counts(risks: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Risks by status; an open info risk only informs (Risk.is_open), counted apart."""
    counts = Counter(
        "info" if r["status"] == "open" and not is_risk_severity(r["severity"]) else r["status"]
        for r in risks
    )
    return {s: counts.get(s, 0) for s in (*RISK_STATUSES, "info")}


def _capped(items: Sequence[Any]) -> dict[str, Any]:
    shown = list(items[:PANEL_LIST_LIMIT])
    return {"items": shown, "omitted": max(0, len(items) - len(shown))}


def trends_view(
    register: Mapping[str, Any], risks: Sequence[Mapping[str, Any]]
) -> dict[str, Any] | None:
    """The comparison with the previous run; None when the register has no trends key.

    ``{"first_run": True}`` when the key is there but empty (no earlier comparable run).
    """
    if "trends" not in register:
        return None
    trends = register.get("trends")
    if not isinstance(trends, Mapping):
        return {"first_run": True}
    by_id = {r["id"]: r for r in risks}

    def described(ids: Any) -> list[dict[str, Any]]:
        out = []
        for risk_id in _as_list(ids):
            risk = by_id.get(str(risk_id), {})
            out.append(
                {
                    "id": str(risk_id),
                    "title": risk.get("title", ""),
                    "severity": risk.get("severity", ""),
                    "hosts": len(risk.get("affected_hosts", ())),
                    "index": risk.get("index"),
                }
            )
        return out

    def briefs(entries: Any) -> list[dict[str, Any]]:
        """Risks of the previous run (no longer in this register: nothing to link to)."""
        return [
            {
                "id": str(r.get("id", "")),
                "title": str(r.get("title", "")),
                "severity": str(r.get("severity", "")),
                "hosts": len(_as_list(r.get("affected_hosts"))),
                "index": None,
            }
            for r in _as_list(entries)
            if isinstance(r, Mapping)
        ]

    growth = [g for g in _as_list(trends.get("growth")) if isinstance(g, Mapping)]
    drivers = [d for d in _as_list(trends.get("driver_changes")) if isinstance(d, Mapping)]
    added = [str(h) for h in _as_list(trends.get("hosts_added"))]
    removed = [str(h) for h in _as_list(trends.get("hosts_removed"))]
    compared = trends.get("compared_hosts")
    return {
        "first_run": False,
        "previous_run_id": str(trends.get("previous_run_id") or ""),
        "previous_generated_at": str(trends.get("previous_generated_at") or ""),
        "previous_scope": _scope_text(trends.get("previous_scope")),
        "compared_hosts": compared if isinstance(compared, int) else None,
        "new": _capped(described(trends.get("new"))),
        "resolved": _capped(briefs(trends.get("resolved"))),
        "persisting": _capped(described(trends.get("persisting"))),
        "unverified": _capped(briefs(trends.get("unverified"))),
        "risks_on_new_hosts": _capped(described(trends.get("risks_on_new_hosts"))),
        "risks_not_judged_before": _capped(described(trends.get("risks_not_judged_before"))),
        "risks_not_in_scope": _capped(briefs(trends.get("risks_not_in_scope"))),
        "fleet_not_compared": _capped(described(trends.get("fleet_not_compared"))),
        "growth": _capped(growth),
        "driver_changes": _capped(drivers),
        "hosts_added": _capped(added),
        "hosts_removed": _capped(removed),
        "notes": [str(n) for n in _as_list(trends.get("notes"))],
    }


def _scope_text(scope: Any) -> str:
    """The previous run's scope in words ("" when it recorded none or it is unreadable)."""
    if not isinstance(scope, Mapping):
        return ""
    try:
        return Scope.from_dict(scope).describe()
    except (TypeError, ValueError):
        return ""


def _score(entry: Any) -> dict[str, Any]:
    entry = entry if isinstance(entry, Mapping) else {}
    pct = entry.get("score_pct")
    return {
        "passed": entry.get("passed", 0),
        "checked": entry.get("checked", 0),
        "unknown": entry.get("unknown", 0),
        "score_pct": pct if isinstance(pct, (int, float)) else None,
    }


def checklist_views(
    register: Mapping[str, Any], docs_pages: Set[str] = frozenset()
) -> list[dict[str, Any]]:
    """Each checklist with its fleet score, its reference and, per item, how many hosts fail
    it; the reference is linked as a risk's are (``docs_pages``, see risk_views)."""
    checklists = register.get("checklists")
    if not isinstance(checklists, Mapping):
        return []
    views = []
    for key, checklist in checklists.items():
        if not isinstance(checklist, Mapping):
            continue
        hosts = checklist.get("hosts")
        if not isinstance(hosts, Mapping):
            hosts = {}
        failing: Counter[str] = Counter()
        unknown: Counter[str] = Counter()
        for entry in hosts.values():
            if isinstance(entry, Mapping):
                failing.update(str(i) for i in _as_list(entry.get("failed_items")))
                unknown.update(str(i) for i in _as_list(entry.get("unknown_items")))
        items = [
            {
                "id": str(item.get("id", "")),
                "text": str(item.get("text", "")),
                "rules": [str(r) for r in _as_list(item.get("rules"))],
                "checked": bool(item.get("checked")),
                "failing_hosts": failing.get(str(item.get("id", "")), 0),
                # Hosts where its rules could not look (or are disabled): not verified there.
                "unknown_hosts": unknown.get(str(item.get("id", "")), 0),
            }
            for item in _as_list(checklist.get("items"))
            if isinstance(item, Mapping)
        ]
        reference, linked = reference_view(checklist.get("reference") or "", docs_pages)
        views.append(
            {
                "key": str(key),
                "title": str(checklist.get("title") or key),
                "reference": reference,
                "reference_link": linked,
                "fleet": _score(checklist.get("fleet")),
                "items": items,
                "host_count": len(hosts),
            }
        )
    return views


def host_checklists(register: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Per host: its score on each checklist, with the texts of the items it fails and of the
    items that could not be verified on it."""
    checklists = register.get("checklists")
    by_host: dict[str, list[dict[str, Any]]] = {}
    if not isinstance(checklists, Mapping):
        return by_host
    for key, checklist in checklists.items():
        if not isinstance(checklist, Mapping) or not isinstance(checklist.get("hosts"), Mapping):
            continue
        texts = {
            str(i.get("id")): str(i.get("text", ""))
            for i in _as_list(checklist.get("items"))
            if isinstance(i, Mapping)
        }
        for host, entry in checklist["hosts"].items():
            if not isinstance(entry, Mapping):
                continue
            failed = [str(i) for i in _as_list(entry.get("failed_items"))]
            unknown = [str(i) for i in _as_list(entry.get("unknown_items"))]
            reasons = entry.get("unknown_reasons")
            why = reasons if isinstance(reasons, Mapping) else {}
            by_host.setdefault(str(host), []).append(
                {
                    "title": str(checklist.get("title") or key),
                    **_score(entry),
                    "failed": [_item_line(i, texts) for i in failed],
                    "not_verified": [_item_line(i, texts, why.get(i)) for i in unknown],
                }
            )
    return by_host


def _item_line(item: str, texts: Mapping[str, str], why: Any = None) -> str:
    """A checklist item as the host's checklist lists it: its id, its text, and why it could
    not be verified where that is known."""
    line = f"{item}: {texts[item]}" if texts.get(item) else item
    reasons = "; ".join(str(w) for w in (why if isinstance(why, (list, tuple)) else [why]) if w)
    return f"{line} — {reasons}" if reasons else line
