"""GA301 / GA302 counted from real kernel-log captures read by the kernel-log parser: one
incident per XID however many lines the driver printed for it, and no XID for a GPU whose
adapter failed to start."""

from __future__ import annotations

from pathlib import Path

from gpuaudit.parsers.kernel_log import parse_kernel_log, resolve_gpus
from gpuaudit.rules.base import Severity

KLOG = Path(__file__).parents[1] / "fixtures" / "kernel-log"


def events_of(name: str):
    return parse_kernel_log((KLOG / name).read_text(encoding="utf-8"))


def test_xid79_and_its_fallen_off_bus_line_are_one_finding_of_one(make_host, findings):
    events = events_of(
        "issue-akash-support-209-xid79-fallen-off-bus-followup-crash-dump-dmesg-T.log"
    )
    (f,) = findings("GA301", make_host(xid_events=events))
    assert (f.evidence.actual["code"], f.evidence.actual["count"]) == (79, 1)
    assert f.evidence.actual["pci_bus_id"] == "0000:A1:00.0"
    assert f.severity is Severity.CRITICAL
    assert "legacy" not in f.message  # the follow-up line is not a second, legacy XID 79
    # Both driver lines stay in the evidence.
    assert "NVRM: Xid (PCI:0000:a1:00): 79" in f.evidence.excerpt
    assert "NVRM: GPU 0000:a1:00.0: GPU has fallen off the bus." in f.evidence.excerpt


def test_multiline_fallen_off_bus_without_xid_counts_as_one_xid79(make_host, findings):
    events = events_of("issue-nvsentinel-155-fallen-off-bus-multiline-no-xid-probe-failed.log")
    (f,) = findings("GA301", make_host(xid_events=events))
    assert (f.evidence.actual["code"], f.evidence.actual["count"]) == (79, 1)
    assert f.evidence.actual["pci_bus_id"] == "0000:B3:00.0"


def test_failed_adapter_start_is_not_an_xid_with_an_unreadable_code(make_host, findings):
    events = events_of("issue-gpu-operator-649-rminitadapter-failed-two-vgpus.log")
    assert {e.kind for e in events} == {"init_failed"}
    assert findings("GA301", make_host(xid_events=events)) == []
    name = "issue-open-gpu-kernel-modules-876-rminitadapter-then-xid120-gsp-crashcat.log"
    (f,) = findings("GA301", make_host(xid_events=events_of(name)))
    assert (f.evidence.actual["code"], f.evidence.actual["count"]) == (120, 1)


def test_sxid_detail_lines_do_not_add_to_the_count(make_host, findings):
    events = events_of("issue-nvtrust-124-sxid22013-severity-data-continuation.log")
    (f,) = findings("GA302", make_host(xid_events=events))
    # Three SXid lines with a header; the detail lines (and the orphan Data line) are not counted.
    assert (f.evidence.actual["code"], f.evidence.actual["count"]) == (22013, 3)
    assert f.severity is Severity.MEDIUM  # every header says Non-fatal


def test_a_gpu_that_did_not_come_up_is_a_finding_per_gpu(make_host, findings):
    # Two vGPUs whose starts keep failing, and no XID at all: one GA312 finding each.
    events = events_of("issue-gpu-operator-649-rminitadapter-failed-two-vgpus.log")
    raw = (KLOG / "issue-gpu-operator-649-rminitadapter-failed-two-vgpus.log").read_text()
    starts = {
        bus: sum(1 for line in raw.splitlines() if f"GPU {bus}: RmInitAdapter failed" in line)
        for bus in ("0000:04:01.0", "0000:04:02.0")
    }
    found = findings("GA312", make_host(xid_events=events))
    by_bus = {f.evidence.actual["pci_bus_id"]: f for f in found}
    assert sorted(by_bus) == ["0000:04:01.0", "0000:04:02.0"]
    for bus, f in by_bus.items():
        assert f.evidence.actual["count"] == starts[bus]
        assert f.severity is Severity.HIGH
        assert "did not come up" in f.message and f"PCI {bus}" in f.message
        assert "RmInitAdapter failed" in f.evidence.excerpt
    # One risk for the fleet, not one per unreadable code.
    assert all("code" not in f.evidence.actual for f in found)


def test_a_failed_start_without_a_bus_id_is_still_reported(make_host, findings):
    name = "issue-bumblebee-204-legacy-rminitadapter-no-bus-vbios-copy-failed.log"
    events = events_of(name)
    assert events and all(e.pci_bus_id is None for e in events if e.kind == "init_failed")
    (f,) = findings("GA312", make_host(xid_events=events))
    assert f.message.startswith("A GPU (the driver named no bus id) did not come up")
    assert findings("GA312", make_host()) == []  # a clean log: nothing


def test_xid_45_that_names_its_cause_is_not_read_as_alone(make_host, findings):
    # Every line says "caused by previous Xid 149/145"; those XIDs' own lines are not in the
    # capture (as when the kernel log was cut to its newest lines). NVIDIA's "alone: restart
    # nvidia-fabricmanager" does not apply: the clean-up follows the XID its line names.
    events = events_of(
        "issue-open-gpu-kernel-modules-1150-xid45-caused-by-previous-xid149-xid145.log"
    )
    found = findings("GA301", make_host(xid_events=events))
    by_bus = {f.evidence.actual["pci_bus_id"]: f for f in found}
    assert len(by_bus) == 4
    for f in found:
        assert f.evidence.actual["code"] == 45
        assert "fabricmanager" not in f.message
        assert f.severity is Severity.MEDIUM  # its cause is not in the log to be judged
    assert "XID 149" in by_bus["0000:DC:00.0"].message
    assert "XID 145" in by_bus["0000:ED:00.0"].message


def test_contained_ecc_error_on_a_mig_instance_is_its_gpus_xid_94(make_host, findings):
    # NVIDIA's example of XID 94 on a MIG GPU ("GPU Memory Error Management"), on GPU 1's bus.
    line = (
        "[ 3811.221040] NVRM: Xid (PCI:0000:19:00 GPU-I:05): 94, pid=7194, Contained: CE User "
        "Channel (0x9). RST: No, D-RST: No"
    )
    host = make_host()
    events = resolve_gpus(parse_kernel_log(line), host.gpus)
    (f,) = findings("GA301", make_host(xid_events=events))
    assert (f.gpu, f.evidence.actual["code"], f.evidence.actual["count"]) == (1, 94, 1)
    assert f.severity is Severity.MEDIUM  # RESTART_APP: only the instance's application is hit
