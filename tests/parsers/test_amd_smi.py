"""amd-smi JSON: the real captures in tests/fixtures/amd-smi (list and "gpu_data" shapes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuaudit.parsers.amd_smi import parse_amd_smi_json
from gpuaudit.parsers.errors import ParseError

AMD_SMI = Path(__file__).parents[1] / "fixtures" / "amd-smi"
STATIC = "luckylinux-rx6600-amd-smi-static.json"
METRIC = "luckylinux-rx6600-amd-smi-metric.json"
MI210 = "devmetrics-mi210-amd-smi-static-gpu-data.json"


def read(name: str) -> str:
    return (AMD_SMI / name).read_text(encoding="utf-8")


@pytest.mark.parametrize("path", sorted(AMD_SMI.glob("*.json")), ids=lambda p: p.name)
def test_every_capture_parses(path: Path) -> None:
    (gpu,) = parse_amd_smi_json(path.read_text(encoding="utf-8"))
    assert gpu.index == 0 and gpu.vendor == "amd" and gpu.status == "ok"
    assert gpu.memory_total_mib and gpu.memory_total_mib > 1000


def test_static_list_shape_rx6600() -> None:
    (gpu,) = parse_amd_smi_json(read(STATIC))
    assert gpu.name == "Navi 23 [Radeon RX 6600/6600 XT"  # cut short as printed
    assert gpu.pci_bus_id == "0000:0B:00.0"
    # The part number, as rocm-smi's "VBIOS version" printed it on the same host.
    assert gpu.vbios_version == "115-D534P00-100"
    assert gpu.driver_version == "7.0.0-3-pve"
    assert gpu.memory_total_mib == 8176  # "MB" are MiB
    assert (gpu.pcie_gen_max, gpu.pcie_width_max) == (4, 16)  # 16 GT/s
    assert gpu.power_limit_w == 100.0 and gpu.temperature_slowdown_c == 100.0
    assert gpu.serial is None and gpu.unavailable["serial"] == "not_applicable"
    # Metric-only fields are absent, not N/A: no reason recorded.
    assert gpu.temperature_c is None and "temperature_c" not in gpu.unavailable


def test_metric_list_shape_rx6600() -> None:
    (gpu,) = parse_amd_smi_json(read(METRIC))
    assert gpu.name is None and gpu.pci_bus_id is None  # metric names no device
    assert gpu.utilization_gpu_pct == 1.0 and gpu.power_draw_w == 6.0
    assert gpu.temperature_c == 36.0  # edge, not hotspot (37)
    assert (gpu.memory_total_mib, gpu.memory_used_mib) == (8176, 202)
    assert (gpu.pcie_gen_current, gpu.pcie_width_current) == (4, 8)  # x8 in an x16 slot
    assert (gpu.ecc_volatile.corrected, gpu.ecc_volatile.uncorrected) == (0, 0)
    assert gpu.pcie_replay_count is None
    assert gpu.unavailable == {"pcie_replay_count": "not_applicable"}


def test_static_then_metric_merge_into_one_gpu() -> None:
    # What the collector's amd_smi section holds: both documents, one after the other.
    (gpu,) = parse_amd_smi_json(read(STATIC) + read(METRIC))
    assert gpu.pci_bus_id == "0000:0B:00.0" and gpu.power_draw_w == 6.0
    assert (gpu.pcie_width_current, gpu.pcie_width_max) == (8, 16)
    assert gpu.unavailable == {"serial": "not_applicable", "pcie_replay_count": "not_applicable"}


def test_gpu_data_shape_mi210() -> None:
    (gpu,) = parse_amd_smi_json(read(MI210))
    assert gpu.name == "AMD Instinct MI210" and gpu.architecture == "gfx90a"
    assert gpu.memory_total_mib == 65520
    assert gpu.power_limit_w == 300.0 and gpu.temperature_slowdown_c == 99.0
    assert (gpu.pcie_gen_max, gpu.pcie_width_max) == (4, 16)
    assert gpu.serial == "0"  # as printed
    assert gpu.driver_version is not None and gpu.driver_version.startswith("Linuxversion6.14")
    # This capture's bus group has no bdf, and its vbios group only a name.
    assert gpu.pci_bus_id is None and gpu.vbios_version is None


def test_value_objects_units_and_no_value_spellings() -> None:
    text = (
        '[{"gpu": 1, "mem_usage": {"total_vram": {"value": 17163091968, "unit": "B"}},'
        ' "pcie": {"speed": {"value": 16000, "unit": "MT/s"}, "width": "N/A"},'
        ' "power": {"socket_power": {"value": "N/A", "unit": "W"}},'
        ' "temperature": {"edge": "N/A", "hotspot": {"value": 41, "unit": "C"}}}]'
    )
    (gpu,) = parse_amd_smi_json(text)
    assert gpu.index == 1 and gpu.memory_total_mib == 16368
    assert gpu.pcie_gen_current == 4 and gpu.temperature_c == 41.0
    assert gpu.unavailable == {
        "pcie_width_current": "not_applicable",
        "power_draw_w": "not_applicable",
    }


@pytest.mark.parametrize(
    "text",
    ["", "   ", "not json", "[1, 2]", '{"card0": {}}', '[{"asic": {}}]', "[]", '[{"gpu": 0}] {'],
)
def test_garbage_raises_parse_error(text: str) -> None:
    with pytest.raises(ParseError):
        parse_amd_smi_json(text)


def test_a_warning_printed_before_the_json_is_not_part_of_it() -> None:
    """amd-smi prints its missing-groups warning on stdout ahead of --json output (ROCm amdsmi
    pull request 114): the GPUs after it are read all the same."""
    warning = (
        "WARNING: User is missing the following required groups: render, video. "
        "Please add user to these groups.\n"
    )
    for name in (STATIC, METRIC):
        assert parse_amd_smi_json(warning + read(name)) == parse_amd_smi_json(read(name))
    with pytest.raises(ParseError, match=r"no GPU objects|not JSON"):
        parse_amd_smi_json(warning)
