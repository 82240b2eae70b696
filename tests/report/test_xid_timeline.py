"""The page's XID incidents built from real kernel-log captures."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from gpuaudit.parsers.kernel_log import parse_earlier_boots, parse_kernel_log
from gpuaudit.report.xid_timeline import xid_view

KLOG = Path(__file__).parents[1] / "fixtures" / "kernel-log"


def view_of(name: str, boot_time: str | None = None):
    return xid_view(parse_kernel_log((KLOG / name).read_text(encoding="utf-8")), boot_time)


def test_xid79_with_follow_up_line_is_one_incident_keeping_both_lines() -> None:
    view = view_of("issue-akash-support-209-xid79-fallen-off-bus-followup-crash-dump-dmesg-T.log")
    assert view["total"] == 1
    (incident,) = view["incidents"]
    assert (incident["what"], incident["count"]) == ("XID 79", 1)
    assert incident["gpu"] == "0000:A1:00.0 (not a listed GPU)"
    assert incident["first_seen"] == "2024-04-05 21:29:39 host clock"
    assert (
        incident["raw"]
        .splitlines()[1]
        .endswith("NVRM: GPU 0000:a1:00.0: GPU has fallen off the bus.")
    )


def test_failed_starts_are_incidents_per_gpu() -> None:
    view = view_of("issue-gpu-operator-649-rminitadapter-failed-two-vgpus.log")
    assert view["total"] == 6
    assert [(i["what"], i["gpu"], i["count"]) for i in view["incidents"]] == [
        ("GPU did not come up", "0000:04:01.0 (not a listed GPU)", 3),
        ("GPU did not come up", "0000:04:02.0 (not a listed GPU)", 3),
    ]
    first = view["incidents"][0]
    # [ 1097.650222] and [ 1117.008104] since boot, the snapshot giving no boot time.
    assert (first["first_seen"], first["last_seen"]) == (
        "18 min 17 s after boot",
        "18 min 37 s after boot",
    )
    assert first["message"].startswith(
        "GPU did not come up: RmInitAdapter failed! (0x11:0x45:2525)"
    )


def test_sxid_details_are_not_incidents() -> None:
    view = view_of("issue-nvtrust-124-sxid22013-severity-data-continuation.log")
    assert view["total"] == 3
    ((what, count),) = [(i["what"], i["count"]) for i in view["incidents"]]
    assert (what, count) == ("SXid 22013", 3)


def test_journalctl_stamps_without_a_year_keep_their_order_across_new_year() -> None:
    # Derived from issue-dxvk-1799-xid31-mmu-fault-journalctl-k-rtx2080.log (journalctl -k,
    # whose stamps carry no year): the same two XID 31 lines, the first on Dec 31 and the
    # second on Jan 01, and an XID 13 later on Jan 01. In log order they are one year's end
    # and the next one's start, not a January before a December.
    text = "\n".join(
        [
            "Dec 31 23:59:58 zeus kernel: NVRM: Xid (PCI:0000:c1:00): 31, pid=12890, Ch 0000003b, "
            "intr 00000000. MMU Fault: ENGINE HOST0 HUBCLIENT_HOST_CPU faulted @ 0x1_0c3c0000. "
            "Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE",
            "Jan 01 00:00:03 zeus kernel: NVRM: Xid (PCI:0000:c1:00): 31, pid=12890, Ch 0000003e, "
            "intr 00000000. MMU Fault: ENGINE GRAPHICS HUBCLIENT_SCC faulted @ 0x1_8c710000. "
            "Fault is of type FAULT_PTE ACCESS_TYPE_VIRT_READ",
            "Jan 01 00:10:00 zeus kernel: NVRM: Xid (PCI:0000:c1:00): 13, pid=12890, Graphics",
        ]
    )
    view = xid_view(parse_kernel_log(text))
    assert [(i["what"], i["first_seen"], i["last_seen"]) for i in view["incidents"]] == [
        ("XID 31", "Dec 31 23:59:58 host clock", "Jan 01 00:00:03 host clock"),
        ("XID 13", "Jan 01 00:10:00 host clock", "Jan 01 00:10:00 host clock"),
    ]


JOURNAL_A = "issue-dxvk-1799-xid31-mmu-fault-journalctl-k-rtx2080.log"
JOURNAL_B = "issue-open-gpu-kernel-modules-1151-rm-init-adapter-osinitnvmapping-journalctl.log"
DMESG = "issue-gpu-operator-649-rminitadapter-failed-two-vgpus.log"


def test_earlier_boots_incidents_come_first_each_saying_its_boot() -> None:
    a, b = ((KLOG / n).read_text(encoding="utf-8").rstrip("\n") for n in (JOURNAL_A, JOURNAL_B))
    earlier = parse_earlier_boots(f"-- boot -3 --\n{a}\n-- boot -1 --\n{a}\n{b}\n")
    running = parse_kernel_log((KLOG / DMESG).read_text(encoding="utf-8"))
    view = xid_view(running, "2024-01-10T08:00:00Z", earlier, earlier_cut=True)
    assert (
        (view["total"], view["earlier"])
        == (len(earlier) + len(running), len(earlier))
        == (
            13,
            7,
        )
    )
    # The same XID on the same GPU in two boots is two incidents, the oldest boot first.
    assert [(i["boot"], i["what"], i["gpu"], i["count"]) for i in view["incidents"]] == [
        ("3 reboots ago", "XID 31", "0000:C1:00.0 (not a listed GPU)", 2),
        ("the boot before this one", "XID 31", "0000:C1:00.0 (not a listed GPU)", 2),
        ("the boot before this one", "GPU did not come up", "0000:09:00.0 (not a listed GPU)", 3),
        ("", "GPU did not come up", "0000:04:01.0 (not a listed GPU)", 3),
        ("", "GPU did not come up", "0000:04:02.0 (not a listed GPU)", 3),
    ]
    # journalctl's stamps are the host's clock; the running boot's seconds are dated from its
    # boot time, which says nothing of the earlier boots.
    assert view["incidents"][0]["first_seen"] == "Nov 29 11:28:11 host clock"
    assert view["incidents"][3]["first_seen"] == "2024-01-10 08:18:17 UTC from boot"
    assert view["notes"][-1].startswith("The journal's log of the earlier boots was cut")
    # A snapshot older than schema 1.4 tags no boot: its previous-boot events are boot -1.
    untagged = [replace(e, boot=None) for e in parse_kernel_log(a)]
    (incident,) = xid_view((), None, untagged)["incidents"]
    assert incident["boot"] == "the boot before this one"
    # Without earlier events nothing says boots.
    assert {i["boot"] for i in view_of(DMESG)["incidents"]} == {""}
    assert view_of(DMESG)["earlier"] == 0
