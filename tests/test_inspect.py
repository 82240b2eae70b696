"""`gpuaudit inspect`: every real capture is recognised as what it is and parsed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuaudit.cli import main
from gpuaudit.inspect import PARSERS, detect_kind, inspect_file

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).parents[1]
CAPTURES = sorted(p for p in FIXTURES.glob("*/*") if p.is_file())

# Folder -> the kind of every file in it; mixed folders map a file-name mark to its kind.
KIND_BY_FOLDER: dict[str, str | dict[str, str]] = {
    "nvidia-smi-xml": "nvidia-smi-xml",
    "nvidia-smi-q": "nvidia-smi-q",
    "nvidia-smi-table": "nvidia-smi-table",
    "kernel-log": "kernel-log",
    "query-csv": {
        "help-query-gpu": "query-gpu-help",
        "query-retired-pages": "query-retired-pages-csv",
        "query-gpu": "query-gpu-csv",
    },
    "rocm-smi": {".json": "rocm-smi-json", "concise": "rocm-smi-concise"},
    "amd-smi": "amd-smi-json",
    "topo": {"nvlink-status": "nvlink-status", "topo-p2p": "topo-p2p", "": "topo-matrix"},
    "mig": {
        "nvidia-smi-table": "nvidia-smi-table",
        "nvidia-smi-L": "mig-list",
        "mig-lgip": "mig-lgip",
        "mig-lcip": "mig-lcip",
        "mig-lgi": "mig-lgi",
        "mig-cgi": "mig-cgi",
    },
}


def expected_kind(path: Path) -> str:
    rule = KIND_BY_FOLDER[path.parent.name]
    if isinstance(rule, str):
        return rule
    return next(kind for mark, kind in rule.items() if mark in path.name)


def test_every_fixture_folder_has_expectations() -> None:
    assert {p.parent.name for p in CAPTURES} == set(KIND_BY_FOLDER)


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_capture_is_recognised_and_parsed(path: Path) -> None:
    result = inspect_file(path)
    assert result.get("error") is None
    assert result["kind"] == expected_kind(path)
    assert result["file"] == str(path)
    assert result["parsed"]  # a non-empty parse
    json.dumps(result)  # JSON-able as returned


def test_every_kind_is_exercised_or_named() -> None:
    seen = {expected_kind(p) for p in CAPTURES}
    # No fixture holds these kinds; they are covered by the tests below.
    assert set(PARSERS) - seen == {"mig-lci", "gpuaudit-bundle", "gpuaudit-snapshot"}


def test_compute_instance_listing() -> None:
    # The -lci layout tests/parsers/test_mig.py reads (no capture of it is in fixtures/).
    lci = (
        "+-------------------------------------------------------+\n"
        "| Compute instances:                                    |\n"
        "| GPU     GPU       Name             Profile   Instance |\n"
        "|       Instance                       ID        ID     |\n"
        "|         ID                                            |\n"
        "|=======================================================|\n"
        "|   0      1       MIG 1c.3g.20gb       0         0     |\n"
        "+-------------------------------------------------------+\n"
    )
    assert detect_kind(lci) == "mig-lci"


def test_collector_bundle_and_snapshot(tmp_path: Path) -> None:
    case = json.loads(
        (REPO / "tests/facts/gpu.GpuAuditSections/tool_missing_and_bounded_kernel_log.json")
        .read_text(encoding="utf-8")
    )  # fmt: skip
    bundle = tmp_path / "host.bundle"
    bundle.write_text("\n".join(case["output"]) + "\n", encoding="utf-8")
    result = inspect_file(bundle)
    assert result["kind"] == "gpuaudit-bundle"
    assert "status" in result["parsed"]["snapshot"]
    assert "sections" not in result["parsed"]["snapshot"]

    snapshot = sorted((REPO / "reports/example/hosts").glob("*.json"))[0]
    result = inspect_file(snapshot)
    assert result["kind"] == "gpuaudit-snapshot"
    assert result["parsed"]["gpus"]


def test_bytes_that_are_not_utf8_never_crash(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(b"\xff\xfe\x00\x01 not a capture \xc3\x28\n")
    result = inspect_file(garbage)
    assert result["kind"] == "unknown" and result["error"]
    # A real capture with one bad byte is still read.
    text = (FIXTURES / "nvidia-smi-q" / "thamada-l4-driver550.90.07.nvidia-smi-q.txt").read_bytes()
    damaged = tmp_path / "l4.txt"
    damaged.write_bytes(text.replace(b"NVIDIA L4", b"NVIDIA L4\xff", 1))
    result = inspect_file(damaged)
    assert result["kind"] == "nvidia-smi-q"
    assert result["parsed"]["gpus"][0]["name"] == "NVIDIA L4\ufffd"


def test_unreadable_and_truncated_files(tmp_path: Path) -> None:
    assert inspect_file(tmp_path / "missing.txt")["kind"] == "unknown"
    cut = tmp_path / "cut.xml"
    xml = (FIXTURES / "nvidia-smi-xml" / "telegraf-a10g-driver515.xml").read_text()
    cut.write_text(xml[: len(xml) // 2])
    result = inspect_file(cut)
    assert result["kind"] == "unknown" and "truncated" in result["error"]
    assert detect_kind("") == "unknown"


def test_cli_prints_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    capture = FIXTURES / "nvidia-smi-table" / "gpud-nvidia-smi-table-8x-h100-driver550.90.07.txt"
    assert main(["inspect", str(capture)]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    assert result["kind"] == "nvidia-smi-table"
    assert len(result["parsed"]["gpus"]) == 8
    junk = tmp_path / "junk.txt"
    junk.write_text("hello\n")
    assert main(["inspect", str(capture), str(junk)]) == 1
    assert [r["kind"] for r in json.loads(capsys.readouterr().out)] == [
        "nvidia-smi-table",
        "unknown",
    ]
