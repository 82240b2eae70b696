"""Every NVIDIA capture, every field: parser output against a per-capture golden file.

Each file under ``tests/fixtures/{nvidia-smi-q,nvidia-smi-xml,nvidia-smi-table,query-csv}``
(except the ``--help-query-gpu`` list and ``--query-retired-pages`` listings, which are not GPU
reports) has a golden JSON file under ``golden/nvidia/<folder>/<file>.json`` holding what the
parser reads from it: the driver and CUDA versions, the timestamp, and every field of every GPU
(ECC volatile / aggregate, retired pages, remapped rows, MIG devices, utilisation,
temperatures, power, clock event reasons, PCIe generation / width / replays, ``unavailable``
reasons, status), plus the parse warnings.

The golden values were checked against the raw files; :func:`test_golden_values_are_printed`
keeps that check mechanical: every text and number in a golden file (other than sums the
parser forms, such as the ECC totals) is printed in its capture.

To rewrite the golden files after a deliberate parser change: ``GOLDEN_UPDATE=1 pytest
tests/parsers/test_nvidia_golden.py``, then read the diff against the captures.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuaudit.model.jsonable import to_jsonable
from gpuaudit.parsers.nvidia_common import NvidiaSmiLog
from gpuaudit.parsers.nvidia_table import parse_nvidia_smi_table
from gpuaudit.parsers.nvidia_text import parse_nvidia_smi_text
from gpuaudit.parsers.nvidia_xml import parse_nvidia_smi_xml
from gpuaudit.parsers.query_csv import parse_query_gpu_csv
from gpuaudit.parsers.warnings import collecting

FIXTURES = Path(__file__).parents[1] / "fixtures"
GOLDEN = Path(__file__).parent / "golden" / "nvidia"
PARSERS: dict[str, Callable[[str], NvidiaSmiLog]] = {
    "nvidia-smi-q": parse_nvidia_smi_text,
    "nvidia-smi-xml": parse_nvidia_smi_xml,
    "nvidia-smi-table": parse_nvidia_smi_table,
    "query-csv": parse_query_gpu_csv,
}
NOT_GPU_REPORTS = ("help-query-gpu", "query-retired-pages")
CAPTURES = sorted(
    path
    for folder in PARSERS
    for path in (FIXTURES / folder).iterdir()
    if path.is_file() and not any(mark in path.name for mark in NOT_GPU_REPORTS)
)


def golden_path(capture: Path) -> Path:
    return GOLDEN / capture.parent.name / f"{capture.name}.json"


def parsed(capture: Path) -> dict[str, Any]:
    text = capture.read_text(encoding="utf-8")
    with collecting() as warnings:
        log = PARSERS[capture.parent.name](text)
    result: dict[str, Any] = to_jsonable(log)
    result["parse_warnings"] = [to_jsonable(w) for w in warnings]
    return result


def test_every_capture_has_a_golden_file() -> None:
    wanted = {golden_path(p) for p in CAPTURES}
    present = set(GOLDEN.glob("*/*.json"))
    assert present == wanted


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_parser_output_matches_golden(capture: Path) -> None:
    result = parsed(capture)
    path = golden_path(capture)
    if os.environ.get("GOLDEN_UPDATE"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    assert result == json.loads(path.read_text(encoding="utf-8"))


# Golden keys whose values the parser forms rather than copies: sums of counters, booleans
# read from Yes/No/Active, normalised bus ids, indexes, enum-like status words.
_FORMED = {
    "corrected", "uncorrected", "pending", "failure", "persistence_mode", "reset_required",
    "drain_and_reset_recommended", "index", "status", "vendor", "pci_bus_id", "gpu",
    "clock_event_reasons", "unavailable", "parse_warnings", "source", "message", "text",
    "status_detail", "sram_uncorrected",
}  # fmt: skip


# The table prints the volatile uncorrectable count where ECC is on, and reads as "Enabled".
_FORMED_IN = {"nvidia-smi-table": {"ecc_mode_current"}}


def _leaves(
    value: Any, key: str = "", formed: frozenset[str] = frozenset()
) -> Iterator[tuple[str, Any]]:
    if key in _FORMED or key in formed:
        return
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, k, formed)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item, key, formed)
    elif value is not None and not isinstance(value, bool):
        yield key, value


def _printed_forms(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, int):
        return [str(value)]
    number = float(value)
    forms = [f"{number:.2f}", f"{number:.1f}", repr(number), f"{number:g}"]
    return [*forms, str(int(number))] if number.is_integer() else forms


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_golden_values_are_printed(capture: Path) -> None:
    raw = capture.read_text(encoding="utf-8")
    golden = json.loads(golden_path(capture).read_text(encoding="utf-8"))
    missing = [
        (key, value)
        for key, value in _leaves(golden, formed=frozenset(_FORMED_IN.get(capture.parent.name, ())))
        if not any(
            re.search(rf"(?<![0-9A-Za-z.]){re.escape(form)}(?![0-9])", raw)
            for form in _printed_forms(value)
        )
    ]
    assert missing == []
