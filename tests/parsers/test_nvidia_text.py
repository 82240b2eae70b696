"""`nvidia-smi -q` plain text, on every real capture (whole reports and excerpts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuaudit.parsers.errors import ParseError
from gpuaudit.parsers.nvidia_text import parse_nvidia_smi_text, read_tree

Q = Path(__file__).parents[1] / "fixtures" / "nvidia-smi-q"
ALL_Q = sorted(Q.glob("*.txt"))


def read(name: str) -> str:
    return (Q / name).read_text(encoding="utf-8")


# file -> (GPU count, driver, first GPU's name, first and last bus id)
EXPECTED = {
    "azhc-8gpu-driver535.86.10-q-d-page-retirement.nvidia-smi-q.txt": (
        8, "535.86.10", None, "0001:00:00.0", "0008:00:00.0"
    ),
    "azhpc-4x-tesla-v100-pcie-16gb-driver460.nvidia-smi-q.txt": (
        4, "460.32.03", "Tesla V100-PCIE-16GB", "0001:00:00.0", "0004:00:00.0"
    ),
    "azhpc-8x-a100-sxm4-40gb-ndv4-driver460-mig-disabled.nvidia-smi-q.txt": (
        8, "460.32.03", "A100-SXM4-40GB", "0001:00:00.0", "000E:00:00.0"
    ),
    "gpud-8x-h100-80gb-hbm3-driver535.161.08-hw-slowdown.nvidia-smi-q.txt": (
        8, "535.161.08", "NVIDIA H100 80GB HBM3", "0000:19:00.0", "0000:DB:00.0"
    ),
    "gpud-8x-rtx4090-driver535.154.05.nvidia-smi-q.txt": (
        8, "535.154.05", "NVIDIA GeForce RTX 4090", "0000:01:00.0", "0000:E1:00.0"
    ),
    "gpud-titan-v-driver560.35.03.nvidia-smi-q.txt": (
        1, "560.35.03", "NVIDIA TITAN V", "0000:01:00.0", "0000:01:00.0"
    ),
    "mleng-a100-sxm4-80gb-8gpu-driver510-dram-ce177-row-remap-pending.nvidia-smi-q-excerpt.txt": (
        1, "510.73.08", "NVIDIA A100-SXM4-80GB", "0000:10:1C.0", "0000:10:1C.0"
    ),
    "mleng-ecc-sram-uncorrectable-volatile1-aggregate5.nvidia-smi-q-excerpt.txt": (
        1, None, None, None, None
    ),
    "thamada-4x-a100-sxm4-80gb-driver555.42.02.nvidia-smi-q.txt": (
        4, "555.42.02", "NVIDIA A100-SXM4-80GB", "0000:68:00.0", "0000:D4:00.0"
    ),
    "thamada-8x-h100-80gb-hbm3-driver565.57.01.nvidia-smi-q.txt": (
        8, "565.57.01", "NVIDIA H100 80GB HBM3", "0000:18:00.0", "0000:DB:00.0"
    ),
    "thamada-8x-rtx6000-ada-driver550.127.05.nvidia-smi-q.txt": (
        8, "550.127.05", "NVIDIA RTX 6000 Ada Generation", "0000:01:00.0", "0000:E1:00.0"
    ),
    "thamada-l4-driver550.90.07.nvidia-smi-q.txt": (
        1, "550.90.07", "NVIDIA L4", "0000:01:00.0", "0000:01:00.0"
    ),
    "thamada-l40s-driver550.127.05.nvidia-smi-q.txt": (
        1, "550.127.05", "NVIDIA L40S", "0000:A1:00.0", "0000:A1:00.0"
    ),
    "utk-h100-80gb-hbm3-driver590.nvidia-smi-q.txt": (
        1, "590.48.01", "NVIDIA H100 80GB HBM3", "0000:00:09.0", "0000:00:09.0"
    ),
    "utk-l40s-driver595.80-load.nvidia-smi-q.txt": (
        1, "595.80", "NVIDIA L40S", "0000:01:00.0", "0000:01:00.0"
    ),
    "issue-cubecos-312-4x-rtx-pro-6000-blackwell-driver580.105.06-q-d-memory-performance-"
    "truncated.txt": (
        1, "580.105.06", None, "0000:42:00.0", "0000:42:00.0"
    ),
    "issue-cudalibrarysamples-64-rtx3090-driver510.47.03-a-truncated.nvidia-smi-q.txt": (
        1, "510.47.03", "NVIDIA GeForce RTX 3090", "0000:07:00.0", "0000:07:00.0"
    ),
    "issue-nvidia-docker-1553-nvidia-smi-a-i0-unable-to-determine-device-handle.txt": (
        1, None, None, "0000:09:00.0", "0000:09:00.0"
    ),
    "issue-sysmon-12-gtx780-driver450.66-truncated.nvidia-smi-q.txt": (
        1, "450.66", "GeForce GTX 780", "0000:01:00.0", "0000:01:00.0"
    ),
    "jesse-rtx4070-laptop-wddm-driver566.36.nvidia-smi-q.txt": (
        1, "566.36", "NVIDIA GeForce RTX 4070 Laptop GPU", "0000:01:00.0", "0000:01:00.0"
    ),
    "utk-h100-mig-driver590-load.nvidia-smi-q.txt": (
        1, "590.48.01", "NVIDIA H100 80GB HBM3", "0000:00:09.0", "0000:00:09.0"
    ),
    "utk-h200-driver590-idle.nvidia-smi-q.txt": (
        1, "590.48.01", "NVIDIA H200", "0000:83:00.0", "0000:83:00.0"
    ),
    "utk-h200-mig-driver590-idle.nvidia-smi-q.txt": (
        1, "590.48.01", "NVIDIA H200", "0000:83:00.0", "0000:83:00.0"
    ),
    "utk-rtx2080super-driver610.57.04-kmd-version-idle.nvidia-smi-q.txt": (
        1, "610.57.04", "NVIDIA GeForce RTX 2080 SUPER", "0000:0C:00.0", "0000:0C:00.0"
    ),
    "utk-rtx2080super-windows-wddm-driver591.86-idle.nvidia-smi-q.txt": (
        1, "591.86", "NVIDIA GeForce RTX 2080 SUPER", "0000:0C:00.0", "0000:0C:00.0"
    ),
    "utk-rtx2080super-windows-wddm-driver610.62-load.nvidia-smi-q.txt": (
        1, "610.62", "NVIDIA GeForce RTX 2080 SUPER", "0000:0C:00.0", "0000:0C:00.0"
    ),
    "utk-rtx4080super-driver595.71.05-load.nvidia-smi-q.txt": (
        1, "595.71.05", "NVIDIA GeForce RTX 4080 SUPER", "0000:01:00.0", "0000:01:00.0"
    ),
}  # fmt: skip
# Captures of a GPU nvidia-smi could not reach: the one GPU reads as an error.
FAILED = {"issue-nvidia-docker-1553-nvidia-smi-a-i0-unable-to-determine-device-handle.txt"}


def test_every_capture_has_expectations() -> None:
    assert sorted(EXPECTED) == [p.name for p in ALL_Q]


@pytest.mark.parametrize("path", ALL_Q, ids=lambda p: p.name)
def test_every_capture_parses(path: Path) -> None:
    count, driver, name, first_bus, last_bus = EXPECTED[path.name]
    log = parse_nvidia_smi_text(path.read_text(encoding="utf-8"))
    assert len(log.gpus) == count
    assert log.driver_version == driver
    assert [g.index for g in log.gpus] == list(range(count))
    assert {g.status for g in log.gpus} == ({"error"} if path.name in FAILED else {"ok"})
    assert {g.vendor for g in log.gpus} == {"nvidia"}
    assert log.gpus[0].name == name
    assert (log.gpus[0].pci_bus_id, log.gpus[-1].pci_bus_id) == (first_bus, last_bus)
    assert {g.driver_version for g in log.gpus} == {driver}


def test_h100_hgx_hw_slowdown_and_pcie_replays() -> None:
    log = parse_nvidia_smi_text(
        read("gpud-8x-h100-80gb-hbm3-driver535.161.08-hw-slowdown.nvidia-smi-q.txt")
    )
    assert (log.cuda_version, log.attached_gpus) == ("12.2", 8)
    assert log.timestamp == "Wed Jul 31 11:22:39 2024"
    # "HW Slowdown : Active" is a heading with children; both levels are reasons.
    assert {g.clock_event_reasons for g in log.gpus} == {("hw_slowdown", "hw_power_brake_slowdown")}
    assert [g.pcie_replay_count for g in log.gpus] == [67, 63, 52, 43, 49, 53, 82, 67]
    gpu = log.gpus[0]
    assert gpu.uuid == "GPU-ee7954ec-da95-fd7a-ddfd-c6b32cc2f8aa"
    assert gpu.serial == "1650124031592"
    assert gpu.architecture == "Hopper"
    assert gpu.vbios_version == "96.00.74.00.0D"
    assert gpu.inforom_image == "G520.0200.00.05"
    assert (gpu.memory_total_mib, gpu.memory_used_mib) == (81559, 0)
    assert gpu.power_draw_w == pytest.approx(67.74) and gpu.power_limit_w == 700.0
    assert gpu.temperature_c == 29.0
    # Only "GPU Slowdown T.Limit Temp" (a margin, -2 C) is printed: no absolute threshold.
    assert gpu.temperature_slowdown_c is None
    assert (gpu.pcie_gen_current, gpu.pcie_gen_max) == (5, 5)
    assert (gpu.pcie_width_current, gpu.pcie_width_max) == (16, 16)
    assert (gpu.mig_mode_current, gpu.mig_mode_pending) == ("Disabled", "Disabled")
    assert gpu.persistence_mode is True
    assert (gpu.reset_required, gpu.drain_and_reset_recommended) == (False, False)
    # SRAM uncorrectable is printed split into Parity and SEC-DED.
    assert gpu.ecc_aggregate.sram_uncorrected == 0 and gpu.ecc_aggregate.uncorrected == 0
    assert gpu.remapped_rows.pending is False
    assert gpu.unavailable["retired_pages.single_bit"] == "not_applicable"


def test_mleng_a100_excerpt_row_remap_pending() -> None:
    log = parse_nvidia_smi_text(
        read(
            "mleng-a100-sxm4-80gb-8gpu-driver510-dram-ce177-row-remap-pending"
            ".nvidia-smi-q-excerpt.txt"
        )
    )
    # The excerpt keeps one of eight GPUs: the gap stays visible.
    assert log.attached_gpus == 8 and len(log.gpus) == 1
    gpu = log.gpus[0]
    assert gpu.remapped_rows.correctable == 1
    assert gpu.remapped_rows.uncorrectable == 0
    assert gpu.remapped_rows.pending is True
    assert gpu.remapped_rows.failure is False
    assert gpu.ecc_volatile.dram_corrected == 177 and gpu.ecc_aggregate.dram_corrected == 177
    assert gpu.ecc_aggregate.corrected == 177 and gpu.ecc_aggregate.uncorrected == 0
    assert gpu.retired_pages.pending is None
    assert gpu.unavailable["retired_pages.pending"] == "not_applicable"
    # "[...]" marks lines the author cut; fields from those lines stay unknown, not N/A.
    assert gpu.memory_total_mib is None and "memory_total_mib" not in gpu.unavailable


def test_mleng_ecc_excerpt_without_gpu_heading() -> None:
    log = parse_nvidia_smi_text(
        read("mleng-ecc-sram-uncorrectable-volatile1-aggregate5.nvidia-smi-q-excerpt.txt")
    )
    assert len(log.gpus) == 1
    gpu = log.gpus[0]
    assert (gpu.ecc_volatile.sram_uncorrected, gpu.ecc_aggregate.sram_uncorrected) == (1, 5)
    assert (gpu.ecc_volatile.uncorrected, gpu.ecc_aggregate.uncorrected) == (1, 5)
    assert gpu.ecc_volatile.dram_uncorrected == 0 and gpu.ecc_volatile.corrected == 0
    assert gpu.pci_bus_id is None and gpu.name is None


def test_v100_legacy_ecc_retired_pages_and_throttle_heading() -> None:
    log = parse_nvidia_smi_text(read("azhpc-4x-tesla-v100-pcie-16gb-driver460.nvidia-smi-q.txt"))
    gpu = log.gpus[0]
    assert gpu.ecc_mode_current == "Enabled"  # printed as "Ecc Mode"
    assert (gpu.ecc_volatile.corrected, gpu.ecc_aggregate.uncorrected) == (0, 0)
    assert gpu.ecc_aggregate.sram_uncorrected is None  # not split before Ampere
    assert (gpu.retired_pages.single_bit, gpu.retired_pages.double_bit) == (0, 0)
    assert gpu.retired_pages.pending is False
    assert gpu.remapped_rows.pending is None
    assert gpu.unavailable["remapped_rows"] == "not_applicable"  # "Remapped Rows : N/A"
    assert gpu.power_draw_w == pytest.approx(36.38) and gpu.power_limit_w == 250.0
    assert gpu.temperature_slowdown_c == 87.0
    assert gpu.persistence_mode is False
    assert gpu.unavailable["mig_mode_current"] == "not_applicable"
    # Older drivers call them "Clocks Throttle Reasons"; the names come out the same.
    active = read("azhpc-4x-tesla-v100-pcie-16gb-driver460.nvidia-smi-q.txt").replace(
        "        SW Power Cap                      : Not Active",
        "        SW Power Cap                      : Active",
        1,
    )
    assert parse_nvidia_smi_text(active).gpus[0].clock_event_reasons == ("sw_power_cap",)


def test_page_retirement_only_report_of_an_azure_vm() -> None:
    log = parse_nvidia_smi_text(
        read("azhc-8gpu-driver535.86.10-q-d-page-retirement.nvidia-smi-q.txt")
    )
    assert log.attached_gpus == 8
    for gpu in log.gpus:
        assert (gpu.retired_pages.single_bit, gpu.retired_pages.double_bit) == (0, 0)
        assert gpu.retired_pages.pending is False
        assert gpu.name is None and gpu.memory_total_mib is None


def test_a100_with_dram_errors_and_one_pending_remap() -> None:
    log = parse_nvidia_smi_text(read("thamada-4x-a100-sxm4-80gb-driver555.42.02.nvidia-smi-q.txt"))
    assert [g.ecc_aggregate.dram_corrected for g in log.gpus] == [0, 353, 0, 0]
    assert [g.remapped_rows.correctable for g in log.gpus] == [0, 1, 1, 0]
    assert [g.remapped_rows.pending for g in log.gpus] == [False, True, False, False]
    assert log.gpus[0].temperature_slowdown_c == 89.0


def test_links_and_ecc_by_product() -> None:
    l4 = parse_nvidia_smi_text(read("thamada-l4-driver550.90.07.nvidia-smi-q.txt")).gpus[0]
    assert (l4.pcie_width_current, l4.pcie_width_max) == (8, 16)
    assert (l4.pcie_gen_current, l4.pcie_gen_max) == (1, 4)
    titan = parse_nvidia_smi_text(read("gpud-titan-v-driver560.35.03.nvidia-smi-q.txt")).gpus[0]
    assert titan.architecture == "Volta"
    assert (titan.pcie_gen_current, titan.pcie_gen_max) == (1, 3)
    assert titan.ecc_mode_current is None and titan.ecc_aggregate.corrected is None
    assert titan.unavailable["ecc_aggregate.corrected"] == "not_applicable"
    rtx = parse_nvidia_smi_text(read("gpud-8x-rtx4090-driver535.154.05.nvidia-smi-q.txt")).gpus
    assert {g.ecc_mode_current for g in rtx} == {"Disabled"}
    assert rtx[1].utilization_gpu_pct == 100.0 and rtx[1].memory_used_mib == 21356


def test_newest_drivers_average_and_instantaneous_power() -> None:
    h100 = parse_nvidia_smi_text(read("utk-h100-80gb-hbm3-driver590.nvidia-smi-q.txt")).gpus[0]
    # 590 prints Average (69.85 W) and Instantaneous (69.62 W): the instantaneous reading wins,
    # as it does in the XML.
    assert h100.power_draw_w == pytest.approx(69.62)
    assert h100.recovery_action == "None"
    assert h100.reset_required is None  # no "GPU Reset Status" block in 590
    assert h100.pcie_replay_count == 9
    l40s = parse_nvidia_smi_text(read("utk-l40s-driver595.80-load.nvidia-smi-q.txt")).gpus[0]
    assert l40s.utilization_gpu_pct == 9.0 and l40s.memory_used_mib == 1235
    assert l40s.clock_event_reasons == ()


def test_tree_reader_keeps_values_with_children() -> None:
    tree = read_tree(
        "GPU 00000000:19:00.0\n"
        "    Clocks Event Reasons\n"
        "        HW Slowdown                       : Active\n"
        "            HW Thermal Slowdown           : Not Active\n"
        "    GPU Memory Power Readings \n"
        "        Average Power Draw                : 43.19 W\n"
    )
    gpu = tree.children[0]
    assert gpu.label == "GPU 00000000:19:00.0" and gpu.value is None
    slowdown = gpu.find("clocks event reasons/HW  Slowdown")
    assert slowdown is not None and slowdown.value == "Active"
    assert [c.label for c in slowdown.children] == ["HW Thermal Slowdown"]
    assert gpu.get("GPU Memory Power Readings/Average Power Draw") == "43.19 W"


def test_unknown_error_marks_the_gpu_and_the_field() -> None:
    text = read("thamada-l40s-driver550.127.05.nvidia-smi-q.txt").replace(
        ": NVIDIA L40S", ": Unknown Error", 1
    )
    gpu = parse_nvidia_smi_text(text).gpus[0]
    assert gpu.status == "error" and "Product Name" in gpu.status_detail
    assert gpu.name is None and gpu.unavailable["name"] == "unreadable"
    assert gpu.memory_total_mib == 46068  # the rest still reads


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   \n",
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
        '<?xml version="1.0" ?>\n<nvidia_smi_log></nvidia_smi_log>\n',
        "Mon Jan 20 10:18:26 2025\n+------+\n| NVIDIA-SMI 550.90.07  Driver Version: 550.90.07 |\n",
        "colour : blue\nshape  : round\n",
        "\x00\x01\x02 : \ufffd\n",
    ],
)
def test_refuses_what_is_not_a_report(text: str) -> None:
    with pytest.raises(ParseError):
        parse_nvidia_smi_text(text)


def test_memory_repair_and_the_sram_threshold_are_read() -> None:
    """The H200's text report (driver 590): the repair states and the SRAM threshold, as
    printed ("No"), and each set to "Yes" in the same report."""
    text = read("utk-h200-driver590-idle.nvidia-smi-q.txt")
    (gpu,) = parse_nvidia_smi_text(text).gpus
    fields = ("channel_repair_pending", "tpc_repair_pending", "unrepairable_memory",
              "sram_threshold_exceeded")  # fmt: skip
    assert [getattr(gpu, name) for name in fields] == [False] * 4
    labels = ("Channel Repair Pending", "TPC Repair Pending", "Unrepairable Memory",
              "SRAM Threshold Exceeded")  # fmt: skip
    for name, label in zip(fields, labels, strict=True):
        start = text.index(label)
        line_end = text.index("\n", start)
        changed = text[:line_end].removesuffix("No") + "Yes" + text[line_end:]
        (flagged,) = parse_nvidia_smi_text(changed).gpus
        assert getattr(flagged, name) is True, name
