"""GA92x: what the monitoring sees, against what the register's risks need.

The audit is a snapshot; dcgm-exporter and the site's alert rules are what watch the GPUs
between two audits. These rules check that the exporter runs, that its counters file exports
the fields the register's risks are read from, that node_exporter can pick up gpuaudit.prom,
and that the site's Prometheus rules alert on every class of GPU failure
(docs/field-guide/monitoring.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gpuaudit.model.snapshot import CountersFile, HostSnapshot, MonitoringView
from gpuaudit.parsers.prometheus_rules import PromRule
from gpuaudit.rules import refs
from gpuaudit.rules.audit import GPU_LIST, NOT_COLLECTED, section_need
from gpuaudit.rules.base import (
    FLEET_HOST,
    CheckResult,
    Evidence,
    Finding,
    NotEvaluated,
    Owner,
    Rule,
    RuleContext,
    Severity,
    rule,
)
from gpuaudit.rules.evidence import section_excerpt
from gpuaudit.rules.hardware import is_datacenter_gpu
from gpuaudit.rules.monitoring_coverage import (
    ALERT_CLASSES,
    CRITICAL_FIELD_CLASSES,
    FieldGap,
    alert_coverage,
    field_classes_for,
    field_gaps,
)

MONITORING = section_need(
    "monitoring", "monitoring agents (dcgm-exporter, node_exporter)", lambda s: bool(s.monitoring)
)


def monitoring_settings(policy: Mapping[str, Any]) -> dict[str, Any]:
    value = policy.get("monitoring")
    return dict(value) if isinstance(value, Mapping) else {}


def _wants_exporter(snap: HostSnapshot, policy: Mapping[str, Any]) -> bool:
    return bool(policy.get("monitoring_required", True)) and any(
        is_datacenter_gpu(g, policy) for g in snap.gpus
    )


def _units(view: MonitoringView) -> str:
    shown = {u: s or "not found" for u, s in view.dcgm_exporter_units.items()}
    return ", ".join(f"{u}: {s}" for u, s in shown.items()) or "systemctl not available"


@rule(
    "GA921",
    "dcgm-exporter not running on a GPU host",
    category="monitoring",
    needs=(GPU_LIST, MONITORING),
    owner=Owner.INFRA,
    severity=Severity.MEDIUM,
    likelihood=4,
    impact=3,
    remediation=(
        "Run dcgm-exporter on the host (its systemd unit, or the DCGM exporter container / "
        "Kubernetes DaemonSet) with a counters file that exports the register's fields "
        "(docs/field-guide/monitoring.md#dcgm-exporter-counters), and scrape it; sites whose "
        "exporter runs where the audit cannot see it set monitoring_required: false."
    ),
    references=(refs.GUIDE_EXPORTER_COUNTERS, refs.GUIDE_DCGM, refs.DCGM_EXPORTER),
)
def exporter_absent(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[Finding]:
    """No dcgm-exporter runs on a host with datacenter GPUs.

    Checks: on hosts with a datacenter GPU (``datacenter_gpu_name_patterns``) and
    ``monitoring_required`` (default true), that a dcgm-exporter process is visible under
    /proc or a ``dcgm-exporter`` / ``nvidia-dcgm-exporter`` unit is active. The DCGM host
    engine alone (GA403 accepts it) records the GPU fields, but nothing publishes them to
    Prometheus.
    Why: without the exporter no dashboard or alert sees the GPUs between two audits: an XID,
    an ECC error or a GPU off the bus is found by the job that hits it.
    Evidence: the units' states and the exporter processes found.
    Remediation: run dcgm-exporter (unit, container or DaemonSet) and scrape it.
    """
    view = snap.monitoring
    if view is None or not _wants_exporter(snap, ctx.settings_for(snap)):
        return
    if view.dcgm_exporter_running:
        return
    seen = (
        "the process table was not visible"
        if view.proc_entries == 0
        else "no dcgm-exporter process"
    )
    yield rule.finding(
        snap,
        f"dcgm-exporter is not running ({_units(view)}; {seen}): no GPU metrics reach "
        "Prometheus from this host.",
        Evidence(
            fact="monitoring.units",
            actual=view.dcgm_exporter_units or "no unit",
            expected="a dcgm-exporter process or active unit",
            excerpt=section_excerpt(snap, "monitoring"),
        ),
    )


def _gap_text(gap: FieldGap) -> str:
    if gap.unwatched:
        text = f"{gap.cls.title} ({gap.cls.rules[0]}): none of {', '.join(gap.cls.fields)}"
    else:
        text = f"{gap.cls.title} ({gap.cls.rules[0]}): {', '.join(gap.missing)} missing"
    if gap.commented:
        text += f" [commented out: {', '.join(gap.commented)}]"
    return text


@rule(
    "GA922",
    "dcgm-exporter counters miss fields the register's risks need",
    category="monitoring",
    needs=(GPU_LIST, MONITORING),
    owner=Owner.INFRA,
    severity=Severity.MEDIUM,
    likelihood=4,
    impact=3,
    remediation=(
        "Add the missing fields to the counters file (uncomment them in dcgm-exporter's "
        "default-counters.csv, or list them in the file given with -f / "
        "DCGM_EXPORTER_COLLECTORS) and restart dcgm-exporter; in Kubernetes, put the file in "
        "the exporter's ConfigMap."
    ),
    references=(refs.GUIDE_EXPORTER_COUNTERS, refs.DCGM_EXPORTER, refs.DCGM_FIELDS),
)
def counters_incomplete(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[CheckResult]:
    """The counters file dcgm-exporter reads leaves out fields the register's risks need.

    Checks: each counters file a running dcgm-exporter reads (its ``-f`` / ``--collectors``
    argument, else ``DCGM_EXPORTER_COLLECTORS``, else /etc/dcgm-exporter/default-counters.csv)
    against the field classes of rules/monitoring_coverage.py: XID, uncorrectable and
    correctable ECC, retired pages (GPUs that retire pages), remapped rows (GPUs that remap
    rows), NVLink error counters (hosts with NVLink), temperature, memory used/free, power and
    clock-event reasons. Each class that none of its fields covers is unwatched; one that
    needs all its fields and has only some is partly watched. Lines dcgm-exporter refuses are
    reported too (it does not start with such a file). Not evaluated when the file could not
    be read; silent when no dcgm-exporter runs (GA921).
    Why: dcgm-exporter's default file exports XID and remapped rows but leaves ECC, retired
    pages, NVLink errors and the throttle counters commented out; monitoring built on it
    cannot see or alert on those failures, and the audit is then the only place they show.
    Evidence: the file, how it was chosen, the missing fields per class and which of them the
    file has commented out.
    Remediation: add (uncomment) the fields and restart the exporter.
    """
    view = snap.monitoring
    if view is None or not view.dcgm_exporter_running:
        return
    if not view.counters:
        yield NotEvaluated("dcgm-exporter runs but no counters file was read")
        return
    classes = field_classes_for(snap)
    for counters in view.counters:
        if counters.error is not None:
            yield NotEvaluated(f"the counters file could not be read: {counters.error}")
            continue
        yield from _file_findings(rule, snap, counters, field_gaps(counters, classes))


def _file_findings(
    rule: Rule, snap: HostSnapshot, counters: CountersFile, gaps: Sequence[FieldGap]
) -> Iterable[Finding]:
    if not gaps and not counters.malformed:
        return
    unwatched = [g.cls.key for g in gaps if g.unwatched]
    critical = [k for k in unwatched if k in CRITICAL_FIELD_CLASSES]
    parts = [_gap_text(g) for g in gaps]
    if counters.malformed:
        parts.append(
            "lines dcgm-exporter refuses (it does not start): " + "; ".join(counters.malformed)
        )
    chosen = "default path" if counters.source == "default" else f"given by {counters.source}"
    titles = [g.cls.title for g in gaps if g.unwatched]
    summary = f"unwatched: {', '.join(titles)}" if titles else "some fields missing"
    yield rule.finding(
        snap,
        f"dcgm-exporter's counters file {counters.path} ({chosen}) leaves risks unwatched "
        f"between audits — {summary}. " + "; ".join(parts) + ".",
        Evidence(
            fact="monitoring.counters",
            actual={
                "path": counters.path,
                "source": counters.source,
                "unwatched": unwatched,
                "missing_fields": sorted({f for g in gaps for f in g.missing}),
                "commented_out": sorted({f for g in gaps for f in g.commented}),
            },
            expected="every field class the register's risks need",
            excerpt="\n".join(f"{f.field}, {f.metric_type}" for f in counters.fields[:40]),
        ),
        severity=Severity.MEDIUM if critical or counters.malformed else Severity.LOW,
    )


@rule(
    "GA923",
    "node_exporter textfile directory missing for gpuaudit.prom",
    category="monitoring",
    needs=(MONITORING,),
    owner=Owner.INFRA,
    severity=Severity.LOW,
    likelihood=3,
    impact=2,
    remediation=(
        "Run node_exporter with --collector.textfile.directory=DIR (Debian's "
        "prometheus-node-exporter: /var/lib/prometheus/node-exporter), create DIR writable "
        "by the audit, and write the register's gpuaudit.prom there after each run."
    ),
    references=(refs.GUIDE_TEXTFILE, refs.NODE_EXPORTER_TEXTFILE),
)
def textfile_missing(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[Finding]:
    """The site wants gpuaudit.prom scraped, and node_exporter cannot pick it up.

    Checks: only when policy ``monitoring.textfile_scrape`` is true, that node_exporter runs
    with ``--collector.textfile.directory`` and that the directory exists and is writable by
    the audit user.
    Why: the register's Prometheus view (gpuaudit_risk, gpuaudit_host_status) lets alerts and
    dashboards follow the audit's findings; without the directory the file is written nowhere
    a scrape reads.
    Evidence: node_exporter's processes and argv, the directory and its state.
    Remediation: give node_exporter a textfile directory the audit can write.
    """
    settings = monitoring_settings(ctx.settings_for(snap))
    view = snap.monitoring
    if view is None or not settings.get("textfile_scrape"):
        return
    if not view.node_exporter_running:
        problem = "node_exporter is not running"
    elif view.textfile_directory is None:
        problem = "node_exporter runs without --collector.textfile.directory"
    elif not view.textfile_directory_exists:
        problem = f"its textfile directory {view.textfile_directory} does not exist"
    elif not view.textfile_directory_writable:
        problem = f"its textfile directory {view.textfile_directory} is not writable"
    else:
        return
    yield rule.finding(
        snap,
        f"gpuaudit.prom cannot be scraped here: {problem}.",
        Evidence(
            fact="monitoring.textfile_directory",
            actual=view.textfile_directory or problem,
            expected="an existing, writable --collector.textfile.directory",
            excerpt=section_excerpt(snap, "monitoring"),
        ),
    )


def loaded_alert_rules(settings: Mapping[str, Any]) -> tuple[PromRule, ...] | None:
    """The site's rules as the policy loader read them (``monitoring.alert_rules_loaded``)."""
    items = settings.get("alert_rules_loaded")
    if not isinstance(items, list):
        return None
    return tuple(r for r in (PromRule.from_dict(i) for i in items) if r is not None)


@rule(
    "GA924",
    "GPU failure classes without an alert",
    category="monitoring",
    owner=Owner.INFRA,
    severity=Severity.MEDIUM,
    likelihood=4,
    impact=3,
    remediation=(
        "Add alerts for the classes listed, for example from `gpuaudit alerts --policy "
        "POLICY` (a Prometheus rules file built from the policy's thresholds; "
        "--format prometheusrule for the Prometheus Operator)."
    ),
    references=(refs.GUIDE_ALERT_COVERAGE, refs.GUIDE_ALERTS, refs.PROMETHEUS_ALERTING),
    fleet=True,
)
def alerts_missing(
    rule: Rule, snapshots: Sequence[HostSnapshot], ctx: RuleContext
) -> Iterable[CheckResult]:
    """The site's Prometheus rules leave classes of GPU failure without an alert.

    Checks: the rules file named by policy ``monitoring.alert_rules`` (relative to the policy
    file; a plain rules file or a PrometheusRule), read when the policy is loaded: for each
    class — GPU temperature, memory pressure, XID, ECC, row remaps and retired pages, GPU
    count drop — whether an alert's expression reads one of its DCGM fields or gpuaudit_risk
    on one of its rules (rules/monitoring_coverage.py). With no file named, every class is
    reported unalerted only when ``monitoring.require_alerts`` is true; otherwise the rule is
    silent. Not evaluated when the file could not be read. One finding for the fleet.
    Why: dcgm-exporter ships no alert rules; metrics that nobody alerts on are found after
    the incident, and `DCGM_FI_DEV_XID_ERRORS` only holds the last code, so an alert that
    does not watch it for changes misses repeats.
    Evidence: the file, and per class the alerts that cover it.
    Remediation: add the alerts (`gpuaudit alerts` prints a starting set).
    """
    settings = monitoring_settings(ctx.policy)
    collected = [s for s in snapshots if s.status not in NOT_COLLECTED]
    path = settings.get("alert_rules")
    if path and settings.get("alert_rules_error"):
        for snap in collected:
            yield NotEvaluated(str(settings["alert_rules_error"]), host=snap.host)
        return
    rules = loaded_alert_rules(settings)
    if path and rules is not None:
        coverage = alert_coverage(rules)
        source = str(settings.get("alert_rules_path") or path)
    elif not path and settings.get("require_alerts"):
        coverage = {c.key: () for c in ALERT_CLASSES}
        source = "no alert rules file (policy monitoring.alert_rules)"
    else:
        return
    missing = [c for c in ALERT_CLASSES if not coverage[c.key]]
    if not missing:
        return
    yield rule.finding_for(
        FLEET_HOST,
        f"{len(missing)} of {len(ALERT_CLASSES)} GPU failure classes have no alert in "
        f"{source}: {', '.join(c.title for c in missing)}.",
        Evidence(
            fact="policy.monitoring.alert_rules",
            actual={c.key: list(coverage[c.key]) for c in ALERT_CLASSES},
            expected="at least one alert per class",
            excerpt=source,
        ),
    )
