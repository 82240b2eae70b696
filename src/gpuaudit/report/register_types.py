"""The risk register's types: what the register stage hands every renderer.

:class:`Register` is the typed register (register.py builds it); each renderer reads its
attributes, and :meth:`Register.to_dict` is register.json, the published document whose shape
register.py's docstring gives. :meth:`Register.from_dict` reads a register.json back (the
terminal summary of an audit, ``gpuaudit explain``, the ``--fail-on`` gate), so a document and
the register it was written from are one thing in two forms.

Each type's ``to_dict`` writes its part of the document in a fixed key order, so two registers
of the same input compare equal byte for byte.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gpuaudit.model.findings import Finding, Owner, RuleOutcome, Severity
from gpuaudit.report.provenance import Provenance, Scope

OPEN = "open"
WAIVED = "waived"
RESOLVED = "resolved"


def is_risk_severity(severity: Severity | str) -> bool:
    """Whether findings of ``severity`` are risks; info findings only inform (GA801's model
    sizes), as kube-bench's INFO checks never fail."""
    return getattr(severity, "value", severity) != Severity.INFO.value


def at_or_above(severity: Severity | str, threshold: Severity | str) -> bool:
    """Whether ``severity`` is ``threshold`` or more severe."""
    return Severity(severity).rank >= Severity(threshold).rank


def _strs(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, (list, tuple)) else ()


# --- findings and risks --------------------------------------------------------------------------


@dataclass(frozen=True)
class Waiver:
    """A site-policy waiver as the register shows it."""

    reason: str
    expires: str | None
    hosts: tuple[str, ...] | str | None
    owner: str | None

    def to_dict(self) -> dict[str, Any]:
        hosts = list(self.hosts) if isinstance(self.hosts, tuple) else self.hosts
        return {"reason": self.reason, "expires": self.expires, "hosts": hosts, "owner": self.owner}

    @classmethod
    def from_dict(cls, data: Any) -> Waiver | None:
        if not isinstance(data, Mapping):
            return None
        hosts = data.get("hosts")
        return cls(
            str(data.get("reason") or ""),
            None if data.get("expires") is None else str(data["expires"]),
            _strs(hosts) if isinstance(hosts, list) else (None if hosts is None else str(hosts)),
            None if data.get("owner") is None else str(data["owner"]),
        )


@dataclass(frozen=True)
class RegisterFinding:
    """A finding as the register holds it: the rule's finding, the risk it belongs to and
    what the site policy said of it (open or waived, by which waiver, expired or not)."""

    finding: Finding
    risk: str
    status: str = OPEN  # OPEN | WAIVED
    waiver: Waiver | None = None
    waiver_expired: bool = False

    @property
    def host(self) -> str:
        return self.finding.host

    @property
    def rule(self) -> str:
        return self.finding.rule

    @property
    def severity(self) -> Severity:
        return self.finding.severity

    @property
    def is_open_risk(self) -> bool:
        """Open (not waived) and above info."""
        return self.status == OPEN and is_risk_severity(self.severity)

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.finding.to_dict(),
            "risk": self.risk,
            "status": self.status,
            "waiver": self.waiver.to_dict() if self.waiver else None,
            "waiver_expired": self.waiver_expired,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RegisterFinding:
        finding = Finding.from_dict(dict(data))
        return cls(
            finding,
            str(data.get("risk") or finding.rule),
            str(data.get("status") or OPEN),
            Waiver.from_dict(data.get("waiver")),
            bool(data.get("waiver_expired")),
        )


@dataclass(frozen=True)
class AffectedGpu:
    host: str
    gpu: int | None
    gpu_name: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "gpu": self.gpu, "gpu_name": self.gpu_name}


@dataclass(frozen=True)
class Risk:
    """The findings of one rule about one subject, across every host they occur on
    (risks.py); ``findings`` are indexes into the register's findings."""

    id: str
    rule: str
    title: str
    category: str
    owner: Owner
    severity: Severity
    likelihood: int
    impact: int
    score: int
    status: str  # OPEN | WAIVED
    waiver: Waiver | None
    waiver_expired: bool
    affected_hosts: tuple[str, ...]
    affected_gpus: tuple[AffectedGpu, ...]
    finding_count: int
    remediation: str
    operation: str | None
    references: tuple[str, ...]
    findings: tuple[int, ...]

    @property
    def is_open(self) -> bool:
        """An open risk: not waived, and above info (its most severe open finding sets its
        severity, risks.py)."""
        return self.status == OPEN and is_risk_severity(self.severity)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "rule": self.rule,
            "title": self.title,
            "category": self.category,
            "owner": self.owner.value,
            "severity": self.severity.value,
            "likelihood": self.likelihood,
            "impact": self.impact,
            "score": self.score,
            "status": self.status,
            "waiver": self.waiver.to_dict() if self.waiver else None,
            "waiver_expired": self.waiver_expired,
            "affected_hosts": list(self.affected_hosts),
            "affected_gpus": [g.to_dict() for g in self.affected_gpus],
            "finding_count": self.finding_count,
            "remediation": self.remediation,
            "operation": self.operation,
            "references": list(self.references),
            "findings": list(self.findings),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Risk:
        gpus = data.get("affected_gpus") or []
        return cls(
            id=str(data["id"]),
            rule=str(data.get("rule") or str(data["id"]).partition(":")[0]),
            title=str(data.get("title") or ""),
            category=str(data.get("category") or ""),
            owner=Owner(data.get("owner") or Owner.INFRA.value),
            severity=Severity(data["severity"]),
            likelihood=int(data.get("likelihood") or 0),
            impact=int(data.get("impact") or 0),
            score=int(data.get("score") or 0),
            status=str(data.get("status") or OPEN),
            waiver=Waiver.from_dict(data.get("waiver")),
            waiver_expired=bool(data.get("waiver_expired")),
            affected_hosts=_strs(data.get("affected_hosts")),
            affected_gpus=tuple(
                AffectedGpu(str(g.get("host")), g.get("gpu"), g.get("gpu_name"))
                for g in gpus
                if isinstance(g, Mapping)
            ),
            finding_count=int(data.get("finding_count") or 0),
            remediation=str(data.get("remediation") or ""),
            operation=data.get("operation"),
            references=_strs(data.get("references")),
            findings=tuple(int(i) for i in data.get("findings") or ()),
        )


# --- hosts and the summary -----------------------------------------------------------------------


@dataclass(frozen=True)
class GpuEntry:
    index: int
    name: str | None
    uuid: str | None
    pci_bus_id: str | None
    vbios: str | None
    memory_total_mib: int | None
    status: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "uuid": self.uuid,
            "pci_bus_id": self.pci_bus_id,
            "vbios": self.vbios,
            "memory_total_mib": self.memory_total_mib,
            "status": self.status,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GpuEntry:
        return cls(
            int(data.get("index") or 0),
            data.get("name"),
            data.get("uuid"),
            data.get("pci_bus_id"),
            data.get("vbios"),
            data.get("memory_total_mib"),
            str(data.get("status") or ""),
        )


@dataclass(frozen=True)
class HostEntry:
    """One host of the register: its status, versions, GPUs, findings by severity and every
    rule's outcome on it."""

    name: str
    status: str  # a HostStatus value
    status_detail: str
    collected_at: str
    snapshot_schema_version: str
    driver_version: str | None
    cuda_version: str | None
    os: str | None
    kernel: str | None
    gpus: tuple[GpuEntry, ...]
    finding_count: int
    findings_by_severity: Mapping[str, int]
    outcomes: tuple[RuleOutcome, ...] = ()

    def to_dict(self, *, outcomes: bool = True) -> dict[str, Any]:
        """The host as register.json holds it (``outcomes=False``: without its rules'
        outcomes, the last key)."""
        entry: dict[str, Any] = {
            "name": self.name,
            "status": self.status,
            "status_detail": self.status_detail,
            "collected_at": self.collected_at,
            "snapshot_schema_version": self.snapshot_schema_version,
            "driver_version": self.driver_version,
            "cuda_version": self.cuda_version,
            "os": self.os,
            "kernel": self.kernel,
            "gpus": [g.to_dict() for g in self.gpus],
            "finding_count": self.finding_count,
            "findings_by_severity": dict(self.findings_by_severity),
        }
        if outcomes:
            entry["outcomes"] = {o.rule: o.to_dict() for o in self.outcomes}
        return entry

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, outcomes: bool = True) -> HostEntry:
        """A host read back (``outcomes=False``: without its rules' outcomes)."""
        name = str(data.get("name") or "")
        entries = (data.get("outcomes") or {}) if outcomes else {}
        return cls(
            name=name,
            status=str(data.get("status") or ""),
            status_detail=str(data.get("status_detail") or ""),
            collected_at=str(data.get("collected_at") or ""),
            snapshot_schema_version=str(data.get("snapshot_schema_version") or ""),
            driver_version=data.get("driver_version"),
            cuda_version=data.get("cuda_version"),
            os=data.get("os"),
            kernel=data.get("kernel"),
            gpus=tuple(GpuEntry.from_dict(g) for g in data.get("gpus") or ()),
            finding_count=int(data.get("finding_count") or 0),
            findings_by_severity=dict(data.get("findings_by_severity") or {}),
            outcomes=tuple(
                RuleOutcome.from_dict(rule, name, entry) for rule, entry in entries.items()
            ),
        )


@dataclass(frozen=True)
class Summary:
    """The register's counts. Every count map lists all known keys, zeros included."""

    host_count: int = 0
    gpu_count: int = 0
    finding_count: int = 0
    findings_by_severity: Mapping[str, int] = field(default_factory=dict)
    findings_by_category: Mapping[str, int] = field(default_factory=dict)
    findings_by_owner: Mapping[str, int] = field(default_factory=dict)
    hosts_by_status: Mapping[str, int] = field(default_factory=dict)
    hosts_not_ok: tuple[str, ...] = ()
    risk_count: int = 0
    risks_by_status: Mapping[str, int] = field(default_factory=dict)
    info_risk_count: int = 0
    open_risks_by_severity: Mapping[str, int] = field(default_factory=dict)
    outcomes: Mapping[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "host_count": self.host_count,
            "gpu_count": self.gpu_count,
            "finding_count": self.finding_count,
            "findings_by_severity": dict(self.findings_by_severity),
            "findings_by_category": dict(self.findings_by_category),
            "findings_by_owner": dict(self.findings_by_owner),
            "hosts_by_status": dict(self.hosts_by_status),
            "hosts_not_ok": list(self.hosts_not_ok),
            "risk_count": self.risk_count,
            "risks_by_status": dict(self.risks_by_status),
            "info_risk_count": self.info_risk_count,
            "open_risks_by_severity": dict(self.open_risks_by_severity),
            "outcomes": dict(self.outcomes),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Summary:
        counts = {
            name: dict(data.get(name) or {})
            for name in (
                "findings_by_severity",
                "findings_by_category",
                "findings_by_owner",
                "hosts_by_status",
                "risks_by_status",
                "open_risks_by_severity",
                "outcomes",
            )
        }
        return cls(
            host_count=int(data.get("host_count") or 0),
            gpu_count=int(data.get("gpu_count") or 0),
            finding_count=int(data.get("finding_count") or 0),
            hosts_not_ok=_strs(data.get("hosts_not_ok")),
            risk_count=int(data.get("risk_count") or 0),
            info_risk_count=int(data.get("info_risk_count") or 0),
            **counts,
        )


# --- checklists ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tally:
    """Checks passed of checked; unknown ones are checked and not passed. ``score_pct`` is
    None when nothing could be checked."""

    passed: int
    checked: int
    unknown: int = 0

    @property
    def score_pct(self) -> float | None:
        return round(100 * self.passed / self.checked, 1) if self.checked else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "checked": self.checked,
            "unknown": self.unknown,
            "score_pct": self.score_pct,
        }


@dataclass(frozen=True)
class HostChecklist:
    """One host's score on one checklist, with the items it failed and those it could not
    verify (and why)."""

    tally: Tally
    failed_items: tuple[str, ...] = ()
    unknown_reasons: Mapping[str, Sequence[str]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.tally.to_dict(),
            "failed_items": list(self.failed_items),
            "unknown_items": list(self.unknown_reasons),
            "unknown_reasons": {k: list(v) for k, v in self.unknown_reasons.items()},
        }


@dataclass(frozen=True)
class ItemScore:
    id: str
    text: str
    rules: tuple[str, ...]
    note: str
    failed_hosts: tuple[str, ...] = ()
    unknown_hosts: tuple[str, ...] = ()

    @property
    def checked(self) -> bool:
        return bool(self.rules)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "text": self.text,
            "rules": list(self.rules),
            "checked": self.checked,
            "note": self.note,
            "failed_hosts": list(self.failed_hosts),
            "unknown_hosts": list(self.unknown_hosts),
        }


@dataclass(frozen=True)
class ChecklistScore:
    """A readiness checklist scored over the fleet and host by host (checklists.py)."""

    key: str
    title: str
    reference: str
    items: tuple[ItemScore, ...]
    fleet: Tally
    hosts: Mapping[str, HostChecklist]

    def to_dict(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "reference": self.reference,
            "items": [i.to_dict() for i in self.items],
            "fleet": self.fleet.to_dict(),
            "hosts": {name: h.to_dict() for name, h in self.hosts.items()},
        }


# --- trends --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RiskBrief:
    """A risk of the previous run, as trends name it."""

    id: str
    title: str
    severity: str
    affected_hosts: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "severity": self.severity,
            "affected_hosts": list(self.affected_hosts),
        }


@dataclass(frozen=True)
class DriverChange:
    host: str
    before: str
    after: str

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "from": self.before, "to": self.after}


@dataclass(frozen=True)
class CounterGrowth:
    """An error counter of one GPU that grew since the previous run."""

    host: str
    gpu: int | None
    pci_bus_id: str
    metric: str
    before: int
    after: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "gpu": self.gpu,
            "pci_bus_id": self.pci_bus_id,
            "metric": self.metric,
            "before": self.before,
            "after": self.after,
        }


@dataclass(frozen=True)
class Trends:
    """This run against the previous one, on the hosts both hold (trends.py)."""

    previous_run_id: str
    previous_generated_at: str | None
    previous_scope: Scope | None
    compared_hosts: int
    new: tuple[str, ...] = ()
    resolved: tuple[RiskBrief, ...] = ()
    unverified: tuple[RiskBrief, ...] = ()
    persisting: tuple[str, ...] = ()
    risks_on_new_hosts: tuple[str, ...] = ()
    risks_not_judged_before: tuple[str, ...] = ()
    risks_not_in_scope: tuple[RiskBrief, ...] = ()
    fleet_not_compared: tuple[str, ...] = ()
    hosts_added: tuple[str, ...] = ()
    hosts_removed: tuple[str, ...] = ()
    driver_changes: tuple[DriverChange, ...] = ()
    growth: tuple[CounterGrowth, ...] = ()
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "previous_run_id": self.previous_run_id,
            "previous_generated_at": self.previous_generated_at,
            "previous_scope": self.previous_scope.to_dict() if self.previous_scope else None,
            "compared_hosts": self.compared_hosts,
            "new": list(self.new),
            "resolved": [{**r.to_dict(), "status": RESOLVED} for r in self.resolved],
            "unverified": [r.to_dict() for r in self.unverified],
            "persisting": list(self.persisting),
            "risks_on_new_hosts": list(self.risks_on_new_hosts),
            "risks_not_judged_before": list(self.risks_not_judged_before),
            "risks_not_in_scope": [r.to_dict() for r in self.risks_not_in_scope],
            "fleet_not_compared": list(self.fleet_not_compared),
            "hosts_added": list(self.hosts_added),
            "hosts_removed": list(self.hosts_removed),
            "driver_changes": [c.to_dict() for c in self.driver_changes],
            "growth": [g.to_dict() for g in self.growth],
            "notes": list(self.notes),
        }


# --- rollouts and the register -------------------------------------------------------------------


@dataclass(frozen=True)
class RolloutSummary:
    """A driver rollout beside the run that is not completed (rollouts.py)."""

    rollout_id: str
    status: str
    reason: str
    target_version: str
    updated_at: str
    outcomes: Mapping[str, int]
    report: str  # the rollout page, relative to the run's page

    def to_dict(self) -> dict[str, Any]:
        return {
            "rollout_id": self.rollout_id,
            "status": self.status,
            "reason": self.reason,
            "target_version": self.target_version,
            "updated_at": self.updated_at,
            "outcomes": dict(self.outcomes),
            "report": self.report,
        }


@dataclass(frozen=True)
class Register:
    """The risk register of one run: what every renderer reads (module docstring)."""

    schema_version: str
    generated_at: str
    run_id: str | None
    summary: Summary
    hosts: tuple[HostEntry, ...] = ()
    rules: Mapping[str, str] = field(default_factory=dict)
    risks: tuple[Risk, ...] = ()
    findings: tuple[RegisterFinding, ...] = ()
    checklists: tuple[ChecklistScore, ...] = ()
    trends: Trends | None = None
    provenance: Provenance | None = None
    # None: a bare register, not written beside a reports directory (no rollouts looked for).
    rollouts: tuple[RolloutSummary, ...] | None = None

    def with_rollouts(self, rollouts: Sequence[RolloutSummary]) -> Register:
        return replace(self, rollouts=tuple(rollouts))

    def host(self, name: str) -> HostEntry | None:
        return self._hosts_by_name.get(name)

    @functools.cached_property
    def _hosts_by_name(self) -> dict[str, HostEntry]:
        # Made once: summary.md looks up every host that is not ok, thousands in a large fleet.
        by_name: dict[str, HostEntry] = {}
        for entry in self.hosts:
            by_name.setdefault(entry.name, entry)
        return by_name

    def open_risks_at_or_above(self, threshold: Severity | str) -> list[Risk]:
        """The risks with an open finding at ``threshold`` or above (what ``--fail-on``
        counts).

        Counted on open findings, not on the risk's overall severity: a risk whose critical
        finding is waived and whose other findings are low must not fail a ``--fail-on high``
        gate. Info findings are never counted, whatever the threshold.
        """
        return [
            risk
            for risk in self.risks
            if any(
                self.findings[i].is_open_risk and at_or_above(self.findings[i].severity, threshold)
                for i in risk.findings
                if 0 <= i < len(self.findings)
            )
        ]

    @functools.cached_property
    def document(self) -> dict[str, Any]:
        """:meth:`to_dict`, made once: what the renderers that write JSON read (register.json,
        the page's data). Shared by them: never changed."""
        if "head" in self.__dict__:
            return {**self.head, "hosts": [h.to_dict() for h in self.hosts]}
        return self.to_dict()

    @functools.cached_property
    def head(self) -> dict[str, Any]:
        """:attr:`document` without its hosts (their ``hosts`` is an empty list, in its place):
        what the page reads, and register.json's text around its hosts, which are written one
        by one (renderers.register_json_chunks). Shared: never changed."""
        if "document" in self.__dict__:
            return {**self.document, "hosts": []}
        return self.to_dict(hosts=False)

    def to_dict(self, *, hosts: bool = True) -> dict[str, Any]:
        """register.json's document (``hosts=False``: with an empty host list)."""
        document: dict[str, Any] = {
            "schema_version": self.schema_version,
            "generated_at": self.generated_at,
            "run_id": self.run_id,
            "summary": self.summary.to_dict(),
            "hosts": [h.to_dict() for h in self.hosts] if hosts else [],
            "rules": dict(self.rules),
            "risks": [r.to_dict() for r in self.risks],
            "findings": [f.to_dict() for f in self.findings],
            "checklists": {c.key: c.to_dict() for c in self.checklists},
            "trends": self.trends.to_dict() if self.trends else None,
        }
        if self.provenance is not None:
            document["provenance"] = self.provenance.to_dict()
        if self.rollouts is not None:
            document["rollouts"] = [r.to_dict() for r in self.rollouts]
        return document

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, outcomes: bool = True) -> Register:
        """A register read back from register.json, for what reads its findings, risks, hosts
        and counts (checklists and trends are the page's and stay in the document). Raises
        ValueError (KeyError, TypeError included) on a document that is not a register.

        ``outcomes=False`` leaves out every rule's outcome on each host (the hosts' ``outcomes``
        are empty): most of a large fleet's register, which the terminal summary and the
        ``--fail-on`` gate do not read."""
        if not isinstance(data, Mapping):
            raise ValueError("a register is a JSON object")
        try:
            findings = tuple(RegisterFinding.from_dict(f) for f in data.get("findings") or ())
            risks = tuple(Risk.from_dict(r) for r in data.get("risks") or ())
            provenance = data.get("provenance")
            return cls(
                schema_version=str(data.get("schema_version") or ""),
                generated_at=str(data.get("generated_at") or ""),
                run_id=None if data.get("run_id") is None else str(data["run_id"]),
                summary=Summary.from_dict(data.get("summary") or {}),
                hosts=tuple(
                    HostEntry.from_dict(h, outcomes=outcomes) for h in data.get("hosts") or ()
                ),
                rules=dict(data.get("rules") or {}),
                risks=risks,
                findings=findings,
                provenance=Provenance.from_dict(provenance)
                if isinstance(provenance, Mapping)
                else None,
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"not a gpuaudit register: {exc!r}") from exc
