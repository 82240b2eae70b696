"""The default `nvidia-smi` table, including the MIG devices table under it."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuaudit.parsers.errors import ParseError
from gpuaudit.parsers.nvidia_table import parse_nvidia_smi_table

FIXTURES = Path(__file__).parents[1] / "fixtures"
TABLES = sorted((FIXTURES / "nvidia-smi-table").glob("*.txt")) + sorted(
    (FIXTURES / "mig").glob("*table*.txt")
)
H100 = FIXTURES / "nvidia-smi-table" / "gpud-nvidia-smi-table-8x-h100-driver550.90.07.txt"
RTX6000 = FIXTURES / "nvidia-smi-table" / "stelline-4x-rtx6000ada-nvidia-smi-table-driver575.txt"
A100_MIG = FIXTURES / "mig" / "jear-a100-pcie-40gb-nvidia-smi-table-7-mig-devices.txt"
H100_MIG = FIXTURES / "mig" / "utk-h100-mig-nvidia-smi-table-mig-devices-driver590.txt"


@pytest.mark.parametrize("path", TABLES, ids=lambda p: p.name)
def test_every_table_parses(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    log = parse_nvidia_smi_table(text)
    assert log.gpus and log.driver_version and log.timestamp
    # Drivers before 410 print no CUDA version in the table.
    assert log.cuda_version or "CUDA" not in text.splitlines()[2]
    for position, gpu in enumerate(log.gpus):
        assert gpu.index == position and gpu.status == "ok"
        assert gpu.name and gpu.pci_bus_id
        assert gpu.memory_total_mib and gpu.temperature_c and gpu.power_limit_w


def test_h100_wide_layout() -> None:
    log = parse_nvidia_smi_table(H100.read_text(encoding="utf-8"))
    assert (log.driver_version, log.cuda_version) == ("550.90.07", "12.4")
    assert log.timestamp == "Mon Jan 20 10:18:26 2025"
    assert len(log.gpus) == 8
    assert [g.pci_bus_id for g in log.gpus][:2] == ["0000:19:00.0", "0000:3B:00.0"]
    assert log.gpus[-1].pci_bus_id == "0000:DB:00.0"
    gpu = log.gpus[0]
    assert gpu.name == "NVIDIA H100 80GB HBM3"
    assert gpu.persistence_mode is True
    assert (gpu.memory_used_mib, gpu.memory_total_mib) == (1, 81559)
    assert (gpu.temperature_c, gpu.power_draw_w, gpu.power_limit_w) == (27.0, 72.0, 700.0)
    assert gpu.utilization_gpu_pct == 0.0
    assert gpu.ecc_mode_current == "Enabled" and gpu.ecc_volatile.uncorrected == 0
    assert gpu.mig_mode_current == "Disabled"
    assert [g.temperature_c for g in log.gpus] == [27, 24, 23, 23, 27, 22, 24, 23]


def test_truncated_names_stay_as_printed() -> None:
    log = parse_nvidia_smi_table(RTX6000.read_text(encoding="utf-8"))
    assert (log.driver_version, log.cuda_version) == ("575.51.03", "12.9")
    assert {g.name for g in log.gpus} == {"NVIDIA RTX 6000 Ada Gene..."}
    gpu = log.gpus[1]
    assert gpu.persistence_mode is False
    assert gpu.ecc_mode_current == "Disabled"  # "Off" in the Volatile Uncorr. ECC column
    assert gpu.ecc_volatile.uncorrected is None
    assert gpu.power_draw_w == 11.0 and gpu.memory_total_mib == 49140
    assert gpu.mig_mode_current is None and gpu.unavailable["mig_mode_current"] == "not_applicable"


def test_mig_tables_of_two_driver_generations() -> None:
    a100 = parse_nvidia_smi_table(A100_MIG.read_text(encoding="utf-8"))
    (gpu,) = a100.gpus
    assert a100.driver_version == "460.32.03"
    assert gpu.name == "A100-PCIE-40GB" and gpu.temperature_c == 75.0
    assert gpu.mig_mode_current == "Enabled"
    assert gpu.ecc_mode_current == "Enabled"  # "On": counted per MIG instance
    assert gpu.utilization_gpu_pct is None
    assert gpu.unavailable["utilization_gpu_pct"] == "not_applicable"
    assert [d.gpu_instance_id for d in gpu.mig_devices] == [7, 8, 9, 10, 11, 12, 13]
    assert {d.memory_total_mib for d in gpu.mig_devices} == {4864}

    h100 = parse_nvidia_smi_table(H100_MIG.read_text(encoding="utf-8")).gpus[0]
    assert h100.pci_bus_id == "0000:00:09.0" and h100.power_draw_w == 98.0
    assert [d.memory_total_mib for d in h100.mig_devices] == [40448, 20096, 9984, 9984]
    assert [d.multiprocessor_count for d in h100.mig_devices] == [60, 32, 16, 16]


def test_a_broken_row_and_err_values() -> None:
    text = H100.read_text(encoding="utf-8")
    text = text.replace(
        "|   1  NVIDIA H100 80GB HBM3          On  |", "|  Unable to determine handle  |"
    )
    text = text.replace(
        "| N/A   23C    P0             70W /  700W |", "| N/A  ERR!    P0           ERR! /  700W |"
    )
    log = parse_nvidia_smi_table(text)
    assert log.gpus[1].status == "error" and "Unable to determine" in log.gpus[1].status_detail
    third = log.gpus[2]
    # ERR! in the temperature (a core reading) is a failing reading, not "not supported".
    assert third.status == "error" and "'ERR!' for temperature" in third.status_detail
    assert third.temperature_c is None and third.power_draw_w is None
    assert third.unavailable == {"temperature_c": "unreadable", "power_draw_w": "unreadable"}
    assert third.power_limit_w == 700.0


@pytest.mark.parametrize(
    "text",
    [
        "",
        "No devices were found\n",
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
        "+---+\n| NVIDIA-SMI 550.90.07  Driver Version: 550.90.07  CUDA Version: 12.4 |\n+---+\n",
        (FIXTURES / "nvidia-smi-q" / "thamada-l4-driver550.90.07.nvidia-smi-q.txt").read_text(),
    ],
)
def test_refuses_what_is_not_a_table(text: str) -> None:
    with pytest.raises(ParseError):
        parse_nvidia_smi_table(text)
