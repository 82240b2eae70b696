"""The pre-check and the health gate: each check's outcome, and how they make the gate's."""

from __future__ import annotations

import dataclasses
from datetime import date

import pytest
from upgrade_factories import (
    OLD,
    TARGET,
    captured_a100,
    finding,
    gpu,
    host,
    replace_gpu,
    replace_gpus,
    xid,
    xid63_log,
)

from gpuaudit.model.snapshot import (
    EccCounts,
    HostSnapshot,
    HostStatus,
    RemappedRows,
    RetiredPages,
    Section,
    Service,
)
from gpuaudit.model.status import unreachable_snapshot
from gpuaudit.policy import Policy
from gpuaudit.upgrade.gates import GateCheck, GateResult, combine, health_gate, precheck

ON = date(2026, 3, 1)
FABRIC = Service("nvidia-fabricmanager", "active", "enabled")
PERSISTENCED = Service("nvidia-persistenced", "active", "enabled")


def upgraded(snapshot: HostSnapshot, **changes) -> HostSnapshot:
    """The same host after an upgrade to TARGET (its kernel log cleared by the reboot)."""
    fields = {
        "driver_version": TARGET,
        "driver_version_proc": TARGET,
        "xid_events": (),
        "gpus": tuple(dataclasses.replace(g, driver_version=TARGET) for g in snapshot.gpus),
    }
    fields.update(changes)
    return dataclasses.replace(snapshot, **fields)


def check(result: GateResult, name: str) -> GateCheck:
    (found,) = [c for c in result.checks if c.name == name]
    return found


# --- combining checks --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("outcomes", "expected"),
    [
        (["pass", "pass"], "pass"),
        (["pass", "not_checked"], "pass"),
        (["pass", "inconclusive", "not_checked"], "inconclusive"),
        (["inconclusive", "fail", "pass"], "fail"),
        (["fail"], "fail"),
    ],
)
def test_any_fail_fails_else_any_inconclusive_is_inconclusive(outcomes, expected):
    result = combine(GateCheck(f"c{i}", o, "d") for i, o in enumerate(outcomes))
    assert result.outcome == expected and len(result.checks) == len(outcomes)


# --- pre-check ---------------------------------------------------------------------------------


def test_a_healthy_host_passes_the_pre_check_with_free_disk_not_checked():
    result = precheck(host("gpu-01"), on=ON)
    assert result.outcome == "pass"
    assert [c.name for c in result.checks] == [
        "collected",
        "driver_answering",
        "gpus_present",
        "critical_findings",
        "free_disk",
    ]
    free_disk = check(result, "free_disk")
    assert free_disk.outcome == "not_checked"
    assert free_disk.detail.startswith("free disk not checked")
    assert check(result, "driver_answering").detail == f"nvidia-smi answers with driver {OLD}"


def test_an_unreachable_host_fails_the_pre_check():
    result = precheck(unreachable_snapshot("gpu-01", "no route to host"), on=ON)
    assert result.outcome == "fail"
    assert check(result, "collected").detail == "not collected (unreachable): no route to host"


def test_a_driver_that_does_not_answer_fails_the_pre_check():
    down = dataclasses.replace(
        host("gpu-01"),
        status=HostStatus.DRIVER_NOT_RESPONDING,
        status_detail="the driver does not answer",
        driver_version=None,
        gpus=(),
    )
    result = precheck(down, [], on=ON)
    assert check(result, "driver_answering").outcome == "fail"
    assert check(result, "gpus_present").outcome == "inconclusive"
    assert result.outcome == "fail"


def test_a_missing_gpu_fails_the_pre_check():
    result = precheck(host("gpu-01"), [], on=ON, expected_gpus=4)
    assert result.outcome == "fail"
    assert check(result, "gpus_present").detail == "2 of 4 expected GPUs are listed"


def test_open_critical_findings_fail_the_pre_check_waived_ones_do_not():
    found = [finding("GA402", "gpu-01"), finding("GA101", "other-host")]
    result = precheck(host("gpu-01"), found, on=ON)
    assert result.outcome == "fail"
    assert check(result, "critical_findings").detail == (
        "open critical findings: GA402 (GA402 title)"
    )
    policy = Policy.from_text(
        "version: 1\nwaivers:\n  - {rule: GA402, hosts: gpu-01, reason: r, "
        "expires: 2026-12-31, owner: infra}\n"
    )
    assert precheck(host("gpu-01"), found, policy=policy, on=ON).outcome == "pass"


def test_extra_pre_checks_count():
    disk = GateCheck("free_disk_var", "fail", "/var has 200 MiB free, 2 GiB needed")
    result = precheck(host("gpu-01"), [], on=ON, extra=[disk])
    assert result.outcome == "fail" and result.failed == (disk,)


# --- health gate: the host's return and the driver -------------------------------------------


def test_a_healthy_upgraded_host_passes():
    before = host("gpu-01", services=(PERSISTENCED, FABRIC))
    result = health_gate(before, upgraded(before), TARGET, expected_gpus=2)
    assert result.outcome == "pass", result.summary()
    assert [c.name for c in result.checks] == [
        "host_returned",
        "driver_version",
        "gpus_present",
        "xid",
        "ecc_uncorrectable",
        "row_remap",
        "persistence",
        "fabric_manager",
    ]
    assert {c.outcome for c in result.checks} == {"pass"}


def test_a_host_that_did_not_come_back_is_inconclusive():
    result = health_gate(host("gpu-01"), None, TARGET, 2)
    assert result.outcome == "inconclusive"
    assert check(result, "host_returned").detail.startswith("the host did not answer")
    unreachable = unreachable_snapshot("gpu-01", "timed out")
    assert health_gate(host("gpu-01"), unreachable, TARGET, 2).outcome == "inconclusive"


def test_a_failing_extra_check_fails_a_host_that_did_not_come_back():
    diag = GateCheck("dcgm_diag", "fail", "dcgmi diag -r 1: Memory test failed on GPU 0")
    assert health_gate(host("gpu-01"), None, TARGET, 2, [diag]).outcome == "fail"


def test_the_driver_must_be_the_target():
    before = host("gpu-01")
    result = health_gate(before, before, TARGET, 2)
    driver = check(result, "driver_version")
    assert driver.outcome == "fail" and result.outcome == "fail"
    assert driver.detail == (
        f"nvidia-smi reports {OLD}, kernel module reports {OLD}, not the target {TARGET}"
    )


def test_a_kernel_module_left_at_the_old_version_fails():
    before = host("gpu-01")
    stale = upgraded(before, driver_version_proc=OLD)
    driver = check(health_gate(before, stale, TARGET, 2), "driver_version")
    assert driver.outcome == "fail"
    assert driver.detail == f"kernel module reports {OLD}, not the target {TARGET}"


def test_a_driver_that_does_not_answer_after_the_upgrade_fails():
    before = host("gpu-01")
    down = upgraded(
        before,
        status=HostStatus.DRIVER_NOT_RESPONDING,
        status_detail="nvidia-smi is installed but the driver does not answer",
        driver_version=None,
        driver_version_proc=None,
        gpus=(),
    )
    driver = check(health_gate(before, down, TARGET, 2), "driver_version")
    assert driver.outcome == "fail"
    assert driver.detail.endswith("no /proc/driver/nvidia/version: the kernel module is not loaded")


def test_no_driver_version_at_all_is_inconclusive():
    before = host("gpu-01")
    blank = upgraded(before, driver_version=None, driver_version_proc=None)
    blank = replace_gpus(blank, driver_version=None)
    assert check(health_gate(before, blank, TARGET, 2), "driver_version").outcome == (
        "inconclusive"
    )


def test_the_target_from_nvidia_smi_alone_passes_and_says_so():
    before = host("gpu-01")
    driver = check(
        health_gate(before, upgraded(before, driver_version_proc=None), TARGET, 2),
        "driver_version",
    )
    assert driver.outcome == "pass" and "/proc/driver/nvidia/version was not read" in driver.detail


# --- health gate: GPUs -------------------------------------------------------------------------


def test_fewer_gpus_than_expected_fail():
    before = host("gpu-01", 4)
    after = upgraded(before, gpus=upgraded(before).gpus[:3])
    gpus = check(health_gate(before, after, TARGET, 4), "gpus_present")
    assert gpus.outcome == "fail"
    assert gpus.detail == (
        "3 of 4 expected GPUs are listed; GPUs listed before are gone: GPU-00000003"
    )


def test_a_gpu_with_another_uuid_fails():
    before = host("gpu-01")
    after = replace_gpu(upgraded(before), 1, uuid="GPU-99999999")
    gpus = check(health_gate(before, after, TARGET, 2), "gpus_present")
    assert gpus.outcome == "fail" and "GPU-00000001" in gpus.detail


def test_an_erroring_gpu_fails():
    before = host("gpu-01")
    after = replace_gpu(upgraded(before), 0, status="error", status_detail="Unknown Error")
    gpus = check(health_gate(before, after, TARGET, 2), "gpus_present")
    assert gpus.outcome == "fail" and gpus.detail == "GPU(s) 0 answer with an error"


def test_without_an_expected_count_the_gpus_before_are_expected():
    before = host("gpu-01", 2)
    gpus = check(health_gate(before, upgraded(before), TARGET, None), "gpus_present")
    assert gpus.outcome == "pass"
    assert gpus.detail == "2 GPUs listed, 2 expected; the same 2 UUIDs as before the upgrade"
    lost = upgraded(before, gpus=upgraded(before).gpus[:1])
    assert check(health_gate(before, lost, TARGET, None), "gpus_present").outcome == "fail"


# --- health gate: XID --------------------------------------------------------------------------


def test_a_new_xid_fails():
    before = host("gpu-01", xid_events=(xid(13, "  100.1"),))
    after = upgraded(before, xid_events=(xid(79, "   12.5", 1, "GPU has fallen off the bus."),))
    result = health_gate(before, after, TARGET, 2)
    found = check(result, "xid")
    assert found.outcome == "fail" and result.outcome == "fail"
    assert found.detail == (
        "1 new GPU error event in the kernel log: XID 79 on GPU 1 (0000:19:00.0) at "
        "[   12.5]: GPU has fallen off the bus."
    )


def test_events_from_before_the_upgrade_are_not_new():
    old = (xid(13, "  100.1"), xid(13, "  100.1"), xid(43, "  101.0"))
    before = host("gpu-01", xid_events=old)
    # A module reload without a reboot keeps the kernel log: the same lines are there again.
    kept = check(health_gate(before, upgraded(before, xid_events=old), TARGET, 2), "xid")
    assert kept.outcome == "pass"
    assert kept.detail.endswith("(3 after, 3 before)")
    # The same line once more than before is a new one.
    again = upgraded(before, xid_events=(*old, xid(13, "  100.1")))
    assert check(health_gate(before, again, TARGET, 2), "xid").outcome == "fail"


def test_the_same_xid_at_another_time_is_new():
    before = host("gpu-01", xid_events=(xid(13, "  100.1"),))
    after = upgraded(before, xid_events=(xid(13, "   20.7"),))
    assert check(health_gate(before, after, TARGET, 2), "xid").outcome == "fail"


def test_an_unreadable_kernel_log_after_the_upgrade_is_inconclusive():
    before = host("gpu-01")
    after = upgraded(before, sections={"kernel_log": Section(rc=1, stderr="Permission denied")})
    result = health_gate(before, after, TARGET, 2)
    assert check(result, "xid").outcome == "inconclusive" and result.outcome == "inconclusive"
    assert check(result, "xid").detail == "after the upgrade reading the kernel log failed (rc=1)"


def test_events_after_a_pre_check_that_could_not_read_the_log_are_inconclusive():
    before = host("gpu-01", tools={"dmesg": False, "journalctl": False, "nvidia-smi": True})
    after = upgraded(before, tools={"dmesg": True}, xid_events=(xid(13, "1.0"),))
    assert check(health_gate(before, after, TARGET, 2), "xid").outcome == "inconclusive"
    clean = upgraded(before, tools={"dmesg": True})
    assert check(health_gate(before, clean, TARGET, 2), "xid").outcome == "pass"


# --- health gate: ECC and row remapping --------------------------------------------------------


def test_new_uncorrectable_ecc_errors_fail():
    before = host("gpu-01")
    grown = replace_gpu(upgraded(before), 1, ecc_aggregate=EccCounts(corrected=0, uncorrected=2))
    ecc = check(health_gate(before, grown, TARGET, 2), "ecc_uncorrectable")
    assert ecc.outcome == "fail"
    assert ecc.detail == "new uncorrectable ECC errors: GPU 1 (aggregate 0 → 2, volatile 0 → 0)"
    volatile = replace_gpu(upgraded(before), 0, ecc_volatile=EccCounts(uncorrected=1))
    assert check(health_gate(before, volatile, TARGET, 2), "ecc_uncorrectable").outcome == "fail"


def test_volatile_counts_reset_by_the_reload_are_not_new_errors():
    before = replace_gpu(
        host("gpu-01"),
        0,
        ecc_volatile=EccCounts(uncorrected=3),
        ecc_aggregate=EccCounts(uncorrected=3),
    )
    after = replace_gpu(
        upgraded(before),
        0,
        ecc_volatile=EccCounts(uncorrected=0),
        ecc_aggregate=EccCounts(uncorrected=3),
    )
    ecc = check(health_gate(before, after, TARGET, 2), "ecc_uncorrectable")
    assert ecc.outcome == "pass" and "of 2 GPUs compared" in ecc.detail


def test_ecc_counts_missing_after_the_upgrade_are_inconclusive():
    before = host("gpu-01")
    after = replace_gpus(upgraded(before), ecc_volatile=EccCounts(), ecc_aggregate=EccCounts())
    ecc = check(health_gate(before, after, TARGET, 2), "ecc_uncorrectable")
    assert ecc.outcome == "inconclusive" and ecc.detail.endswith("GPU 0, GPU 1")


def test_gpus_without_ecc_are_not_checked():
    before = replace_gpus(
        host("gpu-01"),
        ecc_mode_current="Disabled",
        ecc_volatile=EccCounts(),
        ecc_aggregate=EccCounts(),
    )
    result = health_gate(before, upgraded(before), TARGET, 2)
    assert check(result, "ecc_uncorrectable").outcome == "not_checked"
    assert result.outcome == "pass"


def test_a_new_pending_row_remap_fails():
    before = host("gpu-01")
    pending = replace_gpu(
        upgraded(before),
        1,
        remapped_rows=RemappedRows(correctable=0, uncorrectable=0, pending=True, failure=False),
    )
    remap = check(health_gate(before, pending, TARGET, 2), "row_remap")
    assert remap.outcome == "fail" and remap.detail == "GPU 1: row remap pending"
    failed = replace_gpu(upgraded(before), 0, remapped_rows=RemappedRows(0, 0, False, True))
    assert check(health_gate(before, failed, TARGET, 2), "row_remap").outcome == "fail"
    grown = replace_gpu(upgraded(before), 0, remapped_rows=RemappedRows(0, 1, False, False))
    assert check(health_gate(before, grown, TARGET, 2), "row_remap").outcome == "fail"


def test_a_remap_pending_before_and_done_by_the_reboot_passes():
    before = replace_gpu(host("gpu-01"), 0, remapped_rows=RemappedRows(0, 0, True, False))
    done = replace_gpu(upgraded(before), 0, remapped_rows=RemappedRows(0, 1, False, False))
    assert check(health_gate(before, done, TARGET, 2), "row_remap").outcome == "pass"


def test_a_new_pending_page_retirement_fails_on_older_gpus():
    before = replace_gpus(
        host("gpu-01"), remapped_rows=RemappedRows(), retired_pages=RetiredPages(0, 0, False)
    )
    after = replace_gpu(upgraded(before), 0, retired_pages=RetiredPages(0, 1, True))
    remap = check(health_gate(before, after, TARGET, 2), "row_remap")
    assert remap.outcome == "fail" and remap.detail == "GPU 0: page retirement pending"


def test_row_remapping_not_reported_after_the_upgrade_is_inconclusive():
    before = host("gpu-01")
    after = replace_gpus(upgraded(before), remapped_rows=RemappedRows())
    assert check(health_gate(before, after, TARGET, 2), "row_remap").outcome == "inconclusive"


# --- health gate: persistence and fabric manager -----------------------------------------------


def test_persistence_mode_lost_fails():
    before = host("gpu-01", services=(PERSISTENCED,))
    after = replace_gpu(upgraded(before), 1, persistence_mode=False)
    persistence = check(health_gate(before, after, TARGET, 2), "persistence")
    assert persistence.outcome == "fail"
    assert persistence.detail == "persistence mode is off on GPU 1"


def test_the_persistence_daemon_stopped_fails():
    before = host("gpu-01", services=(PERSISTENCED,))
    stopped = Service("nvidia-persistenced", "failed", "enabled")
    after = upgraded(before, services=(stopped,))
    persistence = check(health_gate(before, after, TARGET, 2), "persistence")
    assert persistence.outcome == "fail"
    assert persistence.detail == (
        "nvidia-persistenced ran before the upgrade and is failed (enabled) after it"
    )


def test_persistence_off_before_is_not_required_after():
    before = replace_gpus(host("gpu-01", services=()), persistence_mode=False)
    result = health_gate(before, upgraded(before), TARGET, 2)
    assert check(result, "persistence").outcome == "not_checked"


def test_fabric_manager_must_run_where_it_ran_before():
    before = host("gpu-01", services=(PERSISTENCED, FABRIC))
    stopped = upgraded(
        before, services=(PERSISTENCED, Service("nvidia-fabricmanager", "inactive", "enabled"))
    )
    fabric = check(health_gate(before, stopped, TARGET, 2), "fabric_manager")
    assert fabric.outcome == "fail"
    assert fabric.detail == (
        "nvidia-fabricmanager ran before the upgrade and is inactive (enabled) after it"
    )
    unread = upgraded(before, services=(), sections={"services": Section(rc=1)})
    assert check(health_gate(before, unread, TARGET, 2), "fabric_manager").outcome == (
        "inconclusive"
    )


def test_fabric_manager_not_running_before_is_not_checked():
    before = host("gpu-01")  # the factory's fabric manager is not installed
    fabric = check(health_gate(before, upgraded(before), TARGET, 2), "fabric_manager")
    assert fabric.outcome == "not_checked"


# --- extra checks and snapshots built from captured output -------------------------------------


def test_extra_checks_decide_the_outcome_with_the_others():
    before = host("gpu-01")
    after = upgraded(before)
    diag_pass = GateCheck("dcgm_diag", "pass", "dcgmi diag -r 1: all tests passed")
    diag_fail = GateCheck("dcgm_diag", "fail", "dcgmi diag -r 1: PCIe test failed")
    timed_out = GateCheck("site_command", "inconclusive", "the site's check timed out")
    assert health_gate(before, after, TARGET, 2, [diag_pass]).outcome == "pass"
    assert health_gate(before, after, TARGET, 2, [diag_fail]).outcome == "fail"
    assert health_gate(before, after, TARGET, 2, [diag_pass, timed_out]).outcome == "inconclusive"
    assert health_gate(before, after, TARGET, 2, [diag_fail]).checks[-1] == diag_fail


def test_gate_on_snapshots_built_from_captured_output():
    before = captured_a100()
    assert before.status is HostStatus.OK, before.status_detail
    same = health_gate(before, captured_a100(), "535.54.03", expected_gpus=1)
    assert same.outcome == "pass", same.summary()
    # The capture's GPU has persistence mode off: nothing to keep.
    persistence = check(same, "persistence")
    assert persistence.detail == "nvidia-persistenced active before and after the upgrade"
    # The real XID 63 line of an A100 appearing after the upgrade.
    remapping = health_gate(before, captured_a100(xid63_log()), "535.54.03", expected_gpus=1)
    assert remapping.outcome == "fail"
    assert check(remapping, "xid").detail.startswith(
        "1 new GPU error event in the kernel log: XID 63 (0000:10:1C.0): pid=1896, Row Remapper"
    )
    # A kernel module from another release than the user-space driver the XML reports.
    mismatch = health_gate(
        before, captured_a100(driver_proc="550.127.05"), "535.54.03", expected_gpus=1
    )
    assert check(mismatch, "driver_version").detail == (
        "kernel module reports 550.127.05, not the target 535.54.03"
    )


def test_gate_results_are_plain_json():
    import json

    before = host("gpu-01")
    result = health_gate(before, upgraded(before, xid_events=(xid(79, "1.0"),)), TARGET, 2)
    data = json.loads(json.dumps(result.to_dict()))
    assert data["outcome"] == "fail"
    assert data["checks"][3]["name"] == "xid" and data["checks"][3]["evidence"]["after"] == 1


def test_every_check_says_what_it_compared():
    before = host("gpu-01", services=(PERSISTENCED, FABRIC), xid_events=(xid(13, "1.0"),))
    result = health_gate(before, upgraded(before), TARGET, 2)
    details = {c.name: c.detail for c in result.checks}
    assert "persistence mode on for the 2 GPUs that had it" in details["persistence"]
    assert "compared with before the upgrade: none grew" in details["ecc_uncorrectable"]
    assert "nothing new pending or failed" in details["row_remap"]
    assert "that was not there before (0 after, 1 before)" in details["xid"]
    assert all(details.values())


def test_gpu_factory_is_healthy_for_the_gate():
    # Guards the other tests: the factory GPU has the data every check compares.
    made = gpu(0)
    assert made.persistence_mode is True and made.remapped_rows.pending is False
    assert made.ecc_aggregate.uncorrected == 0
