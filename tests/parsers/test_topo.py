from __future__ import annotations

from pathlib import Path

import pytest

from gpuaudit.parsers.errors import ParseError
from gpuaudit.parsers.nvlink import parse_nvlink
from gpuaudit.parsers.topo import parse_p2p_matrix, parse_topo_matrix

FIXTURES = Path(__file__).parents[1] / "fixtures"
TOPO = FIXTURES / "topo"
P2P_FILES = {
    "issue-club3090-1229-2x-rtx5090-topo-p2p-rw-gns.txt",
    "mleng-2x-l4-topo-p2p-r-cns.txt",
    "mleng-8x-h100-topo-p2p-r-ok.txt",
}
NVLINK_FILES = {"azhc-a100-sxm4-80gb-nvlink-status-all-links-inactive.txt"}
MATRIX_FILES = sorted(p for p in TOPO.glob("*.txt") if p.name not in P2P_FILES | NVLINK_FILES)


def read(name: str) -> str:
    return (TOPO / name).read_text(encoding="utf-8")


def test_every_fixture_is_classified() -> None:
    names = {p.name for p in TOPO.glob("*.txt")}
    assert names >= P2P_FILES | NVLINK_FILES
    assert len(MATRIX_FILES) == len(names) - len(P2P_FILES) - len(NVLINK_FILES) >= 9


@pytest.mark.parametrize("path", MATRIX_FILES, ids=lambda p: p.name)
def test_every_topo_m_capture_parses(path: Path) -> None:
    topo = parse_topo_matrix(path.read_text(encoding="utf-8"))
    assert topo.devices and topo.columns
    assert all(len(row) == len(topo.columns) for row in topo.matrix)
    for row_index, device in enumerate(topo.devices):
        if device in topo.columns:
            assert topo.matrix[row_index][topo.columns.index(device)] == "X"
    gpus = [d for d in topo.devices if d.startswith("GPU")]
    assert set(topo.cpu_affinity) == set(gpus)


@pytest.mark.parametrize("name", sorted(P2P_FILES))
def test_p2p_captures_are_refused_by_topo_m_and_read_by_p2p(name: str) -> None:
    with pytest.raises(ParseError, match="p2p"):
        parse_topo_matrix(read(name))
    p2p = parse_p2p_matrix(read(name))
    assert p2p.devices == p2p.columns


def test_nvlink_status_is_refused_by_topo_m_and_read_by_nvlink() -> None:
    name = "azhc-a100-sxm4-80gb-nvlink-status-all-links-inactive.txt"
    with pytest.raises(ParseError, match="nvlink"):
        parse_topo_matrix(read(name))
    (gpu,) = parse_nvlink(read(name))
    assert gpu.gpu == 6
    assert gpu.uuid == "GPU-9667d95e-6d22-0c22-1f57-c481f13e7c44"
    assert gpu.links == () and gpu.all_inactive


def test_8x_b200_tabs_nics_and_extra_empty_cell() -> None:
    topo = parse_topo_matrix(read("issue-vllm-22372-8x-b200-nv18-8nic-pix-pairs-gpu-rows.txt"))
    assert topo.devices == tuple(f"GPU{i}" for i in range(8))
    assert topo.columns[-1] == "NIC7" and len(topo.columns) == 16
    assert topo.matrix[0][:3] == ("X", "NV18", "NV18")
    assert topo.matrix[0][8:12] == ("PIX", "PIX", "NODE", "NODE")
    assert topo.cpu_affinity["GPU0"] == "0-55,112-167"
    assert topo.cpu_affinity["GPU7"] == "56-111,168-223"
    assert topo.numa_affinity["GPU3"] == "0" and topo.numa_affinity["GPU4"] == "1"
    assert topo.gpu_numa_id["GPU0"] == "N/A"


def test_spaces_instead_of_tabs_with_empty_affinity() -> None:
    topo = parse_topo_matrix(read("issue-vllm-19607-2gpu-nv12-8nic-empty-cpu-numa-affinity.txt"))
    assert topo.devices[:2] == ("GPU0", "GPU1") and topo.devices[-1] == "NIC7"
    assert topo.matrix[0][1] == "NV12"
    assert topo.matrix[topo.devices.index("NIC7")][-1] == "X"
    # Empty cells must not shift N/A into the CPU Affinity column.
    assert topo.cpu_affinity == {"GPU0": "", "GPU1": ""}
    assert topo.numa_affinity == {"GPU0": "", "GPU1": ""}
    assert topo.gpu_numa_id == {"GPU0": "N/A", "GPU1": "N/A"}


def test_spaces_8x_h100_two_numa_nodes() -> None:
    topo = parse_topo_matrix(read("mleng-8x-h100-nv18-ht-cpu-affinity.txt"))
    assert {cell for row in topo.matrix for cell in row} == {"X", "NV18"}
    assert topo.cpu_affinity["GPU4"] == "52-103,156-207"
    assert [topo.numa_affinity[f"GPU{i}"] for i in range(8)] == ["0"] * 4 + ["1"] * 4
    assert topo.gpu_numa_id == {}


def test_nic_legend_and_connection_legend() -> None:
    topo = parse_topo_matrix(read("stelline-puget-wrx90-2gpu-phb-2nic.txt"))
    assert topo.legend["NIC0"] == "mlx5_0" and topo.legend["NIC1"] == "mlx5_1"
    assert topo.legend["PHB"].startswith("Connection traversing PCIe as well as a PCIe Host")
    assert topo.matrix[topo.devices.index("NIC0")] == ("NODE", "NODE", "X", "PIX")
    assert topo.cpu_affinity == {"GPU0": "0-23", "GPU1": "0-23"}
    assert topo.numa_affinity == {"GPU0": "0", "GPU1": "0"}
    assert topo.gpu_numa_id == {"GPU0": "N/A", "GPU1": "N/A"}


def test_ansi_underlined_header() -> None:
    topo = parse_topo_matrix(read("utk-1x-h100-mig-vm-ansi-header.txt"))
    assert topo.columns == ("GPU0",)
    assert topo.cpu_affinity == {"GPU0": "0-19"}
    assert topo.numa_affinity == {"GPU0": "0"}
    assert "X" in topo.legend


def test_windows_empty_affinity_cells() -> None:
    topo = parse_topo_matrix(read("utk-windows-rtx2080super-topo-m-empty-affinity.txt"))
    assert topo.cpu_affinity == {"GPU0": ""} and topo.gpu_numa_id == {"GPU0": "N/A"}


def test_rtx5090_phb() -> None:
    topo = parse_topo_matrix(read("issue-club3090-1229-2x-rtx5090-phb-threadripper.txt"))
    assert topo.matrix == (("X", "PHB"), ("PHB", "X"))
    assert topo.cpu_affinity == {"GPU0": "0-63", "GPU1": "0-63"}


@pytest.mark.parametrize(
    "text",
    [
        "",
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
        "\tGPU0\tGPU1\tCPU Affinity\n",
        "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \n",
        "\tGPU0\tCPU Affinity\nbogus\t X \t0-3\n",
    ],
)
def test_garbage_raises_parse_error(text: str) -> None:
    with pytest.raises(ParseError):
        parse_topo_matrix(text)
