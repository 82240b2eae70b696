from __future__ import annotations

import json

from report_factories import (
    GENERATED_AT,
    finding,
    healthy_host,
    register_document,
    unreachable_host,
)

import gpuaudit.rules
from gpuaudit.model.snapshot import HostSnapshot
from gpuaudit.report.register import (
    REGISTER_SCHEMA_VERSION,
    build_register,
)
from gpuaudit.report.register_views import risk_views, status_counts
from gpuaudit.rules.base import Finding, GpuOutcome, Outcome, RuleOutcome, Severity

assert gpuaudit.rules  # importing the package registers the catalogue the titles come from


def test_top_level_contract(fleet: list[HostSnapshot], fleet_findings: list[Finding]) -> None:
    reg = register_document(
        fleet, fleet_findings, generated_at=GENERATED_AT, run_id="20261129T161000Z"
    )
    assert set(reg) == {
        "schema_version",
        "generated_at",
        "run_id",
        "summary",
        "hosts",
        "rules",
        "risks",
        "findings",
        "checklists",
        "trends",
    }
    assert reg["schema_version"] == REGISTER_SCHEMA_VERSION == "1.5"
    assert reg["generated_at"] == GENERATED_AT
    assert reg["run_id"] == "20261129T161000Z"
    json.dumps(reg)  # JSON-ready as it is


def test_generated_at_defaults_to_utc_now() -> None:
    reg = register_document([], [])
    assert reg["generated_at"].endswith("Z") and "T" in reg["generated_at"]
    assert reg["run_id"] is None
    assert reg["hosts"] == [] and reg["findings"] == []
    assert reg["summary"]["host_count"] == 0 and reg["summary"]["gpu_count"] == 0


def test_every_host_present_including_unreachable(
    fleet: list[HostSnapshot], fleet_findings: list[Finding]
) -> None:
    reg = register_document(fleet, fleet_findings, generated_at=GENERATED_AT)
    names = [h["name"] for h in reg["hosts"]]
    assert names == ["gpu-a01", "gpu-b01", "gpu-z99"]  # sorted, deterministic
    z99 = reg["hosts"][2]
    assert z99["status"] == "unreachable"
    assert "No route to host" in z99["status_detail"]
    assert z99["gpus"] == []
    assert z99["finding_count"] == 1


def test_host_entry_fields(fleet: list[HostSnapshot], fleet_findings: list[Finding]) -> None:
    reg = register_document(fleet, fleet_findings, generated_at=GENERATED_AT)
    b01 = next(h for h in reg["hosts"] if h["name"] == "gpu-b01")
    for key in (
        "name",
        "status",
        "status_detail",
        "driver_version",
        "cuda_version",
        "os",
        "kernel",
    ):
        assert key in b01
    assert b01["driver_version"] == "550.127.05"
    assert b01["os"] == "Ubuntu 22.04.4 LTS"
    assert b01["kernel"] == "5.15.0-105-generic"
    assert b01["finding_count"] == 1
    assert b01["findings_by_severity"]["high"] == 1
    assert [g["index"] for g in b01["gpus"]] == [0, 1]
    assert set(b01["gpus"][0]) >= {
        "index",
        "name",
        "uuid",
        "pci_bus_id",
        "vbios",
        "memory_total_mib",
        "status",
    }
    assert b01["gpus"][0]["vbios"] == "96.00.89.00.01"
    assert b01["gpus"][0]["memory_total_mib"] == 81559


def test_summary_counts(fleet: list[HostSnapshot], fleet_findings: list[Finding]) -> None:
    summary = register_document(fleet, fleet_findings, generated_at=GENERATED_AT)["summary"]
    assert summary["host_count"] == 3
    assert summary["gpu_count"] == 10
    assert summary["finding_count"] == 4
    assert summary["findings_by_severity"] == {
        "critical": 1,
        "high": 1,
        "medium": 1,
        "low": 1,
        "info": 0,
    }
    assert list(summary["findings_by_severity"]) == ["critical", "high", "medium", "low", "info"]
    assert summary["findings_by_category"] == {
        "collection": 1,
        "driver": 1,
        "memory": 1,
        "topology": 1,
    }
    assert summary["findings_by_owner"] == {"infra": 3, "ml-engineering": 1}
    assert summary["hosts_by_status"]["ok"] == 2
    assert summary["hosts_by_status"]["unreachable"] == 1
    assert summary["hosts_by_status"]["collection_failed"] == 0
    assert summary["hosts_not_ok"] == ["gpu-z99"]


def test_findings_sorted_by_severity_and_serialised(
    fleet: list[HostSnapshot], fleet_findings: list[Finding]
) -> None:
    reg = register_document(fleet, fleet_findings, generated_at=GENERATED_AT)
    assert [f["severity"] for f in reg["findings"]] == ["critical", "high", "medium", "low"]
    first = reg["findings"][0]
    for key in ("rule", "severity", "host", "evidence", "remediation", "owner", "category"):
        assert key in first
    assert Finding.from_dict(reg["findings"][1]) == fleet_findings[1]


def test_deterministic_whatever_the_input_order(
    fleet: list[HostSnapshot], fleet_findings: list[Finding]
) -> None:
    one = register_document(fleet, fleet_findings, generated_at=GENERATED_AT, run_id="r")
    two = register_document(
        list(reversed(fleet)), list(reversed(fleet_findings)), generated_at=GENERATED_AT, run_id="r"
    )
    assert json.dumps(one) == json.dumps(two)


def test_ties_broken_by_rule_host_gpu() -> None:
    findings = [
        finding("GA302", Severity.HIGH, "h2", gpu_index=1),
        finding("GA302", Severity.HIGH, "h1", gpu_index=3),
        finding("GA302", Severity.HIGH, "h1", gpu_index=None),
        finding("GA301", Severity.HIGH, "h9"),
    ]
    reg = register_document([healthy_host("h1"), unreachable_host("h2")], findings)
    order = [(f["rule"], f["host"], f["gpu"]) for f in reg["findings"]]
    assert order == [
        ("GA301", "h9", 0),
        ("GA302", "h1", None),
        ("GA302", "h1", 3),
        ("GA302", "h2", 1),
    ]
    # A finding for a host with no snapshot (a fleet-level rule) is kept, not dropped.
    assert len(reg["findings"]) == 4


def test_info_findings_are_not_open_risks() -> None:
    findings = [
        finding("GA801", Severity.INFO, "h1", gpu_index=None, message="70B fits at fp8"),
        finding("GA801", Severity.INFO, "h2", gpu_index=None, message="8B fits at bf16"),
        finding("GA304", Severity.HIGH, "h1"),
    ]
    built = build_register([healthy_host("h1"), healthy_host("h2")], findings)
    reg = built.to_dict()
    summary = reg["summary"]
    assert summary["risk_count"] == 2
    assert summary["risks_by_status"] == {"open": 1, "waived": 0}
    assert summary["info_risk_count"] == 1
    assert summary["open_risks_by_severity"]["info"] == 0
    assert summary["open_risks_by_severity"]["high"] == 1
    # --fail-on counts risks, whatever the threshold; the page's "Open risks" too.
    assert [r.id for r in built.open_risks_at_or_above("info")] == ["GA304"]
    counts = status_counts(risk_views(reg))
    assert (counts["open"], counts["info"]) == (1, 1)


def test_outcomes_per_host_with_reasons_and_gpus() -> None:
    error = GpuOutcome(1, Outcome.NOT_EVALUATED, "it answers with an error")
    gpus = (GpuOutcome(0, Outcome.FAIL), error)
    outcomes = [
        RuleOutcome("GA304", "h1", Outcome.FAIL, findings=1, gpus=gpus, per_gpu=True),
        RuleOutcome("GA403", "h1", Outcome.NOT_EVALUATED, "no service list: systemctl missing"),
        RuleOutcome("GA602", "h1", Outcome.DISABLED, "disabled_rules of the site policy"),
        RuleOutcome("GA105", "h1", Outcome.PASS),
    ]
    reg = register_document(
        [healthy_host("h1")], [finding("GA304", Severity.HIGH, "h1")], outcomes=outcomes
    )
    (host,) = reg["hosts"]
    assert host["outcomes"] == {
        "GA105": {"outcome": "pass"},
        "GA304": {
            "outcome": "fail",
            "findings": 1,
            "gpus": {"fail": [0], "not_evaluated": [1]},
            "gpu_reasons": {"1": "it answers with an error"},
        },
        "GA403": {"outcome": "not_evaluated", "reason": "no service list: systemctl missing"},
        "GA602": {"outcome": "disabled", "reason": "disabled_rules of the site policy"},
    }
    assert reg["summary"]["outcomes"] == {
        "fail": 1,
        "pass": 1,
        "not_evaluated": 1,
        "disabled": 1,
        "not_applicable": 0,
    }
    assert reg["rules"]["GA304"] == "Title of GA304"  # the finding's title
    assert reg["rules"]["GA105"] == "Kernel log unreadable: XID history unknown"
    json.dumps(reg)


def test_register_json_hosts_are_each_one_plain_dump() -> None:
    """register.json turns each distinct outcome into JSON once and joins the texts: every
    host's line is still exactly what dumping the host's entry gives, whether its outcomes
    share one GPU list (as a host's passing rules do), carry their own, or say why in text
    that JSON must escape."""
    from gpuaudit.report.renderers import register_json

    plain = (GpuOutcome(0, Outcome.PASS), GpuOutcome(1, Outcome.PASS))
    other = (GpuOutcome(0, Outcome.PASS), GpuOutcome(1, Outcome.FAIL))
    odd = 'quote " backslash \\ newline \n ≤ é \u2028'
    outcomes = []
    for host in ("h1", "h2", "h3"):
        outcomes += [
            RuleOutcome("GA103", host, Outcome.PASS, gpus=plain, per_gpu=True),
            RuleOutcome("GA201", host, Outcome.PASS, gpus=plain, per_gpu=True),
            RuleOutcome("GA105", host, Outcome.PASS),
            # The same GPU outcomes in another tuple, and then another list of them.
            RuleOutcome("GA303", host, Outcome.PASS, gpus=tuple(plain), per_gpu=True),
            # Alike but for the GPUs judged.
            RuleOutcome("GA306", host, Outcome.PASS, gpus=plain[:1], per_gpu=True),
            RuleOutcome("GA304", host, Outcome.FAIL, findings=1, gpus=other, per_gpu=True),
            # Equal but for GPUs a rule does not judge one by one: those are not written.
            RuleOutcome("GA401", host, Outcome.PASS, gpus=other),
            RuleOutcome("GA403", host, Outcome.NOT_EVALUATED, f"{host}: {odd}"),
            RuleOutcome("GA602", host, Outcome.DISABLED, odd),
        ]
    outcomes.append(
        RuleOutcome(
            "GA305",
            "h2",
            Outcome.NOT_EVALUATED,
            "GPU 1: " + odd,
            gpus=(GpuOutcome(0, Outcome.PASS), GpuOutcome(1, Outcome.NOT_EVALUATED, odd)),
            per_gpu=True,
        )
    )
    hosts = [healthy_host("h1"), healthy_host("h2"), healthy_host("h3", gpus=0)]
    register = build_register(hosts, [finding("GA304", host="h1")], outcomes=outcomes)
    lines = register_json(register).split("\n")
    start = lines.index(' "hosts": [')
    written = [line.strip().rstrip(",") for line in lines[start + 1 : start + 4]]
    assert written == [
        json.dumps(h.to_dict(), ensure_ascii=False, allow_nan=False) for h in register.hosts
    ]
    assert json.loads(register_json(register)) == register.to_dict()
    h2 = json.loads(written[1])["outcomes"]
    assert h2["GA305"]["gpu_reasons"] == {"1": odd}
    assert h2["GA401"] == {"outcome": "pass"}
    assert h2["GA303"] == h2["GA103"] == {"outcome": "pass", "gpus": {"pass": [0, 1]}}
    assert h2["GA306"] == {"outcome": "pass", "gpus": {"pass": [0]}}
