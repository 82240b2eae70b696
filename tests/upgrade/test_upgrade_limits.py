"""The limits: max_unavailable as a count or a percentage, hosts already out of service counted,
max_parallel, and the failure budgets."""

from __future__ import annotations

import dataclasses
from datetime import date

import pytest
from upgrade_factories import finding, host, inventory_host, replace_gpu

from gpuaudit.model.snapshot import HostStatus
from gpuaudit.model.status import unreachable_snapshot
from gpuaudit.policy import Policy
from gpuaudit.policy.upgrade import UpgradeSettings
from gpuaudit.rules.base import Severity
from gpuaudit.upgrade.plan import (
    already_unavailable,
    halt_reason,
    may_start,
    plan_rollout,
    unavailable_budget,
    unavailable_hosts,
)

ON = date(2026, 3, 1)


@pytest.mark.parametrize(
    ("max_unavailable", "total", "budget"),
    [
        (1, 100, 1),
        (3, 12, 3),
        ("25%", 12, 3),
        ("25%", 13, 3),  # rounded down
        ("25%", 3, 1),  # at least 1
        ("10%", 5, 1),
        ("50%", 7, 3),
        ("100%", 7, 7),
        ("1%", 0, 1),
    ],
)
def test_max_unavailable_as_a_count_or_a_percentage(max_unavailable, total, budget):
    settings = UpgradeSettings(max_unavailable=max_unavailable)
    assert unavailable_budget(settings, total) == budget


def _driver_down(name: str):
    return dataclasses.replace(
        host(name),
        status=HostStatus.DRIVER_NOT_RESPONDING,
        status_detail="nvidia-smi is installed but the driver does not answer (exit status 9)",
        driver_version=None,
        gpus=(),
    )


def test_hosts_unhealthy_before_the_rollout_are_unavailable():
    hosts = [
        inventory_host("healthy"),
        inventory_host("unreachable", (), unreachable_snapshot("unreachable", "no route")),
        inventory_host("unaudited", (), None),
        inventory_host("driver-down", (), _driver_down("driver-down")),
        inventory_host("gpu-lost", (), host("gpu-lost", host_data={"expected_gpu_count": 3})),
        inventory_host("gpu-erroring", (), replace_gpu(host("gpu-erroring"), 0, status="error")),
        inventory_host("critical"),
        inventory_host("only-high"),
        inventory_host("no-gpu-tool", (), host("no-gpu-tool", status=HostStatus.NO_GPU_TOOLING)),
    ]
    found = [
        finding("GA402", "critical"),
        finding("GA304", "only-high", Severity.HIGH),
    ]
    listed = {u.name: u.reasons for u in unavailable_hosts(hosts, findings=found, on=ON)}
    assert set(listed) == {
        "unreachable",
        "unaudited",
        "driver-down",
        "gpu-lost",
        "gpu-erroring",
        "critical",
    }
    assert listed["unreachable"] == ("not collected (unreachable): no route",)
    assert listed["gpu-lost"] == ("2 of 3 expected GPUs are listed",)
    assert listed["critical"] == ("open critical findings: GA402 (GA402 title)",)
    assert listed["driver-down"][0].startswith("nvidia-smi is installed but the driver")
    assert already_unavailable(hosts, findings=found, on=ON) == frozenset(listed)


def test_a_waived_critical_finding_does_not_make_a_host_unavailable():
    policy = Policy.from_text(
        "version: 1\nwaivers:\n  - {rule: GA402, hosts: critical, reason: r, "
        "expires: 2026-12-31, owner: infra}\n"
    )
    hosts = [inventory_host("critical")]
    found = [finding("GA402", "critical")]
    assert already_unavailable(hosts, findings=found, on=ON) == {"critical"}
    assert already_unavailable(hosts, findings=found, policy=policy, on=ON) == frozenset()


def test_the_rules_are_evaluated_when_no_findings_are_given():
    down = inventory_host("driver-down", (), _driver_down("driver-down"))
    reasons = unavailable_hosts([down], on=ON)[0].reasons
    assert reasons[-1] == (
        "open critical findings: GA101 (NVIDIA driver not loaded or not responding)"
    )


def test_max_parallel_limits_hosts_upgraded_at_once():
    settings = UpgradeSettings(max_parallel=2, max_unavailable=10)
    assert may_start("c", ["a"], [], settings, 20)
    refused = may_start("c", ["a", "b"], [], settings, 20)
    assert not refused and refused.reason == "2 hosts being upgraded (a, b): max_parallel is 2"
    assert not may_start("a", ["a"], [], settings, 20)


def test_already_unavailable_hosts_count_against_max_unavailable():
    settings = UpgradeSettings(max_parallel=5, max_unavailable=2)
    # One host broken before the rollout, one being upgraded: the budget of 2 is full.
    refused = may_start("c", ["a"], ["broken"], settings, 10)
    assert not refused.allowed
    assert refused.reason == (
        "2 of 10 hosts unavailable (a, broken) and max_unavailable (2) allows 2"
    )
    assert may_start("c", ["a"], [], settings, 10).allowed
    # Two hosts broken before the rollout: nothing may start until one is back.
    assert not may_start("a", [], ["broken-1", "broken-2"], settings, 10)


def test_a_host_already_unavailable_adds_nothing_when_it_starts():
    settings = UpgradeSettings(max_parallel=5, max_unavailable=2)
    assert may_start("broken", ["a"], ["broken"], settings, 10).allowed


def test_max_unavailable_percentage_of_the_inventory():
    settings = UpgradeSettings(max_parallel=10, max_unavailable="25%")
    # 12 hosts: 3 may be out; one was broken before the rollout.
    assert may_start("c", ["a"], ["broken"], settings, 12).allowed
    assert not may_start("d", ["a", "c"], ["broken"], settings, 12).allowed
    assert may_start("d", ["a", "c"], ["broken"], settings, 16).allowed  # 25% of 16 is 4


def test_the_plan_counts_the_hosts_already_unavailable():
    hosts = [
        inventory_host("a", ("canary",)),
        inventory_host("b", ("wave1",), unreachable_snapshot("b", "no route")),
        inventory_host("c", ("wave1",)),
        inventory_host("d", ("wave1",)),
    ]
    settings = UpgradeSettings(max_unavailable="50%", max_parallel=4)
    rollout = plan_rollout(hosts, "560.35.03", settings, ON)
    assert rollout.already_unavailable == {"b"} and rollout.unavailable_budget == 2
    # A halt on a used-up budget names each host with why it counts.
    assert rollout.out_of_service() == "b (not collected (unreachable): no route)"
    assert may_start("a", [], rollout.already_unavailable, settings, rollout.total_hosts)
    assert not may_start("c", ["a"], rollout.already_unavailable, settings, rollout.total_hosts)


def test_failure_budgets_of_the_canary_and_of_the_waves():
    strict = UpgradeSettings()
    assert halt_reason(strict, [], []) is None
    canary = halt_reason(strict, ["c1"], [])
    assert canary == "1 canary host failed (c1); canary_failure_budget is 0"
    waves = halt_reason(strict, [], ["w1"])
    assert waves == "1 host failed in the waves (w1); failure_budget is 0"
    lenient = UpgradeSettings(failure_budget=2, canary_failure_budget=1)
    assert halt_reason(lenient, ["c1"], ["w1", "w2"]) is None
    assert halt_reason(lenient, ["c1", "c2"], []) == (
        "2 canary hosts failed (c1, c2); canary_failure_budget is 1"
    )
    assert halt_reason(lenient, [], ["w1", "w2", "w3"]) is not None
    assert lenient.failure_budget_for("canary") == 1 and lenient.failure_budget_for("wave2") == 2
