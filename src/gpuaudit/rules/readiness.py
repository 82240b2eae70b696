"""GA931-GA937: what DCGM's own active diagnostic (``dcgmi diag -r LEVEL``) found.

The audit runs the diagnostic only where the site policy asks for it (``dcgm_diag.level``,
policy/diag.py), DCGM is installed and no compute process runs on the host's GPUs
(docs/field-guide/dcgm-diag.md). DCGM numbers GPUs as NVML does, which is nvidia-smi's index
order: a result for DCGM GPU 3 is reported against the snapshot's GPU 3.

Hosts the audit ran no diagnostic on have these rules not evaluated, with the reason: no
diagnostic asked for, a busy GPU, no dcgmi, or a run that gave no results. Silence is never a
pass: a diagnostic that did not run proved nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from gpuaudit.model.snapshot import (
    DcgmDiag,
    DcgmDiagMessage,
    DcgmDiagResult,
    DcgmDiagTest,
    DiagRun,
    DiagStatus,
    HostSnapshot,
)
from gpuaudit.policy.diag import diag_request
from gpuaudit.rules import refs
from gpuaudit.rules.base import (
    CheckResult,
    Evidence,
    Need,
    NotEvaluated,
    Outcome,
    Owner,
    Rule,
    RuleContext,
    Severity,
    rule,
)
from gpuaudit.rules.evidence import section_excerpt

CATEGORY = "readiness"
SECTION = "dcgm_diag"

# Failures of these tests are the hardware's: memory, the PCIe / NVLink fabric, retired pages.
_HARDWARE_WORDS = ("memory", "memtest", "pcie", "nvlink", "nvbandwidth", "page retirement")
# Failures of these are the GPU under load: power, thermals, compute (the EUD, the stress
# tests, DCGM's "Diagnostic" GEMM test).
_STRESS_WORDS = ("stress", "power", "diagnostic", "eud", "pulse", "sm ")
# DCGM_FR_EC_* categories of the hardware (DCGM diagnostic errors reference): thermal,
# memory, NVLink, NVSwitch, PCIe, power, other hardware.
_HARDWARE_CATEGORIES = frozenset({9, 10, 11, 12, 13, 14, 15})
# Tests DCGM skips on most hosts by design (the EUD needs a separate package).
_USUALLY_SKIPPED = ("eud",)


def _no_diag(snap: HostSnapshot) -> str | None:
    if snap.dcgm_diag is not None:
        return None
    return "the audit ran no dcgmi diag on this host (the policy's dcgm_diag.level is 0)"


DIAG = Need("the DCGM diagnostic", _no_diag, Outcome.DISABLED)


def _not_run(diag: DcgmDiag) -> NotEvaluated | None:
    """Why the diagnostic gave no results to judge, or None when it ran."""
    if diag.run is DiagRun.RAN:
        return None
    why = {
        DiagRun.BUSY: "it was not run: compute processes were running on the GPUs",
        DiagRun.NOT_CHECKED: "it was not run: the GPUs could not be shown to be idle",
        DiagRun.MISSING: "dcgmi is not installed",
        DiagRun.FAILED: "dcgmi diag gave no results",
    }[diag.run]
    return NotEvaluated(f"DCGM diagnostic level {diag.level}: {why} ({diag.reason})")


def test_label(test: DcgmDiagTest) -> str:
    return f"{test.category} / {test.name}" if test.category else test.name


def failure_severity(test: DcgmDiagTest, messages: Iterable[DcgmDiagMessage]) -> Severity:
    """High for the hardware (memory, PCIe, NVLink, retired pages, or a DCGM error category of
    the hardware), medium for the stress tests and for the software and deployment checks."""
    name = f" {test.name.lower()} "
    if any(word in name for word in _HARDWARE_WORDS):
        return Severity.HIGH
    if any(m.error_category in _HARDWARE_CATEGORIES for m in messages):
        return Severity.HIGH
    return Severity.MEDIUM


def _targets(result: DcgmDiagResult) -> dict[int | None, tuple[DcgmDiagMessage, ...]]:
    """The GPUs a result is about, each with its messages; None: the result names no GPU."""
    if result.gpus:
        return {gpu: result.warnings or result.info for gpu in result.gpus}
    named: dict[int | None, list[DcgmDiagMessage]] = {}
    for item in result.warnings:
        named.setdefault(item.gpu, []).append(item)
    if not named:
        return {None: result.info}
    return {gpu: tuple(items) for gpu, items in named.items()}


def _said(messages: Iterable[DcgmDiagMessage], limit: int = 2) -> str:
    texts = [m.text for m in messages]
    if not texts:
        return "DCGM gave no message"
    more = f" (+{len(texts) - limit} more)" if len(texts) > limit else ""
    return "; ".join(t[:300] for t in texts[:limit]) + more


def _codes(messages: Iterable[DcgmDiagMessage]) -> list[int]:
    return sorted({m.error_id for m in messages if m.error_id is not None})


def _evidence(snap: HostSnapshot, diag: DcgmDiag, test: DcgmDiagTest, result: DcgmDiagResult,
              messages: tuple[DcgmDiagMessage, ...], expected: str) -> Evidence:  # fmt: skip
    actual: dict[str, object] = {
        "test": test_label(test),
        "status": result.raw_status or result.status.value,
        "level": diag.level,
    }
    if _codes(messages):
        actual["dcgm_error_ids"] = _codes(messages)
    return Evidence(
        fact=f"dcgm_diag.tests[{test.name}]",
        actual=actual,
        expected=expected,
        excerpt="\n".join(m.text for m in messages[:4]) or section_excerpt(snap, SECTION),
    )


def _results_with(
    rule: Rule, snap: HostSnapshot, status: DiagStatus, verb: str
) -> Iterator[CheckResult]:
    """A finding for each result of the host's diagnostic with ``status``, per GPU where DCGM
    names one; what made the diagnostic give no results, when it gave none."""
    diag = snap.dcgm_diag
    if diag is None:
        return  # not evaluated: the DIAG need says why
    skipped = _not_run(diag)
    if skipped is not None:
        yield skipped
        return
    for test in diag.tests:
        for result in test.results:
            if result.status is not status:
                continue
            for gpu, messages in _targets(result).items():
                where = f"GPU {gpu}" if gpu is not None else "the host"
                yield rule.finding(
                    snap,
                    f"DCGM diagnostic level {diag.level} {verb} {test_label(test)} on "
                    f"{where}: {_said(messages)}",
                    _evidence(snap, diag, test, result, messages, "Pass"),
                    gpu=gpu,
                    # A failure's severity is its test's; a warning keeps the rule's own.
                    severity=failure_severity(test, messages)
                    if status is DiagStatus.FAIL
                    else None,
                )


@rule(
    "GA931",
    "DCGM diagnostic test failed",
    category=CATEGORY,
    needs=(DIAG,),
    per_gpu=True,
    owner=Owner.INFRA,
    severity=Severity.HIGH,
    likelihood=4,
    impact=4,
    remediation=(
        "Drain the host, then read the failed test's message and DCGM error code against "
        "NVIDIA's diagnostic errors reference: a memory, PCIe or NVLink failure that repeats "
        "after a GPU reset and a rerun of the same level is a hardware fault for the vendor "
        "(RMA, with the dcgmi output and nvidia-bug-report.sh); a deployment or CUDA failure "
        "is the host's software (driver, fabric manager, persistence) to fix first."
    ),
    references=(refs.DCGM_DIAGNOSTICS, refs.DCGM_DIAG_ERRORS, refs.GUIDE_DIAG_FAILURES),
)
def diag_failed(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[CheckResult]:
    """A test of the audit's dcgmi diag failed.

    Checks: every result with status Fail, per GPU where DCGM names the GPU (its result, or
    the "GPU N" its warning starts with), else once for the host. Severity by test: high for
    memory, PCIe, NVLink, page retirement / row remap and any failure DCGM files under a
    hardware error category; medium for the stress tests and the deployment checks.
    Why: DCGM's diagnostic exercises what passive counters cannot show: a GPU whose memory
    fails a pattern test, whose PCIe link cannot reach its bandwidth, or that cannot start a
    CUDA context will fail jobs, not just log errors.
    Evidence: the test, its status, the diagnostic level, DCGM's warning text and error ids.
    Remediation: drain; rerun after a reset; RMA on a hardware failure that repeats.
    """
    yield from _results_with(rule, snap, DiagStatus.FAIL, "failed test")


@rule(
    "GA932",
    "DCGM diagnostic warning",
    category=CATEGORY,
    needs=(DIAG,),
    per_gpu=True,
    owner=Owner.INFRA,
    severity=Severity.MEDIUM,
    likelihood=3,
    impact=2,
    remediation=(
        "Read DCGM's warning: most are settings DCGM wants changed before it trusts the GPU "
        "(persistence mode, ECC off, clocks throttled during the test); fix the setting and "
        "rerun the diagnostic."
    ),
    references=(refs.DCGM_DIAGNOSTICS, refs.DCGM_DIAG_ERRORS, refs.GUIDE_DIAG_FAILURES),
)
def diag_warned(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[CheckResult]:
    """A test of the audit's dcgmi diag ended with status Warn.

    Checks: every result with status Warn, per GPU where DCGM names it (failures are GA931's).
    Why: a warning is DCGM saying the GPU passed under conditions it does not trust (ECC off,
    throttled clocks, persistence mode off): the next run, or the next job, may not.
    Evidence: the test, its status, DCGM's warning text and error ids.
    Remediation: fix what the warning names and rerun the diagnostic.
    """
    yield from _results_with(rule, snap, DiagStatus.WARN, "warned in test")


@rule(
    "GA933",
    "DCGM diagnostic not run: GPUs busy",
    category=CATEGORY,
    needs=(DIAG,),
    owner=Owner.INFRA,
    severity=Severity.INFO,
    likelihood=2,
    impact=1,
    remediation=(
        "Nothing to fix on the host: run the diagnostic when it is drained (a maintenance "
        "window, the staged upgrade's gate), or audit it again when its jobs have ended."
    ),
    references=(refs.GUIDE_DIAG_BUSY, refs.DCGM_DIAGNOSTICS),
)
def diag_busy(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[CheckResult]:
    """The diagnostic the policy asked for was not run, because the GPUs were not idle.

    Checks: the collector found compute processes on the GPUs (nvidia-smi
    --query-compute-apps), or could not show that there were none (nvidia-smi missing or
    failing); it then ran nothing.
    Why: the diagnostic loads every GPU to its limits; on a GPU that runs a job it would slow
    or fail the job, and its results would be wrong (memory and stress tests need the whole
    GPU). Not running it is the audit keeping its promise to be read-only; the host's
    readiness by DCGM is unknown until it runs.
    Evidence: the processes found, or why the GPUs' idleness was unknown.
    Remediation: run it when the host is drained.
    """
    diag = snap.dcgm_diag
    if diag is None or diag.run not in (DiagRun.BUSY, DiagRun.NOT_CHECKED):
        return
    pids = ", ".join(str(p) for p in diag.busy_pids) or "none listed"
    yield rule.finding(
        snap,
        f"DCGM diagnostic level {diag.level} was not run: {diag.reason} "
        f"(compute processes: {pids}).",
        Evidence(
            fact="dcgm_diag.run",
            actual={"run": diag.run.value, "busy_pids": list(diag.busy_pids)},
            expected="ran on idle GPUs",
            excerpt=section_excerpt(snap, SECTION),
        ),
    )


@rule(
    "GA934",
    "DCGM diagnostic asked for, dcgmi missing",
    category=CATEGORY,
    needs=(DIAG,),
    owner=Owner.INFRA,
    severity=Severity.MEDIUM,
    likelihood=3,
    impact=2,
    remediation=(
        "Install DCGM (the datacenter-gpu-manager package of NVIDIA's repository, matching the "
        "driver's CUDA major version) and enable nvidia-dcgm, or set dcgm_diag.level: 0 for "
        "hosts that will never have it."
    ),
    references=(refs.DCGM_GUIDE, refs.GUIDE_DIAG_SETUP),
)
def diag_missing(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[CheckResult]:
    """The policy asks for a DCGM diagnostic on a host that has no dcgmi.

    Checks: the dcgm_diag section's exit status 127 (command not found).
    Why: the site's readiness check cannot run there, so the host is judged by passive
    counters only; the same host also lacks DCGM's health watches and dcgm-exporter's source.
    Evidence: the collector's "dcgmi: command not found".
    Remediation: install DCGM, or stop asking for the diagnostic on such hosts.
    """
    diag = snap.dcgm_diag
    if diag is None or diag.run is not DiagRun.MISSING:
        return
    yield rule.finding(
        snap,
        "The policy asks for a DCGM diagnostic, but dcgmi is not installed on the host.",
        Evidence(
            fact="dcgm_diag.run",
            actual=diag.run.value,
            expected="dcgmi installed",
            excerpt=section_excerpt(snap, SECTION),
        ),
    )


@rule(
    "GA935",
    "DCGM diagnostic failed to run",
    category=CATEGORY,
    needs=(DIAG,),
    owner=Owner.INFRA,
    severity=Severity.MEDIUM,
    likelihood=3,
    impact=3,
    remediation=(
        "Start the host engine (systemctl start nvidia-dcgm), check that its version matches "
        "the driver and that the diagnostic's plugins are installed (datacenter-gpu-manager "
        "config packages), then rerun dcgmi diag by hand. A diagnostic stopped at its time "
        "limit on an idle host points at a GPU that hangs under load: drain it."
    ),
    references=(refs.GUIDE_DIAG_SETUP, refs.DCGM_DIAGNOSTICS),
)
def diag_broken(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[CheckResult]:
    """dcgmi diag ran but gave no test results.

    Checks: the section's state: dcgmi answered with an error, printed nothing readable, or
    ran past its time limit (exit 124).
    Why: the host engine not running, a DCGM that does not match the driver, or missing
    diagnostic plugins all leave the site's readiness check silently absent; a diagnostic
    that hangs on an idle GPU is itself a sign of a sick GPU.
    Evidence: dcgmi's exit status and first line of output.
    Remediation: fix DCGM's install or host engine; drain a host whose diagnostic hangs.
    """
    diag = snap.dcgm_diag
    if diag is None or diag.run is not DiagRun.FAILED:
        return
    yield rule.finding(
        snap,
        f"DCGM diagnostic level {diag.level} gave no results: {diag.reason}",
        Evidence(
            fact="dcgm_diag.reason",
            actual={"rc": diag.rc, "reason": diag.reason},
            expected="test results",
            excerpt=section_excerpt(snap, SECTION),
        ),
        severity=Severity.HIGH if diag.rc == 124 else None,
    )


@rule(
    "GA936",
    "DCGM diagnostic asked for, not run",
    category=CATEGORY,
    owner=Owner.INFRA,
    severity=Severity.LOW,
    likelihood=2,
    impact=2,
    remediation=(
        "For level 2 or 3, set allow_long: true beside the level in the policy (the host data "
        "that asked for it bypasses the policy file's check); otherwise audit the host with "
        "this gpuaudit's collector, which runs the diagnostic the policy asks for."
    ),
    references=(refs.GUIDE_DIAG_LEVELS,),
)
def diag_not_collected(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[CheckResult]:
    """The host's settings ask for a DCGM diagnostic, but the audit ran none.

    Checks: the resolved ``dcgm_diag`` setting names a level above 0 while the snapshot has
    no diagnostic: a level 2 or 3 without ``allow_long: true`` (set in host data, which the
    policy file's check does not see), or a bundle from a collector run without the setting
    (an offline bundle, an older gpuaudit).
    Why: the register would otherwise show the host as if the site's readiness check had
    nothing to say about it.
    Evidence: the setting and why no diagnostic ran.
    Remediation: opt in to the long level beside it, or collect with the setting.
    """
    if snap.dcgm_diag is not None:
        return
    request = diag_request(ctx.settings_for(snap))
    if not request.asked:
        return
    why = request.refused or "the collector ran no diagnostic (a bundle collected without it)"
    yield rule.finding(
        snap,
        f"The settings ask for DCGM diagnostic level {request.asked}, but none was run: {why}",
        Evidence(
            fact="settings.dcgm_diag",
            actual=ctx.settings_for(snap).get("dcgm_diag"),
            expected=f"a dcgm_diag section of level {request.asked}",
        ),
    )


@rule(
    "GA937",
    "DCGM diagnostic skipped tests",
    category=CATEGORY,
    needs=(DIAG,),
    owner=Owner.INFRA,
    severity=Severity.LOW,
    likelihood=3,
    impact=2,
    remediation=(
        "Read why DCGM skipped each test (its warning): ECC disabled, a test not allowed on "
        "this SKU (the diag-skus configuration), a plugin missing; fix that and rerun, or "
        "accept that the level did not cover it."
    ),
    references=(refs.GUIDE_DIAG_FAILURES, refs.DCGM_DIAGNOSTICS),
)
def diag_skipped(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[CheckResult]:
    """Tests of the audit's dcgmi diag were skipped (status Skip), so the level covered less
    than it says.

    Checks: results with status Skip, except DCGM's EUD test (skipped wherever its separate
    package is not installed), listed once per host with DCGM's reasons.
    Why: a diagnostic whose memory or PCIe test was skipped (ECC off, an unknown SKU) reads
    as passed when it tested nothing that matters.
    Evidence: the skipped tests and GPUs, with DCGM's warning where it gave one.
    Remediation: remove the cause and rerun, or accept the narrower coverage.
    """
    diag = snap.dcgm_diag
    if diag is None:
        return  # not evaluated: the DIAG need says why
    skipped = _not_run(diag)
    if skipped is not None:
        yield skipped
        return
    lines = []
    for test in diag.tests:
        if any(word in test.name.lower() for word in _USUALLY_SKIPPED):
            continue
        for result in test.results:
            if result.status is DiagStatus.SKIP:
                gpus = ",".join(map(str, result.gpus)) or "all"
                lines.append(f"{test_label(test)} (GPU {gpus}): {_said(result.warnings, 1)}")
    if not lines:
        return
    yield rule.finding(
        snap,
        f"DCGM diagnostic level {diag.level} skipped {len(lines)} test result(s): "
        + "; ".join(lines[:4])
        + (f" (+{len(lines) - 4} more)" if len(lines) > 4 else ""),
        Evidence(
            fact="dcgm_diag.tests",
            actual=lines,
            expected="every test of the level run",
            excerpt=section_excerpt(snap, SECTION),
        ),
    )
