"""GA0xx: the audit itself — hosts that could not be audited, rules that could not run.

Also what the other rules read and why a host may lack it (:func:`section_need`,
:data:`GPU_LIST`, :data:`GPU_TOOL`), and :func:`judge`, which turns what a rule's check gave on
a host into the rule's outcome there: a rule that found nothing passes only where it had the
data to look at.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from gpuaudit.model.snapshot import Gpu, HostSnapshot, HostStatus
from gpuaudit.model.status import NOT_COLLECTED as NOT_COLLECTED
from gpuaudit.rules import refs
from gpuaudit.rules.base import (
    REGISTRY,
    CheckResult,
    Evidence,
    Finding,
    GpuOutcome,
    Need,
    NotEvaluated,
    Outcome,
    Owner,
    Rule,
    RuleContext,
    RuleOutcome,
    Severity,
    register,
    rule,
)
from gpuaudit.rules.evidence import section_excerpt

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
    HostStatus.NOT_AUDITED: (
        "was not audited",
        "The run stopped before it reached the host (interrupted, or pyinfra ended early): "
        "re-run the audit for it (gpuaudit audit INVENTORY --limit HOST).",
    ),
}

# Enough of a tool's error message to recognise it; the snapshot keeps all of it.
_REASON_CHARS = 300
# The sections a GPU list is read from, the vendor tools first.
_GPU_SECTIONS = ("nvidia_smi_xml", "rocm_smi", "amd_smi", "nvml")


def section_problem(snap: HostSnapshot, name: str) -> str | None:
    """Why section ``name`` gave the rules nothing to read; None when it ran and was read."""
    section = snap.sections.get(name)
    if section is None:
        return f"the {name} section was not collected"
    error = snap.parse_errors.get(name)
    if section.rc in (0, None):
        return f"the {name} section could not be read: {_clip(error)}" if error else None
    detail = error or _first_line(section.stderr) or _first_line(section.stdout)
    if not detail.startswith("exit status"):
        detail = f"exit status {section.rc}" + (f": {detail}" if detail else "")
    return f"the {name} section failed: {_clip(detail)}"


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _REASON_CHARS else text[: _REASON_CHARS - 1] + "…"


def section_need(
    name: str, what: str, parsed: Callable[[HostSnapshot], bool] | None = None
) -> Need:
    """The data of one collected section: there when ``parsed`` finds it in the snapshot, or
    when the section ran and was read (and simply held nothing)."""

    def missing(snap: HostSnapshot) -> str | None:
        if parsed is not None and parsed(snap):
            return None
        problem = section_problem(snap, name)
        return None if problem is None else f"no {what}: {problem}"

    return Need(what, missing)


def _no_gpu_tool(snap: HostSnapshot) -> str | None:
    if snap.status is not HostStatus.NO_GPU_TOOLING:
        return None
    return f"no GPU tool: {_clip(snap.status_detail)}" if snap.status_detail else "no GPU tool"


def _gpu_list_missing(snap: HostSnapshot) -> str | None:
    if snap.gpus:
        return None
    no_tool = _no_gpu_tool(snap)
    if no_tool is not None:
        return f"no GPU list ({no_tool})"
    present = [name for name in _GPU_SECTIONS if name in snap.sections]
    problems = {name: p for name in present if (p := section_problem(snap, name))}
    # A tool that is there and failed says more than the ones that are not installed.
    failed = [p for name, p in problems.items() if snap.sections[name].rc != 127]
    if failed:
        return "no GPU list: " + "; ".join(failed)
    if present and len(problems) == len(present):
        return "no GPU list: " + "; ".join(problems.values())
    if present:
        return "no GPU list: the GPU tools answered but listed no GPU"
    return "no GPU list: the snapshot lists no GPU"


# The GPUs and what they reported (nvidia-smi, rocm-smi / amd-smi, NVML).
GPU_LIST = Need("the GPU list", _gpu_list_missing)
# A vendor tool to ask the driver with: without one, whether the driver answers is unknown.
GPU_TOOL = Need("a GPU tool", _no_gpu_tool)
# What the other sections give, each "there" when parsed or when its command answered.
TOOL_LIST = section_need("tools", "tool list", lambda s: bool(s.tools))
PACKAGES = section_need("packages", "package list", lambda s: bool(s.packages))
KERNEL_LOG = section_need("kernel_log", "kernel log", lambda s: bool(s.xid_events))
PREVIOUS_BOOT_LOG = section_need(
    "kernel_log_previous",
    "kernel log of the previous boot",
    lambda s: bool(s.previous_boot_xid_events),
)
SERVICES = section_need("services", "service list", lambda s: bool(s.services))
NVLINK = section_need("nvlink_status", "NVLink state", lambda s: s.nvlink is not None)
SYSCTLS = section_need("sysctl", "sysctl values", lambda s: bool(s.sysctls))
DEVICE_NODES = section_need("device_nodes", "device node list", lambda s: bool(s.device_nodes))
# Only lspci's own answer: an empty listing of a failing lspci is no "no GPU on the bus".
PCI_BUS = section_need("lspci", "PCI bus listing")
DRIVER_MODULE = section_need(
    "driver_proc", "loaded NVIDIA kernel module", lambda s: bool(s.driver_version_proc)
)


# A rule's outcome on a host where it found nothing, the reason, and its GPUs' outcomes.
_Verdict = tuple[Outcome, str, tuple[GpuOutcome, ...]]


def quiet_key(rule: Rule) -> tuple[int, bool]:
    """What a rule's verdict where it found nothing hangs on: its needs (one tuple for equal
    lists, base.rule) and whether it judges GPUs."""
    return id(rule.needs), rule.per_gpu


class HostJudging:
    """What :func:`judge` works out about one host once, for every rule judged on it: the
    host's GPUs in index order, their outcomes where a rule found nothing on any of them, and
    why the host lacks each need asked about (evaluate() keeps one per host)."""

    __slots__ = ("_missing", "_plain", "_quiet", "gpus")

    def __init__(self, snap: HostSnapshot) -> None:
        self.gpus = tuple(sorted(snap.gpus, key=lambda g: g.index))
        self._plain: tuple[GpuOutcome, ...] | None = None
        self._missing: dict[int, tuple[Need, str | None]] = {}
        self._quiet: dict[tuple[int, bool], tuple[tuple[Need, ...], _Verdict]] = {}

    def plain(self) -> tuple[GpuOutcome, ...]:
        """The GPUs' outcomes where a rule had nothing to say of any of them."""
        if self._plain is None:
            self._plain = tuple(_plain_gpu_outcome(gpu) for gpu in self.gpus)
        return self._plain

    def missing(self, need: Need, snap: HostSnapshot) -> str | None:
        known = self._missing.get(id(need))
        if known is None:
            known = self._missing[id(need)] = (need, need.missing(snap))
        return known[1]

    def quiet(self, key: tuple[int, bool], rule: Rule, snap: HostSnapshot) -> _Verdict:
        """The verdict of a rule whose check found nothing and skipped nothing here: it hangs
        only on the rule's needs and whether it judges GPUs, so rules alike share it (``key``:
        :func:`quiet_key` of the rule)."""
        known = self._quiet.get(key)
        if known is None or known[0] is not rule.needs:
            unjudged = [
                (n.outcome, m) for n in rule.needs if (m := self.missing(n, snap)) is not None
            ]
            verdict = _verdict(unjudged, self.plain() if rule.per_gpu else ())
            known = self._quiet[key] = (rule.needs, verdict)
        return known[1]


def judge(
    rule: Rule,
    snap: HostSnapshot,
    results: Sequence[CheckResult],
    failure: Finding | None = None,
    host: HostJudging | None = None,
) -> RuleOutcome:
    """The rule's outcome on ``snap`` from what its check gave for that host (``failure``: the
    GA000 finding when the check raised; ``host``: what was worked out about the host already,
    for the next rule judged there)."""
    if failure is not None:
        return RuleOutcome(
            rule.code,
            snap.host,
            Outcome.NOT_EVALUATED,
            f"the rule failed ({failure.rule}): {failure.evidence.actual}",
            per_gpu=rule.per_gpu,
        )
    if host is None:
        host = HostJudging(snap)
    if not results:
        # The common case, made short: the check found nothing and skipped nothing.
        outcome, why, gpus = host.quiet(quiet_key(rule), rule, snap)
        return RuleOutcome(rule.code, snap.host, outcome, why, 0, gpus, rule.per_gpu)
    findings = [r for r in results if isinstance(r, Finding)]
    skipped = [r for r in results if isinstance(r, NotEvaluated)]
    gpus = _gpu_outcomes(host, findings, skipped) if rule.per_gpu else ()
    if findings:
        return RuleOutcome(
            rule.code, snap.host, Outcome.FAIL, "", len(findings), gpus, rule.per_gpu
        )
    unjudged = [(n.outcome, m) for n in rule.needs if (m := host.missing(n, snap)) is not None]
    unjudged += [(s.outcome, s.reason) for s in skipped if s.gpu is None]
    outcome, why, gpus = _verdict(unjudged, gpus)
    return RuleOutcome(rule.code, snap.host, outcome, why, 0, gpus, rule.per_gpu)


def _verdict(unjudged: list[tuple[Outcome, str]], gpus: tuple[GpuOutcome, ...]) -> _Verdict:
    """The outcome of a rule that found nothing on a host: passed, or why it did not judge
    (``unjudged``: the needs the host lacks and what the check skipped, with their outcomes)."""
    gpu_gaps = any(g.outcome is Outcome.NOT_EVALUATED for g in gpus)
    if not unjudged and not gpu_gaps:
        return Outcome.PASS, "", gpus
    kinds = {outcome for outcome, _ in unjudged}
    if len(kinds) == 1 and kinds != {Outcome.NOT_EVALUATED} and not gpu_gaps:
        # Off by the site's policy, or nothing to check on this host: said so, never a pass.
        return kinds.pop(), "; ".join(dict.fromkeys(reason for _, reason in unjudged)), gpus
    reasons = [reason for _, reason in unjudged]
    reasons += [f"GPU {g.gpu}: {g.reason}" for g in gpus if g.outcome is Outcome.NOT_EVALUATED]
    if reasons:
        return Outcome.NOT_EVALUATED, "; ".join(dict.fromkeys(reasons)), gpus
    return Outcome.PASS, "", gpus


def _gpu_outcomes(
    host: HostJudging, findings: Sequence[Finding], skipped: Sequence[NotEvaluated]
) -> tuple[GpuOutcome, ...]:
    failed = {f.gpu for f in findings if f.gpu is not None}
    not_judged = {s.gpu: s.reason for s in skipped if s.gpu is not None}
    if not failed and not not_judged:
        return host.plain()
    outcomes = []
    for gpu in host.gpus:
        if gpu.index in failed:
            outcomes.append(GpuOutcome(gpu.index, Outcome.FAIL))
        elif gpu.index in not_judged:
            outcomes.append(GpuOutcome(gpu.index, Outcome.NOT_EVALUATED, not_judged[gpu.index]))
        else:
            outcomes.append(_plain_gpu_outcome(gpu))
    return tuple(outcomes)


def _plain_gpu_outcome(gpu: Gpu) -> GpuOutcome:
    if gpu.status == "error":
        # A GPU that answers with an error reports no values to judge it by.
        detail = f": {_clip(gpu.status_detail)}" if gpu.status_detail else ""
        return GpuOutcome(gpu.index, Outcome.NOT_EVALUATED, f"it answers with an error{detail}")
    return GpuOutcome(gpu.index, Outcome.PASS)


def not_audited(rule: Rule, snap: HostSnapshot) -> RuleOutcome:
    """The outcome of a rule that did not run because the host gave no data."""
    detail = f": {_clip(snap.status_detail)}" if snap.status_detail else ""
    reason = f"the host was not audited ({snap.status.value}{detail})"
    return RuleOutcome(rule.code, snap.host, Outcome.NOT_EVALUATED, reason, per_gpu=rule.per_gpu)


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
    its host key changed), TIMED_OUT (the collection did not finish within GPUAUDIT_TIMEOUT),
    COLLECTION_FAILED (the collector's output could not be read) or NOT_AUDITED (the run was
    interrupted, or pyinfra ended, before the host was collected). No other rule runs on such a
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
