"""The demo fleet audited with the production deploy file, by the real pyinfra command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Each faulty demo host and the findings (rule, GPU) its fault implies.
EXPECTED = {
    "@sim/a100-hgx-02": {("GA304", 3), ("GA301", 3)},  # row remap pending (+ its XID 63)
    "@sim/a100-hgx-03": {("GA402", None), ("GA701", None)},  # fabric manager; driver drift
    # MIG mode change pending on GPU 7, which the policy's layout (a100-4x-1g.20gb) wants on.
    "@sim/a100-hgx-04": {("GA201", 7), ("GA203", 7)},
    # The policy names all-1g.10gb for it; MIG is still off until remediation applies it.
    "@sim/h100-01": {("GA203", gpu) for gpu in range(8)},
    # XID 79: GPU fell off the bus; Slurm still configures 8 GPUs, gres.conf lists 8 files.
    "@sim/a100-hgx-05": {("GA301", None), ("GA102", None), ("GA911", None), ("GA916", None)},
    # The driver does not answer, and slurmctld drained the node for its missing GPUs.
    "@sim/v100-02": {("GA101", None), ("GA913", None)},
    "@sim/t4-02": {("GA401", 0), ("GA601", None)},  # persistence off, rmem_max low
    "@sim/t4-03": {("GA104", None)},  # nvidia-smi missing
    # XID storm; its dcgm-exporter counters watch neither XID nor ECC.
    "@sim/a10g-01": {("GA301", 0), ("GA922", None)},
    "@sim/a10g-02": {("GA001", None)},  # unreachable
    "@sim/p100-01": {("GA602", None), ("GA106", None)},  # 0666 nodes, packages not held
    "@sim/rtx3090-01": {("GA501", 1)},  # PCIe x8 of x16
    "@sim/rtx4000ada-01": {("GA320", 0)},  # HW slowdown
}
HEALTHY = {"@sim/a100-hgx-01", "@sim/v100-01", "@sim/t4-01", "@sim/mi100-01"}


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("demo")
    env = dict(
        os.environ,
        GPUAUDIT_SIM_DIR=str(tmp / "sim"),
        GPUAUDIT_REPORTS_DIR=str(tmp / "reports"),
        GPUAUDIT_RUN_ID="demo-run",
    )
    result = subprocess.run(
        [sys.executable, "-m", "pyinfra", "-y", "inventory/demo.py", "deploys/audit.py"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    run = tmp / "reports" / "demo-run"
    # pyinfra exits 1 because one demo host is unreachable; the register must exist anyway.
    assert (run / "register.json").exists(), result.stdout[-4000:] + result.stderr[-4000:]
    return run


def test_every_demo_host_is_in_the_register(demo_run: Path) -> None:
    register = json.loads((demo_run / "register.json").read_text())
    names = {h["name"] for h in register["hosts"]}
    assert names == set(EXPECTED) | HEALTHY
    status = {h["name"]: h["status"] for h in register["hosts"]}
    assert status["@sim/a10g-02"] == "unreachable"
    assert status["@sim/v100-02"] == "driver_not_responding"
    assert status["@sim/t4-03"] == "no_gpu_tooling"
    assert len(list((demo_run / "hosts").glob("*.json"))) == len(names)


def test_each_fault_carries_its_finding(demo_run: Path) -> None:
    register = json.loads((demo_run / "register.json").read_text())
    found: dict[str, set[tuple[str, int | None]]] = {}
    for f in register["findings"]:
        if f["severity"] == "info":  # information (the capacity summary), not a fault
            continue
        found.setdefault(f["host"], set()).add((f["rule"], f["gpu"]))
    for host, expected in EXPECTED.items():
        assert expected <= found.get(host, set()), (host, found.get(host))
    for host in HEALTHY:
        assert host not in found, (host, found[host])


def test_report_rebuilds_the_same_findings_from_snapshots(demo_run: Path) -> None:
    before = json.loads((demo_run / "register.json").read_text())
    subprocess.run(
        [sys.executable, "-m", "gpuaudit.cli", "report", str(demo_run)],
        check=True,
        capture_output=True,
    )
    after = json.loads((demo_run / "register.json").read_text())
    # The audit judged the snapshots it had just written without reading them back: the files
    # hold the same hosts, so a rebuild from them says all the same.
    for part in ("summary", "hosts", "rules", "risks", "findings", "checklists"):
        assert after[part] == before[part], part
    page = (demo_run / "index.html").read_text()
    assert "@sim/a10g-02" in page and "unreachable" in page


def test_fail_on_gates_on_open_risks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """`gpuaudit audit` in this process, pyinfra in its own: the summary and the gate come
    from the verdict the register's writer handed over (report/verdict.py), and register.json
    is never read back here."""
    from gpuaudit.cli import main
    from gpuaudit.report.run import RunDir

    def refused(self: RunDir, *, outcomes: bool = True) -> object:
        raise AssertionError("register.json read back")

    monkeypatch.setattr(RunDir, "load_register", refused)
    monkeypatch.setenv("GPUAUDIT_SIM_DIR", str(tmp_path / "sim"))
    monkeypatch.chdir(REPO)
    audit = ["audit", "inventory/demo.py", "--reports-dir", str(tmp_path / "reports")]
    assert main([*audit, "--fail-on", "critical", "--limit", "@sim/v100-02"]) == 1
    sick = capfd.readouterr()
    assert "risks at critical or above" in sick.err
    assert "gpuaudit: 1 host: 1 driver_not_responding" in sick.out
    assert "critical  GA101  NVIDIA driver not loaded" in sick.out
    assert main([*audit, "--fail-on", "low", "--limit", "@sim/t4-01"]) == 0
    healthy = capfd.readouterr()
    assert "register.json" in healthy.out and "risks at" not in healthy.err
