"""`gpuaudit inspect`: every real capture is recognised as what it is and parsed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gpuaudit.cli import main
from gpuaudit.inspect import PARSERS, detect_kind, inspect_file, looks_like

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).parents[1]
CAPTURES = sorted(p for p in [*FIXTURES.glob("*/*"), *FIXTURES.glob("slurm/*/*")] if p.is_file())

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
    "rocm-smi": {
        ".json": "rocm-smi-json",
        "concise": "rocm-smi-concise",
        "showallinfo": "rocm-smi-showallinfo",
    },
    "amd-smi": "amd-smi-json",
    "nvlink": "nvlink-status",
    "dcgm-diag": "dcgm-diag",
    "monitoring": {".csv": "dcgm-exporter-counters", ".yml": "prometheus-rules"},
    "kubernetes": {"-labels": "kubernetes-node-labels", "-nodelist": "kubernetes-nodes"},
    # Slurm's outputs, one folder each.
    "gres-conf": "slurm-gres-conf",
    "scontrol-show-node": "slurm-node",
    "slurm-conf": "slurm-conf",
    "slurmd-C": "slurmd-hardware",
    "slurmd-G": "slurmd-gres",
    # Other vendors' tools: each file name opens with <vendor>-<tool>.
    "lookalike": {
        "iluvatar-ixsmi": "lookalike:iluvatar-ixsmi",
        "kunlunxin-xpu-smi": "lookalike:kunlunxin-xpu-smi",
        "metax-mx-smi": "lookalike:metax-mx-smi",
        "moorethreads-mthreads-gmi": "lookalike:moorethreads-mthreads-gmi",
        "hygon-rocm-smi": "lookalike:hygon-hy-smi",
        "enflame-efsmi": "lookalike:enflame-efsmi",
        "cambricon-cnmon": "lookalike:cambricon-cnmon",
        "ascend-npu-smi": "lookalike:ascend-npu-smi",
    },
    "topo": {"nvlink-status": "nvlink-status", "topo-p2p": "topo-p2p", "": "topo-matrix"},
    "mig": {
        # Refused MIG operations first: their names also name the operation (mig-cgi, ...).
        "mig-lgipp": "mig-lgipp",
        "-in-use": "mig-failure",
        "insufficient-resources": "mig-failure",
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
    assert set(PARSERS) - seen == {
        "mig-lci",
        "gpuaudit-bundle",
        "gpuaudit-snapshot",
        "lookalike:biren-brsmi",  # no brsmi capture is at hand
    }


def test_a_kubernetes_node_list_is_read_node_by_node() -> None:
    # The demo fleet's node list (derived from the demo hosts: src/gpuaudit/sim/data/README.md).
    path = REPO / "src" / "gpuaudit" / "sim" / "data" / "kubernetes-nodes.json"
    result = inspect_file(path)
    assert result["kind"] == "kubernetes-nodes" and result.get("error") is None
    names = [node["name"] for node in result["parsed"]["nodes"]]
    assert len(names) == len(json.loads(path.read_text())["items"])


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


LOOKALIKES = sorted((FIXTURES / "lookalike").iterdir())
NVIDIA_AND_AMD_KINDS = {
    kind for kind in PARSERS if not kind.startswith(("lookalike:", "gpuaudit-"))
}


@pytest.mark.parametrize("path", LOOKALIKES, ids=lambda p: p.name)
def test_lookalike_is_reported_as_its_vendor_never_nvidia_or_amd(path: Path) -> None:
    result = inspect_file(path)
    vendor = path.name.split("-")[0]
    assert result["kind"].startswith(f"lookalike:{vendor}-")
    assert result["kind"] not in NVIDIA_AND_AMD_KINDS
    assert result["parsed"]["vendor"] == vendor
    assert result["parsed"]["device_count"] >= 1
    # Nothing printed about the file (its name aside) says NVIDIA or AMD.
    printed = json.dumps({k: v for k, v in result.items() if k != "file"})
    assert not re.search(r"\b(?:nvidia|amd|rocm)\b", printed, re.IGNORECASE)


def test_hygon_json_would_pass_for_rocm_smi_without_the_lookalike_check() -> None:
    # Its cardN keys are what marks rocm-smi JSON: the look-alike check has to come first.
    text = (FIXTURES / "lookalike" / "hygon-rocm-smi-json-dcu-dtk24.04.3.json").read_text()
    assert '"card0"' in text
    assert detect_kind(text) == "lookalike:hygon-hy-smi"


def test_cli_exits_zero_for_a_lookalike(capsys: pytest.CaptureFixture[str]) -> None:
    capture = FIXTURES / "lookalike" / "iluvatar-ixsmi-16x-bi-v150-driver4.3.0.txt"
    assert main(["inspect", str(capture)]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    assert result["kind"] == "lookalike:iluvatar-ixsmi"
    assert result["parsed"]["device_count"] == 16
    assert result["parsed"]["devices"][0] == "Iluvatar BI-V150"


def test_unknown_files_are_refused_saying_what_they_look_like(tmp_path: Path) -> None:
    def error(name: str, data: bytes) -> str:
        path = tmp_path / name
        path.write_bytes(data)
        result = inspect_file(path)
        assert result["kind"] == "unknown"
        return str(result["error"])

    assert "binary data" in error("blob.bin", bytes(range(256)) * 8)
    assert "binary data" in error("zeros.bin", b"\0" * 4096)
    json_other = error("other.json", b'{"hosts": ["a", "b"], "count": 2}\n')
    assert "looks like JSON but not rocm-smi, amd-smi or a gpuaudit snapshot" in json_other
    assert "'hosts'" in json_other
    assert "looks like JSON but not" in error("list.json", b"[1, 2, 3]\n")
    # Derived: a real rocm-smi JSON capture cut in half.
    rocm = (FIXTURES / "rocm-smi" / "telegraf-mi100-rocm5.7.1.json").read_bytes()
    assert "looks like JSON but does not parse" in error("cut.json", rocm[: len(rocm) // 2])
    xml = error("other.xml", b'<?xml version="1.0"?>\n<testsuites><testsuite/></testsuites>\n')
    assert "XML of another schema (root <testsuites>)" in xml
    assert "plain text" in error("junk.txt", b"hello\n")


def test_an_nvidia_table_without_gpu_rows_is_refused_clearly(tmp_path: Path) -> None:
    # Derived: the 8x H100 table with its GPU boxes cut out (banner and titles kept).
    table = FIXTURES / "nvidia-smi-table" / "gpud-nvidia-smi-table-8x-h100-driver550.90.07.txt"
    lines = table.read_text(encoding="utf-8").splitlines()
    end = next(i for i, line in enumerate(lines) if line.startswith("|===")) + 1
    path = tmp_path / "no-rows.txt"
    path.write_text("\n".join(lines[:end]) + "\n", encoding="utf-8")
    result = inspect_file(path)
    assert result["kind"] == "unknown"
    assert "no GPU rows" in result["error"]


def test_looks_like_names_boxed_tables_and_smi_banners() -> None:
    # Derived from the Enflame capture: its banner lines dropped, the boxed table kept.
    efsmi = (FIXTURES / "lookalike" / "enflame-efsmi-2x-s60-driver1.2.0.301.txt").read_text()
    boxed = "\n".join(
        line for line in efsmi.splitlines() if "Enflame" not in line and "EFSMI" not in line
    )
    assert detect_kind(boxed) == "unknown"
    assert "boxed table like nvidia-smi's" in looks_like(boxed)
    # Derived from the ROCm 6 concise capture: its title kept, the rest cut.
    concise = (FIXTURES / "rocm-smi" / "thamada-4x-mi300x-rocm-smi-concise.txt").read_text()
    title = next(line for line in concise.splitlines() if "ROCm System Management" in line)
    assert "banner of nvidia-smi or rocm-smi" in looks_like(title + "\nsomething else\n")
