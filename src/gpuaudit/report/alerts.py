"""``gpuaudit alerts``: Prometheus alert rules for a GPU fleet, from the policy's thresholds.

One group reads dcgm-exporter's metrics (temperature, memory pressure, XID, ECC, row remaps
and retired pages, GPU count), one the register's own textfile metrics (``gpuaudit_risk``,
``gpuaudit_last_run_timestamp_seconds``: report/outputs.py ``render_prometheus``), so a
site gets paged between audits on what the audit checks at each. The default output is a
rules file for Prometheus' ``rule_files`` (it passes ``promtool check rules``);
``--format prometheusrule`` wraps the same groups in a Kubernetes ``PrometheusRule``
(monitoring.coreos.com/v1) for the Prometheus Operator. Every alert class of
rules/monitoring_coverage.py is covered (GA924 finds no gap in the output).

The DCGM fields behind ECC, retired pages and (in older files) XID are commented out in
dcgm-exporter's default counters file: those alerts stay silent until the fields are
exported (GA922 reports the hosts where they are not).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

from gpuaudit.policy.defaults import effective_policy

FORMATS = ("rules", "prometheusrule")
# The label dcgm-exporter gives each series for its host, and the GPU's index and UUID.
_WHERE = "{{ $labels.Hostname }} GPU {{ $labels.gpu }} ({{ $labels.UUID }})"


def _alert(
    name: str,
    expr: str,
    severity: str,
    summary: str,
    description: str,
    duration: str | None = None,
    **labels: str,
) -> dict[str, Any]:
    rule: dict[str, Any] = {"alert": name, "expr": expr}
    if duration:
        rule["for"] = duration
    rule["labels"] = {"severity": severity, **labels}
    rule["annotations"] = {"summary": summary, "description": description}
    return rule


def dcgm_group(policy: Mapping[str, Any]) -> dict[str, Any]:
    """Alerts on dcgm-exporter's metrics, with the policy's thresholds."""
    temp = policy["temperature_alert_c"]
    pressure = policy["memory_pressure_pct"] / 100
    remaps = policy["remapped_rows_uncorrectable_limit"]
    retired = policy["retired_pages_limit"]
    corrected = policy["ecc_corrected_limit"]
    rules = [
        _alert(
            "GPUTemperatureHigh",
            f"DCGM_FI_DEV_GPU_TEMP > {temp}",
            "warning",
            "GPU temperature above the policy's alert threshold",
            f"{_WHERE} is at {{{{ $value }}}} °C, above {temp} °C (temperature_alert_c).",
            "5m",
        ),
        _alert(
            "GPUMemoryPressure",
            f"DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE) > {pressure:g}",
            "critical",
            "GPU memory almost full",
            f"{_WHERE} uses more than {policy['memory_pressure_pct']} % of its memory "
            "(memory_pressure_pct): the next allocation is likely an out-of-memory error.",
            "5m",
        ),
        _alert(
            "GPUXidError",
            "(DCGM_FI_DEV_XID_ERRORS > 0 and changes(DCGM_FI_DEV_XID_ERRORS[10m]) > 0) or "
            "(DCGM_FI_DEV_XID_ERRORS > 0 unless DCGM_FI_DEV_XID_ERRORS offset 10m)",
            "critical",
            "The driver reported an XID",
            f"{_WHERE} reported XID {{{{ $value }}}}. The field holds the last code only: "
            "a repeat of the same code does not change it; read the host's kernel log.",
        ),
        _alert(
            "GPUUncorrectableECCErrors",
            "increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[10m]) > 0 or "
            "increase(DCGM_FI_DEV_ECC_DBE_AGG_TOTAL[10m]) > 0",
            "critical",
            "Uncorrectable ECC errors",
            f"{_WHERE} counted uncorrectable (double-bit) ECC errors: drain it and reset the GPU.",
        ),
        _alert(
            "GPUCorrectableECCErrorsHigh",
            f"DCGM_FI_DEV_ECC_SBE_AGG_TOTAL > {corrected}",
            "warning",
            "Corrected ECC errors above the health-check threshold",
            f"{_WHERE} has more than {corrected} corrected ECC errors (ecc_corrected_limit).",
        ),
        _alert(
            "GPURowRemapFailure",
            "DCGM_FI_DEV_ROW_REMAP_FAILURE > 0",
            "critical",
            "Row remapping failed",
            f"{_WHERE} could not remap a memory row: the GPU needs an RMA.",
        ),
        _alert(
            "GPUUncorrectableRowRemaps",
            "increase(DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS[1h]) > 0 or "
            f"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS >= {remaps}",
            "warning",
            "Rows remapped after uncorrectable errors",
            f"{_WHERE} remapped rows after uncorrectable errors: a GPU reset applies the "
            f"remap; {remaps} (remapped_rows_uncorrectable_limit) means an RMA.",
        ),
        _alert(
            "GPURetiredPages",
            "DCGM_FI_DEV_RETIRED_PENDING > 0 or "
            f"DCGM_FI_DEV_RETIRED_SBE + DCGM_FI_DEV_RETIRED_DBE >= {retired}",
            "warning",
            "Memory pages pending retirement or at the limit",
            f"{_WHERE} has pages pending retirement (a reset retires them) or {retired} "
            "retired pages (retired_pages_limit).",
        ),
        _alert(
            "GPUCountDropped",
            "count by (Hostname) (DCGM_FI_DEV_GPU_TEMP) < "
            "max_over_time(count by (Hostname) (DCGM_FI_DEV_GPU_TEMP)[1d:5m])",
            "critical",
            "A host reports fewer GPUs than it did",
            "{{ $labels.Hostname }} exports {{ $value }} GPUs, fewer than in the last day: a "
            "GPU fell off the bus or was not initialised.",
            "10m",
        ),
    ]
    return {"name": "gpuaudit-gpu-health", "rules": rules}


def register_group(policy: Mapping[str, Any]) -> dict[str, Any]:
    """Alerts on the register's textfile metrics (gpuaudit.prom)."""
    rules = [
        _alert(
            "GPUAuditRiskOpen",
            'gpuaudit_risk{status="open",severity=~"critical|high"} > 0',
            "warning",
            "The last audit found an open high or critical risk",
            "{{ $labels.host }}: {{ $labels.rule }} ({{ $labels.risk }}), severity "
            "{{ $labels.severity }}; gpuaudit explain {{ $labels.rule }}.",
        ),
        _alert(
            "GPUAuditGpuMissing",
            'gpuaudit_risk{rule=~"GA102|GA108",status="open"} > 0',
            "critical",
            "The audit found fewer GPUs than the host should have",
            "{{ $labels.host }}: GPUs are missing ({{ $labels.rule }}).",
        ),
        _alert(
            "GPUAuditHealthRisk",
            'gpuaudit_risk{rule=~"GA301|GA303|GA304|GA305|GA306|GA307|GA321|GA330",'
            'status="open"} > 0',
            "warning",
            "The audit found an XID, memory error, remap, temperature or memory risk",
            "{{ $labels.host }} GPU {{ $labels.gpu }}: {{ $labels.rule }} ({{ $labels.risk }}).",
        ),
        _alert(
            "GPUAuditStale",
            "time() - gpuaudit_last_run_timestamp_seconds > 8 * 86400",
            "warning",
            "No gpuaudit register for over a week",
            "The last gpuaudit run is {{ $value | humanizeDuration }} old.",
        ),
    ]
    return {"name": "gpuaudit-register", "rules": rules}


def alert_groups(policy: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The rule groups for ``policy`` (a site's settings; missing keys take the defaults)."""
    settings = effective_policy(policy)
    return [dcgm_group(settings), register_group(settings)]


def render_alerts(
    policy: Mapping[str, Any] | None = None, fmt: str = "rules", source: str = "the defaults"
) -> str:
    """The groups as a Prometheus rules file (``rules``) or a PrometheusRule resource."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r} (known: {', '.join(FORMATS)})")
    groups = alert_groups(policy)
    document: dict[str, Any] = {"groups": groups}
    if fmt == "prometheusrule":
        document = {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "PrometheusRule",
            "metadata": {
                "name": "gpuaudit-gpu-alerts",
                "labels": {"app.kubernetes.io/name": "gpuaudit"},
            },
            "spec": {"groups": groups},
        }
    header = (
        f"# GPU fleet alerts from gpuaudit, thresholds from {source}.\n"
        "# dcgm-exporter must export the DCGM fields these read: docs/field-guide/monitoring.md\n"
    )
    import yaml  # here: `gpuaudit` adds this command's parser on every start

    body = yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=4096)
    return header + body


def add_alerts_parser(sub: Any) -> None:
    alerts = sub.add_parser(
        "alerts", help="print Prometheus alert rules for the fleet from the policy's thresholds"
    )
    alerts.add_argument("--policy", metavar="FILE", default=None,
                        help="site policy whose thresholds the alerts use")  # fmt: skip
    alerts.add_argument("--format", choices=FORMATS, default="rules",
                        help="a rules file (default) or a Kubernetes PrometheusRule")  # fmt: skip
    alerts.set_defaults(func=cmd_alerts)


def cmd_alerts(args: argparse.Namespace) -> int:
    from gpuaudit.policy.check import load_for_cli

    settings: Mapping[str, Any] | None = None
    source = "gpuaudit's defaults"
    if args.policy:
        policy = load_for_cli(args.policy)
        if policy is None:
            return 2
        settings = policy.settings_for({})
        source = f"the policy {args.policy}"
    sys.stdout.write(render_alerts(settings, args.format, source))
    return 0
