"""`rocm-smi --showallinfo` text (``rocm-smi -a``) of a 4x MI300X host."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuaudit.parsers.errors import ParseError
from gpuaudit.parsers.rocm_smi import parse_rocm_smi_showallinfo
from gpuaudit.parsers.warnings import collecting

ROCM = Path(__file__).parents[1] / "fixtures" / "rocm-smi"
MI300X = "thamada-4x-mi300x-rocm-smi-showallinfo.txt"


def read(name: str) -> str:
    return (ROCM / name).read_text(encoding="utf-8")


def test_mi300x_showallinfo_per_gpu_values() -> None:
    with collecting() as warnings:
        gpus = parse_rocm_smi_showallinfo(read(MI300X))
    assert [g.index for g in gpus] == [0, 1, 2, 3]
    assert {g.vendor for g in gpus} == {"amd"}
    assert {g.name for g in gpus} == {"AMD Instinct MI300X OAM"}  # "Card series", tab-padded
    assert {g.driver_version for g in gpus} == {"6.7.0"}
    assert {g.vbios_version for g in gpus} == {"113-MI3SRIOV-001"}
    assert [g.uuid for g in gpus] == [
        "0x8d1457e2c20f59d2", "0xb4fa34630e85d42a", "0xe8986800e182538a", "0xeff71edc82169115"
    ]  # fmt: skip
    assert [g.serial for g in gpus] == [
        "692347006052", "692347005894", "692347006047", "692347005902"
    ]  # fmt: skip
    assert [g.pci_bus_id for g in gpus] == [
        "0000:26:00.0", "0000:46:00.0", "0000:65:00.0", "0000:85:00.0"
    ]  # fmt: skip
    assert [g.temperature_c for g in gpus] == [35.0, 37.0, 34.0, 39.0]  # junction, no edge
    assert [g.power_draw_w for g in gpus] == [133.0, 130.0, 131.0, 136.0]
    assert {g.power_limit_w for g in gpus} == {750.0}
    assert {g.utilization_gpu_pct for g in gpus} == {0.0}
    assert {g.pcie_replay_count for g in gpus} == {0}
    # This release prints no VRAM byte counts, no GFX version and no PCIe level in -a.
    assert {g.memory_total_mib for g in gpus} == {None}
    assert {g.architecture for g in gpus} == {None}
    assert warnings == []


def test_unknown_line_and_unreadable_number_warn() -> None:
    # Derived: the capture with one junction temperature garbled and a stray line added.
    text = (
        read(MI300X)
        .replace(
            "GPU[2]\t\t: Temperature (Sensor junction) (C): 34.0",
            "GPU[2]\t\t: Temperature (Sensor junction) (C): hot",
            1,
        )
        .replace("Driver version: 6.7.0\n", "Driver version: 6.7.0\nsomething else\n", 1)
    )
    with collecting() as warnings:
        gpus = parse_rocm_smi_showallinfo(text)
    assert gpus[2].temperature_c is None
    assert sorted((w.message, w.text, w.gpu) for w in warnings) == [
        ("Temperature (Sensor junction) (C) is not a number", "hot", 2),
        (
            "line outside a GPU entry (section 'Version of System Component')",
            "something else",
            None,
        ),
    ]


@pytest.mark.parametrize(
    "text",
    [
        "",
        "GPU[0]\t\t: VBIOS version: x\n",
        "============================ ROCm System Management Interface ===\n",
    ],
)
def test_not_showallinfo_raises(text: str) -> None:
    with pytest.raises(ParseError):
        parse_rocm_smi_showallinfo(text)
