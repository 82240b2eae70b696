"""The page's XID incidents built from real kernel-log captures."""

from __future__ import annotations

from pathlib import Path

from gpuaudit.parsers.kernel_log import parse_kernel_log
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
