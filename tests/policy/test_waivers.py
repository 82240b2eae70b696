"""Waivers: which findings they cover, and what an expired one does (it hides nothing)."""

from __future__ import annotations

from datetime import date, datetime, timezone

import pytest
from policy_helpers import parse

from gpuaudit.rules.base import Evidence, Finding, Owner, Severity

POLICY = """
waivers:
  - rule: GA401
    hosts: ["gpu-l40s-*", "GPU-SPARE-01"]
    reason: persistence kept by the DCGM host engine
    expires: 2027-03-31
    owner: ml-infra
  - rule: GA304
    hosts: "gpu-a100-003*"
    gpu: [3]
    reason: RMA booked, GPU 3 is drained
    expires: 2026-01-15
    owner: infra
  - rule: GA304
    hosts: "gpu-a100-003*"
    gpu: 3
    reason: first RMA window
    expires: 2025-12-01
    owner: infra
  - rule: GA501
    hosts: "t4-*"
    reason: riser slot
    expires: 2025-06-30
    owner: lab
"""


def finding(rule: str, host: str, gpu: int | None = None) -> Finding:
    return Finding(
        rule=rule,
        title="t",
        severity=Severity.MEDIUM,
        category="c",
        owner=Owner.INFRA,
        host=host,
        message="m",
        evidence=Evidence("f", 1, 0),
        remediation="r",
        gpu=gpu,
    )


@pytest.fixture
def policy():
    return parse(POLICY)


@pytest.mark.parametrize(
    ("f", "covered"),
    [
        (finding("GA401", "gpu-l40s-001.prod.example.net", 0), True),
        (finding("GA401", "GPU-L40S-002.prod.example.net"), True),  # host names ignore case
        (finding("GA401", "gpu-spare-01"), True),
        (finding("GA401", "@sim/gpu-l40s-9"), True),  # the connector prefix is optional
        (finding("GA401", "gpu-h100-001.prod.example.net"), False),
        (finding("GA402", "gpu-l40s-001.prod.example.net"), False),  # another rule
        (finding("GA304", "gpu-a100-003.prod.example.net", 3), True),
        (finding("GA304", "gpu-a100-003.prod.example.net", 2), False),  # another GPU
        (finding("GA304", "gpu-a100-003.prod.example.net"), False),  # host-wide finding
    ],
)
def test_waiver_matching(policy, f, covered):
    assert (policy.waiver_for(f, date(2025, 11, 1)) is not None) is covered


def test_expiry_day_is_the_last_day_in_force(policy):
    f = finding("GA401", "gpu-l40s-001")
    (waiver,) = [w for w in policy.waivers if w.rule == "GA401"]
    assert not waiver.expired(date(2027, 3, 31)) and waiver.expired(date(2027, 4, 1))
    assert policy.waiver_status(f, date(2027, 3, 31)) == ("waived", waiver)
    assert policy.waiver_status(f, date(2027, 4, 1)) == ("waiver_expired", waiver)


def test_an_expired_waiver_reopens_the_risk_and_says_which(policy):
    f = finding("GA501", "t4-02", 0)
    status, waiver = policy.waiver_status(f, date(2026, 1, 1))
    assert status == "waiver_expired"
    assert waiver is not None and waiver.expires == date(2025, 6, 30) and waiver.owner == "lab"
    assert policy.waiver_for(f, date(2026, 1, 1)) is None


def test_latest_waiver_is_reported_and_a_live_one_beats_lapsed_ones(policy):
    f = finding("GA304", "gpu-a100-003.prod.example.net", 3)
    status, waiver = policy.waiver_status(f, date(2025, 12, 10))
    assert (
        status == "waived"
        and waiver is not None
        and waiver.reason == "RMA booked, GPU 3 is drained"
    )
    status, waiver = policy.waiver_status(f, date(2026, 2, 1))
    assert status == "waiver_expired" and waiver is not None
    assert waiver.expires == date(2026, 1, 15)  # the one that lapsed last


def test_unwaived_findings_are_open_and_datetimes_are_accepted(policy):
    on = datetime(2025, 11, 1, 12, tzinfo=timezone.utc)
    assert policy.waiver_status(finding("GA101", "gpu-l40s-001"), on) == ("open", None)
    assert policy.waiver_status(finding("GA401", "gpu-l40s-001"), on)[0] == "waived"


def test_expired_waivers_and_json(policy):
    assert [w.rule for w in policy.expired_waivers(date(2026, 2, 1))] == ["GA304", "GA304", "GA501"]
    entry = policy.waivers[1].to_dict()
    assert entry == {
        "rule": "GA304",
        "hosts": ["gpu-a100-003*"],
        "gpus": [3],
        "reason": "RMA booked, GPU 3 is drained",
        "expires": "2026-01-15",
        "owner": "infra",
        "location": "site.yaml:8",
    }
