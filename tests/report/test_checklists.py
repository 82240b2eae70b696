"""Readiness checklists: items as the docs state them, rule mapping, scores per host and fleet."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from demo_run import demo_report, register_of
from report_factories import (
    GENERATED_AT,
    finding,
    healthy_host,
    register_document,
    unreachable_host,
)

import gpuaudit.rules
from gpuaudit.model.snapshot import HostStatus
from gpuaudit.pipeline import write_report
from gpuaudit.report.checklists import CHECKLISTS, NOT_CHECKED
from gpuaudit.report.run import RunDir
from gpuaudit.rules.base import REGISTRY, Outcome, RuleOutcome, Severity

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


def passing(host: str, *, failing: tuple[str, ...] = ()) -> list[RuleOutcome]:
    """Every checklist rule passed on ``host``, except ``failing`` (which have findings)."""
    codes = {code for checklist in CHECKLISTS for item in checklist.items for code in item.rules}
    return [
        RuleOutcome(code, host, Outcome.FAIL if code in failing else Outcome.PASS, findings=1)
        for code in sorted(codes)
    ]


def test_scores_per_host_and_fleet() -> None:
    snapshots = [healthy_host("ok-1"), healthy_host("bad-1"), unreachable_host("gone-1")]
    findings = [
        finding("GA107", Severity.MEDIUM, "bad-1", gpu_index=None),  # PP2
        finding("GA106", Severity.MEDIUM, "bad-1", gpu_index=None),  # PP4
        finding("GA001", Severity.HIGH, "gone-1", gpu_index=None),
        finding("GA320", Severity.MEDIUM, "ok-1"),  # no checklist item
    ]
    outcomes = [*passing("ok-1"), *passing("bad-1", failing=("GA107", "GA106"))]
    reg = register_document(snapshots, findings, generated_at=GENERATED_AT, outcomes=outcomes)
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
        "unknown": 0,
        "score_pct": 100.0,
        "failed_items": [],
        "unknown_items": [],
        "unknown_reasons": {},
    }
    assert pre["hosts"]["bad-1"]["failed_items"] == ["PP2", "PP4"]
    assert pre["hosts"]["bad-1"]["score_pct"] == 50.0
    # Nothing about an unreachable host was verified: it passes nothing.
    assert pre["hosts"]["gone-1"]["passed"] == 0
    assert pre["hosts"]["gone-1"]["failed_items"] == ["PP1", "PP2", "PP3", "PP4"]
    assert pre["fleet"] == {"passed": 6, "checked": 12, "unknown": 0, "score_pct": 50.0}
    assert pre["items"][1]["failed_hosts"] == ["bad-1", "gone-1"]

    prod = reg["checklists"]["production_readiness"]
    assert [i["checked"] for i in prod["items"]] == [True, False, True, True]
    assert prod["items"][0]["text"] == "Service level objectives are defined and measured."
    # What the hosts show of it is scored; the item no host shows is never a pass.
    assert prod["hosts"]["ok-1"]["score_pct"] == 100.0 and prod["hosts"]["ok-1"]["checked"] == 3
    assert prod["items"][1]["note"].startswith(NOT_CHECKED)
    assert prod["fleet"] == {"passed": 6, "checked": 9, "unknown": 0, "score_pct": 66.7}


def test_rules_without_an_outcome_are_unknown_not_passed() -> None:
    """Findings alone say nothing of the rules that did not fire: no outcome, no pass."""
    reg = register_document([healthy_host("h1")], [], generated_at=GENERATED_AT)
    pre = reg["checklists"]["pre_production"]["hosts"]["h1"]
    assert pre["passed"] == 0 and pre["score_pct"] == 0.0
    assert pre["unknown_items"] == ["PP1", "PP2", "PP3", "PP4"]
    assert "GA102: no outcome recorded" in pre["unknown_reasons"]["PP1"]


def test_not_evaluated_and_disabled_rules_leave_the_item_unknown() -> None:
    outcomes = [
        *(o for o in passing("h1") if o.rule not in ("GA102", "GA106")),
        RuleOutcome("GA102", "h1", Outcome.NOT_EVALUATED, "no GPU list: nvidia-smi failed"),
        RuleOutcome("GA106", "h1", Outcome.DISABLED, "disabled_rules of the site policy"),
    ]
    reg = register_document([healthy_host("h1")], [], generated_at=GENERATED_AT, outcomes=outcomes)
    host = reg["checklists"]["pre_production"]["hosts"]["h1"]
    assert host["unknown_items"] == ["PP1", "PP4"] and host["failed_items"] == []
    assert host["score_pct"] == 50.0
    assert host["unknown_reasons"]["PP1"] == ["GA102 not evaluated: no GPU list: nvidia-smi failed"]
    assert host["unknown_reasons"]["PP4"] == ["GA106 disabled: disabled_rules of the site policy"]
    items = reg["checklists"]["pre_production"]["items"]
    assert items[0]["unknown_hosts"] == ["h1"] and items[1]["unknown_hosts"] == []


def test_dead_driver_host_does_not_score_75(tmp_path: Path) -> None:
    reg = register_of(demo_report(tmp_path / "run"))
    pre = reg["checklists"]["pre_production"]["hosts"]
    dead = pre["@sim/v100-02"]
    # PP2 fails (GA101); PP1's GPU counts and MIG state could not be read at all.
    assert dead["failed_items"] == ["PP2"] and dead["unknown_items"] == ["PP1"]
    assert dead["score_pct"] == 50.0
    assert any("nvidia_smi_xml section failed" in why for why in dead["unknown_reasons"]["PP1"])
    # The host without nvidia-smi: nothing about its GPUs was seen.
    no_tool = pre["@sim/t4-03"]
    assert no_tool["score_pct"] == 25.0 and no_tool["unknown_items"] == ["PP1"]
    assert pre["@sim/a100-hgx-01"]["score_pct"] == 100.0
    # The production readiness checklist is scored too.
    prod = reg["checklists"]["production_readiness"]["hosts"]
    assert prod["@sim/p100-01"]["failed_items"] == ["PR4"]  # world-writable /dev/nvidia*
    assert prod["@sim/a100-hgx-01"]["score_pct"] == 100.0
    assert prod["@sim/v100-02"]["unknown_items"] == ["PR1"]


def test_host_without_gpu_tooling_does_not_score_100(tmp_path: Path) -> None:
    bare = dataclasses.replace(
        healthy_host("bare-1"),
        status=HostStatus.NO_GPU_TOOLING,
        status_detail="neither nvidia-smi nor rocm-smi nor amd-smi is installed",
        gpus=(),
        driver_version=None,
        tools={"nvidia-smi": False, "rocm-smi": False, "amd-smi": False, "dmesg": True},
    )
    run = RunDir(tmp_path / "run")
    write_report(run, [bare], generated_at=GENERATED_AT)
    host = register_of(run)["checklists"]["pre_production"]["hosts"]["bare-1"]
    assert host["score_pct"] is not None and host["score_pct"] < 50.0
    assert {"PP1", "PP2"} <= set(host["unknown_items"])
    assert any("no GPU tool" in why for why in host["unknown_reasons"]["PP2"])


def test_waived_findings_do_not_fail_items() -> None:
    class Waive:
        def waiver_status(self, f: object, on: object) -> tuple[str, object]:
            return "waived", None

    reg = register_document(
        [healthy_host("h1")],
        [finding("GA106", Severity.MEDIUM, "h1", gpu_index=None)],
        generated_at=GENERATED_AT,
        policy=Waive(),
        outcomes=passing("h1", failing=("GA106",)),
    )
    host = reg["checklists"]["pre_production"]["hosts"]["h1"]
    assert host["failed_items"] == [] and host["unknown_items"] == []
    assert host["score_pct"] == 100.0
