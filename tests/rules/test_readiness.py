"""GA931-GA937: the audit's dcgmi diag as findings, on real captures (tests/fixtures/dcgm-diag)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from gpuaudit.model.findings import Outcome, Severity
from gpuaudit.model.snapshot import DcgmDiag, HostSnapshot, Section
from gpuaudit.parsers.dcgm_diag import parse_dcgm_diag_section
from gpuaudit.rules import all_rules, assess
from gpuaudit.rules.refs import GUIDE_DIAG_BUSY

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "dcgm-diag"


def _section(capture: str, level: int, fmt: str) -> tuple[DcgmDiag, Section]:
    stdout = f"level={level}\nstate=ran\nformat={fmt}\noutput:\n" + (FIXTURES / capture).read_text()
    return parse_dcgm_diag_section(stdout, "", 0), Section(rc=0, stdout=stdout)


def _host(
    make_host: Callable[..., HostSnapshot], capture: str, level: int, gpus: int
) -> HostSnapshot:
    fmt = "json" if capture.endswith(".json") else "text"
    diag, section = _section(capture, level, fmt)
    return make_host(gpus=gpus, dcgm_diag=diag, sections={"dcgm_diag": section})


def _outcome(snap: HostSnapshot, code: str, policy: dict | None = None):
    return next(o for o in assess([snap], policy).outcomes if o.rule == code)


def test_rules_are_registered_in_their_own_category() -> None:
    codes = {r.code: r for r in all_rules() if r.category == "readiness"}
    assert sorted(codes) == [f"GA93{i}" for i in range(1, 8)]
    assert GUIDE_DIAG_BUSY in codes["GA933"].references


def test_per_gpu_stress_failures(make_host, findings) -> None:
    snap = _host(make_host, "dcgm-testdiagmanager-per-gpu-fail-skip.json", 1, 4)
    failed = findings("GA931", snap)
    # sm_stress failed on GPUs 0, 2 and 3 (GPU 1 passed); nothing else failed.
    assert [f.gpu for f in failed] == [0, 2, 3]
    assert all("Stress / sm_stress" in f.message for f in failed)
    gpu2 = next(f for f in failed if f.gpu == 2)
    assert "Max stress level of 1096.5" in gpu2.message
    assert gpu2.evidence.actual["dcgm_error_ids"] == [50]
    # DCGM files it under error category 9 (thermal hardware): high.
    assert gpu2.severity is Severity.HIGH
    outcome = _outcome(snap, "GA931")
    assert {g.gpu: g.outcome for g in outcome.gpus}[1] is Outcome.PASS


def test_memory_failure_on_every_gpu_from_the_table(make_host, findings) -> None:
    snap = _host(make_host, "nccl-tests-264-h100x8-r3-memory-fail-dcgm338.txt", 3, 8)
    failed = findings("GA931", snap)
    assert [f.gpu for f in failed] == list(range(8))
    assert all(f.severity is Severity.HIGH for f in failed)  # a memory test
    assert "system not yet initialized" in failed[7].message
    assert failed[0].evidence.actual == {
        "test": "Hardware / GPU Memory",
        "status": "Fail",
        "level": 3,
    }
    skipped = findings("GA937", snap)
    assert len(skipped) == 1
    # PCIe and Memory Bandwidth were skipped; the EUD test is left out.
    assert "Integration / PCIe" in skipped[0].message
    assert "Memory Bandwidth" in skipped[0].message
    assert "EUD" not in skipped[0].message


def test_passing_runs_have_no_findings(make_host, findings) -> None:
    for capture, level in (
        ("virtualclient-r1-pass.json", 1),
        ("virtualclient-r3-pass.json", 3),
        ("elideng-h100-r2-pass-dcgm338.txt", 2),
    ):
        snap = _host(make_host, capture, level, 1)
        for code in ("GA931", "GA932", "GA933", "GA934", "GA935", "GA937"):
            assert findings(code, snap) == [], (capture, code)
        assert _outcome(snap, "GA931").outcome is Outcome.PASS


def test_a_warn_status_is_ga932(make_host, findings) -> None:
    """Derived from the level-2 table: the PCIe row's status changed to Warn."""
    text = (FIXTURES / "elideng-h100-r2-pass-dcgm338.txt").read_text()
    text = text.replace(
        "| PCIe                      | Pass - All ", "| PCIe                      | Warn - All "
    )
    stdout = "level=2\nstate=ran\nformat=text\noutput:\n" + text
    snap = make_host(gpus=1, dcgm_diag=parse_dcgm_diag_section(stdout))
    warned = findings("GA932", snap)
    assert len(warned) == 1 and "Integration / PCIe" in warned[0].message
    assert findings("GA931", snap) == []


def test_busy_host_is_informational_and_not_evaluated(make_host, findings) -> None:
    diag = parse_dcgm_diag_section(
        "level=1\nbusy_pids=4242\nstate=busy\nreason=compute processes run on the GPUs\noutput:\n"
    )
    snap = make_host(dcgm_diag=diag)
    busy = findings("GA933", snap)
    assert len(busy) == 1 and busy[0].severity is Severity.INFO
    assert "4242" in busy[0].message
    outcome = _outcome(snap, "GA931")
    assert outcome.outcome is Outcome.NOT_EVALUATED
    assert "compute processes" in outcome.reason


def test_dcgmi_missing_and_failed(make_host, findings) -> None:
    missing = make_host(dcgm_diag=parse_dcgm_diag_section("", "dcgmi: command not found\n", 127))
    assert len(findings("GA934", missing)) == 1
    assert _outcome(missing, "GA931").outcome is Outcome.NOT_EVALUATED
    stopped = make_host(
        dcgm_diag=parse_dcgm_diag_section("level=3\nstate=ran\nformat=json\noutput:\n", "", 124)
    )
    broken = findings("GA935", stopped)
    assert len(broken) == 1 and broken[0].severity is Severity.HIGH


def test_no_diagnostic_asked_leaves_the_rules_disabled_by_policy(make_host, findings) -> None:
    snap = make_host()
    outcome = _outcome(snap, "GA931")
    assert outcome.outcome is Outcome.DISABLED  # level 0: the site did not ask, never a pass
    assert "dcgm_diag.level is 0" in outcome.reason
    assert findings("GA936", snap) == []


def test_asked_for_but_not_run(make_host, findings) -> None:
    # A level 3 set in host data, without the opt-in the policy file would have demanded.
    long_level = make_host(host_data={"dcgm_diag": {"level": 3}})
    not_run = findings("GA936", long_level)
    assert len(not_run) == 1 and "allow_long" in not_run[0].message
    # A level-1 request whose bundle has no diagnostic (collected without the setting).
    quick = make_host(host_data={"dcgm_diag": {"level": 1}})
    assert "collector ran no diagnostic" in findings("GA936", quick)[0].message
    ran = _host(make_host, "virtualclient-r1-pass.json", 1, 2)
    assert findings("GA936", ran) == []
