"""The pre-check before a host's upgrade and the health gate after it.

A gate is a list of checks, each ``pass``, ``fail``, ``inconclusive`` or ``not_checked``, and
an outcome, in the manner of Argo Rollouts' analysis runs
(https://argo-rollouts.readthedocs.io/en/stable/features/analysis/):

- any check failed → ``fail``: the rollout halts and the host is rolled back;
- else any check inconclusive (the host did not come back in time, data a check needs is
  missing) → ``inconclusive``: the rollout pauses for a person to decide;
- else → ``pass``.

``not_checked`` marks a check that has nothing to look at by design (ECC on GPUs that have it
off, fabric manager on a host that never ran it, free disk that the audit does not collect): it
does not count towards the outcome, and is listed so nobody takes it for checked.

The health gate compares the snapshot taken before the upgrade (the pre-check's) with the one
taken after it: what was healthy before must still be, and nothing new may have gone wrong.
Checks that run on the host (``dcgmi diag``, the site's command) are run by the caller and
passed in as ``extra`` :class:`GateCheck` values.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from typing import TYPE_CHECKING

from gpuaudit.model.snapshot import HostSnapshot
from gpuaudit.rules.base import Finding
from gpuaudit.rules.software import host_driver_version
from gpuaudit.upgrade.gate_checks import (
    driver_check,
    ecc_check,
    fabric_manager_check,
    gpus_check,
    persistence_check,
    row_remap_check,
    xid_check,
)
from gpuaudit.upgrade.gate_types import CheckOutcome, GateCheck, GateOutcome, GateResult, combine
from gpuaudit.upgrade.health import (
    describe_findings,
    driver_problem,
    expected_gpu_count,
    lost_gpus,
    not_collected,
    nvidia_gpus,
    open_critical,
    open_findings,
)

if TYPE_CHECKING:
    from gpuaudit.policy import Policy

__all__ = [
    "CheckOutcome",
    "GateCheck",
    "GateOutcome",
    "GateResult",
    "combine",
    "health_gate",
    "precheck",
]


# --- pre-check ---------------------------------------------------------------------------------


def precheck(
    snapshot: HostSnapshot,
    findings: Sequence[Finding] | None = None,
    *,
    policy: Policy | None = None,
    on: date | None = None,
    expected_gpus: int | None = None,
    extra: Sequence[GateCheck] = (),
) -> GateResult:
    """Whether the host is healthy enough to upgrade, from its audit snapshot.

    Checks: the host was collected; the driver answers; no GPU is lost; no open (unwaived)
    critical finding — from ``findings`` when the caller evaluated the fleet already, else
    ``rules.evaluate([snapshot], policy)``; free disk (``not_checked``: the audit snapshot
    has no disk usage; a caller that measures it passes its own check in ``extra``).
    ``expected_gpus`` defaults to the host's ``expected_gpu_count`` setting.
    """
    missing = not_collected(snapshot)
    if missing:
        return combine([GateCheck("collected", "fail", missing), *extra])
    on = on or date.today()
    if findings is None:
        from gpuaudit.rules import evaluate

        findings = evaluate([snapshot], policy)
    if expected_gpus is None:
        expected_gpus = expected_gpu_count(snapshot, policy)
    status = {"status": snapshot.status.value, "status_detail": snapshot.status_detail}
    checks = [GateCheck("collected", "pass", "the audit collected the host", status)]

    down = driver_problem(snapshot)
    version = host_driver_version(snapshot)
    checks.append(
        GateCheck("driver_answering", "fail", down, status)
        if down
        else GateCheck(
            "driver_answering",
            "pass",
            f"nvidia-smi answers with driver {version}",
            {"driver_version": version},
        )
    )

    listed = len(nvidia_gpus(snapshot))
    lost = lost_gpus(snapshot, expected_gpus) if not down else []
    counts = {"listed": listed, "expected": expected_gpus, "attached": snapshot.attached_gpus}
    if down:
        checks.append(GateCheck("gpus_present", "inconclusive", "no GPU list: " + down, counts))
    elif lost:
        checks.append(GateCheck("gpus_present", "fail", "; ".join(lost), counts))
    else:
        against = f", {expected_gpus} expected" if expected_gpus is not None else ""
        checks.append(GateCheck("gpus_present", "pass", f"{listed} GPUs listed{against}", counts))

    critical = open_critical(findings, snapshot.host, policy, on)
    named = [f.rule if f.gpu is None else f"{f.rule} GPU {f.gpu}" for f in critical]
    codes = {"open_critical": named}
    if critical:
        detail = "open critical findings: " + describe_findings(critical)
        checks.append(GateCheck("critical_findings", "fail", detail, codes))
    else:
        others = len(open_findings(findings, snapshot.host, policy, on))
        detail = f"no open critical finding ({others} open findings of lower severity)"
        checks.append(GateCheck("critical_findings", "pass", detail, codes))

    checks.append(
        GateCheck(
            "free_disk",
            "not_checked",
            "free disk not checked: the audit snapshot has no disk usage",
        )
    )
    return combine([*checks, *extra])


# --- health gate -------------------------------------------------------------------------------


def health_gate(
    before: HostSnapshot,
    after: HostSnapshot | None,
    target_version: str,
    expected_gpus: int | None,
    extra: Sequence[GateCheck] = (),
    *,
    events_since: HostSnapshot | None = None,
) -> GateResult:
    """Whether the host is healthy on ``target_version``: ``after`` against ``before``.

    ``after`` is None when the host did not answer within the gate's wait: inconclusive.
    ``expected_gpus`` None: as many GPUs as ``before`` listed. ``events_since``: the snapshot
    new errors (XIDs, ECC counts, row remaps and retired pages) are counted from, where it is
    not ``before`` (a rollback's re-check: from the failed gate's audit); the GPUs and the
    services are still compared with ``before``.
    """
    since = events_since or before
    if after is None:
        detail = "the host did not answer within the gate's wait: no snapshot after the upgrade"
        return combine([GateCheck("host_returned", "inconclusive", detail), *extra])
    missing = not_collected(after)
    if missing:
        detail = f"the host could not be audited after the upgrade: {missing}"
        return combine([GateCheck("host_returned", "inconclusive", detail), *extra])
    checks = [
        GateCheck("host_returned", "pass", "the host answered and was collected again"),
        driver_check(after, target_version),
        gpus_check(before, after, expected_gpus),
        xid_check(since, after),
        ecc_check(since, after),
        row_remap_check(since, after),
        persistence_check(before, after),
        fabric_manager_check(before, after),
    ]
    return combine([*checks, *extra])
