"""Readiness checklists: items as the docs state them, rule mapping, scores per host and fleet."""

from __future__ import annotations

import re
from pathlib import Path

from report_factories import GENERATED_AT, finding, healthy_host, unreachable_host

import gpuaudit.rules
from gpuaudit.report.checklists import CHECKLISTS, NOT_CHECKED
from gpuaudit.report.register import build_register
from gpuaudit.rules.base import REGISTRY, Severity

DOCS = Path(__file__).resolve().parents[2] / "docs" / "field-guide" / "readiness-checklists.md"


def test_items_are_the_documented_ones_and_name_real_rules() -> None:
    assert gpuaudit.rules  # importing the package registers the catalogue
    page = DOCS.read_text(encoding="utf-8")
    # The page's tables: "| PP1 | <item text> | <rules> | ..." per item.
    rows = {
        m.group(1): [cell.strip() for cell in m.group(2).split("|")]
        for m in re.finditer(r"^\| ((?:PP|PR)\d) \|(.*)\|$", page, re.MULTILINE)
    }
    ids = [item.id for checklist in CHECKLISTS for item in checklist.items]
    assert sorted(rows) == sorted(ids)
    for checklist in CHECKLISTS:
        assert checklist.reference.startswith("docs/field-guide/readiness-checklists.md#")
        for item in checklist.items:
            assert re.fullmatch(r"(PP|PR)\d", item.id)
            assert rows[item.id][0] == item.text, item.id
            if item.rules:  # the page names the rules that fail the item
                assert rows[item.id][1] == ", ".join(item.rules), item.id
            for code in item.rules:
                assert code in REGISTRY, (item.id, code)
            assert item.note
            if not item.rules:
                assert item.note.startswith(NOT_CHECKED)


def test_scores_per_host_and_fleet() -> None:
    snapshots = [healthy_host("ok-1"), healthy_host("bad-1"), unreachable_host("gone-1")]
    findings = [
        finding("GA107", Severity.MEDIUM, "bad-1", gpu_index=None),  # PP2
        finding("GA106", Severity.MEDIUM, "bad-1", gpu_index=None),  # PP4
        finding("GA001", Severity.HIGH, "gone-1", gpu_index=None),
        finding("GA320", Severity.MEDIUM, "ok-1"),  # no checklist item
    ]
    reg = build_register(snapshots, findings, generated_at=GENERATED_AT)
    pre = reg["checklists"]["pre_production"]
    assert pre["title"] == "Pre-production checklist"
    assert [i["id"] for i in pre["items"]] == ["PP1", "PP2", "PP3", "PP4"]
    assert (
        pre["items"][0]["text"] == "Every model to be served fits in the GPU memory of its hosts."
    )
    assert pre["reference"] == "docs/field-guide/readiness-checklists.md#pre-production-checklist"
    assert all(i["checked"] for i in pre["items"])
    assert pre["hosts"]["ok-1"] == {
        "passed": 4,
        "checked": 4,
        "score_pct": 100.0,
        "failed_items": [],
    }
    assert pre["hosts"]["bad-1"]["failed_items"] == ["PP2", "PP4"]
    assert pre["hosts"]["bad-1"]["score_pct"] == 50.0
    # Nothing about an unreachable host was verified: it passes nothing.
    assert pre["hosts"]["gone-1"]["passed"] == 0
    assert pre["hosts"]["gone-1"]["failed_items"] == ["PP1", "PP2", "PP3", "PP4"]
    assert pre["fleet"] == {"passed": 6, "checked": 12, "score_pct": 50.0}
    assert pre["items"][1]["failed_hosts"] == ["bad-1", "gone-1"]

    prod = reg["checklists"]["production_readiness"]
    assert [i["checked"] for i in prod["items"]] == [False] * 4
    assert prod["items"][0]["text"] == "Service level objectives are defined and measured."
    # Not checked is not passed: no score at all rather than 100%.
    assert prod["fleet"] == {"passed": 0, "checked": 0, "score_pct": None}
    assert prod["hosts"]["ok-1"]["score_pct"] is None


def test_waived_findings_do_not_fail_items() -> None:
    class Waive:
        def waiver_status(self, f: object, on: object) -> tuple[str, object]:
            return "waived", None

    reg = build_register(
        [healthy_host("h1")],
        [finding("GA106", Severity.MEDIUM, "h1", gpu_index=None)],
        generated_at=GENERATED_AT,
        policy=Waive(),
    )
    assert reg["checklists"]["pre_production"]["hosts"]["h1"]["failed_items"] == []
