"""dcgmi diag output (JSON and the text table) on real captures, and the collector's section.

Expectations are read off the raw files in tests/fixtures/dcgm-diag/ (provenance:
tests/fixtures/SOURCES.md, dcgm-diag/).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuaudit.model.snapshot import DcgmDiagTest, DiagRun, DiagStatus
from gpuaudit.parsers.dcgm_diag import (
    parse_dcgm_diag_json,
    parse_dcgm_diag_output,
    parse_dcgm_diag_section,
)
from gpuaudit.parsers.dcgm_diag_text import parse_dcgm_diag_text
from gpuaudit.parsers.errors import ParseError
from gpuaudit.parsers.warnings import collecting

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "dcgm-diag"
DEPLOYMENT = [
    "Denylist",
    "NVML Library",
    "CUDA Main Library",
    "Permissions and OS Blocks",
    "Persistence Mode",
    "Environment Variables",
    "Page Retirement/Row Remap",
    "Graphics Processes",
    "Inforom",
]


def _read(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def _test(tests: tuple[DcgmDiagTest, ...], name: str) -> DcgmDiagTest:
    return next(t for t in tests if t.name == name)


def test_every_capture_parses_without_warnings() -> None:
    names = sorted(p.name for p in FIXTURES.iterdir())
    assert len(names) == 6
    for name in names:
        with collecting() as warnings:
            out = parse_dcgm_diag_output(_read(name))
        assert out.tests, name
        assert warnings == [], (name, warnings)


def test_virtualclient_level_1_json() -> None:
    out = parse_dcgm_diag_json(_read("virtualclient-r1-pass.json"))
    assert out.output_format == "json"
    assert [t.name for t in out.tests] == DEPLOYMENT
    assert {t.category for t in out.tests} == {"Deployment"}
    for test in out.tests:
        # "results" : [ { "status" : "Pass" } ]: one result, no GPU ids
        assert len(test.results) == 1
        assert test.results[0].status is DiagStatus.PASS
        assert test.results[0].raw_status == "Pass"
        assert test.results[0].gpus == ()
    assert out.dcgm_version is None and out.driver_version is None


def test_virtualclient_level_2_json_info_per_gpu() -> None:
    out = parse_dcgm_diag_json(_read("virtualclient-r2-pass.json"))
    assert [t.category for t in out.tests][-2:] == ["Integration", "Hardware"]
    pcie = _test(out.tests, "PCIe")
    assert pcie.results[0].gpus == (0,)
    info = pcie.results[0].info[0].text
    assert info.startswith("GPU 0 GPU 0 GPU to Host bandwidth: 13.15 GB/s")
    assert "bidirectional latency: 4.532 us" in info  # tabs in the capture read as spaces
    memory = _test(out.tests, "GPU Memory")
    assert memory.results[0].info[0].text == "GPU 0 Allocated 15206918958 bytes (97.3%)"
    assert memory.results[0].info[0].gpu == 0


def test_virtualclient_level_3_json_skip_and_stress() -> None:
    out = parse_dcgm_diag_json(_read("virtualclient-r3-pass.json"))
    assert len(out.tests) == 16
    assert _test(out.tests, "EUD Test").results[0].status is DiagStatus.SKIP
    assert _test(out.tests, "EUD Test").category == "Hardware"
    power = _test(out.tests, "Targeted Power")
    assert power.category == "Stress"
    assert power.results[0].info[0].text == "GPU 0 GPU 0 power average: 70 W"
    assert _test(out.tests, "Memory Bandwidth").results[0].status is DiagStatus.PASS
    statuses = {r.status for t in out.tests for r in t.results}
    assert statuses == {DiagStatus.PASS, DiagStatus.SKIP}


def test_dcgm_per_gpu_json_fail_skip_and_error_codes() -> None:
    out = parse_dcgm_diag_json(_read("dcgm-testdiagmanager-per-gpu-fail-skip.json"))
    assert out.dcgm_version == "1.7"
    assert len(out.tests) == 17
    denylist = _test(out.tests, "Denylist")
    assert denylist.results[0].gpus == (0, 1, 2, 3)  # "gpu_ids": "0,1,2,3"
    assert denylist.results[0].raw_status == "PASS"
    memory = _test(out.tests, "memory")
    assert memory.category == "Hardware"
    assert [(r.gpus, r.status) for r in memory.results] == [
        ((0,), DiagStatus.SKIP),
        ((1,), DiagStatus.PASS),
        ((2,), DiagStatus.PASS),
        ((3,), DiagStatus.PASS),
    ]
    ecc = memory.results[0].warnings[0]
    assert ecc.text.startswith("ECC memory on GPU 0 is not currently active.")
    assert (ecc.error_id, ecc.error_category, ecc.error_severity) == (55, 11, 2)
    assert memory.results[1].info[0].text == "Allocated 16583361795 bytes (97.2%)"
    stress = _test(out.tests, "sm_stress")
    assert [(r.gpus, r.status) for r in stress.results] == [
        ((0,), DiagStatus.FAIL),
        ((1,), DiagStatus.PASS),
        ((2,), DiagStatus.FAIL),
        ((3,), DiagStatus.FAIL),
    ]
    gpu2 = stress.results[2].warnings[0]
    assert (
        gpu2.text
        == "Max stress level of 1096.5 did not exceed desired stress level of 3000.0 for GPU 2"
    )
    assert (gpu2.error_id, gpu2.error_severity, gpu2.error_category) == (50, 1, 9)
    assert [i.text for i in stress.results[1].info] == [
        "GPU 1 relative stress level: 577",
        "GPU 1 temperature average: 32 C",
    ]
    bandwidth = _test(out.tests, "memory_bandwidth")
    assert bandwidth.results[3].warnings[0].text == (
        "GPU 3: The memory bandwidth test is skipped for this GPU."
    )
    assert bandwidth.results[3].warnings[0].gpu == 3
    assert bandwidth.results[3].warnings[0].error_id == 48


def test_elideng_level_2_text_table() -> None:
    out = parse_dcgm_diag_text(_read("elideng-h100-r2-pass-dcgm338.txt"))
    assert out.output_format == "text"
    assert (out.dcgm_version, out.driver_version) == ("3.3.8", "535.309.01")
    assert out.gpu_device_ids == ("2330",)
    assert [t.name for t in out.tests] == [*DEPLOYMENT, "PCIe", "GPU Memory"]
    assert [t.category for t in out.tests][-2:] == ["Integration", "Hardware"]
    pcie = _test(out.tests, "PCIe")
    assert pcie.results[0].raw_status == "Pass" and pcie.results[0].gpus == ()  # "Pass - All"
    persistence = _test(out.tests, "Persistence Mode")
    assert persistence.results[0].status is DiagStatus.PASS
    # Three wrapped rows joined without adding spaces: "Enabl" + "e persistence".
    assert persistence.results[0].info[0].text == (
        "Persistence mode for GPU 0 is disabled. Enable persistence mode by running "
        '"nvidia-smi -i <gpuId> -pm 1 " as root.'
    )
    assert persistence.results[0].info[0].gpu is None  # it does not start with "GPU N"
    # The Stress category is printed but empty at level 2.
    assert "Stress" not in {t.category for t in out.tests}


def test_nccl_tests_level_3_text_memory_failure_on_every_gpu() -> None:
    out = parse_dcgm_diag_text(_read("nccl-tests-264-h100x8-r3-memory-fail-dcgm338.txt"))
    assert (out.dcgm_version, out.driver_version) == ("3.3.8", "560.35.03")
    assert out.gpu_device_ids == ("2330",) * 8
    assert len(out.tests) == 13
    memory = _test(out.tests, "GPU Memory")
    assert memory.category == "Hardware"
    assert len(memory.results) == 1
    result = memory.results[0]
    assert (result.status, result.raw_status, result.gpus) == (DiagStatus.FAIL, "Fail", ())
    assert [w.gpu for w in result.warnings] == list(range(8))
    assert result.warnings[5].text == (
        "GPU 5 Error using CUDA API cuInit Check DCGM and system logs for errors. Reset GPU. "
        "Restart DCGM. Rerun diagnostics. Unable to initialize CUDA library: 'system not yet "
        "initialized'. . Please check if a CUDA sample program can be run successfully on this "
        "host. Refer to https://github.com/nvidia/cuda-samples"
    )
    for name in ("PCIe", "Memory Bandwidth", "EUD Test"):
        assert _test(out.tests, name).results[0].status is DiagStatus.SKIP
    # The Info under Persistence Mode is cut by dcgmi itself ("Enable pers").
    info = _test(out.tests, "Persistence Mode").results[0].info[0].text
    assert info.endswith("Persistence mode for GPU 4 is disabled. Enable pers")


def test_text_per_gpu_results_get_their_own_messages() -> None:
    """Derived from the nccl-tests capture: its memory row split into one GPU's pass and
    another's failure, the form dcgmi prints ("Pass - GPU: 1" then "Fail - GPU: 0")."""
    lines = _read("nccl-tests-264-h100x8-r3-memory-fail-dcgm338.txt").splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("| GPU Memory"))
    lines[at] = "| GPU Memory                | Pass - GPU: 1                                  |"
    lines.insert(
        at + 1, "|                           | Fail - GPU: 0                                  |"
    )
    with collecting() as warnings:
        out = parse_dcgm_diag_text("\n".join(lines))
    assert warnings == []
    results = _test(out.tests, "GPU Memory").results
    assert [(r.status, r.gpus) for r in results] == [
        (DiagStatus.PASS, (1,)),
        (DiagStatus.FAIL, (0,)),
    ]
    assert [w.gpu for w in results[1].warnings] == [0]
    assert [w.gpu for w in results[0].warnings] == [1]


def test_unknown_status_is_never_a_pass() -> None:
    """Derived: the level-1 JSON capture with one status word changed."""
    text = _read("virtualclient-r1-pass.json").replace(
        '"status" : "Pass"', '"status" : "Aborted"', 1
    )
    with collecting() as warnings:
        out = parse_dcgm_diag_json(text)
    assert out.tests[0].results[0].status is DiagStatus.UNKNOWN
    assert any("unknown diagnostic status" in w.message for w in warnings)


def test_banner_before_the_json_is_skipped() -> None:
    """Derived: dcgmi's banner line put before the level-2 JSON capture."""
    text = "Successfully ran diagnostic for group.\n" + _read("virtualclient-r2-pass.json")
    assert len(parse_dcgm_diag_output(text).tests) == 11


@pytest.mark.parametrize(
    "text",
    [
        "Error: unable to establish a connection to the specified host: localhost\n",
        '{"DCGM GPU Diagnostic": ',
        "[1, 2]\n",
    ],
)
def test_output_that_is_no_result_raises_parse_error(text: str) -> None:
    with pytest.raises(ParseError):
        parse_dcgm_diag_output(text)


# --- the collector's section --------------------------------------------------------------


def test_section_that_ran_carries_the_results() -> None:
    stdout = "level=1\nstate=ran\nformat=json\noutput:\n" + _read("virtualclient-r1-pass.json")
    diag = parse_dcgm_diag_section(stdout, "", 0)
    assert (diag.run, diag.level, diag.output_format, diag.rc) == (DiagRun.RAN, 1, "json", 0)
    assert len(diag.tests) == 9


def test_section_busy_and_not_checked() -> None:
    busy = parse_dcgm_diag_section(
        "level=1\nbusy_pids=4242 77\nstate=busy\nreason=compute processes run\noutput:\n"
    )
    assert (busy.run, busy.busy_pids, busy.tests) == (DiagRun.BUSY, (4242, 77), ())
    unknown = parse_dcgm_diag_section(
        "level=2\nstate=not_checked\nreason=nvidia-smi is missing\noutput:\n"
    )
    assert (unknown.run, unknown.level, unknown.reason) == (
        DiagRun.NOT_CHECKED,
        2,
        "nvidia-smi is missing",
    )


def test_section_missing_dcgmi_and_failed_run() -> None:
    missing = parse_dcgm_diag_section("", "dcgmi: command not found\n", 127)
    assert (missing.run, missing.reason) == (DiagRun.MISSING, "dcgmi: command not found")
    hostengine = (
        "Error: unable to establish a connection to the specified host: localhost\n"
        "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n"
    )
    failed = parse_dcgm_diag_section(
        "level=1\nstate=ran\nformat=text\njson_rc=235\noutput:\n" + hostengine, "", 235
    )
    assert failed.run is DiagRun.FAILED
    assert failed.reason.startswith("exit status 235: Error: unable to establish a connection")
    timed_out = parse_dcgm_diag_section("level=3\nstate=ran\nformat=json\noutput:\n", "", 124)
    assert timed_out.run is DiagRun.FAILED and "time limit" in timed_out.reason


def test_section_without_a_state_is_a_parse_error() -> None:
    with pytest.raises(ParseError):
        parse_dcgm_diag_section("level=1\noutput:\n")
