from __future__ import annotations

from dataclasses import replace

import pytest

from gpuaudit.model.snapshot import PciDevice, XidEvent
from gpuaudit.rules.base import Owner, Severity
from gpuaudit.rules.xid_catalog import CATALOG, XidAction, lookup, other_readings

# The reference notes' table (shared/reference/xid-ecc-rules.md), code by code.
REFERENCE = {
    XidAction.RESTART_APP: [
        *(8, 13, 31, 32, 39, 40, 41, 68, 69, 70, 71, 72, 75, 76, 77, 80, 83, 84, 94),
    ],
    XidAction.IGNORE: [14, 37, 38, 43, 44, 63, 66, 67, 92, 93, 106, 107, 121, 137, 141, 157, 161],
    XidAction.RESET_GPU: [46, 62, 64, 95, 109, 110, 119, 120, 136, 140, 143, 155, 156, 158],
    XidAction.RESTART_BM: [79, 160],
    XidAction.WORKFLOW: [48, 45, 74, 144, 145, 146, 147, 148, 149, 150, 154],
    XidAction.OTHER: [54, 78, 151, 159],
}


def xid(code, bus="0000:18:00.0", ts="[ 10.0]", msg="", gpu=None, kind="xid"):
    short = bus.rsplit(".", 1)[0]
    raw = f"{ts} NVRM: Xid (PCI:{short}): {code}, {msg}"
    return XidEvent(kind, code, bus, msg, raw, timestamp=ts, gpu_index=gpu)


# NVIDIA's catalogue beyond the reference notes' table (NVSentinel's xiderrorsmapping.csv).
BEYOND_REFERENCE = {
    XidAction.RESTART_APP: [
        *(11, 25, 60, 82, 85, 86, 88, 89, *range(96, 106), *range(126, 136), 139),
    ],
    XidAction.IGNORE: [152, 153],
    XidAction.RESET_GPU: [162],
    XidAction.CONTACT_SUPPORT: [
        *(1, 2, 3, 4, 5, 6, 7, 9, 10, 12, *range(15, 25), *range(26, 31), *range(33, 37)),
        *(42, 47, 49, 50, 51, 52, 53, 55, 56, 57, 58, 59, 61, 65, 73, 81, 87, 90, 91, 108),
        *(*range(111, 119), 122, 123, 124, 125, 138, 142),
    ],
}


def test_catalogue_maps_every_reference_code_to_its_action():
    listed = [c for codes in REFERENCE.values() for c in codes]
    assert len(listed) == len(set(listed))
    for action, codes in REFERENCE.items():
        for code in codes:
            assert CATALOG[code].action is action, code


def test_catalogue_lists_every_nvidia_code_once_with_its_bucket():
    table = {**REFERENCE}
    for action, codes in BEYOND_REFERENCE.items():
        table[action] = [*table.get(action, []), *codes]
    listed = [c for codes in table.values() for c in codes]
    assert sorted(listed) == list(range(1, 163)) == sorted(CATALOG)
    for action, codes in table.items():
        for code in codes:
            assert CATALOG[code].action is action, code


def test_codes_without_a_description_are_named_by_nvidia_mnemonic():
    assert CATALOG[57].label == "XID 57 (FB_LINK_TRAINING_FAILURE_ERROR)"
    assert CATALOG[137].label == "XID 137 (NVLink FLA privilege error)"
    assert CATALOG[162].label == "XID 162"  # NVIDIA publishes no mnemonic for it
    assert lookup(57).action is XidAction.CONTACT_SUPPORT
    assert lookup(500).label == "XID 500"


def test_legacy_code_finding_names_it_and_says_contact_support(make_host, findings):
    (f,) = findings("GA301", make_host(xid_events=(xid(58),)))
    assert "XID 58 (FB_MEMORY_ERROR)" in f.message
    assert f.severity is Severity.MEDIUM and "contact NVIDIA support" in f.remediation


@pytest.mark.parametrize(
    ("code", "severity"),
    [
        (79, Severity.CRITICAL),
        (95, Severity.HIGH),
        (119, Severity.HIGH),
        (13, Severity.MEDIUM),
        (14, Severity.INFO),
        (63, Severity.LOW),
        (74, Severity.HIGH),
        (54, Severity.HIGH),
        (999, Severity.MEDIUM),
    ],
)
def test_severity_follows_the_action(code, severity, make_host, findings):
    (f,) = findings("GA301", make_host(xid_events=(xid(code),)))
    assert f.severity is severity
    assert f.gpu == 0 and f.gpu_name == "NVIDIA L40S"


def test_unknown_code_says_contact_support(make_host, findings):
    (f,) = findings("GA301", make_host(xid_events=(xid(999),)))
    assert lookup(999).action is XidAction.CONTACT_SUPPORT
    assert "CONTACT_SUPPORT" in f.message and "contact NVIDIA support" in f.remediation


def test_one_finding_per_gpu_and_code_with_count_and_timestamps(make_host, findings):
    events = (
        xid(79, ts="[ 1.0]", msg="GPU has fallen off the bus."),
        xid(13, ts="[ 2.0]"),
        xid(79, ts="[ 3.0]", msg="GPU has fallen off the bus."),
        xid(79, ts="[ 4.0]", msg="GPU has fallen off the bus."),
        xid(79, bus="0000:19:00.0", ts="[ 5.0]"),
    )
    result = findings("GA301", make_host(xid_events=events))
    summary = sorted((f.gpu, f.evidence.actual["code"], f.evidence.actual["count"]) for f in result)
    assert summary == [(0, 13, 1), (0, 79, 3), (1, 79, 1)]
    f79 = next(f for f in result if f.gpu == 0 and f.evidence.actual["code"] == 79)
    assert f79.evidence.actual["first_seen"] == "[ 1.0]"
    assert f79.evidence.actual["last_seen"] == "[ 4.0]"
    assert f79.evidence.excerpt.splitlines() == [
        events[0].raw,
        "… (1 more)",
        events[3].raw,
    ]
    assert "×3 on GPU 0" in f79.message
    assert "RESTART_BM" in f79.message


def test_legacy_fallen_off_bus_counts_as_79(make_host, findings):
    legacy = XidEvent(
        "fallen_off_bus",
        None,
        "0000:18:00.0",
        "GPU has fallen off the bus",
        "[   49.261458] NVRM: GPU at 0000:01:00.0 has fallen off the bus.",
        timestamp="[   49.261458]",
    )
    (f,) = findings("GA301", make_host(xid_events=(legacy, xid(79))))
    assert f.evidence.actual["code"] == 79 and f.evidence.actual["count"] == 2
    assert f.severity is Severity.CRITICAL
    assert "legacy 'fallen off the bus'" in f.message


def test_xid_63_shows_where_other_readings_differ(make_host, findings):
    (f,) = findings("GA301", make_host(xid_events=(xid(63),)))
    assert "NVIDIA: IGNORE" in f.message
    assert (
        "field guide: ECC errors piling up: plan to replace the GPU "
        "(docs/field-guide/xid.md#common-xid-codes)"
    ) in f.message
    assert "Azure HPC health checks fail the node" in f.message
    assert "AWS EKS" in f.message
    # DCGM has no verdict on 63, so it is not listed.
    assert "DCGM" not in f.message


def test_other_readings_only_lists_disagreements():
    # NVIDIA and every other reading agree that 79 is fatal: nothing to show.
    assert other_readings(CATALOG[79]) == []
    assert "Meta gcm warns" in other_readings(CATALOG[109])


def test_dbe_workflow_depends_on_remap_events(make_host, findings):
    (alone,) = findings("GA301", make_host(xid_events=(xid(48),)))
    assert alone.severity is Severity.HIGH
    assert "reset the GPU" in alone.message and "field diagnostics" not in alone.message
    together = findings("GA301", make_host(xid_events=(xid(48), xid(63))))
    dbe = next(f for f in together if f.evidence.actual["code"] == 48)
    assert "drain the GPU" in dbe.message and "field diagnostics" in dbe.message


def test_xid_45_alone_or_after_another(make_host, findings):
    (alone,) = findings("GA301", make_host(xid_events=(xid(45),)))
    assert alone.severity is Severity.MEDIUM and "fabricmanager" in alone.message
    after = findings("GA301", make_host(xid_events=(xid(109), xid(45))))
    cleanup = next(f for f in after if f.evidence.actual["code"] == 45)
    assert cleanup.severity is Severity.LOW and "Follows XID 109" in cleanup.message


def test_xid_154_follows_the_named_recovery_action(make_host, findings):
    msg = "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"
    (f,) = findings("GA301", make_host(xid_events=(xid(154, msg=msg),)))
    assert f.severity is Severity.CRITICAL and "reboot the node" in f.message


def test_restart_app_codes_belong_to_ml_engineering(make_host, findings):
    (f,) = findings("GA301", make_host(xid_events=(xid(31),)))
    assert f.owner is Owner.ML_ENGINEERING
    (g,) = findings("GA301", make_host(xid_events=(xid(79),)))
    assert g.owner is Owner.INFRA


def test_site_override_changes_severity_and_prints_reason(make_host, findings):
    policy = {"xid_overrides": {"63": {"action": "RESET_GPU", "reason": "drain on any remap"}}}
    (f,) = findings("GA301", make_host(xid_events=(xid(63),)), policy=policy)
    assert f.severity is Severity.HIGH
    assert "NVIDIA: RESET_GPU" in f.message
    assert "Site policy overrides this code: drain on any remap." in f.message


def test_event_on_unknown_bus_is_kept_without_gpu(make_host, findings):
    (f,) = findings("GA301", make_host(xid_events=(xid(79, bus="0000:AA:00.0"),)))
    assert f.gpu is None and "PCI 0000:AA:00.0" in f.message


def test_truncated_kernel_log_is_noted(make_host, findings):
    (f,) = findings("GA301", make_host(xid_events=(xid(13),), kernel_log_truncated=True))
    assert "lower bounds" in f.message


def test_sxid_has_its_own_finding(make_host, findings):
    fatal = XidEvent(
        "sxid",
        24007,
        "0000:05:00.0",
        "Fatal, Link 44 sourcetrack timeout error (First)",
        "nvidia-nvswitch1: SXid (PCI:0000:05:00.0): 24007, Fatal, Link 44 sourcetrack timeout",
    )
    benign = XidEvent(
        "sxid",
        12028,
        "0000:06:00.0",
        "Non-fatal, Link 47 egress non-posted PRIV error (First)",
        "nvidia-nvswitch2: SXid (PCI:0000:06:00.0): 12028, Non-fatal, Link 47 egress",
    )
    snap = make_host(xid_events=(fatal, benign, benign))
    assert findings("GA301", snap) == []
    result = findings("GA302", snap)
    assert sorted(
        (f.evidence.actual["code"], f.severity, f.evidence.actual["count"]) for f in result
    ) == [
        (12028, Severity.MEDIUM, 2),
        (24007, Severity.HIGH, 1),
    ]
    assert all(f.gpu is None for f in result)


def test_no_events_no_findings(make_host, findings):
    assert findings("GA301", make_host()) == []
    assert findings("GA302", make_host()) == []


def test_nvlink_errors_are_medium_when_every_line_is_nonfatal(make_host, findings):
    nonfatal = xid(145, msg="RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008)")
    fatal = xid(149, msg="NETIR Fatal XC0 i0 Link -1 (0x000fe406 0x00000000)")
    result = findings("GA301", make_host(xid_events=(nonfatal, nonfatal, fatal)))
    severities = {f.evidence.actual["code"]: f.severity for f in result}
    assert severities == {145: Severity.MEDIUM, 149: Severity.HIGH}


def test_xid_on_a_gpu_nvidia_smi_no_longer_lists_points_at_the_bus(make_host, findings):
    gone = "0000:90:00.0"
    lspci = (PciDevice(bus_id=gone, class_code="0302", vendor_id="10de", device_id="20b2",
                       revision="ff"),)  # fmt: skip
    event = xid(79, bus=gone, msg="GPU has fallen off the bus.")
    (listed,) = findings("GA301", make_host(xid_events=(event,), pci_devices=lspci))
    assert listed.gpu is None
    assert f"PCI {gone} (not listed by nvidia-smi; on the PCI bus it reads all ones" in (
        listed.message
    )
    (unknown,) = findings("GA301", make_host(xid_events=(event,)))
    assert f"PCI {gone} (no GPU with that bus id)" in unknown.message


# --- GA313: the boot before this one ---------------------------------------------------------


def test_previous_boot_xid_is_one_step_milder_and_says_the_host_rebooted(make_host, findings):
    events = (xid(79, ts="Nov 29 11:28:11", msg="GPU has fallen off the bus."), xid(48, gpu=1))
    result = findings("GA313", make_host(previous_boot_xid_events=events))
    by_code = {f.evidence.actual["code"]: f for f in result}
    assert sorted(by_code) == [48, 79]
    assert by_code[79].severity is Severity.HIGH  # GA301: critical
    assert by_code[48].severity is Severity.MEDIUM  # GA301: high
    assert by_code[79].evidence.actual["boot"] == "previous"
    assert by_code[79].evidence.actual["in_this_boot"] == 0
    assert "in the boot before this one, at Nov 29 11:28:11" in by_code[79].message
    assert "rebooted since" in by_code[79].message
    assert findings("GA301", make_host(previous_boot_xid_events=events)) == []


def test_previous_boot_xid_that_came_back_keeps_its_severity(make_host, findings):
    host = make_host(previous_boot_xid_events=(xid(79),), xid_events=(xid(79), xid(79)))
    (f,) = findings("GA313", host)
    assert f.severity is Severity.CRITICAL
    assert f.evidence.actual["in_this_boot"] == 2
    assert "came back after the reboot: ×2 in this boot's log too" in f.message


def test_previous_boot_application_and_informational_codes_are_left_out(make_host, findings):
    host = make_host(previous_boot_xid_events=(xid(13), xid(31), xid(43), xid(94)))
    assert findings("GA313", host) == []


def test_previous_boot_follows_the_site_overrides(make_host, findings):
    policy = {"xid_overrides": {"63": {"action": "RESET_GPU", "reason": "drain on any remap"}}}
    host = make_host(previous_boot_xid_events=(xid(63),))
    assert findings("GA313", host) == []
    (f,) = findings("GA313", host, policy=policy)
    assert f.severity is Severity.MEDIUM
    assert "Site policy overrides this code: drain on any remap." in f.message


def test_previous_boot_log_cut_short_is_noted(make_host, findings):
    host = make_host(previous_boot_xid_events=(xid(79),), previous_boot_log_truncated=True)
    (f,) = findings("GA313", host)
    assert "log of the earlier boots was cut to its newest lines" in f.message


def test_an_xid_two_reboots_ago_is_still_reported_and_says_when(make_host, findings):
    """Rebooted twice since the GPU fell off the bus: the XID is in boot -2's log only."""
    events = (replace(xid(79, ts="Nov 28 10:00:01"), boot=-2),)
    (f,) = findings("GA313", make_host(previous_boot_xid_events=events))
    assert "in an earlier boot, 2 reboots ago, at Nov 28 10:00:01" in f.message
    assert f.severity is Severity.HIGH  # GA301: critical, one step down
    assert f.evidence.actual["boots"] == [-2]


def test_an_xid_in_two_earlier_boots_came_back_after_a_reboot_and_keeps_its_severity(
    make_host, findings
):
    events = (
        replace(xid(48, gpu=1), boot=-3),
        replace(xid(48, gpu=1), boot=-1),
        replace(xid(79), boot=-1),
    )
    result = findings("GA313", make_host(previous_boot_xid_events=events))
    by_code = {f.evidence.actual["code"]: f for f in result}
    assert by_code[48].severity is Severity.HIGH  # GA301's own, not one step down
    assert "×2 on GPU 1 in 2 earlier boots, 1 and 3 reboots ago" in by_code[48].message
    assert "came back after a reboot: it is in 2 boots' logs" in by_code[48].message
    assert by_code[48].evidence.actual["boots"] == [-1, -3]
    assert by_code[79].severity is Severity.HIGH  # one boot only: one step down
    assert "in the boot before this one" in by_code[79].message


def test_an_older_snapshots_previous_boot_events_are_the_boot_before_this_one(make_host, findings):
    (f,) = findings("GA313", make_host(previous_boot_xid_events=(xid(79),)))
    assert f.evidence.actual["boots"] == [-1]
