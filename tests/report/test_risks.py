"""Risks: findings grouped across hosts, waivers, and the --fail-on count."""

from __future__ import annotations

import dataclasses
import fnmatch
import json
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from report_factories import GENERATED_AT, finding, healthy_host

from gpuaudit.report.register import Register, build_register
from gpuaudit.report.risks import discriminator, risk_id
from gpuaudit.rules.base import Evidence, Finding, Owner, Severity


def xid(host: str, code: int | None, gpu: int | None = 0, **changes: Any) -> Finding:
    base = finding("GA301", Severity.HIGH, host, gpu_index=gpu, category="health")
    actual = {"code": code, "count": 3, "pci_bus_id": "0000:18:00.0"}
    return dataclasses.replace(
        base, evidence=Evidence("xid_events", actual, "no XID events"), **changes
    )


def keyed(rule: str, host: str, fact: str, severity: Severity = Severity.MEDIUM) -> Finding:
    base = finding(rule, severity, host, gpu_index=None, category="system")
    return dataclasses.replace(base, evidence=Evidence(fact, 1, 2))


@dataclasses.dataclass(frozen=True)
class FakeWaiver:
    rule: str
    hosts: tuple[str, ...]
    reason: str
    expires: date
    owner: str


class FakePolicy:
    """Stands in for gpuaudit's site policy: only what the register calls."""

    def __init__(self, *waivers: FakeWaiver) -> None:
        self.waivers = waivers

    def waiver_status(self, f: Finding, on: date) -> tuple[str, FakeWaiver | None]:
        for w in self.waivers:
            if w.rule == f.rule and any(fnmatch.fnmatch(f.host, p) for p in w.hosts):
                return ("waiver_expired" if on > w.expires else "waived"), w
        return "open", None


def typed_register(findings: list[Finding], policy: object = None) -> Register:
    hosts = sorted({f.host for f in findings})
    return build_register(
        [healthy_host(h) for h in hosts], findings, generated_at=GENERATED_AT, policy=policy
    )


def register(findings: list[Finding], policy: object = None) -> dict[str, Any]:
    """register.json's document of the findings."""
    return typed_register(findings, policy).to_dict()


def test_risk_keys() -> None:
    assert risk_id(xid("h1", 79)) == "GA301:79"
    assert risk_id(xid("h1", None)) == "GA301:unknown"
    assert discriminator(keyed("GA601", "h1", "sysctls[net.core.rmem_max]")) == "net.core.rmem_max"
    assert risk_id(keyed("GA402", "h", "services[nvidia-fabricmanager]")) == (
        "GA402:nvidia-fabricmanager"
    )
    assert risk_id(keyed("GA000", "h", "GA301")) == "GA000:GA301"
    # A GPU index is what is grouped, not a subject of its own.
    assert risk_id(keyed("GA304", "h", "gpus[3].remapped_rows.pending")) == "GA304"
    assert risk_id(keyed("GA106", "h", "packages")) == "GA106"


def test_one_risk_across_hosts_and_gpus() -> None:
    findings = [
        xid("h1", 79, gpu=5),
        xid("h2", 79, gpu=1),
        xid("h3", 79, gpu=None),
        xid("h3", 13, gpu=0, severity=Severity.MEDIUM, likelihood=2, impact=2),
        dataclasses.replace(xid("h2", 79, gpu=2), severity=Severity.CRITICAL, impact=5),
    ]
    reg = register(findings)
    risks = {r["id"]: r for r in reg["risks"]}
    assert set(risks) == {"GA301:79", "GA301:13"}
    r79 = risks["GA301:79"]
    assert r79["affected_hosts"] == ["h1", "h2", "h3"]
    assert r79["affected_gpus"] == [
        {"host": "h1", "gpu": 5, "gpu_name": "NVIDIA H100 80GB HBM3"},
        {"host": "h2", "gpu": 1, "gpu_name": "NVIDIA H100 80GB HBM3"},
        {"host": "h2", "gpu": 2, "gpu_name": "NVIDIA H100 80GB HBM3"},
    ]
    assert r79["finding_count"] == 4
    assert r79["severity"] == "critical"  # the worst finding's
    assert (r79["likelihood"], r79["impact"], r79["score"]) == (3, 5, 15)
    assert r79["status"] == "open" and r79["waiver"] is None and r79["waiver_expired"] is False
    for key in ("rule", "title", "category", "owner", "remediation", "operation", "references"):
        assert key in r79
    # Indices point at the register's own findings.
    assert sorted(reg["findings"][i]["host"] for i in r79["findings"]) == ["h1", "h2", "h2", "h3"]
    assert all(reg["findings"][i]["risk"] == "GA301:79" for i in r79["findings"])
    assert [r["id"] for r in reg["risks"]] == ["GA301:79", "GA301:13"]  # most severe first
    assert reg["summary"]["risk_count"] == 2
    assert reg["summary"]["open_risks_by_severity"]["critical"] == 1


def test_waiver_hides_a_risk_until_it_expires() -> None:
    findings = [xid("h1", 79), xid("h2", 79)]
    waiver = FakeWaiver("GA301", ("h*",), "RMA open, ticket 42", date(2026, 12, 31), "infra")
    reg = register(findings, FakePolicy(waiver))
    (risk,) = reg["risks"]
    assert risk["status"] == "waived"
    assert risk["waiver"] == {
        "reason": "RMA open, ticket 42",
        "expires": "2026-12-31",
        "hosts": ["h*"],
        "owner": "infra",
    }
    assert risk["waiver_expired"] is False
    assert {f["status"] for f in reg["findings"]} == {"waived"}
    assert reg["findings"][0]["waiver"]["expires"] == "2026-12-31"
    assert reg["summary"]["risks_by_status"] == {"open": 0, "waived": 1}
    json.dumps(reg)

    lapsed = dataclasses.replace(waiver, expires=date(2026, 11, 28))  # the day before the run
    reg = register(findings, FakePolicy(lapsed))
    (risk,) = reg["risks"]
    assert risk["status"] == "open"
    assert risk["waiver_expired"] is True
    assert risk["waiver"]["expires"] == "2026-11-28"
    assert {f["status"] for f in reg["findings"]} == {"open"}
    assert all(f["waiver_expired"] for f in reg["findings"])


def test_a_waiver_must_cover_every_finding_of_the_risk() -> None:
    findings = [xid("h1", 79), xid("other", 79), keyed("GA601", "h1", "sysctls[x]")]
    waiver = FakeWaiver("GA301", ("h1",), "known", date(2027, 1, 1), "infra")
    reg = register(findings, FakePolicy(waiver))
    risks = {r["id"]: r for r in reg["risks"]}
    assert risks["GA301:79"]["status"] == "open"  # "other" is not covered
    assert risks["GA301:79"]["waiver"]["hosts"] == ["h1"]  # shown: it covers part of the risk
    by_host = {(f["rule"], f["host"]): f["status"] for f in reg["findings"]}
    assert by_host == {
        ("GA301", "h1"): "waived",
        ("GA301", "other"): "open",
        ("GA601", "h1"): "open",
    }


def test_risks_sorted_open_first_then_severity_score_id() -> None:
    findings = [
        keyed("GA602", "h1", "device_nodes", Severity.LOW),
        keyed("GA601", "h1", "sysctls[b]", Severity.MEDIUM),
        keyed("GA601", "h1", "sysctls[a]", Severity.MEDIUM),
        xid("h1", 79),
    ]
    waiver = FakeWaiver("GA301", ("*",), "accepted", date(2027, 1, 1), "ml")
    reg = register(findings, FakePolicy(waiver))
    order = [(r["id"], r["status"]) for r in reg["risks"]]
    assert order == [
        ("GA601:a", "open"),
        ("GA601:b", "open"),
        ("GA602", "open"),
        ("GA301:79", "waived"),
    ]


@pytest.mark.parametrize(
    ("threshold", "expected"), [("critical", 0), ("high", 1), ("medium", 2), ("info", 2)]
)
def test_fail_on_counts_open_risks_only(threshold: str, expected: int) -> None:
    findings = [
        xid("h1", 79),
        xid("h2", 79),  # the same risk: counted once
        keyed("GA601", "h1", "sysctls[a]"),
        dataclasses.replace(xid("h1", 48), severity=Severity.CRITICAL, owner=Owner.INFRA),
    ]
    waiver = FakeWaiver("GA301", ("h1",), "", date(2027, 1, 1), "infra")
    built = typed_register(findings, FakePolicy(waiver))
    # GA301:48 is waived (critical, but accepted); GA301:79 stays open through h2.
    assert len(built.open_risks_at_or_above(threshold)) == expected
    # The gate reads register.json back as the register it was written from.
    document = json.loads(json.dumps(built.to_dict()))
    assert len(Register.from_dict(document).open_risks_at_or_above(threshold)) == expected


def test_a_register_read_back_from_its_document_writes_the_same_document() -> None:
    findings = [xid("h1", 79), keyed("GA601", "h1", "sysctls[a]"), xid("h2", 48)]
    waiver = FakeWaiver("GA301", ("h1",), "known", date(2027, 1, 1), "infra")
    document = json.loads(json.dumps(register(findings, FakePolicy(waiver))))
    again = Register.from_dict(document).to_dict()
    for key in ("schema_version", "generated_at", "summary", "hosts", "rules", "risks"):
        assert again[key] == document[key], key
    assert again["findings"] == document["findings"]


def test_a_register_read_without_outcomes_gives_the_same_summary_and_gate() -> None:
    """What the terminal summary and --fail-on read is all there when the hosts' rule
    outcomes, most of a large fleet's register, are left out."""
    from gpuaudit.report.run import RunDir

    run = RunDir(Path(__file__).resolve().parents[2] / "reports" / "example")
    whole, light = run.load_register(), run.load_register(outcomes=False)
    assert any(h.outcomes for h in whole.hosts)
    assert not any(h.outcomes for h in light.hosts)
    assert light.summary == whole.summary
    assert (light.risks, light.findings) == (whole.risks, whole.findings)
    assert [(h.name, h.status, h.finding_count) for h in light.hosts] == [
        (h.name, h.status, h.finding_count) for h in whole.hosts
    ]
    for threshold in ("critical", "high", "medium", "low"):
        assert light.open_risks_at_or_above(threshold) == whole.open_risks_at_or_above(threshold)
    assert all(whole.host(h.name) is h for h in whole.hosts)
    assert whole.host("no-such-host") is None


def test_a_partly_waived_risk_is_as_severe_as_its_open_findings() -> None:
    """The summary's open risks by severity, summary.md's top risks and the --fail-on gate
    read one severity: a waived high finding does not make the medium one left open a high
    risk (nor an open info finding a risk at all)."""
    findings = [
        finding("GA304", Severity.HIGH, "h1", gpu_index=0),
        finding("GA304", Severity.MEDIUM, "h2", gpu_index=0),
        finding("GA801", Severity.HIGH, "h1", gpu_index=None),
        finding("GA801", Severity.INFO, "h2", gpu_index=None),
    ]
    waivers = [FakeWaiver(rule, ("h1",), "accepted", date(2027, 1, 1), "infra")
               for rule in ("GA304", "GA801")]  # fmt: skip
    built = typed_register(findings, FakePolicy(*waivers))
    risks = {r.id: r for r in built.risks}
    assert (risks["GA304"].status, risks["GA304"].severity) == ("open", Severity.MEDIUM)
    assert risks["GA304"].affected_hosts == ("h1", "h2")  # the waived finding stays in it
    assert not risks["GA801"].is_open  # only its info finding is open
    assert built.summary.open_risks_by_severity == {
        "critical": 0, "high": 0, "medium": 1, "low": 0, "info": 0
    }  # fmt: skip
    assert built.summary.info_risk_count == 1
    assert [r.id for r in built.open_risks_at_or_above("medium")] == ["GA304"]
    assert built.open_risks_at_or_above("high") == []
