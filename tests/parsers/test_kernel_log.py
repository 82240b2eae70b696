from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from gpuaudit.model.snapshot import Gpu, XidEvent
from gpuaudit.parsers.kernel_log import parse_earlier_boots, parse_kernel_log, resolve_gpus
from gpuaudit.parsers.nvidia_xml import parse_nvidia_smi_xml

FIXTURES = Path(__file__).parents[1] / "fixtures"
KLOG = FIXTURES / "kernel-log"
ALL_LOGS = sorted(KLOG.glob("*.log"))


def events_of(name: str) -> tuple[XidEvent, ...]:
    return parse_kernel_log((KLOG / name).read_text(encoding="utf-8"))


def codes(name: str) -> Counter[tuple[str, int | None, str | None]]:
    return Counter((e.kind, e.code, e.pci_bus_id) for e in events_of(name))


@pytest.mark.parametrize("path", ALL_LOGS, ids=lambda p: p.name)
def test_every_capture_yields_events(path: Path) -> None:
    events = parse_kernel_log(path.read_text(encoding="utf-8"))
    assert events
    for event in events:
        assert event.kind in ("xid", "sxid", "fallen_off_bus", "init_failed")
        # Only drivers of before 2017 print an adapter failure without the bus id.
        if event.kind != "init_failed" or event.pci_bus_id:
            assert event.pci_bus_id and event.pci_bus_id.endswith(".0")
        assert event.raw.strip() and event.gpu_index is None


def test_xid_flood_counts_every_line() -> None:
    counted = codes("gpud-xid13-flood-629-lines-xid43.log")
    assert counted == {("xid", 13, "0000:38:00.0"): 629, ("xid", 43, "0000:38:00.0"): 7}


def test_dmesg_iso_decode_timestamps_and_other_lines_skipped() -> None:
    events = events_of("gpud-xid13-xid43-dmesg-decode-iso.log")
    assert Counter(e.code for e in events) == {13: 16, 43: 1}
    assert events[0].timestamp == "2025-01-21T04:41:44,283302+00:00"


def test_dbe_row_remap_contained() -> None:
    events = events_of("gpud-xid48-dbe-xid63-rowremap-xid94-contained.log")
    assert [e.code for e in events[:3]] == [48, 63, 94]
    assert Counter(e.code for e in events) == {48: 1, 63: 1, 94: 9}
    assert events[0].timestamp == "2024-11-15T12:02:03,470068+00:00"
    assert events[0].message.endswith("partition 2, subpartition 1.")
    assert "An uncorrectable double bit error (DBE)" in events[0].message


def test_ctime_timestamps() -> None:
    events = events_of("gpud-xid13-xid109-ctx-switch-timeout-dmesg-ctime.log")
    assert [e.code for e in events] == [13, 13, 13, 109]
    assert events[-1].timestamp == "[Fri Aug 30 11:43:14 2024]"
    assert "CTX SWITCH TIMEOUT" in events[-1].message
    assert events[-1].pci_bus_id == "0000:CB:00.0"


def test_gsp_timeout_ignores_rpc_history_lines() -> None:
    assert codes("gpud-xid119-gsp-rpc-timeout-dell-xe9680.log") == {("xid", 119, "0000:9B:00.0"): 5}


def test_legacy_fallen_off_bus_without_xid() -> None:
    events = events_of("issue-bumblebee-554-legacy-gpu-fallen-off-bus-no-xid.log")
    assert [(e.kind, e.code, e.pci_bus_id) for e in events] == [
        ("fallen_off_bus", None, "0000:01:00.0")
    ] * 2
    assert events[0].timestamp == "[   49.261458]"


def test_journalctl_prefix() -> None:
    events = events_of("issue-dxvk-1799-xid31-mmu-fault-journalctl-k-rtx2080.log")
    assert [e.code for e in events] == [31, 31]
    assert events[0].timestamp == "Nov 29 11:28:11"
    assert events[0].message.startswith("pid=12890, Ch 0000003b")


def test_caused_by_previous_xid_is_not_a_second_event() -> None:
    name = "issue-open-gpu-kernel-modules-1150-xid45-caused-by-previous-xid149-xid145.log"
    counted = codes(name)
    assert sum(counted.values()) == 7
    assert {code for _kind, code, _bus in counted} == {45}
    assert all(e.timestamp is None for e in events_of(name))  # bare "kernel:" prefix


def test_nvlink_xids_on_non_zero_pci_domains() -> None:
    counted = codes("gpud-xid145-xid149-nvlink-rlw-netir-gb200.log")
    assert counted[("xid", 149, "0019:01:00.0")] == 1
    assert counted[("xid", 145, "0008:01:00.0")] == 3


def test_bare_lines_and_device_number_in_bus_id() -> None:
    (event,) = events_of("mleng-xid63-row-remapper-a100.log")
    assert (event.code, event.pci_bus_id, event.timestamp) == (63, "0000:10:1C.0", None)
    assert events_of("issue-open-gpu-kernel-modules-363-xid31-chrome-gtx1660ti-no-timestamps.log")


def test_sxid_nvswitch_line() -> None:
    # One SXid line as the NVSwitch driver prints it (captures: issue-nvtrust-124-*.log).
    line = "[ 123.456789] nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): 20009, Non-fatal, Link 28 RX"
    (event,) = parse_kernel_log(line)
    assert (event.kind, event.code, event.pci_bus_id) == ("sxid", 20009, "0000:C3:00.0")
    assert event.message == "Non-fatal, Link 28 RX"
    assert event.timestamp == "[ 123.456789]"


def test_modern_xid79_fallen_off_bus_is_an_xid() -> None:
    line = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus."
    (event,) = parse_kernel_log(line)
    assert (event.kind, event.code, event.pci_bus_id) == ("xid", 79, "0000:3B:00.0")


@pytest.mark.parametrize(
    "text",
    ["", "random kernel line\n", "NVRM: loading NVIDIA UNIX x86_64 Kernel Module", "\x00\xff"],
)
def test_noise_yields_nothing(text: str) -> None:
    assert parse_kernel_log(text) == ()


def test_resolve_against_real_xml_bus_ids() -> None:
    gpus = parse_nvidia_smi_xml(
        (FIXTURES / "nvidia-smi-xml" / "telegraf-2x-rtx2070-driver590-v13.xml").read_text()
    ).gpus
    events = resolve_gpus(
        events_of("issue-bumblebee-554-legacy-gpu-fallen-off-bus-no-xid.log"), gpus
    )
    assert [e.gpu_index for e in events] == [0, 0]

    windows = parse_nvidia_smi_xml(
        (FIXTURES / "nvidia-smi-xml" / "netdata-rtx2080-windows-wddm-driver516.xml").read_text()
    ).gpus
    chia = resolve_gpus(
        events_of("issue-chia-gigahorse-301-xid31-ce2-priv-violation-xid62-xid45-dmesg.log"),
        windows,
    )
    assert {e.gpu_index for e in chia} == {0}
    assert [e.code for e in chia[:3]] == [31, 62, 45]


def test_resolve_leaves_unknown_bus_unresolved_and_handles_domains() -> None:
    gpus = (
        Gpu(index=0, pci_bus_id="0008:01:00.0"),
        Gpu(index=1, pci_bus_id="0018:01:00.0"),
        Gpu(index=2, pci_bus_id=None),
    )
    events = resolve_gpus(events_of("gpud-xid145-xid149-nvlink-rlw-netir-gb200.log"), gpus)
    by_bus = {e.pci_bus_id: e.gpu_index for e in events}
    assert by_bus == {"0008:01:00.0": 0, "0018:01:00.0": 1, "0019:01:00.0": None}


# On a MIG GPU the driver names the GPU instance (and the compute instance) inside the
# parenthesis: the format strings of kernel_rc.c in NVIDIA/open-gpu-kernel-modules, and the
# XID 94 example of NVIDIA's "GPU Memory Error Management" guide (the first line below).
@pytest.mark.parametrize(
    ("line", "code", "bus", "message"),
    [
        (
            "NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel "
            "(0x9). RST: No, D-RST: No",
            94,
            "0000:01:00.0",
            "GPU-I:05, pid=7194, Contained: CE User Channel (0x9). RST: No, D-RST: No",
        ),
        (
            "[ 4021.117603] NVRM: Xid (PCI:0000:3b:00 GPU-I:01 GPU-CI:02): 13, pid=9, name=a, "
            "Graphics Exception",
            13,
            "0000:3B:00.0",
            "GPU-I:01 GPU-CI:02, pid=9, name=a, Graphics Exception",
        ),
    ],
)
def test_xid_on_a_mig_instance_is_an_xid_of_its_gpu(
    line: str, code: int, bus: str, message: str
) -> None:
    (event,) = parse_kernel_log(line)
    assert (event.kind, event.code, event.pci_bus_id) == ("xid", code, bus)
    assert event.message == message  # the instance the driver named stays in the message
    (resolved,) = resolve_gpus((event,), (Gpu(index=3, pci_bus_id=bus),))
    assert resolved.gpu_index == 3


# Derived from gpud-xid13-xid43-dmesg-decode-iso.log: the same line as ``dmesg --decode``
# prints it with its default time format, and with -T, instead of --time-format=iso. The
# facility and level come before the stamp, which is still the line's time.
@pytest.mark.parametrize(
    ("stamp", "expected"),
    [
        ("[ 7311.283302]", "[ 7311.283302]"),
        ("[Tue Jan 21 04:41:44 2025]", "[Tue Jan 21 04:41:44 2025]"),
        ("2025-01-21T04:41:44,283302+00:00", "2025-01-21T04:41:44,283302+00:00"),
    ],
)
def test_dmesg_decode_prefix_keeps_the_stamp_after_it(stamp: str, expected: str) -> None:
    line = (
        f"kern  :warn  : {stamp} NVRM: Xid (PCI:0000:38:00): 13, pid='<unknown>', "
        "name=<unknown>, Graphics SM Global Exception on (GPC 8, TPC 5, SM 1): Multiple Warp Errors"
    )
    (event,) = parse_kernel_log(line)
    assert (event.code, event.pci_bus_id, event.timestamp) == (13, "0000:38:00.0", expected)


# --- the boots before this one (kernel_log_previous) -------------------------------------------

JOURNAL_A = "issue-dxvk-1799-xid31-mmu-fault-journalctl-k-rtx2080.log"
JOURNAL_B = "issue-open-gpu-kernel-modules-1151-rm-init-adapter-osinitnvmapping-journalctl.log"


def _boot_text(name: str) -> str:
    return (KLOG / name).read_text(encoding="utf-8").rstrip("\n")


def _untagged(events: tuple[XidEvent, ...]) -> list[XidEvent]:
    return [replace(e, boot=None) for e in events]


def test_earlier_boots_are_read_one_by_one_and_tagged() -> None:
    a, b = _boot_text(JOURNAL_A), _boot_text(JOURNAL_B)
    events = parse_earlier_boots(f"-- boot -3 --\n{a}\n-- boot -2 --\n-- boot -1 --\n{b}\n")
    first, second = parse_kernel_log(a), parse_kernel_log(b)
    assert first and second
    assert [e.boot for e in events] == [-3] * len(first) + [-1] * len(second)
    assert _untagged(events) == [*first, *second]


def test_lines_before_the_first_boot_line_are_the_boot_before_it() -> None:
    """The log was cut to its newest bytes inside boot -3's lines: its line went with them."""
    a, b = _boot_text(JOURNAL_A), _boot_text(JOURNAL_B)
    events = parse_earlier_boots(f"{a}\n-- boot -2 --\n{b}\n")
    assert {e.boot for e in events[: len(parse_kernel_log(a))]} == {-3}
    assert {e.boot for e in events[len(parse_kernel_log(a)) :]} == {-2}


def test_a_log_without_boot_lines_is_the_boot_before_this_one() -> None:
    """What a collector that read boot -1 alone sent; also a cut inside boot -1's lines."""
    a = _boot_text(JOURNAL_A)
    events = parse_earlier_boots(a)
    assert events and {e.boot for e in events} == {-1}
    assert _untagged(events) == list(parse_kernel_log(a))


def test_a_message_does_not_continue_across_a_reboot() -> None:
    text = (
        "-- boot -2 --\n"
        "Nov 20 10:00:00 h kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen\n"
        "-- boot -1 --\n"
        "                          NVRM: off the bus.\n"
    )
    events = parse_earlier_boots(text)
    assert [(e.boot, e.code) for e in events if e.kind == "xid"] == [(-2, 79)]
    assert "off the bus." not in events[0].raw


def test_a_boot_line_must_be_the_whole_line() -> None:
    """Host text that says "-- boot -9 --" inside a kernel line marks no boot."""
    text = "Nov 20 10:00:00 h kernel: NVRM: Xid (PCI:0000:3b:00): 13, -- boot -9 --\n"
    (event,) = parse_earlier_boots(text)
    assert event.boot == -1
