"""Golden expectations for every capture in fixtures/{topo,mig,nvlink,rocm-smi,amd-smi}.

Each capture has ``golden/<folder>/<capture>.json``: the parser that reads it, its result as
plain JSON, and the parse warnings it raises. The golden files were written from the parser's
output and then checked against the raw captures;
:func:`test_golden_values_come_from_the_raw_capture` keeps that check: every text and number
in a golden result (except the fields the parser derives, listed in ``DERIVED``) must occur
in the raw file.

Regenerate after a deliberate change with ``python tests/parsers/test_topo_mig_amd_golden.py``
and review the diff against the raw files.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuaudit.parsers import amd_smi, mig, nvlink, rocm_smi, topo
from gpuaudit.parsers.warnings import collecting

TESTS = Path(__file__).resolve().parents[1]
FIXTURES = TESTS / "fixtures"
GOLDEN = Path(__file__).resolve().parent / "golden"
FOLDERS = ("topo", "mig", "nvlink", "rocm-smi", "amd-smi")

PARSERS: dict[str, Callable[[str], Any]] = {
    f.__name__: f
    for f in (
        topo.parse_topo_matrix,
        topo.parse_p2p_matrix,
        nvlink.parse_nvlink,
        mig.parse_mig_instances,
        mig.parse_mig_profiles,
        mig.parse_mig_list_devices,
        mig.parse_mig_table_devices,
        mig.parse_mig_created,
        mig.parse_mig_placements,
        mig.parse_mig_failures,
        rocm_smi.parse_rocm_smi_json,
        rocm_smi.parse_rocm_smi_concise,
        rocm_smi.parse_rocm_smi_showallinfo,
        amd_smi.parse_amd_smi_json,
    )
}

# Fields whose values the parser computes rather than copies: constants, normalised names,
# unit conversions (bytes → MiB, GT/s → PCIe generation) and sums of printed counters.
DERIVED = frozenset(
    {
        "vendor", "status", "operation", "unavailable", "memory_total_mib", "memory_used_mib",
        "pcie_gen_current", "pcie_gen_max", "replay_errors", "recovery_errors", "crc_errors",
    }
)  # fmt: skip


def captures() -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (FIXTURES / folder).iterdir() if p.is_file())


def parser_name(path: Path) -> str:
    folder, name = path.parent.name, path.name
    if folder == "topo":
        if "nvlink-status" in name:
            return "parse_nvlink"
        return "parse_p2p_matrix" if "-p2p-" in name else "parse_topo_matrix"
    if folder == "nvlink":
        return "parse_nvlink"
    if folder == "rocm-smi":
        if name.endswith(".json"):
            return "parse_rocm_smi_json"
        return "parse_rocm_smi_showallinfo" if "showallinfo" in name else "parse_rocm_smi_concise"
    if folder == "amd-smi":
        return "parse_amd_smi_json"
    for marks, parser in (
        (("-lgipp",), "parse_mig_placements"),
        (("-lgip", "-lcip"), "parse_mig_profiles"),
        (("-lgi-", "-lci-"), "parse_mig_instances"),
        (("-created",), "parse_mig_created"),
        (("-in-use", "insufficient"), "parse_mig_failures"),
        (("nvidia-smi-L",), "parse_mig_list_devices"),
        (("nvidia-smi-table",), "parse_mig_table_devices"),
    ):
        if any(mark in name for mark in marks):
            return parser
    raise AssertionError(f"no parser for {path}")


def plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    return value


def observe(path: Path) -> dict[str, Any]:
    name = parser_name(path)
    with collecting() as warnings:
        result = PARSERS[name](path.read_text(encoding="utf-8"))
    return {
        "parser": name,
        "result": plain(result),
        "warnings": [[w.source, w.message, w.text, w.gpu] for w in warnings],
    }


def golden_path(path: Path) -> Path:
    return GOLDEN / path.parent.name / (path.name + ".json")


@pytest.mark.parametrize("path", captures(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_capture_matches_its_golden_file(path: Path) -> None:
    expected = json.loads(golden_path(path).read_text(encoding="utf-8"))
    assert observe(path) == expected


def leaves(value: Any, key: str = "") -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        return [leaf for k, v in value.items() if k not in DERIVED for leaf in leaves(v, k)]
    if isinstance(value, list):
        return [leaf for v in value for leaf in leaves(v, key)]
    return [(key, value)]


def spellings(value: Any) -> set[str]:
    if isinstance(value, bool):
        return set()
    if isinstance(value, int):
        return {str(value)}
    if isinstance(value, float):
        return {f"{value:g}", f"{value:.1f}", f"{value:.2f}", f"{value:.3f}", str(int(value))}
    return {str(value)}


@pytest.mark.parametrize("path", captures(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_golden_values_come_from_the_raw_capture(path: Path) -> None:
    raw = path.read_text(encoding="utf-8")
    folded = re.sub(r"\s+", " ", raw).lower()
    golden = json.loads(golden_path(path).read_text(encoding="utf-8"))
    for key, value in leaves(golden["result"]):
        if value is None or value == "" or isinstance(value, bool):
            continue
        forms = spellings(value)
        assert any(f in raw or re.sub(r"\s+", " ", f).lower() in folded for f in forms), (
            f"{key}={value!r} does not occur in {path.name}"
        )


def test_every_golden_file_has_a_capture() -> None:
    wanted = {golden_path(p) for p in captures()}
    present = {p for folder in FOLDERS for p in (GOLDEN / folder).glob("*.json")}
    assert present == wanted


if __name__ == "__main__":
    for capture in captures():
        target = golden_path(capture)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(observe(capture), indent=1, sort_keys=True) + "\n")
        print(target.relative_to(TESTS))
