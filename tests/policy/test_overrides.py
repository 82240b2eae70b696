"""Severity overrides by rule and by XID code, applied by evaluate() with the reason kept."""

from __future__ import annotations

import pytest
from policy_helpers import parse

from gpuaudit.model.snapshot import DeviceNode, XidEvent
from gpuaudit.rules import evaluate
from gpuaudit.rules.base import Finding, Severity

POLICY = """
groups:
  lab: {disabled_rules: [GA401]}
severity_overrides:
  rules:
    GA602: {severity: medium, reason: "shared lab hosts"}
    GA301: {severity: low, reason: "every XID is triaged by the on-call bot"}
  xid:
    63: {severity: high, reason: "we RMA on first remap"}
"""


def xid(code: int, bus: str = "0000:18:00.0") -> XidEvent:
    raw = f"[ 10.0] NVRM: Xid (PCI:{bus.rsplit('.', 1)[0]}): {code}, pid=1"
    return XidEvent("xid", code, bus, "pid=1", raw, timestamp="[ 10.0]")


def of(findings: list[Finding], rule: str) -> list[Finding]:
    return [f for f in findings if f.rule == rule]


@pytest.fixture
def policy():
    return parse(POLICY)


def test_rule_override_changes_severity_and_keeps_the_reason(policy, make_host):
    open_nodes = (DeviceNode("/dev/nvidia0", "666", "root", "root"),)
    host = make_host("lab-01", device_nodes=open_nodes)
    (plain,) = of(evaluate([host]), "GA602")
    (f,) = of(evaluate([host], policy), "GA602")
    assert plain.severity is Severity.LOW and plain.override_reason is None
    assert f.severity is Severity.MEDIUM
    assert f.override_reason == "shared lab hosts"
    assert (
        f.message
        == plain.message + " Site policy: severity medium (rule gives low): shared lab hosts."
    )
    assert f.to_dict()["override_reason"] == "shared lab hosts"
    assert Finding.from_dict(f.to_dict()) == f


def test_xid_code_override_beats_the_rule_override(policy, make_host):
    host = make_host("gpu-01", xid_events=(xid(63), xid(13, "0000:19:00.0")))
    by_code = {f.evidence.actual["code"]: f for f in of(evaluate([host], policy), "GA301")}
    assert by_code[63].severity is Severity.HIGH
    assert by_code[63].override_reason == "we RMA on first remap"
    assert "we RMA on first remap" in by_code[63].message
    # XID 13 has no code override: the rule-level one applies
    assert by_code[13].severity is Severity.LOW
    assert by_code[13].override_reason == "every XID is triaged by the on-call bot"


def test_overridden_findings_are_sorted_by_their_new_severity(policy, make_host):
    host = make_host("gpu-01", xid_events=(xid(63),), device_nodes=(
        DeviceNode("/dev/nvidia0", "666", "root", "root"),))  # fmt: skip
    severities = [f.severity.rank for f in evaluate([host], policy)]
    assert severities == sorted(severities, reverse=True)
    assert evaluate([host], policy)[0].rule == "GA301"


def test_disabled_rules_apply_per_group(policy, make_host, make_gpu):
    gpus = [make_gpu(0, persistence_mode=False)]
    lab = make_host("lab-01", gpus=gpus, groups=["lab"])
    prod = make_host("prod-01", gpus=gpus, groups=["prod"])
    assert [f.host for f in of(evaluate([lab, prod], policy), "GA401")] == ["prod-01"]


def test_plain_mapping_policies_still_work(make_host):
    open_nodes = (DeviceNode("/dev/nvidia0", "666", "root", "root"),)
    host = make_host("lab-01", device_nodes=open_nodes)
    (f,) = of(evaluate([host], {"severity_overrides": {"GA602": "high"}}), "GA602")
    assert f.severity is Severity.HIGH and f.override_reason is None
