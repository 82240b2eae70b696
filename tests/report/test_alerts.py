"""``gpuaudit alerts``: the rules file passes Prometheus' own checker (promtool, Debian's
prometheus package), fires on the series it is meant for, and covers every alert class by
gpuaudit's own coverage check (GA924)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from gpuaudit.cli import main
from gpuaudit.parsers.prometheus_rules import parse_prometheus_rules
from gpuaudit.report.alerts import render_alerts
from gpuaudit.rules.monitoring_coverage import ALERT_CLASSES, alert_coverage

PROMTOOL = shutil.which("promtool")


def _promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    # Debian's promtool (package prometheus, installed by make test's system-deps).
    assert PROMTOOL is not None, "promtool is not installed: run make system-deps"
    return subprocess.run(
        [PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


def test_rules_pass_promtool_check(tmp_path: Path) -> None:
    (tmp_path / "gpu.yml").write_text(render_alerts())
    done = _promtool("check", "rules", "gpu.yml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 13 rules found" in done.stdout


def test_policy_thresholds_reach_the_rules(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    policy = tmp_path / "site.yaml"
    policy.write_text(
        "version: 1\ndefaults:\n  thresholds:\n    temperature_alert_c: 75\n"
        "    memory_pressure_pct: 90\n"
    )
    assert main(["alerts", "--policy", str(policy)]) == 0
    out = capsys.readouterr().out
    (tmp_path / "gpu.yml").write_text(out)
    assert _promtool("check", "rules", "gpu.yml", cwd=tmp_path).returncode == 0
    rules = {r.alert: r for r in parse_prometheus_rules(out)}
    assert rules["GPUTemperatureHigh"].expr == "DCGM_FI_DEV_GPU_TEMP > 75"
    assert rules["GPUMemoryPressure"].expr.endswith("> 0.9")
    assert f"the policy {policy}" in out.splitlines()[0]


# The test's series: GPU 0 of gpu-a heats up to 85 °C; GPU 1 logs XID 79 and vanishes.
_TESTS = """\
rule_files: [gpu.yml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'DCGM_FI_DEV_GPU_TEMP{Hostname="gpu-a",gpu="0",UUID="GPU-0"}'
        values: '40 40 85x30'
      - series: 'DCGM_FI_DEV_GPU_TEMP{Hostname="gpu-a",gpu="1",UUID="GPU-1"}'
        values: '40x10 _x25'
      - series: 'DCGM_FI_DEV_XID_ERRORS{Hostname="gpu-a",gpu="1",UUID="GPU-1"}'
        values: '0 0 0 79x8'
      - series: '@RISK@'
        values: '1x30'
    alert_rule_test:
      - eval_time: 10m
        alertname: GPUTemperatureHigh
        exp_alerts:
          - exp_labels: {severity: warning, Hostname: gpu-a, gpu: "0", UUID: GPU-0}
            exp_annotations:
              summary: GPU temperature above the policy's alert threshold
              description: "gpu-a GPU 0 (GPU-0) is at 85 °C, above 80 °C (temperature_alert_c)."
      - eval_time: 5m
        alertname: GPUXidError
        exp_alerts:
          - exp_labels: {severity: critical, Hostname: gpu-a, gpu: "1", UUID: GPU-1}
            exp_annotations:
              summary: The driver reported an XID
              description: "gpu-a GPU 1 (GPU-1) reported XID 79. The field holds the last code
                only: a repeat of the same code does not change it; read the host's kernel log."
      # GPU 1's last sample is at 10m: its series is gone 5m later, the alert fires 10m after.
      - eval_time: 30m
        alertname: GPUCountDropped
        exp_alerts:
          - exp_labels: {severity: critical, Hostname: gpu-a}
            exp_annotations:
              summary: A host reports fewer GPUs than it did
              description: "gpu-a exports 1 GPUs, fewer than in the last day: a GPU fell off the
                bus or was not initialised."
      - eval_time: 5m
        alertname: GPUCountDropped
        exp_alerts: []
      - eval_time: 5m
        alertname: GPUAuditGpuMissing
        exp_alerts:
          # The empty gpu label of a host-wide finding is no label in Prometheus.
          - exp_labels: {severity: critical, host: gpu-a, rule: GA102, risk: GA102, status: open}
            exp_annotations:
              summary: The audit found fewer GPUs than the host should have
              description: "gpu-a: GPUs are missing (GA102)."
""".replace(
    "@RISK@",
    'gpuaudit_risk{host="gpu-a",rule="GA102",risk="GA102",gpu="",'
    + 'severity="high",status="open"}',
)


def test_rules_fire_on_a_series_file(tmp_path: Path) -> None:
    (tmp_path / "gpu.yml").write_text(render_alerts())
    (tmp_path / "tests.yml").write_text(_TESTS)
    done = _promtool("test", "rules", "tests.yml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_prometheusrule_holds_the_same_groups() -> None:
    plain = yaml.safe_load(render_alerts())
    resource = yaml.safe_load(render_alerts(fmt="prometheusrule"))
    assert resource["apiVersion"] == "monitoring.coreos.com/v1"
    assert resource["kind"] == "PrometheusRule"
    assert resource["metadata"]["name"] == "gpuaudit-gpu-alerts"
    assert resource["spec"]["groups"] == plain["groups"]


@pytest.mark.parametrize("fmt", ["rules", "prometheusrule"])
def test_output_covers_every_alert_class(fmt: str) -> None:
    coverage = alert_coverage(parse_prometheus_rules(render_alerts(fmt=fmt)))
    assert set(coverage) == {c.key for c in ALERT_CLASSES}
    uncovered = [key for key, alerts in coverage.items() if not alerts]
    assert uncovered == []
    # Each class by its own dcgm-exporter alert, not only the register's summary alerts.
    assert "GPUXidError" in coverage["xid"]
    assert "GPUUncorrectableECCErrors" in coverage["ecc"]
    assert "GPUCountDropped" in coverage["gpu_count"]


def test_a_bad_policy_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    policy = tmp_path / "bad.yaml"
    policy.write_text("version: 1\ndefaults:\n  monitoring: {alert_rule: x.yml}\n")
    assert main(["alerts", "--policy", str(policy)]) == 2
    assert "alert_rule" in capsys.readouterr().err
