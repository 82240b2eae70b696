"""The audit's dcgmi diag on simulated hosts: the fact's one remote command, the collector's
busy check, the simulated dcgmi answering from real captures, and the findings."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable

from gpuaudit.assemble.build import build_snapshot
from gpuaudit.facts.gpu import GpuAuditSections
from gpuaudit.model.snapshot import DiagRun, DiagStatus, HostSnapshot
from gpuaudit.parsers.bundle import parse_bundle_text
from gpuaudit.rules import assess
from gpuaudit.sim.connector import _is_collector
from gpuaudit.sim.host import SimHost
from gpuaudit.sim.profiles import get_profile


def _audit(host: SimHost, level: int | None, policy: dict | None = None) -> HostSnapshot:
    """The fact's command, as the deploy builds it for the policy's level, run on the host."""
    fact = GpuAuditSections()
    command = fact.command(
        nonce="t1sim", command_timeout=20, dcgm_diag_level=level, dcgm_diag_timeout=60
    )
    assert _is_collector(command)  # a read-only simulated host still runs it
    done = subprocess.run(
        ["sh", "-c", command],
        env={**os.environ, **host.env()},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    host_data = {"dcgm_diag": {"level": level or 0, "allow_long": True}}
    return build_snapshot(host.name, parse_bundle_text(done.stdout), host_data=host_data)


def _diag_events(host: SimHost) -> list[str]:
    return [e for e in host.state()["events"] if e.startswith("dcgmi")]


def _findings(snap: HostSnapshot, code: str) -> list:
    return [f for f in assess([snap]).findings if f.rule == code]


def test_level_1_carries_the_results_and_the_findings(make_host: Callable[..., SimHost]) -> None:
    host = make_host("a100-diag-fail")
    snap = _audit(host, 1)
    diag = snap.dcgm_diag
    assert diag is not None
    assert (diag.run, diag.level, diag.output_format) == (DiagRun.RAN, 1, "json")
    assert len(diag.tests) == 17
    assert _diag_events(host) == ["dcgmi diag -r 1 -j"]
    failed = _findings(snap, "GA931")
    assert [f.gpu for f in failed] == [0, 2, 3]
    assert failed[0].gpu_name == "NVIDIA A100-SXM4-80GB"
    assert len(_findings(snap, "GA937")) == 1
    assert "dcgm_diag" in snap.sections


def test_level_3_falls_back_to_the_table(make_host: Callable[..., SimHost]) -> None:
    """The failing host has only a table capture of level 3: -j is refused, the table read."""
    host = make_host("a100-diag-fail")
    snap = _audit(host, 3)
    diag = snap.dcgm_diag
    assert diag is not None and diag.output_format == "text"
    assert "json_rc=2" in snap.sections["dcgm_diag"].stdout
    assert _diag_events(host) == ["dcgmi diag -r 3 -j", "dcgmi diag -r 3"]
    memory = next(t for t in diag.tests if t.name == "GPU Memory")
    assert memory.results[0].status is DiagStatus.FAIL
    assert [f.gpu for f in _findings(snap, "GA931")] == list(range(8))


def test_level_0_runs_no_dcgmi(make_host: Callable[..., SimHost]) -> None:
    host = make_host("a100-diag-fail")
    snap = _audit(host, 0)
    assert snap.dcgm_diag is None
    assert "dcgm_diag" not in snap.sections
    assert _diag_events(host) == []


def test_the_hosts_environment_cannot_start_a_diagnostic(
    make_host: Callable[..., SimHost], monkeypatch
) -> None:
    host = make_host("a100-diag-fail")
    monkeypatch.setenv("GPUAUDIT_DCGM_DIAG", "3")
    assert _audit(host, 0).dcgm_diag is None
    assert _diag_events(host) == []


def test_a_busy_gpu_skips_the_diagnostic(make_host: Callable[..., SimHost]) -> None:
    profile = get_profile("a100-diag-fail")
    profile["gpus"] = {5: {"processes": [{"pid": 31337, "name": "python3"}]}}
    host = make_host("a100-busy", profile)
    snap = _audit(host, 1)
    diag = snap.dcgm_diag
    assert diag is not None
    assert (diag.run, diag.busy_pids, diag.tests) == (DiagRun.BUSY, (31337,), ())
    assert _diag_events(host) == []
    busy = _findings(snap, "GA933")
    assert len(busy) == 1 and "31337" in busy[0].message
    assert _findings(snap, "GA931") == []


def test_stopped_host_engine_and_missing_dcgm(make_host: Callable[..., SimHost]) -> None:
    stopped = get_profile("a100-hgx-01")
    stopped["services"] = {"nvidia-dcgm": {"active": "inactive"}}
    snap = _audit(make_host("a100-no-hostengine", stopped), 1)
    assert snap.dcgm_diag is not None and snap.dcgm_diag.run is DiagRun.FAILED
    broken = _findings(snap, "GA935")
    assert len(broken) == 1
    assert "exit status 235: Error: unable to establish a connection" in broken[0].message
    no_dcgm = get_profile("a100-hgx-01")
    no_dcgm["dcgm"] = False
    snap = _audit(make_host("a100-no-dcgm", no_dcgm), 1)
    assert snap.dcgm_diag is not None and snap.dcgm_diag.run is DiagRun.MISSING
    assert len(_findings(snap, "GA934")) == 1


def test_a_healthy_host_passes_level_1(make_host: Callable[..., SimHost]) -> None:
    snap = _audit(make_host("a100-hgx-01"), 1)
    assert snap.dcgm_diag is not None and snap.dcgm_diag.run is DiagRun.RAN
    outcomes = {o.rule: o.outcome.value for o in assess([snap]).outcomes}
    assert outcomes["GA931"] == "pass" and outcomes["GA937"] == "pass"
