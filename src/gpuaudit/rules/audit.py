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

NOT_COLLECTED = frozenset(
    {
        HostStatus.UNREACHABLE,
        HostStatus.AUTH_FAILED,
        HostStatus.TIMED_OUT,
        HostStatus.COLLECTION_FAILED,
    }
)

# What GA001 says of each status it reports, and what to do about it.
_NOT_AUDITED: dict[HostStatus, tuple[str, str]] = {
    HostStatus.UNREACHABLE: (
        "could not be reached",
        "Check that the host is up and that the inventory address and SSH port are right and "
        "reachable from the audit machine (DNS, firewall, bastion), then re-run the audit.",
    ),
    HostStatus.AUTH_FAILED: (
        "refused the audit's login",
        "Check the credentials the inventory gives for the host (ssh_user, ssh_key, its "
        "passphrase) and that the key is in the user's authorized_keys there; if the host key "
        "changed (reinstalled host), verify it out of band and update known_hosts.",
    ),
    HostStatus.TIMED_OUT: (
        "did not finish its collection in time",
        "Run the collector by hand on the host (gpuaudit collect-script > collect.sh, then "
        "sh -x collect.sh there) to see which command hangs: a wedged driver, a hung NFS mount "
        "or a stuck lspci usually needs a reboot. Raise GPUAUDIT_TIMEOUT only if the host is "
        "merely slow.",
    ),
    HostStatus.COLLECTION_FAILED: (
        "gave no usable data",
        "Find why the collector's output was cut short or unreadable (collector killed, full "
        "disk, a shell other than POSIX sh), then re-run the audit.",
    ),
}

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
        references=(refs.DOCS_RULE_FAILURE,),
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
        "Make the host reachable for the audit (network, inventory address, credentials) or "
        "find why the collection failed or hung, then re-run; each finding says which."
    ),
    references=(refs.DOCS_PARTIAL_FAILURE, refs.GUIDE_FIRST_CHECKS),
    runs_without_data=True,
)
def host_not_audited(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[Finding]:
    """A host in the inventory for which the audit has no data.

    Checks: host status UNREACHABLE (no connection), AUTH_FAILED (the host refused the login or
    its host key changed), TIMED_OUT (the collection did not finish within GPUAUDIT_TIMEOUT) or
    COLLECTION_FAILED (the collector's output could not be read). No other rule runs on such a
    host.
    Why: a host missing from the register would read as healthy; an unreachable or hanging GPU
    node is also often a node that crashed or whose driver is wedged (in Kubernetes, a node
    that is NotReady).
    Evidence: the status, its detail and any parse errors.
    Remediation: depends on the status: the network, the credentials, the command that hangs,
    or the collector's output; each finding gives its own.
    """
    if snap.status not in NOT_COLLECTED:
        return
    detail = snap.status_detail or "no detail recorded"
    errors = "; ".join(f"{k}: {v}" for k, v in sorted(snap.parse_errors.items()))
    what, remediation = _NOT_AUDITED[snap.status]
    yield rule.finding(
        snap,
        f"The host {what}: {detail}." + (f" Parse errors: {errors}." if errors else ""),
        Evidence(
            fact="status",
            actual=snap.status.value,
            expected=HostStatus.OK.value,
            excerpt=errors or section_excerpt(snap, "meta"),
        ),
        remediation=remediation,
    )


# Sections whose failure another rule already reports, by the host status that explains it.
_REPORTED_ELSEWHERE: dict[HostStatus, frozenset[str]] = {
    # GA101: nothing reaches the driver, so every section that asks it (nvidia-smi, NVML)
    # failed with it.
    HostStatus.DRIVER_NOT_RESPONDING: frozenset(
        (
            "nvidia_smi_xml",
            "nvml",
            "nvidia_topo",
            "mig_gi",
            "mig_ci",
            "nvlink_status",
            "nvlink_errors",
        )
    ),
}
# Sections whose command failing is itself the finding, not a gap: no kernel log to read
# (GA105), no /proc/driver/nvidia/version because no NVIDIA module is loaded (GA101 says so
# where a driver is expected; elsewhere it is simply a host without one).
_FAILURE_IS_DATA = ("kernel_log", "driver_proc")


def _failed(snap: HostSnapshot, name: str) -> bool:
    section = snap.sections.get(name)
    return section is None or section.rc not in (0, None)


@rule(
    "GA002",
    "Collected data incomplete",
    category="audit",
    owner=Owner.INFRA,
    severity=Severity.MEDIUM,
    likelihood=3,
    impact=3,
    remediation=(
        "Run the failing command on the host by hand (the section names it) and compare with "
        "the raw text in the host's snapshot; re-run the audit once the host answers cleanly. "
        "Until then, treat what the section covers as unaudited on this host."
    ),
    references=(refs.DOCS_PARTIAL_FAILURE, refs.NVIDIA_SMI),
)
def data_incomplete(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[Finding]:
    """The host was collected, but some of what it printed could not be read.

    Checks: the snapshot's parse errors: a section that did not parse (nvidia-smi XML cut
    short, or refused because it declares entities), collector output that ended early, output
    that was not UTF-8. Failures that are findings of their own are left out: a kernel log that
    cannot be read (GA105), a missing /proc/driver/nvidia/version (no NVIDIA module), and
    nvidia-smi's and NVML's sections on a host whose driver does not answer (GA101).
    Why: the rules can only judge what was read; a section that did not parse hides its GPUs,
    MIG layout or topology from every other rule, and the register would look cleaner than the
    host is.
    Evidence: each unreadable section and why.
    Remediation: re-run the failing command by hand, fix what garbles it, and audit again.
    """
    skipped = _REPORTED_ELSEWHERE.get(snap.status, frozenset()) | {
        name for name in _FAILURE_IS_DATA if _failed(snap, name)
    }
    problems = {k: v for k, v in sorted(snap.parse_errors.items()) if k not in skipped}
    if not problems:
        return
    listed = "; ".join(f"{name}: {why}" for name, why in problems.items())
    yield rule.finding(
        snap,
        f"Part of what the host printed could not be read ({', '.join(problems)}): {listed}.",
        Evidence(
            fact="parse_errors",
            actual=problems,
            expected={},
            excerpt="\n".join(
                section_excerpt(snap, name, 4) for name in problems if name in snap.sections
            ),
        ),
    )
