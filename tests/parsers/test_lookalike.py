"""Other vendors' look-alike SMI tools are named as themselves, never taken for NVIDIA or AMD.

Every expectation below was read off the raw capture in tests/fixtures/lookalike/ (banner
versions, device rows as printed); see tests/fixtures/SOURCES.md for where each came from.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gpuaudit.parsers.amd_smi import parse_amd_smi_json
from gpuaudit.parsers.lookalike import (
    SCAN_CHARS,
    SPECS,
    LookAlike,
    identify,
    identify_name,
)
from gpuaudit.parsers.nvidia_xml import parse_nvidia_smi_xml
from gpuaudit.parsers.rocm_smi import parse_rocm_smi_json

FIXTURES = Path(__file__).parents[1] / "fixtures"
LOOKALIKE = FIXTURES / "lookalike"
CAPTURES = sorted(LOOKALIKE.iterdir())


def read(name: str) -> str:
    return (LOOKALIKE / name).read_text(encoding="utf-8")


# file -> (vendor, tool, imitates, device_count, device names, tool version, driver version)
EXPECTED: dict[str, tuple[str, str, str, int, tuple[str, ...], str | None, str | None]] = {
    "iluvatar-ixsmi-bi-v150s-driver4.1.0.txt": (
        "iluvatar", "ixsmi", "nvidia-smi", 1, ("Iluvatar BI-V150S",), "4.0.0", "4.1.0",
    ),
    "iluvatar-ixsmi-16x-bi-v150-driver4.3.0.txt": (
        "iluvatar", "ixsmi", "nvidia-smi", 16, ("Iluvatar BI-V150",) * 16, "4.3.0", "4.3.0",
    ),
    "kunlunxin-xpu-smi-8x-p800-driver5.0.21.21.txt": (
        "kunlunxin", "xpu-smi", "nvidia-smi", 8, ("P800 OAM",) * 8, None, "5.0.21.21",
    ),
    "kunlunxin-xpu-smi-2x-r300-driver4.0.txt": (
        "kunlunxin", "xpu-smi", "nvidia-smi", 2, ("R300", "R300"), None, "4.0",
    ),
    "metax-mx-smi-8x-c550-driver2.15.9.txt": (
        "metax", "mx-smi", "nvidia-smi", 8, ("MetaX C550",) * 8, "2.2.4", "2.15.9",
    ),
    "moorethreads-mthreads-gmi-s4000-driver1.2.0.txt": (
        "moorethreads", "mthreads-gmi", "nvidia-smi", 1, ("MTT S4000",), "1.12.2", "1.2.0",
    ),
    "hygon-rocm-smi-4x-dcu-dtk23.10.txt": ("hygon", "hy-smi", "rocm-smi", 4, (), None, None),
    "hygon-rocm-smi-8x-dcu-300w.txt": ("hygon", "hy-smi", "rocm-smi", 8, (), None, None),
    "hygon-rocm-smi-json-dcu-dtk24.04.3.json": (
        "hygon", "hy-smi", "rocm-smi", 1, ("DCU xxxx",), None, None,
    ),
    "enflame-efsmi-2x-s60-driver1.2.0.301.txt": (
        "enflame", "efsmi", "", 2, ("S60", "S60"), "1.2.0.301", "1.2.0.301",
    ),
    "cambricon-cnmon-2x-mlu370-x8-driver5.10.13.txt": (
        "cambricon", "cnmon", "", 2, ("MLU370-X8", "MLU370-X8"), "5.10.13", "5.10.13",
    ),
    "ascend-npu-smi-2x-910b2c-23.0.3.txt": (
        "ascend", "npu-smi", "", 2, ("910B2C", "910B2C"), "23.0.3", "23.0.3",
    ),
    "ascend-npu-smi-8x-910a-22.0.3.1.txt": (
        "ascend", "npu-smi", "", 8, ("910A",) * 8, "22.0.3.1", "22.0.3.1",
    ),
}  # fmt: skip

# The line of each capture that names its tool (its banner, or the Hygon JSON key).
EVIDENCE = {
    "iluvatar": "IX-ML:",
    "kunlunxin": "Version",
    "metax": "MetaX System Management Interface Log",
    "moorethreads": "mthreads-gmi:",
    "hygon": "DCU",  # the DCU column header under the title, or a JSON member
    "enflame": "Enflame System Management Interface",
    "cambricon": "CNMON v5.10.13",
    "ascend": "npu-smi",
}


def test_every_capture_has_expectations() -> None:
    assert {p.name for p in CAPTURES} == set(EXPECTED)
    # At least eight different tools of eight vendors.
    assert len({(v[0], v[1]) for v in EXPECTED.values()}) >= 8


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_capture_is_named_as_its_vendor(name: str) -> None:
    vendor, tool, imitates, count, devices, tool_version, driver = EXPECTED[name]
    found = identify(read(name))
    assert found is not None
    assert (found.vendor, found.tool, found.imitates) == (vendor, tool, imitates)
    assert found.kind == f"lookalike:{vendor}-{tool}"
    assert found.device_count == count
    assert found.devices == devices
    assert (found.tool_version, found.driver_version) == (tool_version, driver)
    assert EVIDENCE[vendor] in found.evidence
    assert all(line in read(name) for line in found.evidence.splitlines())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_printed_result_names_no_nvidia_or_amd(name: str) -> None:
    found = identify(read(name))
    assert found is not None
    printed = json.dumps(found.to_dict())
    assert not re.search(r"\b(?:nvidia|amd|rocm)\b", printed, re.IGNORECASE)


NVIDIA_AND_AMD = sorted(
    p
    for p in FIXTURES.glob("*/*")
    if p.is_file() and p.parent.name != "lookalike" and p.suffix != ".md"
)


@pytest.mark.parametrize("path", NVIDIA_AND_AMD, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_nvidia_and_amd_captures_are_not_lookalikes(path: Path) -> None:
    text = path.read_text(encoding="utf-8", errors="replace")
    assert identify(text) is None


def test_nvidia_and_amd_fixture_folders_are_all_checked() -> None:
    folders = {p.parent.name for p in NVIDIA_AND_AMD}
    assert {"nvidia-smi-xml", "nvidia-smi-q", "nvidia-smi-table", "rocm-smi", "amd-smi"} <= folders
    assert len(NVIDIA_AND_AMD) > 90


def test_ixsmi_rows_alone_name_the_vendor() -> None:
    # Derived: the 16-GPU ixsmi capture without its IX-ML banner line (an ixsmi that prints
    # nvidia-smi's banner, or a cut capture): the device rows still name Iluvatar.
    text = read("iluvatar-ixsmi-16x-bi-v150-driver4.3.0.txt")
    cut = "\n".join(line for line in text.splitlines() if "IX-ML:" not in line)
    found = identify(cut)
    assert found is not None and found.vendor == "iluvatar"
    assert found.evidence.startswith("| 0    Iluvatar BI-V150")
    assert found.device_count == 16 and found.tool_version is None


def test_hygon_json_is_named_by_its_card_vendor_alone() -> None:
    # Derived: the Hygon rocm-smi JSON without its "DCU use (%)" member.
    text = read("hygon-rocm-smi-json-dcu-dtk24.04.3.json")
    cut = "\n".join(line for line in text.splitlines() if "DCU use" not in line)
    found = identify(cut)
    assert found is not None and found.vendor == "hygon"
    assert "Chengdu Haiguang IC Design Co., Ltd." in found.evidence


def test_a_vendor_word_in_a_process_row_of_a_real_table_is_not_a_mark() -> None:
    # Derived: a real nvidia-smi table with its "No running processes found" line replaced
    # by a process row whose command names another vendor's product.
    table = FIXTURES / "nvidia-smi-table" / "gpud-nvidia-smi-table-8x-h100-driver550.90.07.txt"
    text = table.read_text(encoding="utf-8")
    row = "|    0   N/A  N/A     4242      C   /opt/Ascend/MLU370-X8/Iluvatar/bench       512MiB |"
    empty = "|  No running processes found" + " " * 61 + "|"
    assert empty in text
    derived = text.replace(empty, row)
    assert row in derived
    assert identify(derived) is None


def test_hygon_text_capture_is_not_read_as_rocm_smi_concise() -> None:
    # The Hygon title is rocm-smi's without "ROCm", over DCU columns (not GPU).
    text = read("hygon-rocm-smi-8x-dcu-300w.txt")
    assert "ROCm" not in text and text.splitlines()[2].startswith("DCU     Temp")
    found = identify(text)
    assert found is not None
    assert found.evidence.splitlines()[0].startswith("=" * 28 + " System Management Interface")
    assert found.evidence.splitlines()[-1].startswith("DCU     Temp     AvgPwr")


def test_never_raises_and_reads_a_bounded_start() -> None:
    assert identify("") is None
    assert identify("   \n\t") is None
    assert identify("\x00" * 4096) is None
    assert identify("\ufffd\ufffd garbage | 0 | \n{") is None
    # A mark past the scanned start is not looked for.
    late = "x\n" * (SCAN_CHARS // 2 + 1) + read("metax-mx-smi-8x-c550-driver2.15.9.txt")
    assert identify(late) is None
    assert identify("") is None


def test_every_vendor_has_a_kind_of_its_own() -> None:
    kinds = [f"lookalike:{spec.vendor}-{spec.tool}" for spec in SPECS]
    assert len(kinds) == len(set(kinds))
    assert not any(word in kind for kind in kinds for word in ("nvidia", "amd"))
    seen = {identify(read(name)).kind for name in EXPECTED}  # type: ignore[union-attr]
    # Biren has no capture at hand: it is told apart by product name only.
    assert set(kinds) - seen == {"lookalike:biren-brsmi"}
    assert isinstance(identify(read(CAPTURES[0].name)), LookAlike)


def test_device_names_alone() -> None:
    # Names as the captures print them (a device probe reports names without the banner).
    for name, vendor in [
        ("Iluvatar BI-V150", "iluvatar"),
        ("Iluvatar BI-V150S", "iluvatar"),
        ("MetaX C550", "metax"),
        ("MTT S4000", "moorethreads"),
        ("MLU370-X8", "cambricon"),
        ("DCU xxxx", "hygon"),
    ]:
        found = identify_name(name)
        assert found is not None and found.vendor == vendor, name
    assert identify_name("") is None


def test_nvidia_and_amd_gpu_names_are_no_lookalike_names() -> None:
    names = [
        gpu.name
        for path in sorted((FIXTURES / "nvidia-smi-xml").glob("*.xml"))
        for gpu in parse_nvidia_smi_xml(path.read_text(encoding="utf-8")).gpus
    ]
    names += [
        gpu.name
        for path in sorted((FIXTURES / "rocm-smi").glob("*.json"))
        for gpu in parse_rocm_smi_json(path.read_text(encoding="utf-8"))
    ]
    names += [
        gpu.name
        for path in sorted((FIXTURES / "amd-smi").glob("*static*.json"))
        for gpu in parse_amd_smi_json(path.read_text(encoding="utf-8"))
    ]
    assert len([n for n in names if n]) > 30
    assert [n for n in names if n and identify_name(n)] == []


def test_the_literal_prefilter_never_hides_a_match() -> None:
    """identify() searches a pattern only where the literals every match of it holds are in the
    text (lookalike._NEEDLES): on every capture of every folder, wherever a pattern matches,
    its literals are there, so skipping the search where one is missing loses nothing."""
    from gpuaudit.parsers.lookalike import _NEEDLES, SCAN_CHARS

    checked = 0
    for path in sorted(FIXTURES.rglob("*")):
        if not path.is_file() or path.suffix == ".md":
            continue
        head = path.read_bytes().decode("utf-8", "replace")[:SCAN_CHARS]
        for pattern, needles in _NEEDLES.items():
            match = pattern.search(head)
            if match:
                checked += 1
                missing = [n for n in needles if n not in head]
                assert not missing, f"{path.name}: {pattern.pattern!r} matches without {missing}"
    assert checked >= 20  # the look-alike captures and the name fields of the GPU reports
