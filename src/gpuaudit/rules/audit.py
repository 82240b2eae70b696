"""GA0xx: the audit itself — hosts that could not be audited, rules that could not run."""

from __future__ import annotations

from collections.abc import Iterable

from gpuaudit.model.snapshot import HostSnapshot, HostStatus
from gpuaudit.rules import refs
from gpuaudit.rules.base import (
    REGISTRY,
    Evidence,
    Finding,
    Owner,
    Rule,
    RuleContext,
    Severity,
    register,
    rule,
)
from gpuaudit.rules.evidence import section_excerpt

NOT_COLLECTED = frozenset({HostStatus.UNREACHABLE, HostStatus.COLLECTION_FAILED})

RULE_FAILED_CODE = "GA000"

register(
    Rule(
        code=RULE_FAILED_CODE,
        title="Rule failed to evaluate",
        category="audit",
        owner=Owner.INFRA,
        severity=Severity.MEDIUM,
        likelihood=3,
        impact=3,
        remediation=(
            "Report the exception with the host's snapshot attached; until it is fixed, check "
            "what the failing rule covers by hand on that host."
        ),
        references=("gpuaudit: rules are pure functions of snapshot, fleet and policy",),
        doc=(
            "A rule raised an exception instead of returning findings.\n\n"
            "Checks: nothing of its own; evaluate() turns any exception of another rule into "
            "this finding, so one faulty rule or one odd snapshot cannot sink the audit.\n"
            "Why: a rule that did not run is a blind spot in the register, and must show as one.\n"
            "Evidence: the failing rule's code, the exception and the end of its traceback.\n"
            "Remediation: report it; check the failing rule's subject by hand meanwhile."
        ),
    )
)


def rule_failed() -> Rule:
    return REGISTRY[RULE_FAILED_CODE]


@rule(
    "GA001",
    "Host could not be audited",
    category="audit",
    owner=Owner.INFRA,
    severity=Severity.HIGH,
    likelihood=4,
    impact=4,
    remediation=(
        "Make the host reachable for the audit (SSH, inventory address, credentials) or find "
        "why the collector's output was cut short (hung nvidia-smi, full disk), then re-run."
    ),
    references=(refs.SEED_CHECKLIST, "gpuaudit design: partial failure is data"),
    runs_without_data=True,
)
def host_not_audited(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[Finding]:
    """A host in the inventory for which the audit has no data.

    Checks: host status UNREACHABLE (no connection) or COLLECTION_FAILED (the collector's output
    could not be read). No other rule runs on such a host.
    Why: a host missing from the register would read as healthy; an unreachable GPU node is
    also often a node that crashed (seed 000: "Node NotReady").
    Evidence: the status, its detail and any parse errors.
    Remediation: restore access or fix the collection, then audit again.
    """
    if snap.status not in NOT_COLLECTED:
        return
    detail = snap.status_detail or "no detail recorded"
    errors = "; ".join(f"{k}: {v}" for k, v in sorted(snap.parse_errors.items()))
    what = (
        "could not be reached" if snap.status is HostStatus.UNREACHABLE else "gave no usable data"
    )
    yield rule.finding(
        snap,
        f"The host {what}: {detail}." + (f" Parse errors: {errors}." if errors else ""),
        Evidence(
            fact="status",
            actual=snap.status.value,
            expected=HostStatus.OK.value,
            excerpt=errors or section_excerpt(snap, "meta"),
        ),
    )
