"""Rule and finding types, and the registry every rule module registers into.

A rule has a stable code that is never reused (GA1xx driver/software, GA2xx MIG, GA3xx
memory/ECC/XID health, GA4xx services, GA5xx topology/PCIe/NVLink, GA6xx system/sysctl/security,
GA7xx fleet consistency, GA8xx capacity, GA90x/GA91x Kubernetes and Slurm, GA92x monitoring,
GA93x DCGM diagnostics). Host rules look at one snapshot; fleet rules look at
all of them (drift between hosts of the same GPU model).

Every rule gets an outcome on every host (and, for rules that judge GPUs one by one, on every
GPU), in the manner of checkov's PASSED / FAILED / UNKNOWN: ``fail`` (it has findings),
``pass`` (it looked and found nothing), ``not_evaluated`` (the data it reads was missing, or it
raised; the reason says which) and ``disabled`` (the site policy turned it off for the host).
Silence is never read as a pass: a rule declares the collected data it reads (:class:`Need`),
and a check may yield :class:`NotEvaluated` instead of a finding where only it can tell that it
could not judge (a layout it cannot count, a version it was not given).
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

from gpuaudit.model.cluster import ClusterView
from gpuaudit.model.findings import Evidence as Evidence
from gpuaudit.model.findings import Finding as Finding
from gpuaudit.model.findings import GpuOutcome as GpuOutcome
from gpuaudit.model.findings import Outcome as Outcome
from gpuaudit.model.findings import Owner as Owner
from gpuaudit.model.findings import RuleOutcome as RuleOutcome
from gpuaudit.model.findings import Severity as Severity
from gpuaudit.model.snapshot import HostSnapshot

if TYPE_CHECKING:  # typing.Unpack is Python 3.11's
    from typing_extensions import Unpack


class FindingDetails(TypedDict, total=False):
    """What a finding may say other than its rule's defaults (:meth:`Rule.finding`)."""

    severity: Severity | None
    remediation: str | None
    references: tuple[str, ...]
    likelihood: int | None
    impact: int | None
    owner: Owner | None


@dataclass(frozen=True)
class RuleContext:
    """What a rule may consult besides the snapshot: the whole fleet, the policy and, when the
    audit was given one, the Kubernetes cluster's view of the hosts (``cluster``; None: none).

    ``evaluate()`` gives each host a context whose ``policy`` is that host's resolved
    settings (gpuaudit.policy.settings), with ``resolved_for`` naming the host. A context built
    by hand holds a site-level mapping instead, and :meth:`settings_for` merges the host's
    inventory data over it.
    """

    fleet: Sequence[HostSnapshot] = ()
    policy: dict[str, Any] = field(default_factory=dict)
    resolved_for: str | None = None
    cluster: ClusterView | None = None
    # Settings merged for a snapshot (by its id; the snapshot is kept, so the id stays its own),
    # once per context: every fleet rule that asks about a host reads the same merge.
    merged: dict[int, tuple[HostSnapshot, dict[str, Any]]] = field(
        default_factory=dict, repr=False, compare=False
    )

    def settings_for(self, snap: HostSnapshot) -> dict[str, Any]:
        if self.resolved_for is not None and self.resolved_for == snap.host:
            return self.policy
        known = self.merged.get(id(snap))
        if known is None:
            from gpuaudit.policy.defaults import host_policy

            known = self.merged[id(snap)] = (snap, host_policy(snap, self.policy))
        return known[1]


@dataclass(frozen=True)
class NotEvaluated:
    """Yielded by a check instead of a finding: it could not judge the host (or one GPU).

    ``host`` is for fleet checks, which judge many hosts at once; a host check leaves it unset.
    """

    reason: str
    gpu: int | None = None
    host: str | None = None
    # Why it did not judge: the data was missing (NOT_EVALUATED), the site's policy turned
    # the check off (DISABLED), or what it checks is not on the host (NOT_APPLICABLE).
    outcome: Outcome = Outcome.NOT_EVALUATED


@dataclass(frozen=True)
class Need:
    """Collected data a rule reads; ``missing(snapshot)`` says why a host lacks it (None: it
    has it). A rule that found nothing on a host lacking one of its needs did not pass there:
    it is not evaluated, with that reason."""

    what: str
    missing: Callable[[HostSnapshot], str | None]
    # The outcome on a host that lacks it: the data did not arrive (NOT_EVALUATED), the site
    # turned its collection off (DISABLED), or the host has no such thing (NOT_APPLICABLE).
    outcome: Outcome = Outcome.NOT_EVALUATED


@dataclass(frozen=True)
class Evaluation:
    """What evaluating the rules over a fleet gives: the findings (most severe first, the
    site's severities applied) and every rule's outcome on every host."""

    findings: tuple[Finding, ...] = ()
    outcomes: tuple[RuleOutcome, ...] = ()


CheckResult = Finding | NotEvaluated
# One tuple for each distinct list of needs the rules name, so rules that need the same data
# share it: what a host lacks is then worked out once for all of them (audit.HostJudging).
_NEEDS: dict[tuple[Need, ...], tuple[Need, ...]] = {}
HostCheck = Callable[["Rule", HostSnapshot, RuleContext], Iterable[CheckResult]]
FleetCheck = Callable[["Rule", Sequence[HostSnapshot], RuleContext], Iterable[CheckResult]]


@dataclass(frozen=True)
class Rule:
    code: str
    title: str
    category: str
    owner: Owner
    severity: Severity
    likelihood: int
    impact: int
    remediation: str
    references: tuple[str, ...]
    doc: str
    operation: str | None = None
    check_host: HostCheck | None = None
    check_fleet: FleetCheck | None = None
    # Most rules read collected data; a host that could not be collected would only make them
    # report its absence over and over. Rules that report on the collection itself set this.
    runs_without_data: bool = False
    # The collected data the check reads: a host without it gets not_evaluated, not pass.
    needs: tuple[Need, ...] = ()
    # The check judges each GPU on its own (its findings name the GPU): outcomes per GPU too.
    per_gpu: bool = False

    def finding(
        self,
        snap: HostSnapshot,
        message: str,
        evidence: Evidence,
        *,
        gpu: int | None = None,
        **details: Unpack[FindingDetails],
    ) -> Finding:
        """Make a finding of this rule for a host (and a GPU when given)."""
        gpu_rec = next((g for g in snap.gpus if g.index == gpu), None) if gpu is not None else None
        return dataclasses.replace(
            self.finding_for(snap.host, message, evidence, **details),
            gpu=gpu,
            gpu_uuid=gpu_rec.uuid if gpu_rec else None,
            gpu_name=gpu_rec.name if gpu_rec else None,
        )

    def finding_for(
        self, host: str, message: str, evidence: Evidence, **details: Unpack[FindingDetails]
    ) -> Finding:
        """Make a finding of this rule filed under ``host``, a name that need not be an
        audited host's (:data:`FLEET_HOST` for what belongs to the fleet). ``details`` not
        given (or None) are the rule's own."""
        return Finding(
            rule=self.code,
            title=self.title,
            severity=details.get("severity") or self.severity,
            category=self.category,
            owner=details.get("owner") or self.owner,
            host=host,
            message=message,
            evidence=evidence,
            remediation=details.get("remediation") or self.remediation,
            references=self.references + details.get("references", ()),
            likelihood=details.get("likelihood") or self.likelihood,
            impact=details.get("impact") or self.impact,
            operation=self.operation,
        )


REGISTRY: dict[str, Rule] = {}
# The host name a finding that belongs to the fleet, not one host, is filed under (a node the
# inventory lacks, the site's alert coverage, a fleet rule that failed).
FLEET_HOST = "(fleet)"

_CODE = re.compile(r"^GA\d{3}$")

CheckT = TypeVar("CheckT", bound=Callable[..., Iterable[CheckResult]])


def register(new: Rule) -> Rule:
    """Add a rule to the registry, refusing what would make the register ambiguous.

    Codes are never reused, so a second rule under a known code is an error, not an update;
    re-registering the very same check (a module imported twice) is tolerated.
    """
    problems = []
    if not _CODE.match(new.code):
        problems.append("code must look like GA123")
    if not new.doc.strip():
        problems.append("a docstring saying what it checks, why, the evidence and the remedy")
    if not new.references:
        problems.append("at least one reference")
    if not new.remediation.strip():
        problems.append("remediation text")
    if not (1 <= new.likelihood <= 5 and 1 <= new.impact <= 5):
        problems.append("likelihood and impact between 1 and 5")
    if problems:
        raise ValueError(f"rule {new.code}: needs " + "; ".join(problems))
    known = REGISTRY.get(new.code)
    if known is not None and _check_name(known) != _check_name(new):
        raise ValueError(f"rule code {new.code} is already taken by {_check_name(known)}")
    REGISTRY[new.code] = new
    return new


def _check_name(r: Rule) -> str:
    check = r.check_host or r.check_fleet
    return f"{check.__module__}.{check.__qualname__}" if check else f"<{r.code}>"


def rule(
    code: str,
    title: str,
    *,
    category: str,
    owner: Owner,
    severity: Severity,
    likelihood: int,
    impact: int,
    remediation: str,
    references: Sequence[str],
    operation: str | None = None,
    fleet: bool = False,
    runs_without_data: bool = False,
    needs: Sequence[Need] = (),
    per_gpu: bool = False,
) -> Callable[[CheckT], CheckT]:
    """Register the decorated check function as a rule; its docstring becomes the rule's doc.

    A host check is called as ``check(rule, snapshot, context)``, a fleet check (``fleet=True``)
    as ``check(rule, snapshots, context)``; both return an iterable of findings, and of
    :class:`NotEvaluated` where they could not judge. ``needs`` names the collected data the
    check reads; ``per_gpu`` says that it judges each GPU on its own.
    """

    def decorate(check: CheckT) -> CheckT:
        register(
            Rule(
                code=code,
                title=title,
                category=category,
                owner=owner,
                severity=severity,
                likelihood=likelihood,
                impact=impact,
                remediation=remediation,
                references=tuple(references),
                doc=inspect.cleandoc(check.__doc__ or ""),
                operation=operation,
                check_host=None if fleet else check,
                check_fleet=check if fleet else None,
                runs_without_data=runs_without_data,
                needs=_NEEDS.setdefault(tuple(needs), tuple(needs)),
                per_gpu=per_gpu,
            )
        )
        return check

    return decorate
