"""The gate's checks run on the host: ``dcgmi diag`` judged by the tests it reports (real
captures of dcgmi's output), the host's answer told apart from pyinfra's echo of the command,
and, over real pyinfra on simulated hosts, the four cases a fleet has: a diagnostic that
passes, one that fails with exit status 0, a host engine that does not answer, no dcgmi."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuaudit.upgrade.host_checks import (
    ANSWER_MARK,
    dcgm_diag_check,
    dcgm_diag_command,
    host_answer,
)
from gpuaudit.upgrade.runner import Options, Rollout, _run

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "dcgm-diag"


def answer(capture: str, rc: int = 0) -> str:
    text = (FIXTURES / capture).read_bytes()
    return f"rc={rc} {base64.b64encode(text).decode()}"


def test_a_passing_run_passes() -> None:
    check = dcgm_diag_check(1, answer("virtualclient-r1-pass.json"))
    assert (check.outcome, check.detail) == ("pass", "dcgmi diag -r 1: 9 test(s), none failed")


def test_a_failed_test_fails_the_check_whatever_the_exit_status() -> None:
    for rc in (0, 226):
        check = dcgm_diag_check(1, answer("dcgm-testdiagmanager-per-gpu-fail-skip.json", rc))
        assert check.outcome == "fail", rc
        assert "failed: sm_stress" in check.detail
        assert check.evidence["failed"] == ["sm_stress"]
    table = dcgm_diag_check(3, answer("nccl-tests-264-h100x8-r3-memory-fail-dcgm338.txt"))
    assert table.outcome == "fail" and "Memory" in table.detail, table.detail


def test_a_table_that_passes_passes() -> None:
    assert dcgm_diag_check(2, answer("elideng-h100-r2-pass-dcgm338.txt")).outcome == "pass"


def test_no_results_fail_and_no_dcgmi_is_not_checked() -> None:
    # DCGM's own words when nv-hostengine does not answer (dcgmi/Command.cpp), exit -21.
    down = "Error: Unable to connect to host engine. Host engine connection invalid/disconnected."
    check = dcgm_diag_check(1, f"rc=235 {base64.b64encode(down.encode()).decode()}")
    assert check.outcome == "fail"
    assert check.detail == f"dcgmi diag -r 1 gave no results (exit status 235): {down}"
    assert dcgm_diag_check(1, "dcgmi-missing").outcome == "not_checked"
    unreached = dcgm_diag_check(1, None, "[gpu-01] Error: executed 0 commands")
    assert unreached.outcome == "fail" and "could not be run" in unreached.detail
    passing_but_exit_1 = dcgm_diag_check(1, answer("virtualclient-r1-pass.json", 1))
    assert passing_but_exit_1.outcome == "fail" and "exited 1" in passing_but_exit_1.detail


def test_the_answer_is_the_hosts_line_never_the_echoed_command() -> None:
    command = dcgm_diag_command(1)
    assert ANSWER_MARK.strip() not in command
    said = (
        f"--> Starting operation: server.shell (sh -c '{command}')\n"
        f"[gpu-010] {ANSWER_MARK}rc=1 AAAA\n"  # another host's line
        f"    [gpu-01]   {ANSWER_MARK}rc=0 e30=\n"  # padded to a longer name's width
    )
    assert host_answer(said, "gpu-01") == "rc=0 e30="
    assert host_answer("[gpu-01] Error: executed 0 commands", "gpu-01") is None
    with pytest.raises(ValueError):
        dcgm_diag_command(5)


def test_the_command_runs_under_sh_with_dcgmi_refusing_json(tmp_path: Path) -> None:
    # A dcgmi too old for -j: the table is asked for instead, and its exit status carried.
    tools = tmp_path / "bin"
    tools.mkdir()
    table = FIXTURES / "elideng-h100-r2-pass-dcgm338.txt"
    (tools / "dcgmi").write_text(
        '#!/bin/sh\ncase " $* " in *" -j "*) echo "Invalid option -j" >&2; exit 2 ;; esac\n'
        f"cat {table}\n"
    )
    (tools / "dcgmi").chmod(0o755)
    env = {**os.environ, "PATH": f"{tools}:/usr/bin:/bin"}
    done = subprocess.run(
        ["sh", "-c", dcgm_diag_command(2)], capture_output=True, text=True, env=env, check=True
    )
    said = "".join(f"[h] {line}\n" for line in done.stdout.splitlines())
    check = dcgm_diag_check(2, host_answer(said, "h"))
    assert check.outcome == "pass", check
    assert check.evidence["exit_status"] == 0


def test_a_command_past_its_time_limit_answers_124_instead_of_raising() -> None:
    done = _run([sys.executable, "-c", "import time; print('started', flush=True); time.sleep(30)"],
                timeout=1)  # fmt: skip
    assert done.returncode == 124
    assert "started" in done.stdout and "stopped after 1 s" in done.stderr


INVENTORY = """
from gpuaudit.sim.profiles import get_profile
base = get_profile("t4-01")
services = dict(base.get("services") or {})
engine_down = {**services, "nvidia-dcgm": {"active": "inactive", "enabled": "enabled"}}
hosts = [
    ("@sim/hc-pass", {"sim_profile": base}),
    ("@sim/hc-fail", {"sim_profile": {**base, "dcgm_diag": {
        1: ["dcgm-testdiagmanager-per-gpu-fail-skip.json"]}}}),
    ("@sim/hc-down", {"sim_profile": {**base, "services": engine_down}}),
    ("@sim/hc-none", {"sim_profile": {**base, "dcgm": False}}),
]
"""


@pytest.mark.slow
def test_the_diagnostic_over_pyinfra_on_simulated_hosts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inventory = tmp_path / "inventory.py"
    inventory.write_text(INVENTORY)
    monkeypatch.setenv("GPUAUDIT_SIM_DIR", str(tmp_path / "sim"))
    rollout = Rollout(Options(inventory=str(inventory), target="535.161.08"), None, tmp_path)
    outcomes = {}
    for host in ("hc-pass", "hc-fail", "hc-down", "hc-none"):
        (check,) = rollout._gate_commands(f"@sim/{host}")
        outcomes[host] = (check.name, check.outcome)
    assert outcomes == {
        "hc-pass": ("dcgm_diag", "pass"),
        "hc-fail": ("dcgm_diag", "fail"),  # dcgmi exits 0 with a failed test
        "hc-down": ("dcgm_diag", "fail"),  # installed, but its host engine does not answer
        "hc-none": ("dcgm_diag", "not_checked"),
    }
