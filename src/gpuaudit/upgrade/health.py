"""Is a host healthy enough to upgrade, or already out of service: the questions the pre-check
(:func:`gpuaudit.upgrade.gates.precheck`) and the unavailability count
(:func:`gpuaudit.upgrade.plan.already_unavailable`) both ask of an audit snapshot.

Each function answers with the reasons in plain words (an empty list: nothing wrong), so the
plan, the journal and the report can say *why* a host was skipped or counted as unavailable.
The site policy is taken as any object with ``settings_for(snapshot)`` and
``waiver_status(finding, on)`` (a :class:`gpuaudit.policy.Policy`); it is not imported here so
that the policy package can import :mod:`gpuaudit.policy.upgrade` without a cycle.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import date
from typing import TYPE_CHECKING, Any

from gpuaudit.model.pci import nvidia_gpus_on_bus
from gpuaudit.model.snapshot import Gpu, HostSnapshot, HostStatus
from gpuaudit.model.status import NOT_COLLECTED
from gpuaudit.policy.defaults import host_policy
from gpuaudit.rules.base import Finding, Severity
from gpuaudit.rules.software import host_driver_version

if TYPE_CHECKING:
    from gpuaudit.policy import Policy

__all__ = [
    "describe_findings",
    "driver_problem",
    "expected_gpu_count",
    "host_settings",
    "lost_gpus",
    "not_collected",
    "nvidia_gpus",
    "open_critical",
    "open_findings",
]


def host_settings(snapshot: HostSnapshot, policy: Policy | None) -> Mapping[str, Any]:
    """The settings the rules judge ``snapshot`` by (policy layers, then its host data)."""
    if policy is not None:
        return policy.settings_for(snapshot)
    return host_policy(snapshot, None)


def expected_gpu_count(snapshot: HostSnapshot, policy: Policy | None) -> int | None:
    expected = host_settings(snapshot, policy).get("expected_gpu_count")
    if isinstance(expected, int) and not isinstance(expected, bool) and expected > 0:
        return expected
    return None


def nvidia_gpus(snapshot: HostSnapshot) -> tuple[Gpu, ...]:
    return tuple(g for g in snapshot.gpus if g.vendor == "nvidia")


def not_collected(snapshot: HostSnapshot | None) -> str | None:
    """Why the audit has no data about the host (None: it has)."""
    if snapshot is None:
        return "no audit snapshot of the host"
    if snapshot.status in NOT_COLLECTED:
        detail = f": {snapshot.status_detail}" if snapshot.status_detail else ""
        return f"not collected ({snapshot.status.value}){detail}"
    return None


def driver_problem(snapshot: HostSnapshot) -> str | None:
    """Why the NVIDIA driver cannot be taken to answer (None: it answers)."""
    if snapshot.status is HostStatus.DRIVER_NOT_RESPONDING:
        # The status detail says it in full ("nvidia-smi is installed but the driver does not
        # answer (exit status 9): …").
        return snapshot.status_detail or "the NVIDIA driver does not answer"
    if snapshot.status is HostStatus.NO_GPU_TOOLING:
        return snapshot.status_detail or "no GPU tool is installed"
    if snapshot.tools.get("nvidia-smi") is False:
        return "nvidia-smi is not installed, so the driver cannot be asked"
    if host_driver_version(snapshot) is None:
        return "no NVIDIA driver version was reported"
    return None


def lost_gpus(snapshot: HostSnapshot, expected: int | None) -> list[str]:
    """Signs that a GPU the host holds is not usable: erroring, or missing from the driver's
    list against the expected count, the driver's attached count or the PCI bus."""
    listed = nvidia_gpus(snapshot)
    reasons = [
        f"GPU {g.index} answers with an error ({g.status_detail or 'no detail'})"
        for g in listed
        if g.status == "error"
    ]
    if expected is not None and len(snapshot.gpus) < expected:
        reasons.append(f"{len(snapshot.gpus)} of {expected} expected GPUs are listed")
    if snapshot.attached_gpus is not None and snapshot.attached_gpus > len(listed):
        reasons.append(
            f"the driver counts {snapshot.attached_gpus} attached GPUs but lists {len(listed)}"
        )
    on_bus = nvidia_gpus_on_bus(snapshot.sections, snapshot.pci_devices)
    if on_bus is not None and len(on_bus) > len(listed):
        reasons.append(f"lspci shows {len(on_bus)} NVIDIA GPUs, the driver lists {len(listed)}")
    return reasons


def open_findings(
    findings: Iterable[Finding], host: str, policy: Policy | None, on: date
) -> list[Finding]:
    """The host's findings that no waiver in force on ``on`` accepts."""
    mine = [f for f in findings if f.host == host]
    if policy is None:
        return mine
    return [f for f in mine if policy.waiver_status(f, on)[0] != "waived"]


def open_critical(
    findings: Iterable[Finding], host: str, policy: Policy | None, on: date
) -> list[Finding]:
    return [f for f in open_findings(findings, host, policy, on) if f.severity is Severity.CRITICAL]


def describe_findings(findings: Sequence[Finding], limit: int = 3) -> str:
    """'GA402 (fabric manager …), GA101 (…)' for a reason line, the first ``limit`` in full."""
    shown = [f"{f.rule} ({f.title})" for f in findings[:limit]]
    more = f" and {len(findings) - limit} more" if len(findings) > limit else ""
    return ", ".join(shown) + more
