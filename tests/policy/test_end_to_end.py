"""A policy file from disk through evaluate(), the run directory, `gpuaudit report` and the CLI."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import pytest
from policy_helpers import ROOT

from gpuaudit.cli import main
from gpuaudit.model.snapshot import DeviceNode
from gpuaudit.pipeline import rebuild, write_report
from gpuaudit.policy import POLICY_FILE, load_policy
from gpuaudit.report.run import new_run_dir
from gpuaudit.rules import evaluate
from gpuaudit.rules.base import Severity

SITE = """\
version: 1
defaults:
  expected_gpu_count: 8
  thresholds: {retired_pages_limit: 63}
groups:
  l40s: {expected_gpu_count: 4}
  h100_sxm: {desired_driver_version: "550.144.03"}
severity_overrides:
  rules: {GA602: {severity: medium, reason: "shared lab hosts"}}
waivers:
  - {rule: GA602, hosts: "gpu-l40s-*", reason: "single tenant", expires: 2099-12-31, owner: infra}
  - {rule: GA107, hosts: "gpu-h100-*", reason: "upgrade slipped", expires: 2020-01-01, owner: ml}
"""

OPEN_NODES = (DeviceNode("/dev/nvidia0", "666", "root", "root"),)


@pytest.fixture
def site(tmp_path: Path) -> Path:
    path = tmp_path / "policies" / "site.yaml"
    path.parent.mkdir()
    path.write_text(SITE, encoding="utf-8")
    return path


@pytest.fixture
def fleet(make_host, make_gpu):
    # The factory's host_data pins expected_gpu_count to the GPUs present; drop it so the
    # policy's group value is what the rules see.
    def host(name, groups, gpus, **changes):
        snap = make_host(name, gpus=gpus, groups=groups, **changes)
        data = {k: v for k, v in snap.host_data.items() if k != "expected_gpu_count"}
        return make_host(name, gpus=gpus, groups=groups, host_data=data, **changes)

    return [
        host("gpu-l40s-001", ["l40s"], 4, device_nodes=OPEN_NODES),
        host("gpu-l40s-002", ["l40s"], 3),
        host("gpu-h100-001", ["h100_sxm"], 8, device_nodes=OPEN_NODES),
    ]


def test_evaluate_with_a_policy_file(site: Path, fleet):
    policy = load_policy(site)
    findings = evaluate(fleet, policy)
    counts = {(f.rule, f.host) for f in findings}
    # l40s expects 4: only the host with 3 is short; the h100 host expects the default 8
    assert ("GA102", "gpu-l40s-002") in counts
    assert not {("GA102", "gpu-l40s-001"), ("GA102", "gpu-h100-001")} & counts
    # the h100 group pins a driver the fleet does not run
    assert ("GA107", "gpu-h100-001") in counts and ("GA107", "gpu-l40s-001") not in counts
    ga602 = [f for f in findings if f.rule == "GA602"]
    assert {f.severity for f in ga602} == {Severity.MEDIUM}
    statuses = {(f.rule, f.host): policy.waiver_status(f, date(2026, 1, 1))[0] for f in findings}
    assert statuses[("GA602", "gpu-l40s-001")] == "waived"
    assert statuses[("GA602", "gpu-h100-001")] == "open"
    assert statuses[("GA107", "gpu-h100-001")] == "waiver_expired"


def test_register_keeps_the_policy_and_rebuild_reuses_it(site: Path, fleet, tmp_path: Path):
    run = new_run_dir(tmp_path / "reports", "run1")
    for snap in fleet:
        run.write_snapshot(snap)
    policy = load_policy(site)
    policy.copy_to(run.path)
    write_report(run, run.load_snapshots(), policy=policy, generated_at="2026-01-01T00:00:00Z")
    first = json.loads(run.register_path.read_text())
    by_key = {(f["rule"], f["host"]): f for f in first["findings"]}
    assert by_key[("GA602", "gpu-l40s-001")]["status"] == "waived"
    assert by_key[("GA602", "gpu-h100-001")]["override_reason"] == "shared lab hosts"
    assert by_key[("GA107", "gpu-h100-001")]["waiver_expired"] is True
    # `gpuaudit report RUN_DIR` without --policy reads the run's policy.yaml
    assert (run.path / POLICY_FILE).read_text() == SITE
    rebuild(run.path)
    again = json.loads(run.register_path.read_text())
    assert [(f["rule"], f["host"], f["severity"], f["status"]) for f in again["findings"]] == [
        (f["rule"], f["host"], f["severity"], f["status"]) for f in first["findings"]
    ]


def test_cli_report_with_a_new_policy_replaces_the_runs_copy(site: Path, fleet, tmp_path, capsys):
    run = new_run_dir(tmp_path / "reports", "run1")
    for snap in fleet:
        run.write_snapshot(snap)
    assert main(["report", str(run.path), "--policy", str(site)]) == 0
    assert (run.path / POLICY_FILE).read_text() == SITE
    register = json.loads(run.register_path.read_text())
    assert any(f.get("override_reason") == "shared lab hosts" for f in register["findings"])
    broken = tmp_path / "broken.yaml"
    broken.write_text("version: 1\ndefaults: {expected_gpus: 8}\n")
    assert main(["report", str(run.path), "--policy", str(broken)]) == 2
    assert f"{broken}:2:12: unknown key 'expected_gpus'" in capsys.readouterr().err
    assert (run.path / POLICY_FILE).read_text() == SITE


def test_cli_audit_refuses_a_broken_policy_before_contacting_hosts(tmp_path: Path, capsys):
    broken = tmp_path / "broken.yaml"
    broken.write_text("version: 3\n")
    code = main(["audit", "inventory/none.py", "--policy", str(broken),
                 "--reports-dir", str(tmp_path / "reports")])  # fmt: skip
    assert code == 2
    assert "unsupported policy version" in capsys.readouterr().err
    assert not (tmp_path / "reports").exists()


def test_cli_policy_check(capsys):
    assert main(["policy", "check", str(ROOT / "policies" / "example.yaml")]) == 0
    out = capsys.readouterr().out
    assert "valid policy (version 1)" in out
    for group in ("h100_sxm", "a100_sxm", "l40s", "mi300x"):
        assert f"  {group}:" in out
    assert "desired_driver_version: 550.127.05" in out
    assert "XID 63: 'high: we RMA on the first row remap" in out
    demo = str(ROOT / "policies" / "demo.yaml")
    assert main(["policy", "check", demo]) == 0
    assert "expired on 2025-06-30" in capsys.readouterr().out
    assert main(["policy", "check", demo, "--fail-on-expired"]) == 1


def test_cli_policy_check_reports_every_problem(tmp_path: Path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\ndefaults:\n  expected_gpus: 8\n  gpu_vendor: intel\n")
    assert main(["policy", "check", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:3:3: unknown key 'expected_gpus'" in err
    assert f"{bad}:4:15: defaults.gpu_vendor must be one of nvidia, amd" in err
