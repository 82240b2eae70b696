"""The types a finding is made of: its severity, owner and evidence, and the finding itself.

They sit in the model, below the rules that produce findings and the policy that waives and
re-rates them, so both can name them without importing each other. Each rule's outcome on a
host (:mod:`gpuaudit.rules.base`) is built from them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, NamedTuple


class Severity(str, Enum):
    CRITICAL = "critical"
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"
    INFO = "info"

    @property
    def rank(self) -> int:
        return _SEVERITY_RANK[self]


_SEVERITY_RANK = {
    Severity.CRITICAL: 4,
    Severity.HIGH: 3,
    Severity.MEDIUM: 2,
    Severity.LOW: 1,
    Severity.INFO: 0,
}


class Outcome(str, Enum):
    """What a rule concluded about one host or GPU."""

    FAIL = "fail"
    PASS = "pass"
    NOT_EVALUATED = "not_evaluated"
    DISABLED = "disabled"
    # The rule's subject is not on the host: a host that runs no Slurm for the Slurm rules.
    NOT_APPLICABLE = "not_applicable"


class Owner(str, Enum):
    INFRA = "infra"
    ML_ENGINEERING = "ml-engineering"


@dataclass(frozen=True)
class Evidence:
    fact: str  # path into the snapshot, e.g. "gpus[3].remapped_rows.pending"
    actual: Any
    expected: Any
    excerpt: str = ""  # raw host output the value was read from


@dataclass(frozen=True)
class Finding:
    rule: str
    title: str
    severity: Severity
    category: str
    owner: Owner
    host: str
    message: str
    evidence: Evidence
    remediation: str
    references: tuple[str, ...] = ()
    gpu: int | None = None
    gpu_uuid: str | None = None
    gpu_name: str | None = None
    likelihood: int = 3  # 1 (rare) .. 5 (almost certain)
    impact: int = 3  # 1 (negligible) .. 5 (severe)
    operation: str | None = None  # the gpuaudit remediation operation that fixes it
    # Why the site policy changed this finding's severity (None: the rule's own severity).
    override_reason: str | None = None

    @property
    def score(self) -> int:
        return self.likelihood * self.impact

    def to_dict(self) -> dict[str, Any]:
        evidence = self.evidence
        # ``_value_``: the member's value as a plain attribute (``.value`` goes through the
        # enum's descriptor, measurably slower over a large fleet's findings).
        return {
            "rule": self.rule,
            "title": self.title,
            "severity": self.severity._value_,
            "category": self.category,
            "owner": self.owner._value_,
            "host": self.host,
            "gpu": self.gpu,
            "gpu_uuid": self.gpu_uuid,
            "gpu_name": self.gpu_name,
            "message": self.message,
            "likelihood": self.likelihood,
            "impact": self.impact,
            "score": self.score,
            "evidence": {
                "fact": evidence.fact,
                "actual": _jsonable(evidence.actual),
                "expected": _jsonable(evidence.expected),
                "excerpt": evidence.excerpt,
            },
            "remediation": self.remediation,
            "operation": self.operation,
            "references": list(self.references),
            "override_reason": self.override_reason,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Finding:
        ev = data.get("evidence") or {}
        return cls(
            rule=data["rule"],
            title=data["title"],
            severity=Severity(data["severity"]),
            category=data["category"],
            owner=Owner(data["owner"]),
            host=data["host"],
            message=data.get("message", ""),
            evidence=Evidence(
                ev.get("fact", ""), ev.get("actual"), ev.get("expected"), ev.get("excerpt", "")
            ),
            remediation=data.get("remediation", ""),
            references=tuple(data.get("references") or ()),
            gpu=data.get("gpu"),
            gpu_uuid=data.get("gpu_uuid"),
            gpu_name=data.get("gpu_name"),
            likelihood=int(data.get("likelihood", 3)),
            impact=int(data.get("impact", 3)),
            operation=data.get("operation"),
            override_reason=data.get("override_reason"),
        )


_PLAIN = (str, int, float, bool, type(None))


def _jsonable(value: Any) -> Any:
    """``value`` as JSON can hold it: str, int, float, bool and None as they are (the common
    case, checked by exact type first), mappings and sequences converted item by item, anything
    else as its text."""
    kind = type(value)
    if kind in _PLAIN:
        return value
    if kind is dict:
        items = value.items()
        if all(type(k) is str and type(v) in _PLAIN for k, v in items):
            return dict(value)
        return {str(k): _jsonable(v) for k, v in items}
    if kind is list or kind is tuple:
        if all(type(v) in _PLAIN for v in value):
            return list(value)
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)):
        return value  # a subclass (a str Enum, IntEnum), kept as the json module writes it
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_jsonable(v) for v in value]
    return str(value)


@dataclass(frozen=True, slots=True)
class GpuOutcome:
    gpu: int
    outcome: Outcome
    reason: str = ""


class RuleOutcome(NamedTuple):
    """One rule's outcome on one host: why when it was not evaluated or is disabled, how many
    findings when it failed, and the outcome per GPU for rules that judge GPUs one by one.

    A named tuple, immutable like the other model types: the rules make one for every rule on
    every host (760,000 for 10,000 hosts), and a tuple is made in a third of the time a frozen
    dataclass takes.

    As JSON (register.json), compact for fleets of thousands of 8-GPU hosts: ``gpus`` maps each
    outcome to the GPU indexes that had it, ``gpu_reasons`` says why per GPU where there is a
    reason (``{"outcome": "not_evaluated", "gpus": {"pass": [0], "not_evaluated": [1]},
    "gpu_reasons": {"1": "it answers with an error"}, "reason": "GPU 1: …"}``).
    """

    rule: str
    host: str
    outcome: Outcome
    reason: str = ""
    findings: int = 0
    gpus: tuple[GpuOutcome, ...] = ()
    per_gpu: bool = False

    def to_dict(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"outcome": self.outcome.value}
        if self.reason:
            entry["reason"] = self.reason
        if self.findings:
            entry["findings"] = self.findings
        if self.per_gpu:
            by_outcome: dict[str, list[int]] = {}
            for g in self.gpus:
                by_outcome.setdefault(g.outcome.value, []).append(g.gpu)
            entry["gpus"] = by_outcome
            reasons = {str(g.gpu): g.reason for g in self.gpus if g.reason}
            if reasons:
                entry["gpu_reasons"] = reasons
        return entry

    @classmethod
    def from_dict(cls, rule: str, host: str, data: dict[str, Any]) -> RuleOutcome:
        gpus = data.get("gpus")
        reasons = data.get("gpu_reasons") or {}
        per_gpu = [
            GpuOutcome(int(index), Outcome(outcome), str(reasons.get(str(index)) or ""))
            for outcome, indexes in (gpus or {}).items()
            for index in indexes
        ]
        return cls(
            rule=rule,
            host=host,
            outcome=Outcome(data["outcome"]),
            reason=str(data.get("reason") or ""),
            findings=int(data.get("findings") or 0),
            gpus=tuple(sorted(per_gpu, key=lambda g: g.gpu)),
            per_gpu=gpus is not None,
        )
