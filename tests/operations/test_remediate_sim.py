"""deploys/remediate.py end to end on simulated hosts: real pyinfra, real deploy file, the
simulator's systemctl / apt-mark / nvidia-smi keeping the state the audit then reads."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HOSTS = {"@sim/t4-02": "GA401", "@sim/p100-01": "GA106"}
OPERATIONS = (
    "Enable GPU persistence mode",
    "Hold the NVIDIA driver packages",
    "Run the DCGM monitoring units",
)


@pytest.fixture
def fleet(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    inventory = tmp_path / "inventory.py"
    inventory.write_text(f"hosts = {list(HOSTS)!r}\n")
    env = {**os.environ, "GPUAUDIT_SIM_DIR": str(tmp_path / "sim")}
    return inventory, env


def remediate(inventory: Path, env: dict[str, str], *extra: str) -> str:
    run = subprocess.run(
        [sys.executable, "-m", "pyinfra", "-y", *extra, str(inventory), "deploys/remediate.py"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout + run.stderr


def changed_counts(output: str) -> dict[str, str]:
    """The Success column of pyinfra's results table, per operation ("-" when none)."""
    counts = {}
    for name in OPERATIONS:
        match = re.search(rf"^\s*{re.escape(name)}\s+(\S+)\s+(\S+)", output, re.M)
        assert match, output
        counts[name] = match.group(2)
    return counts


def audit_findings(inventory: Path, env: dict[str, str], tmp_path: Path, run_id: str):
    reports = tmp_path / "reports"
    command = [sys.executable, "-m", "gpuaudit.cli", "audit", str(inventory)]
    run = subprocess.run(
        [*command, "--reports-dir", str(reports), "--run-id", run_id],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    register = json.loads((reports / run_id / "register.json").read_text())
    return {(f["host"], f["rule"]) for f in register["findings"]}


def states(env: dict[str, str]) -> dict[str, str]:
    sim = Path(env["GPUAUDIT_SIM_DIR"])
    return {name: (sim / name.removeprefix("@sim/") / "state.json").read_text() for name in HOSTS}


def test_remediate_fixes_findings_once_and_dry_changes_nothing(
    fleet: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    inventory, env = fleet
    before = audit_findings(inventory, env, tmp_path, "before")
    for host, code in HOSTS.items():
        assert (host, code) in before

    untouched = states(env)
    remediate(inventory, env, "--dry")
    assert states(env) == untouched
    assert audit_findings(inventory, env, tmp_path, "after-dry") == before

    first = remediate(inventory, env)
    assert changed_counts(first) == {
        "Enable GPU persistence mode": "1",
        "Hold the NVIDIA driver packages": "1",
        "Run the DCGM monitoring units": "-",
    }
    assert states(env) != untouched
    after = audit_findings(inventory, env, tmp_path, "after")
    for host, code in HOSTS.items():
        assert (host, code) not in after
    assert after == before - set(HOSTS.items())

    settled = states(env)
    second = remediate(inventory, env)
    assert set(changed_counts(second).values()) == {"-"}
    assert states(env) == settled
