"""`nvidia-smi topo -m` with glued, ANSI or space-expanded headers: columns realigned or refused.

Expectations are read off the raw files in tests/fixtures/topo/. Variants marked "derived" are
cut from a real capture in the test itself.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuaudit.parsers.errors import ParseError
from gpuaudit.parsers.topo import parse_topo_matrix
from gpuaudit.parsers.warnings import collecting

TOPO = Path(__file__).parents[1] / "fixtures" / "topo"
DGX1 = "rse-sheffield-dgx1-8gpu-glued-header-mlx5-rows-soc.txt"
A6000 = "siboehm-3x-rtx-a6000-nv4-ansi-header-no-gpu-numa-id.txt"
H100_NV6 = "issue-nccl-1617-4x-h100-nv6-4nic-spaces.txt"


def read(name: str) -> str:
    return (TOPO / name).read_text(encoding="utf-8")


def test_dgx1_glued_gpu_names_and_mlx5_rows() -> None:
    with collecting() as warnings:
        topo = parse_topo_matrix(read(DGX1))
    nics = ("mlx5_0", "mlx5_2", "mlx5_1", "mlx5_3")  # in the order the header prints them
    assert topo.columns == tuple(f"GPU{i}" for i in range(8)) + nics
    assert topo.devices == topo.columns
    assert topo.matrix[0] == (
        "X", "NV1", "NV1", "NV1", "NV1", "SOC", "SOC", "SOC", "PIX", "SOC", "PHB", "SOC"
    )  # fmt: skip
    assert topo.matrix[7] == (
        "SOC", "SOC", "SOC", "NV1", "NV1", "NV1", "NV1", "X", "SOC", "PHB", "SOC", "PIX"
    )  # fmt: skip
    assert topo.matrix[topo.devices.index("mlx5_2")] == (
        "SOC", "SOC", "SOC", "SOC", "PIX", "PIX", "PHB", "PHB", "SOC", "X", "SOC", "PHB"
    )  # fmt: skip
    assert topo.cpu_affinity == {f"GPU{i}": "1-1" for i in range(8)}
    assert topo.numa_affinity == {} and topo.gpu_numa_id == {}
    assert topo.legend["SOC"].startswith("Connection traversing PCIe as well as the SMP link")
    assert [w.message for w in warnings] == ["header names run together; read as 9 columns"]
    assert warnings[0].text == "GPU0GPU1GPU2GPU3GPU4GPU5GPU6GPU7mlx5_0"


def test_a6000_ansi_header_nv4_and_numa_without_gpu_numa_id() -> None:
    with collecting() as warnings:
        topo = parse_topo_matrix(read(A6000))
    assert topo.columns == ("GPU0", "GPU1", "GPU2")
    assert topo.matrix == (("X", "NV4", "NODE"), ("NV4", "X", "NODE"), ("NODE", "NODE", "X"))
    assert topo.cpu_affinity == {f"GPU{i}": "0-31,64-95" for i in range(3)}
    assert topo.numa_affinity == {"GPU0": "0", "GPU1": "0", "GPU2": "0"}
    assert topo.gpu_numa_id == {}
    assert warnings == []


def test_h100_nv6_spaces_one_cpu_list_and_numa_node_per_gpu() -> None:
    topo = parse_topo_matrix(read(H100_NV6))
    assert topo.columns == ("GPU0", "GPU1", "GPU2", "GPU3", "NIC0", "NIC1", "NIC2", "NIC3")
    assert topo.matrix[1] == ("NV6", "X", "NV6", "NV6", "SYS", "PIX", "SYS", "SYS")
    assert topo.matrix[topo.devices.index("NIC3")] == (
        "SYS", "SYS", "SYS", "PIX", "SYS", "SYS", "SYS", "X"
    )  # fmt: skip
    assert topo.cpu_affinity == {
        "GPU0": "6,14,22,30", "GPU1": "4,12,20,28", "GPU2": "7,15,23,31", "GPU3": "5,13,21,29"
    }  # fmt: skip
    assert topo.numa_affinity == {"GPU0": "3", "GPU1": "1", "GPU2": "7", "GPU3": "5"}
    assert topo.gpu_numa_id == {f"GPU{i}": "N/A" for i in range(4)}
    assert topo.legend["PHB"] == (
        "Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)"
    )


def test_glued_header_with_space_expanded_rows_is_realigned() -> None:
    # Derived: the header of the H100 capture with its names run together, as a terminal copy
    # of an underlined header prints it; the rows are left as captured.
    lines = read(H100_NV6).splitlines(keepends=True)
    lines[0] = "GPU0GPU1GPU2GPU3NIC0NIC1NIC2NIC3CPU AffinityNUMA AffinityGPU NUMA ID\n"
    with collecting() as warnings:
        topo = parse_topo_matrix("".join(lines))
    assert topo.columns == parse_topo_matrix(read(H100_NV6)).columns
    assert topo.cpu_affinity["GPU2"] == "7,15,23,31" and topo.numa_affinity["GPU2"] == "7"
    assert topo.gpu_numa_id["GPU3"] == "N/A"
    assert [w.message for w in warnings] == ["header names run together; read as 11 columns"]


def test_a_row_missing_a_cell_is_refused_not_shifted() -> None:
    # Derived: GPU1's third cell (NV6 under GPU2) cut out of the H100 capture, so its CPU list
    # would slide under NIC3 and its NUMA node under CPU Affinity.
    lines = read(H100_NV6).splitlines(keepends=True)
    assert lines[2].startswith("GPU1    NV6      X      NV6     NV6 ")
    lines[2] = lines[2].replace("NV6     NV6     SYS", "NV6     SYS", 1)
    with pytest.raises(ParseError, match="misaligned"):
        parse_topo_matrix("".join(lines))


def test_a_nic_row_with_cells_past_the_matrix_is_refused() -> None:
    # Derived: the DGX-1 capture with its CPU Affinity title cut from the header, so the GPU
    # rows carry a cell ("1-1") that no column names.
    text = read(DGX1).replace("\tCPU Affinity\n", "\n", 1)
    with pytest.raises(ParseError, match="past the matrix"):
        parse_topo_matrix(text)


def test_a_link_value_under_an_affinity_column_is_refused() -> None:
    # Derived: the A6000 capture with GPU0's CPU list replaced by a link value.
    text = read(A6000).replace("NODE\t0-31,64-95\t0\nGPU1", "NODE\tPHB\t0\nGPU1", 1)
    with pytest.raises(ParseError, match="link value 'PHB' under CPU Affinity"):
        parse_topo_matrix(text)
