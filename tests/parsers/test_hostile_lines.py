"""Host lines can be arbitrarily long: parsers stay linear in the line length.

Each parse below would take minutes with a backtracking pattern; the test only asserts the
result (no timing), so a regression shows as a test run that does not finish.
"""

from __future__ import annotations

import pytest

from gpuaudit.parsers.errors import ParseError
from gpuaudit.parsers.mig import parse_mig_list_devices
from gpuaudit.parsers.nvlink import parse_nvlink
from gpuaudit.parsers.topo import parse_topo_matrix
from gpuaudit.parsers.values import split_gpu_header

LONG = 200_000


def test_gpu_header_split() -> None:
    assert split_gpu_header("GPU 3: NVIDIA A100-SXM4-80GB (UUID: GPU-abc)") == (
        3,
        "NVIDIA A100-SXM4-80GB",
        "GPU-abc",
    )
    assert split_gpu_header("GPU 0: Tesla T4") == (0, "Tesla T4", None)
    assert split_gpu_header("GPU x: nope") is None
    assert split_gpu_header("  Link 0: 25 GB/s") is None


def test_long_gpu_header_lines() -> None:
    line = "GPU 0: " + "a (UUID: " * (LONG // 9) + " " * LONG
    index, name, uuid = split_gpu_header(line)  # type: ignore[misc]
    assert index == 0 and uuid is None and len(name) > LONG // 2
    with pytest.raises(ParseError):
        parse_mig_list_devices(line)
    (gpu,) = parse_nvlink(line + "\n")
    assert gpu.gpu == 0 and gpu.links == ()


def test_long_legend_line() -> None:
    text = "\tGPU0\nGPU0\t X \n\nLegend:\n  X = " + "x " * LONG + " " * LONG + "y\n"
    topo = parse_topo_matrix(text)
    assert topo.legend["X"].endswith("y")
