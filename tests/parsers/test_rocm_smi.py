from __future__ import annotations

from pathlib import Path

import pytest

from gpuaudit.parsers.errors import ParseError
from gpuaudit.parsers.rocm_smi import parse_rocm_smi_concise, parse_rocm_smi_json

FIXTURES = Path(__file__).parents[1] / "fixtures"
ROCM = FIXTURES / "rocm-smi"
ALL_JSON = sorted(ROCM.glob("*.json"))


def read(name: str) -> str:
    return (ROCM / name).read_text(encoding="utf-8")


@pytest.mark.parametrize("path", ALL_JSON, ids=lambda p: p.name)
def test_every_json_capture_parses(path: Path) -> None:
    gpus = parse_rocm_smi_json(path.read_text(encoding="utf-8"))
    assert gpus
    for gpu in gpus:
        assert gpu.vendor == "amd" and gpu.status == "ok"
        assert gpu.memory_total_mib and gpu.memory_total_mib > 1000
        assert gpu.temperature_c is not None


def test_mi100_six_cards_with_system_driver() -> None:
    gpus = parse_rocm_smi_json(read("telegraf-mi100-rocm5.7.1.json"))
    assert [g.index for g in gpus] == [0, 1, 2, 3, 4, 5]
    assert {g.name for g in gpus} == {"Arcturus GL-XL [Instinct MI100]"}
    assert {g.driver_version for g in gpus} == {"6.2.4"}
    assert gpus[0].pci_bus_id == "0000:1E:00.0" and gpus[1].pci_bus_id == "0000:22:00.0"
    assert gpus[0].vbios_version == "113-D3430400-037"
    assert gpus[0].memory_total_mib == 34342961152 // (1024 * 1024)
    assert gpus[0].power_limit_w == 290.0 and gpus[0].power_draw_w == 39.0
    assert (gpus[0].pcie_gen_current, gpus[0].pcie_width_current) == (3, 16)  # 8.0GT/s x16
    assert gpus[0].uuid is None  # "N/A"


def test_rocm61_key_renames() -> None:
    (gpu,) = parse_rocm_smi_json(read("telegraf-rx6700xt-rocm6.1.2.json"))
    assert gpu.name == "Navi 22 [Radeon RX 6700/6700 XT / 6800M]"  # "Card Series"
    assert gpu.architecture == "gfx1031"
    assert (gpu.pcie_gen_current, gpu.pcie_width_current) == (4, 16)
    assert gpu.driver_version == "6.3.6"


def test_rocm43_vendor_id_is_not_a_name() -> None:
    (gpu,) = parse_rocm_smi_json(read("telegraf-rx6700xt-rocm4.3.0.json"))
    assert gpu.name is None  # "Card series": "0x1002" is the PCI vendor id
    assert gpu.pci_bus_id == "0000:07:00.0"


def test_secondary_die_power_is_none() -> None:
    (gpu,) = parse_rocm_smi_json(read("telegraf-rx6700xt-rocm6.0.2.json"))
    assert gpu.power_draw_w is None  # "N/A (Secondary die)"


def test_device_name_only_subset() -> None:
    (gpu,) = parse_rocm_smi_json(read("gpustack-rx7800xt-navi32-rocm6.2.4.json"))
    assert gpu.name == "Navi 32 [Radeon RX 7700 XT / 7800 XT]"
    assert gpu.memory_used_mib == 11615076352 // (1024 * 1024)
    assert gpu.utilization_gpu_pct == 100.0
    assert gpu.pci_bus_id is None and gpu.driver_version is None


def test_vega20_serial_and_name() -> None:
    (gpu,) = parse_rocm_smi_json(read("telegraf-vega20-wks-gl-xe.json"))
    assert (gpu.name, gpu.serial) == ("Radeon Instinct MI50 32GB", "692024000810")
    assert gpu.driver_version == "5.9.17"


def test_concise_table_mi300x() -> None:
    gpus = parse_rocm_smi_concise(read("thamada-4x-mi300x-rocm-smi-concise.txt"))
    assert [g.index for g in gpus] == [0, 1, 2, 3]
    assert {g.name for g in gpus} == {"AMD Instinct MI300X"}
    assert [g.temperature_c for g in gpus] == [35.0, 37.0, 34.0, 38.0]
    assert gpus[3].power_draw_w == 137.0 and gpus[3].power_limit_w == 750.0


def test_concise_text_is_not_json() -> None:
    with pytest.raises(ParseError):
        parse_rocm_smi_json(read("thamada-4x-mi300x-rocm-smi-concise.txt"))


@pytest.mark.parametrize("text", ["", "[]", '{"system": {}}', "{not json", '{"card0": "x"}'])
def test_garbage_raises_parse_error(text: str) -> None:
    with pytest.raises(ParseError):
        parse_rocm_smi_json(text)
