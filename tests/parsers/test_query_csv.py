"""`--query-gpu` / `--query-retired-pages` CSV and the `--help-query-gpu` list, on real captures."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuaudit.parsers.errors import ParseError
from gpuaudit.parsers.query_csv import (
    parse_query_gpu_csv,
    parse_query_help,
    parse_retired_pages_csv,
)

CSV = Path(__file__).parents[1] / "fixtures" / "query-csv"
QUERY_GPU = sorted(p for p in CSV.glob("*query-gpu*.csv"))


def read(name: str) -> str:
    return (CSV / name).read_text(encoding="utf-8")


def test_fixture_folder_is_covered() -> None:
    names = {p.name for p in CSV.iterdir()}
    covered = {p.name for p in QUERY_GPU}
    covered |= {"utk-h100-query-retired-pages.csv", "netdata-help-query-gpu.txt"}
    assert names == covered


@pytest.mark.parametrize("path", QUERY_GPU, ids=lambda p: p.name)
def test_every_query_gpu_capture_parses(path: Path) -> None:
    log = parse_query_gpu_csv(path.read_text(encoding="utf-8"))
    assert len(log.gpus) == 1
    gpu = log.gpus[0]
    assert gpu.status == "ok" and gpu.index == 0
    assert gpu.name and gpu.uuid and gpu.uuid.startswith("GPU-")
    assert gpu.temperature_c and gpu.power_draw_w


def test_netdata_p100_nounits_with_units_in_header() -> None:
    log = parse_query_gpu_csv(read("netdata-tesla-p100-query-gpu.csv"))
    gpu = log.gpus[0]
    assert gpu.name == "Tesla P100-PCIE-16GB"
    assert gpu.uuid == "GPU-ef1b2c9b-38d8-2090-2bd1-f567a3eb42a6"
    assert gpu.memory_used_mib == 0
    assert gpu.utilization_gpu_pct == 0.0
    assert gpu.temperature_c == 37.0
    assert gpu.power_draw_w == pytest.approx(28.16)
    # Not queried is not the same as N/A: no entry in unavailable.
    assert gpu.memory_total_mib is None and gpu.unavailable == {}
    assert log.driver_version is None and log.attached_gpus is None


def test_h100_idle_all_fields() -> None:
    log = parse_query_gpu_csv(read("utk-h100-80gb-hbm3-driver590-idle-query-gpu-all-fields.csv"))
    assert (log.driver_version, log.attached_gpus) == ("590.48.01", 1)
    assert log.timestamp == "2026/07/14 08:12:38.696"
    gpu = log.gpus[0]
    assert gpu.name == "NVIDIA H100 80GB HBM3"
    assert gpu.pci_bus_id == "0000:00:09.0"
    assert gpu.vbios_version == "96.00.A5.00.01" and gpu.inforom_image == "G520.0200.00.05"
    assert (gpu.memory_total_mib, gpu.memory_used_mib) == (81559, 0)
    assert gpu.ecc_mode_current == "Enabled"
    assert gpu.ecc_aggregate.corrected == 0 and gpu.ecc_aggregate.sram_uncorrected == 0
    assert gpu.remapped_rows.pending is False and gpu.remapped_rows.correctable == 0
    assert gpu.retired_pages.single_bit is None
    assert gpu.unavailable["retired_pages.single_bit"] == "not_applicable"
    assert gpu.clock_event_reasons == ("gpu_idle",)
    assert (gpu.pcie_gen_current, gpu.pcie_gen_max) == (5, 5)
    assert (gpu.pcie_width_current, gpu.pcie_width_max) == (16, 16)
    assert gpu.power_limit_w == 700.0
    assert (gpu.mig_mode_current, gpu.persistence_mode) == ("Disabled", True)
    assert gpu.recovery_action == "None"


@pytest.mark.parametrize(
    "name",
    [
        "utk-h100-mig-driver590-load-query-gpu-all-fields.csv",
        "utk-h200-mig-driver590-idle-query-gpu-all-fields.csv",
    ],
)
def test_mig_mode_utilisation_is_not_applicable(name: str) -> None:
    gpu = parse_query_gpu_csv(read(name)).gpus[0]
    assert gpu.mig_mode_current == "Enabled"
    assert gpu.utilization_gpu_pct is None
    assert gpu.unavailable["utilization_gpu_pct"] == "not_applicable"
    assert gpu.unavailable["remapped_rows.pending"] == "not_applicable"


def test_h100_mig_under_load() -> None:
    gpu = parse_query_gpu_csv(read("utk-h100-mig-driver590-load-query-gpu-all-fields.csv")).gpus[0]
    assert gpu.memory_used_mib == 11125
    assert gpu.power_draw_w == pytest.approx(433.78)
    assert gpu.temperature_c == 53.0


def test_geforce_without_ecc_or_serial() -> None:
    text = read("utk-rtx2080super-driver610.57.04-load-query-gpu-all-fields.csv")
    log = parse_query_gpu_csv(text)
    gpu = log.gpus[0]
    assert log.driver_version == "610.57.04"
    assert gpu.name == "NVIDIA GeForce RTX 2080 SUPER"
    assert gpu.serial is None and gpu.unavailable["serial"] == "not_applicable"
    assert gpu.ecc_mode_current is None and gpu.ecc_aggregate.uncorrected is None
    assert gpu.unavailable["ecc_aggregate.uncorrected"] == "not_applicable"
    assert gpu.utilization_gpu_pct == 8.0 and gpu.persistence_mode is False
    assert (gpu.pcie_gen_current, gpu.pcie_gen_max) == (3, 3)


def test_retired_pages_lists_the_gpu_even_without_pages() -> None:
    (gpu,) = parse_retired_pages_csv(read("utk-h100-query-retired-pages.csv"))
    assert gpu.pci_bus_id == "0000:00:09.0"
    assert gpu.name == "NVIDIA H100 80GB HBM3"
    assert gpu.pages == ()
    counts = gpu.counts()
    assert (counts.single_bit, counts.double_bit) == (0, 0)


def test_retired_pages_with_addresses() -> None:
    text = (
        "gpu_bus_id, gpu_uuid, retired_pages.address, retired_pages.timestamp, "
        "retired_pages.cause\n"
        "00000000:3B:00.0, GPU-a, 0x000000000012f4a0, 2024/01/02 03:04:05.678, Double Bit ECC\n"
        "00000000:3B:00.0, GPU-a, 0x000000000012f4b0, 2024/01/02 03:04:06.000, Single Bit ECC\n"
        "00000000:5E:00.0, GPU-b, [N/A], [N/A], Single Bit ECC\n"
    )
    first, second = parse_retired_pages_csv(text)
    assert first.pci_bus_id == "0000:3B:00.0"
    assert [p.address for p in first.pages] == ["0x000000000012f4a0", "0x000000000012f4b0"]
    assert (first.counts().single_bit, first.counts().double_bit) == (1, 1)
    assert second.uuid == "GPU-b" and second.pages == ()


def test_help_query_gpu_field_list() -> None:
    text = read("netdata-help-query-gpu.txt")
    fields = parse_query_help(text)
    assert len(fields) == 117
    by_name = {name: f for f in fields for name in f.names}
    assert by_name["gpu_name"].names == ("name", "gpu_name")
    assert by_name["retired_pages.sbe"].names[0] == "retired_pages.single_bit_ecc.count"
    assert "clocks_throttle_reasons.hw_slowdown" in by_name
    assert by_name["mig.mode.pending"].description.startswith("The MIG mode")
    # The query parsers say what the text is instead of misreading it.
    for parser in (parse_query_gpu_csv, parse_retired_pages_csv):
        with pytest.raises(ParseError, match="help-query-gpu field list"):
            parser(text)


def test_units_and_spellings_of_missing_values() -> None:
    text = (
        "index, name, power.draw [W], temperature.gpu, utilization.gpu [%], memory.total [MiB]\n"
        "0, A, [Not Supported], [Unknown Error], [Requested functionality has been deprecated], "
        "40536 MiB\n"
        "1, B, 71.00 W, ERR!, 3 %, [N/A]\n"
    )
    a, b = parse_query_gpu_csv(text).gpus
    assert a.unavailable == {
        "power_draw_w": "not_supported",
        "temperature_c": "unreadable",
        "utilization_gpu_pct": "not_supported",
    }
    assert a.memory_total_mib == 40536
    assert b.power_draw_w == 71.0 and b.utilization_gpu_pct == 3.0
    assert b.unavailable == {"temperature_c": "unreadable", "memory_total_mib": "not_applicable"}


def test_a_row_that_does_not_match_the_header_costs_one_gpu() -> None:
    text = (
        "index, name, pci.bus_id\n"
        "0, NVIDIA A100-SXM4-80GB, 00000000:07:00.0\n"
        "Unable to determine the device handle for GPU0000:0F:00.0: Unknown Error\n"
        "2, NVIDIA A100-SXM4-80GB, 00000000:47:00.0\n"
    )
    gpus = parse_query_gpu_csv(text).gpus
    assert [g.status for g in gpus] == ["ok", "error", "ok"]
    assert "Unknown Error" in gpus[1].status_detail
    assert gpus[2].pci_bus_id == "0000:47:00.0"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Tesla P100-PCIE-16GB, GPU-ef1b2c9b, [N/A], P0\n",  # --format=csv,noheader
        "fan.speed [%], pstate\n38 %, P2\n",  # no field says which GPU
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
        "name, uuid\n\x00\x00\n",
    ],
)
def test_refuses_what_it_cannot_map(text: str) -> None:
    with pytest.raises(ParseError):
        parse_query_gpu_csv(text)


def test_retired_pages_parser_refuses_query_gpu_output() -> None:
    with pytest.raises(ParseError, match=r"retired_pages\.address"):
        parse_retired_pages_csv(read("netdata-tesla-p100-query-gpu.csv"))
    with pytest.raises(ParseError, match="query-retired-pages"):
        parse_query_gpu_csv(read("utk-h100-query-retired-pages.csv"))
