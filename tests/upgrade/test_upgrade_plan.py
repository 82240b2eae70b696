"""The rollout plan: which stage each host is in, in which order, and why a host is skipped."""

from __future__ import annotations

import dataclasses
import json
from datetime import date

import pytest
from upgrade_factories import (
    OLD,
    TARGET,
    finding,
    gpu,
    host,
    inventory_host,
    prod_inventory,
    replace_gpu,
)

from gpuaudit.model.snapshot import HostStatus, Package, Section
from gpuaudit.model.status import unreachable_snapshot
from gpuaudit.policy import Policy
from gpuaudit.policy.upgrade import UpgradeSettings
from gpuaudit.rules.base import Severity
from gpuaudit.upgrade.plan import (
    InventoryHost,
    RolloutPlan,
    assign_stage,
    plan_rollout,
)

ON = date(2026, 3, 1)
SETTINGS = UpgradeSettings()


def plan(*hosts: InventoryHost, settings: UpgradeSettings = SETTINGS, **kwargs) -> RolloutPlan:
    return plan_rollout(hosts, TARGET, settings, ON, **kwargs)


# --- stages ------------------------------------------------------------------------------------


def test_rollout_stage_host_data_wins_over_groups():
    member = inventory_host("gpu-01", ("wave2", "canary"), rollout_stage="wave1")
    assignment = assign_stage(member, SETTINGS)
    assert (assignment.stage, assignment.source) == ("wave1", "host_data")


def test_the_first_stage_group_of_the_host_is_its_stage():
    member = inventory_host("gpu-01", ("h100_sxm", "wave2", "canary"))
    assignment = assign_stage(member, SETTINGS)
    assert (assignment.stage, assignment.source) == ("wave2", "group")
    assert assignment.note == "also in stage group(s) canary"


def test_a_host_in_no_stage_goes_last_and_is_reported_unstaged():
    rollout = plan(inventory_host("gpu-01", ("h100_sxm",)), inventory_host("gpu-02", ("canary",)))
    loose = rollout.host("gpu-01")
    assert (loose.stage, loose.stage_source, loose.unstaged) == ("wave3", "unstaged", True)
    assert "unstaged" in loose.reason
    assert rollout.unstaged == ("gpu-01",)
    assert [h.name for h in rollout.hosts] == ["gpu-02", "gpu-01"]


def test_a_rollout_stage_that_is_no_stage_skips_the_host():
    rollout = plan(inventory_host("gpu-01", ("canary",), rollout_stage="wave9"))
    skipped = rollout.host("gpu-01")
    assert skipped.action == "skip" and skipped.stage == "wave3"
    assert "rollout_stage 'wave9' is not a stage" in skipped.reason


def test_stages_follow_the_settings_order_then_the_inventory_order():
    hosts = [
        inventory_host("w2-a", ("wave2",)),
        inventory_host("c-a", ("canary",)),
        inventory_host("w1-a", ("wave1",)),
        inventory_host("w2-b", ("wave2",)),
        inventory_host(
            "loose",
        ),
        inventory_host("c-b", ("canary",)),
    ]
    rollout = plan(*hosts)
    assert [s.name for s in rollout.stages] == ["canary", "wave1", "wave2", "wave3"]
    assert [h.name for h in rollout.hosts] == ["c-a", "c-b", "w1-a", "w2-a", "w2-b", "loose"]
    custom = UpgradeSettings(stages=("wave2", "canary", "wave1"))
    ordered = plan(*hosts, settings=custom)
    # The last stage of these settings is wave1: the unstaged host goes there, last.
    assert [h.name for h in ordered.hosts] == ["w2-a", "w2-b", "c-a", "c-b", "w1-a", "loose"]
    assert ordered.unstaged == ("loose",)


def test_the_example_inventory_stages():
    hosts = [
        InventoryHost(name, groups, data, host(name, 8 if "mi300x" not in name else 0))
        for name, groups, data in prod_inventory()
    ]
    rollout = plan(*hosts, settings=UpgradeSettings(stages=("canary", "wave1", "wave2")))
    by_stage = {s.name: [h.name.split(".")[0] for h in s.hosts] for s in rollout.stages}
    assert by_stage == {
        "canary": ["gpu-h100-001", "gpu-a100-001", "gpu-l40s-001"],
        "wave1": ["gpu-h100-002", "gpu-h100-003", "gpu-a100-002", "gpu-l40s-002"],
        "wave2": ["gpu-h100-004", "gpu-a100-003", "gpu-mi300x-001"],
    }
    assert all(h.stage_source == "host_data" for h in rollout.hosts)  # group_data/canary.py
    assert rollout.unstaged == ()


# --- actions and reasons -----------------------------------------------------------------------


def test_a_healthy_host_is_upgraded_and_free_disk_is_said_to_be_unchecked():
    planned = plan(inventory_host("gpu-01", ("canary",))).host("gpu-01")
    assert planned.action == "upgrade"
    assert planned.current_version == OLD and planned.pinned is True
    assert planned.reason == f"driver {OLD} → {TARGET}; pre-check passed (free disk not checked)"
    assert planned.precheck is not None and planned.precheck.outcome == "pass"


def test_a_host_already_at_the_target_is_skipped():
    at_target = dataclasses.replace(host("gpu-01"), driver_version=TARGET)
    planned = plan(inventory_host("gpu-01", ("canary",), at_target)).host("gpu-01")
    assert (planned.action, planned.reason) == ("skip", f"already at {TARGET}")


def test_an_unreachable_or_unaudited_host_is_skipped():
    down = unreachable_snapshot("gpu-01", "Could not connect (timed out)")
    rollout = plan(
        inventory_host("gpu-01", ("canary",), down),
        inventory_host("gpu-02", ("canary",), None),
    )
    assert rollout.host("gpu-01").action == "skip"
    assert rollout.host("gpu-01").reason.startswith("not collected (unreachable): Could not")
    assert rollout.host("gpu-02").reason == "no audit snapshot of the host"
    assert rollout.host("gpu-02").current_version is None


def test_a_host_without_nvidia_driver_packages_is_skipped():
    amd = host("mi300x-01", packages=(Package("amdgpu-dkms", "6.8.5", held=True),))
    planned = plan(inventory_host("mi300x-01", ("wave1",), amd)).host("mi300x-01")
    assert planned.action == "skip" and planned.pinned is None
    assert planned.reason.startswith("no NVIDIA driver packages installed")


def test_an_unreadable_package_list_is_not_taken_for_no_packages():
    blind = host("gpu-01", packages=(), sections={"packages": Section(rc=1, stderr="boom")})
    planned = plan(inventory_host("gpu-01", ("wave1",), blind)).host("gpu-01")
    assert planned.action == "skip"
    assert planned.reason.startswith("the package list could not be read (rc=1)")


def test_a_driver_that_does_not_answer_fails_the_pre_check():
    down = dataclasses.replace(
        host("gpu-01"),
        status=HostStatus.DRIVER_NOT_RESPONDING,
        status_detail="nvidia-smi is installed but the driver does not answer (exit status 9)",
        driver_version=None,
        gpus=(),
    )
    planned = plan(inventory_host("gpu-01", ("wave1",), down)).host("gpu-01")
    assert planned.action == "skip"
    assert planned.reason.startswith("pre-check failed: nvidia-smi is installed but the driver")
    assert planned.precheck is not None and planned.precheck.outcome == "fail"


def test_an_open_critical_finding_fails_the_pre_check():
    # Evaluated here: an NVSwitch-sized host (8 SXM GPUs) whose fabric manager is absent: GA402.
    sxm = [gpu(i, name="NVIDIA H100 80GB HBM3") for i in range(8)]
    planned = plan(inventory_host("gpu-01", ("wave1",), host("gpu-01", sxm))).host("gpu-01")
    assert planned.action == "skip"
    assert planned.reason.startswith("pre-check failed: open critical findings: GA402")


def test_findings_given_by_the_caller_are_used_instead_of_evaluating():
    healthy = inventory_host("gpu-01", ("wave1",))
    flagged = plan(healthy, findings=[finding("GA101", "gpu-01")]).host("gpu-01")
    assert flagged.action == "skip" and "GA101 (GA101 title)" in flagged.reason
    sxm = [gpu(i, name="NVIDIA H100 80GB HBM3") for i in range(8)]
    sick = inventory_host("gpu-02", ("wave1",), host("gpu-02", sxm))
    assert plan(sick, findings=[]).host("gpu-02").action == "upgrade"


def test_a_finding_of_lower_severity_does_not_stop_the_upgrade():
    high = finding("GA304", "gpu-01", Severity.HIGH)
    rollout = plan(inventory_host("gpu-01"), findings=[high])
    assert rollout.host("gpu-01").action == "upgrade"


def test_a_waived_critical_finding_does_not_stop_the_upgrade_an_expired_waiver_does():
    def waived(expires: str) -> Policy:
        return Policy.from_text(
            "version: 1\nwaivers:\n  - {rule: GA101, hosts: 'gpu-*', reason: r, "
            f"expires: {expires}, owner: infra}}\n"
        )

    found = [finding("GA101", "gpu-01")]
    current = plan(inventory_host("gpu-01"), findings=found, policy=waived("2026-12-31"))
    assert current.host("gpu-01").action == "upgrade"
    lapsed = plan(inventory_host("gpu-01"), findings=found, policy=waived("2026-01-31"))
    assert lapsed.host("gpu-01").action == "skip"


def test_a_lost_gpu_fails_the_pre_check():
    erroring = replace_gpu(host("gpu-01"), 1, status="error", status_detail="Unknown Error")
    planned = plan(inventory_host("gpu-01", (), erroring), findings=[]).host("gpu-01")
    assert planned.action == "skip"
    assert "GPU 1 answers with an error (Unknown Error)" in planned.reason


def test_pinned_says_whether_the_driver_packages_are_held():
    unheld = host(
        "gpu-01",
        packages=(Package("nvidia-driver-550-server", f"{OLD}-0ubuntu1", held=False),),
    )
    assert plan(inventory_host("gpu-01", (), unheld)).host("gpu-01").pinned is False
    unread = dataclasses.replace(unheld, sections={"package_holds": Section(rc=1)})
    assert plan(inventory_host("gpu-01", (), unread)).host("gpu-01").pinned is None


def test_a_downgrade_and_packages_already_at_the_target_are_noted():
    newer = dataclasses.replace(host("gpu-01"), driver_version="565.57.01")
    assert "(a downgrade)" in plan(inventory_host("gpu-01", (), newer)).host("gpu-01").reason
    staged = host(
        "gpu-02",
        packages=(Package("nvidia-driver-560-server", f"{TARGET}-0ubuntu1", held=True),),
    )
    reason = plan(inventory_host("gpu-02", (), staged)).host("gpu-02").reason
    assert "packages are at the target already" in reason


def test_a_bad_target_or_a_host_listed_twice_is_refused():
    with pytest.raises(ValueError, match="not a driver version"):
        plan_rollout([inventory_host("gpu-01")], "latest", SETTINGS, ON)
    with pytest.raises(ValueError, match="listed twice"):
        plan(inventory_host("gpu-01"), inventory_host("gpu-01"))


def test_the_plan_is_plain_json():
    rollout = plan(
        inventory_host("gpu-01", ("canary",)),
        inventory_host("gpu-02", ("wave1",), None),
        settings=UpgradeSettings(max_unavailable="50%"),
    )
    data = json.loads(json.dumps(rollout.to_dict()))
    assert data["target_version"] == TARGET and data["unavailable_budget"] == 1
    assert data["already_unavailable"] == [
        {"name": "gpu-02", "reasons": ["no audit snapshot of the host"]}
    ]
    canary = data["stages"][0]
    assert canary["name"] == "canary" and canary["hosts"][0]["action"] == "upgrade"
    checks = {c["name"]: c["outcome"] for c in canary["hosts"][0]["precheck"]["checks"]}
    assert checks["free_disk"] == "not_checked" and checks["critical_findings"] == "pass"
