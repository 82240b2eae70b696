"""Kernel-log forms beyond the one-line ``NVRM: Xid``: messages over several lines, the driver's
follow-up lines, failed adapter starts, NVSwitch SXid detail lines, and the warnings for NVIDIA
lines that carry no event this parser reads.

Every expectation below was written from the capture's own lines (tests/fixtures/kernel-log/);
the tests marked "derived" change a real capture in the way they say.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuaudit.model.snapshot import ParseWarning, XidEvent
from gpuaudit.parsers.kernel_log import SOURCE, parse_kernel_log
from gpuaudit.parsers.warnings import collecting

KLOG = Path(__file__).parents[1] / "fixtures" / "kernel-log"

# (kind, code, bus id, timestamp, how many of the file's lines the event holds) per event.
Row = tuple[str, int | None, str | None, str | None, int]


def read(name: str) -> str:
    return (KLOG / name).read_text(encoding="utf-8")


def parsed(text: str) -> tuple[tuple[XidEvent, ...], list[ParseWarning]]:
    with collecting() as warnings:
        events = parse_kernel_log(text)
    return events, warnings


def rows(events: tuple[XidEvent, ...]) -> list[Row]:
    return [(e.kind, e.code, e.pci_bus_id, e.timestamp, len(e.raw.splitlines())) for e in events]


def warned(warnings: list[ParseWarning]) -> list[str]:
    assert all(w.source == SOURCE for w in warnings)
    return [w.text for w in warnings]


INIT = "init_failed"
EXPECTED: dict[str, list[Row]] = {
    # RmInitAdapter failed! + rm_init_adapter failed on the same GPU: one start that failed.
    "issue-gpu-operator-649-rminitadapter-failed-two-vgpus.log": [
        (INIT, None, "0000:04:01.0", "[ 1097.650222]", 2),
        (INIT, None, "0000:04:02.0", "[ 1102.469870]", 2),
        (INIT, None, "0000:04:02.0", "[ 1107.289575]", 2),
        (INIT, None, "0000:04:01.0", "[ 1112.163623]", 2),
        (INIT, None, "0000:04:01.0", "[ 1117.008104]", 2),
        (INIT, None, "0000:04:02.0", "[ 1121.850825]", 1),  # its rm_init_adapter line is cut
    ],
    # syslog prefix before the dmesg stamp: the syslog time is the one kept.
    "issue-gpu-operator-1146-rminitadapter-failed-syslog-uptime-prefix.log": [
        (INIT, None, "0000:0A:00.0", stamp, 2)
        for stamp in (
            "Dec  2 11:49:53",
            "Dec  2 11:50:34",
            "Dec  2 11:52:03",
            "Dec  2 11:54:40",
            "Dec  2 11:54:42",
            "Dec  2 11:54:56",
        )
    ],
    # Six GSP diagnostics, then the failure: one event holding all eight lines.
    "issue-open-gpu-kernel-modules-1058-rminitadapter-gsp-wpr2-assertions.log": [
        (INIT, None, "0000:01:00.0", "[   81.969353]", 8),
    ],
    "issue-open-gpu-kernel-modules-1230-rminitadapter-gsp-wpr2-retry-loop.log": [
        (INIT, None, "0000:A1:00.0", "[  101.209077]", 2),
        (INIT, None, "0000:A1:00.0", "[  101.288303]", 5),
        (INIT, None, "0000:A1:00.0", "[  101.366268]", 5),
    ],
    # The paste starts on an rm_init_adapter line whose RmInitAdapter line was not copied.
    "issue-open-gpu-kernel-modules-1151-rm-init-adapter-osinitnvmapping-journalctl.log": [
        (INIT, None, "0000:09:00.0", "May 27 16:50:10", 1),
        (INIT, None, "0000:09:00.0", "May 27 16:50:10", 4),
        (INIT, None, "0000:09:00.0", "May 27 16:50:10", 4),
    ],
    # A kernel oops between the two lines of one failure: the oops lines are not NVIDIA's.
    "issue-cuda-samples-104-rminitadapter-journalctl-oops-between.log": [
        (INIT, None, "0000:13:00.0", "Feb 09 15:47:06", 2),
    ],
    # Drivers of 2012-2016 print no bus id on either line.
    "issue-bumblebee-204-legacy-rminitadapter-no-bus-vbios-copy-failed.log": [
        (INIT, None, None, "[  139.885299]", 3),
    ],
    "issue-bumblebee-722-legacy-rminitadapter-minor-number-frontend-open.log": [
        (INIT, None, None, "[87669.726564]", 3),
        (INIT, None, None, "[87669.726564]", 3),
    ],
    "issue-open-gpu-kernel-modules-876-rminitadapter-then-xid120-gsp-crashcat.log": [
        (INIT, None, "0000:01:00.0", "[   84.811879]", 6),
        ("xid", 120, "0000:01:00.0", "[   87.526689]", 3),  # + two indented dump lines
    ],
    # Bus id on the first line, "fallen off the bus" two lines later.
    "issue-nvsentinel-155-fallen-off-bus-multiline-no-xid-probe-failed.log": [
        ("fallen_off_bus", None, "0000:B3:00.0", "[ 1843.308145]", 3),
    ],
    # XID 79 and the driver's "GPU 0000:a1:00.0: GPU has fallen off the bus." follow-up.
    "issue-akash-support-209-xid79-fallen-off-bus-followup-crash-dump-dmesg-T.log": [
        ("xid", 79, "0000:A1:00.0", "[Fri Apr  5 21:29:39 2024]", 2),
    ],
    # Header, "Severity … Engine instance …", "Data {…}": one SXid each.
    "issue-nvtrust-124-sxid22013-severity-data-continuation.log": [
        ("sxid", 22013, "0000:04:00.0", "[   38.178720]", 3),
        ("sxid", 22013, "0000:04:00.0", "[   38.187830]", 3),
        ("sxid", 22013, "0000:04:00.0", "[   38.194959]", 1),  # its detail lines are cut
    ],
    "issue-nvtrust-124-sxid-continuations-interleaved-with-rminitadapter.log": [
        (INIT, None, "0000:05:00.0", "[   38.268983]", 3),
        ("sxid", 22013, "0000:04:00.0", "[   38.279408]", 3),
        ("sxid", 22013, "0000:04:00.0", "[   38.286738]", 2),
    ],
}


@pytest.mark.parametrize("name", sorted(EXPECTED), ids=lambda n: n[:60])
def test_events_per_capture(name: str) -> None:
    events, _ = parsed(read(name))
    assert rows(events) == EXPECTED[name]
    lines = read(name).splitlines()
    for event in events:
        held = event.raw.splitlines()
        assert all(line in lines for line in held)  # raw is the file's own lines
        assert event.gpu_index is None


def test_every_new_capture_has_expectations() -> None:
    # Captures of failed starts, SXid details and multi-line messages are all covered above.
    for path in KLOG.glob("*.log"):
        text = path.read_text(encoding="utf-8")
        forms = ("RmInitAdapter", "rm_init_adapter", "Engine instance", "               NVRM:")
        if any(form in text for form in forms):
            assert path.name in EXPECTED, path.name


def test_init_failure_message_says_the_gpu_did_not_come_up() -> None:
    events, _ = parsed(
        read("issue-gpu-operator-1146-rminitadapter-failed-syslog-uptime-prefix.log")
    )
    assert events[0].message == (
        "GPU did not come up: RmInitAdapter failed! (0x24:0x72:1568), device minor number 5"
    )
    assert events[0].raw.splitlines() == [
        "Dec  2 11:49:53 worker4 kernel: [  885.242168] NVRM: GPU 0000:0a:00.0: "
        "RmInitAdapter failed! (0x24:0x72:1568)",
        "Dec  2 11:49:53 worker4 kernel: [  885.242457] NVRM: GPU 0000:0a:00.0: "
        "rm_init_adapter failed, device minor number 5",
    ]
    (legacy,) = parsed(
        read("issue-bumblebee-204-legacy-rminitadapter-no-bus-vbios-copy-failed.log")
    )[0]
    assert legacy.message == (
        "GPU did not come up: RmInitAdapter failed! (0x30:0xffffffff:858), device minor number 0"
    )
    assert legacy.raw.splitlines()[0].endswith("NVRM: failed to copy vbios to system memory.")
    (alone, *_) = parsed(
        read("issue-open-gpu-kernel-modules-1151-rm-init-adapter-osinitnvmapping-journalctl.log")
    )[0]
    assert alone.message == "GPU did not come up: rm_init_adapter failed, device minor number 0"


def test_causes_before_the_failure_join_it_and_warn_only_when_no_failure_follows() -> None:
    events, warnings = parsed(
        read("issue-open-gpu-kernel-modules-1230-rminitadapter-gsp-wpr2-retry-loop.log")
    )
    assert "RmInitAdapter: Cannot initialize GSP firmware RM" in events[1].raw.splitlines()[2]
    # The capture ends on three diagnostics whose failure line was cut off.
    assert warned(warnings) == [
        "NVRM: GPU6 _kgspBootGspRm: unexpected WPR2 already up, cannot proceed with booting GSP",
        "NVRM: GPU6 _kgspBootGspRm: (the GPU is likely in a bad state and may need to be reset)",
        "NVRM: GPU6 RmInitAdapter: Cannot initialize GSP firmware RM",
    ]
    _, clean = parsed(
        read("issue-open-gpu-kernel-modules-1058-rminitadapter-gsp-wpr2-assertions.log")
    )
    assert clean == []


def test_failed_starts_of_two_gpus_interleaved_pair_by_bus_id() -> None:
    # Derived from issue-gpu-operator-649: its first four lines reordered so that both GPUs'
    # RmInitAdapter lines come before both rm_init_adapter lines.
    lines = read("issue-gpu-operator-649-rminitadapter-failed-two-vgpus.log").splitlines()
    text = "\n".join([lines[0], lines[2], lines[1], lines[3]])
    events = parsed(text)[0]
    assert [(e.pci_bus_id, e.message[-24:]) for e in events] == [
        ("0000:04:01.0", "), device minor number 0"),
        ("0000:04:02.0", "), device minor number 1"),
    ]
    assert [e.raw.splitlines() for e in events] == [[lines[0], lines[1]], [lines[2], lines[3]]]


def test_bus_id_from_a_cause_line_when_the_failure_line_has_none() -> None:
    # Derived from issue-bumblebee-204: the 2012 driver's lines after a modern driver's
    # "NVRM: GPU 0000:82:00.0: …" diagnostic (the capture itself names no bus).
    text = read("issue-bumblebee-204-legacy-rminitadapter-no-bus-vbios-copy-failed.log").replace(
        "NVRM: failed to copy vbios", "NVRM: GPU 0000:82:00.0: failed to copy vbios"
    )
    ((kind, _code, bus, _stamp, count),) = rows(parsed(text)[0])
    assert (kind, bus, count) == (INIT, "0000:82:00.0", 3)


def test_multiline_fallen_off_bus_is_one_event_with_the_whole_sentence() -> None:
    events, warnings = parsed(
        read("issue-nvsentinel-155-fallen-off-bus-multiline-no-xid-probe-failed.log")
    )
    assert events[0].message == (
        "The NVIDIA GPU 0000:b3:00.0 (PCI ID: 10de:26b5) installed in this system has fallen "
        "off the bus and is not responding to commands."
    )
    assert warnings == []  # "probe routine failed" and "loading" carry no event of their own


@pytest.mark.parametrize(
    "prefix",
    ["Feb 14 05:03:42 gpu-1 kernel: ", "kern  :err   : 2025-10-25T10:34:54,859532+00:00 "],
)
def test_multiline_fallen_off_bus_under_other_prefixes(prefix: str) -> None:
    # Derived from issue-nvsentinel-155: the first line under a journalctl / dmesg --decode
    # prefix, the continuation lines indented to the message, as those tools print them.
    lines = read(
        "issue-nvsentinel-155-fallen-off-bus-multiline-no-xid-probe-failed.log"
    ).splitlines()
    pad = " " * len(prefix)
    text = "\n".join(
        [prefix + lines[0].split("] ", 1)[1], pad + lines[1].lstrip(), pad + lines[2].lstrip()]
    )
    ((kind, _code, bus, stamp, count),) = rows(parsed(text)[0])
    assert (kind, bus, count) == ("fallen_off_bus", "0000:B3:00.0", 3)
    assert stamp in prefix


def test_multiline_notice_with_a_stamp_on_every_line() -> None:
    # Derived from issue-nvsentinel-155: older kernels stamp each line of the notice.
    text = read("issue-nvsentinel-155-fallen-off-bus-multiline-no-xid-probe-failed.log")
    text = text.replace("               NVRM:", "[ 1843.308146] NVRM:")
    assert rows(parsed(text)[0]) == [("fallen_off_bus", None, "0000:B3:00.0", "[ 1843.308145]", 3)]


def test_xid79_follow_up_and_crash_dump_notice() -> None:
    name = "issue-akash-support-209-xid79-fallen-off-bus-followup-crash-dump-dmesg-T.log"
    (event,), warnings = parsed(read(name))
    assert event.message == "pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    assert event.raw.splitlines()[1] == (
        "[Fri Apr  5 21:29:39 2024] NVRM: GPU 0000:a1:00.0: GPU has fallen off the bus."
    )
    assert warnings == []  # UUID line, crash-dump notice (3 lines) and module load are known


def test_fallen_line_before_the_xid79_is_the_same_incident() -> None:
    # Derived from issue-akash-support-209: the follow-up line moved before the XID line.
    lines = read(
        "issue-akash-support-209-xid79-fallen-off-bus-followup-crash-dump-dmesg-T.log"
    ).splitlines()
    lines[2], lines[3] = lines[3], lines[2]
    ((kind, code, bus, stamp, count),) = rows(parsed("\n".join(lines))[0])
    assert (kind, code, bus, stamp, count) == (
        "xid",
        79,
        "0000:A1:00.0",
        "[Fri Apr  5 21:29:39 2024]",
        2,
    )


def test_fallen_line_long_after_the_xid79_is_a_second_incident() -> None:
    # Derived: gpud's matcher_test.go XID 79 line, then the driver's follow-up line in the form
    # issue-akash-support-209 shows, stamped 888 s later (too late for the same incident).
    text = (
        "[111111111.111] NVRM: Xid (PCI:0000:05:00): 79, pid='<unknown>', name=<unknown>, "
        "GPU has fallen off the bus.\n"
        "[111111999.111] NVRM: GPU 0000:05:00.0: GPU has fallen off the bus.\n"
    )
    assert [(k, c, b, n) for k, c, b, _s, n in rows(parsed(text)[0])] == [
        ("xid", 79, "0000:05:00.0", 1),
        ("fallen_off_bus", None, "0000:05:00.0", 1),
    ]
    near = text.replace("[111111999.111]", "[111111111.118]")
    assert [(k, c, n) for k, c, _b, _s, n in rows(parsed(near)[0])] == [("xid", 79, 2)]


def test_repeated_legacy_fallen_lines_stay_two_events() -> None:
    events, warnings = parsed(read("issue-bumblebee-554-legacy-gpu-fallen-off-bus-no-xid.log"))
    assert [e.kind for e in events] == ["fallen_off_bus", "fallen_off_bus"]
    # os_pci_init_handle lines carry no event: one warning (the same text is kept once).
    assert warned(warnings) == ["NVRM: os_pci_init_handle: invalid context!"]


def test_sxid_detail_lines_are_not_events_and_an_orphan_warns() -> None:
    events, warnings = parsed(read("issue-nvtrust-124-sxid22013-severity-data-continuation.log"))
    assert [e.message for e in events] == [
        f"Non-fatal, Link {link} Minion Link DLREQ interrupt" for link in (44, 45, 46)
    ]
    assert "Severity 0 Engine instance 44 Sub-engine instance 00" in events[0].raw
    assert "Data {0x0000002c," in events[0].raw.splitlines()[2]
    # The capture opens on the Data line of link 43, whose SXid line was not copied.
    assert len(warnings) == 1
    assert "Data {0x0000002b" in warnings[0].text
    assert warnings[0].message.startswith("SXid detail line without its SXid line")


def test_sxid_details_interleaved_with_gpu_lines_find_their_switch() -> None:
    name = "issue-nvtrust-124-sxid-continuations-interleaved-with-rminitadapter.log"
    events, warnings = parsed(read(name))
    init, link57, _link58 = events
    # The SXid line between RmInitAdapter failed! and rm_init_adapter is not the GPU's.
    assert "nvswitch" not in init.raw
    assert init.raw.splitlines()[0].endswith("osInitNvMapping failed, bailing out of RmInitAdapter")
    assert "Engine instance 57" in link57.raw and "0x00000039" in link57.raw
    # Link 56's details lost their SXid line in the cut: two warnings, no events.
    assert [("instance 56" in t, "0x00000038" in t) for t in warned(warnings)] == [
        (True, False),
        (False, True),
    ]


def test_xid_dump_lines_join_the_xid_and_unknown_lines_warn() -> None:
    name = "issue-open-gpu-kernel-modules-876-rminitadapter-then-xid120-gsp-crashcat.log"
    events, warnings = parsed(read(name))
    xid = events[1]
    assert xid.raw.splitlines()[1:] == [
        "[   87.526693] NVRM:     Reported by libos partition:4#5 kernel v3.1 [0] @ ts:2",
        "[   87.526694] NVRM:     RISC-V CSR State:",
    ]
    assert xid.message.startswith("GSP task exception: load access page fault")
    texts = warned(warnings)
    assert len(texts) == 2
    assert texts[0].startswith("NVRM: testIfDsmSubFunctionEnabled: GPS ACPI DSM called")
    assert texts[1].startswith("NVRM: kgspHealthCheck_TU102: ****")


@pytest.mark.parametrize(
    "line",
    [
        # Strings from leptonai/gpud components/accelerator/nvidia/xid/matcher_test.go.
        "NVRM: Xid error: xyz, invalid data",
        "NVRM: Xid (invalid): some error",
    ],
)
def test_unreadable_xid_lines_warn_and_are_not_events(line: str) -> None:
    events, warnings = parsed(line)
    assert events == ()
    assert [(w.message, w.text) for w in warnings] == [
        ("NVIDIA error line of a form this parser does not read", line)
    ]


def test_lines_of_other_drivers_neither_count_nor_warn() -> None:
    text = read("issue-cuda-samples-104-rminitadapter-journalctl-oops-between.log")
    events, warnings = parsed(text)
    assert len(events) == 1 and warnings == []


def test_every_existing_capture_reads_without_warnings_except_known_ones() -> None:
    noisy = {
        "issue-bumblebee-554-legacy-gpu-fallen-off-bus-no-xid.log",
        "issue-open-gpu-kernel-modules-1230-rminitadapter-gsp-wpr2-retry-loop.log",
        "issue-open-gpu-kernel-modules-876-rminitadapter-then-xid120-gsp-crashcat.log",
        "issue-nvtrust-124-sxid22013-severity-data-continuation.log",
        "issue-nvtrust-124-sxid-continuations-interleaved-with-rminitadapter.log",
    }
    for path in sorted(KLOG.glob("*.log")):
        _, warnings = parsed(path.read_text(encoding="utf-8"))
        assert bool(warnings) == (path.name in noisy), path.name


def test_an_xid_between_the_lines_of_a_stamped_notice_is_its_own_event() -> None:
    # Derived from issue-akash-support-209: the crash-dump notice with a stamp on every line
    # (older kernels), and a second GPU's XID 79 printed between its first two lines, as when
    # two GPUs behind one PCIe switch drop at once. The notice's lines may join each other,
    # never an XID.
    stamp = "[Fri Apr  5 21:29:39 2024]"
    lines = read(
        "issue-akash-support-209-xid79-fallen-off-bus-followup-crash-dump-dmesg-T.log"
    ).splitlines()
    notice = [f"{stamp} {line.strip()}" for line in lines[5:7]]
    second = lines[2].replace("PCI:0000:a1:00", "PCI:0000:c1:00")
    text = "\n".join([*lines[:5], second, *notice])
    events = parsed(text)[0]
    assert [(e.kind, e.code, e.pci_bus_id) for e in events] == [
        ("xid", 79, "0000:A1:00.0"),
        ("xid", 79, "0000:C1:00.0"),
    ]
