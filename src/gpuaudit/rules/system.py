"""GA6xx: the operating system around the GPUs — kernel tunables and device permissions."""

from __future__ import annotations

from collections.abc import Iterable

from gpuaudit.model.snapshot import HostSnapshot
from gpuaudit.rules import refs
from gpuaudit.rules.audit import DEVICE_NODES, SYSCTLS
from gpuaudit.rules.base import Evidence, Finding, Owner, Rule, RuleContext, Severity, rule
from gpuaudit.rules.evidence import section_excerpt


def _sysctl_line(snap: HostSnapshot, key: str) -> str:
    section = snap.sections.get("sysctl")
    if section is None:
        return ""
    return next(
        (line.strip() for line in section.stdout.splitlines() if line.strip().startswith(key)), ""
    )


def _as_int(raw: str | None) -> int | None:
    # Multi-value tunables (tcp_rmem "4096 131072 6291456") are not in the baseline; the first
    # field is the value for the single-valued ones it holds.
    if raw is None or not raw.split():
        return None
    try:
        return int(raw.split()[0])
    except ValueError:
        return None


@rule(
    "GA601",
    "Kernel network buffer sysctl below baseline",
    category="system",
    needs=(SYSCTLS,),
    owner=Owner.INFRA,
    severity=Severity.MEDIUM,
    likelihood=3,
    impact=2,
    remediation=(
        "Run gpuaudit.operations.sysctl.baseline (deploys/remediate.py): it writes the site's "
        "sysctl_baseline as one drop-in file, /etc/sysctl.d/90-gpuaudit.conf (e.g. "
        "`net.core.rmem_max = 134217728`), replaced whole, sets the running values below it "
        "(never lowering a higher one) and reports any later drop-in or /etc/sysctl.conf line "
        "that sets a value below it."
    ),
    operation="gpuaudit.operations.sysctl.baseline",
    references=(
        refs.GUIDE_TCP_BUFFERS,
        refs.GUIDE_NETWORK_BOUND,
        refs.KERNEL_NET_SYSCTL,
        refs.KERNEL_IP_SYSCTL,
    ),
)
def sysctl_baseline(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[Finding]:
    """A kernel tunable in the policy's ``sysctl_baseline`` is below its minimum or unreadable.

    Checks: each key of ``sysctl_baseline`` (default net.core.rmem_max and net.core.wmem_max,
    134217728 = 128 MiB) is at least the baseline. A value that was not
    collected or is not a number is a low-severity "could not read" finding.
    Why: with the distribution's default socket buffer limits, large inference payloads and
    multi-node traffic are throttled by the kernel, not the network: a network-bound
    inference service shows high latency while its GPUs are under half busy.
    Evidence: the value read from /proc/sys and the baseline.
    Remediation: a drop-in in /etc/sysctl.d/ (not an append to /etc/sysctl.conf).
    """
    baseline = ctx.settings_for(snap).get("sysctl_baseline") or {}
    for key, minimum in sorted(baseline.items()):
        raw = snap.sysctls.get(key)
        value = _as_int(raw)
        if value is not None and value >= int(minimum):
            continue
        unreadable = value is None
        message = (
            f"Could not read {key} (value: {raw!r}); baseline is {minimum}."
            if unreadable
            else f"{key} is {value}, below the baseline {minimum}."
        )
        yield rule.finding(
            snap,
            message,
            Evidence(
                fact=f"sysctls[{key}]",
                actual=raw if unreadable else value,
                expected=f">= {minimum}",
                excerpt=_sysctl_line(snap, key),
            ),
            severity=Severity.LOW if unreadable else None,
        )


@rule(
    "GA602",
    "World-writable GPU device nodes",
    category="system",
    needs=(DEVICE_NODES,),
    owner=Owner.INFRA,
    severity=Severity.LOW,
    likelihood=3,
    impact=3,
    remediation=(
        "On shared hosts restrict the nodes to a group: options nvidia NVreg_DeviceFileUID=0 "
        "NVreg_DeviceFileGID=<gpu group> NVreg_DeviceFileMode=0660 in /etc/modprobe.d/, reload "
        "the driver, and add the users (or the container runtime) to that group. Single-tenant "
        "sites can accept the driver default with world_writable_device_nodes_allowed: true."
    ),
    references=(refs.GUIDE_DEVICE_PERMISSIONS, refs.NVIDIA_SMI),
)
def world_writable_nodes(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[Finding]:
    """/dev/nvidia* device nodes any local user can write.

    Checks: the mode of every /dev/nvidia* node; one finding per host listing the
    world-writable ones. Silent when policy ``world_writable_device_nodes_allowed`` is true.
    Why: write access to the device nodes is full access to every GPU: any local account or
    container that sees them can use, starve or probe the GPUs outside the scheduler, and each
    driver local-privilege-escalation advisory is reachable from it.
    0666 is the driver's default, so most hosts have it unless the site hardened it.
    Evidence: the nodes with their mode, owner and group.
    Remediation: driver module options that make the nodes 0660 for a GPU group.
    """
    if ctx.settings_for(snap).get("world_writable_device_nodes_allowed"):
        return
    nodes = [n for n in snap.device_nodes if "/dev/nvidia" in n.path and n.world_writable]
    if not nodes:
        return
    listing = ", ".join(f"{n.path} {n.mode}" for n in nodes[:8])
    more = f" and {len(nodes) - 8} more" if len(nodes) > 8 else ""
    yield rule.finding(
        snap,
        f"{len(nodes)} GPU device nodes are world-writable: {listing}{more}.",
        Evidence(
            fact="device_nodes",
            actual={n.path: n.mode for n in nodes},
            expected="mode without the world-write bit (e.g. 660)",
            excerpt=section_excerpt(snap, "device_nodes"),
        ),
    )
