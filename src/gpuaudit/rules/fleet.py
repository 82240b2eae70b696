"""GA7xx: consistency across the fleet — hosts that should match and do not."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gpuaudit.model.snapshot import HostSnapshot
from gpuaudit.rules import refs
from gpuaudit.rules.audit import NOT_COLLECTED
from gpuaudit.rules.base import Evidence, Finding, Owner, Rule, RuleContext, Severity, rule
from gpuaudit.rules.software import host_driver_version

_MAX_NAMES = 10


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else -1 for p in version.split("."))


def _names(snaps: Sequence[HostSnapshot]) -> str:
    hosts = sorted(s.host for s in snaps)
    extra = f", … {len(hosts) - _MAX_NAMES} more" if len(hosts) > _MAX_NAMES else ""
    return ", ".join(hosts[:_MAX_NAMES]) + extra


@rule(
    "GA701",
    "Driver version drift among hosts with the same GPU model",
    category="fleet",
    owner=Owner.INFRA,
    severity=Severity.MEDIUM,
    likelihood=3,
    impact=3,
    remediation=(
        "Bring the host to the model's majority driver with the staged upgrade (canary, waves, "
        "health gates), or, if the odd host is the intended canary, record that in the policy "
        "(desired_driver_version per group)."
    ),
    references=(refs.SEED_ANTI_10, refs.SEED_SAFE_DEPLOY, refs.SEED_F3_DRIVER),
    fleet=True,
)
def driver_drift(
    rule: Rule, snapshots: Sequence[HostSnapshot], ctx: RuleContext
) -> Iterable[Finding]:
    """Hosts whose driver differs from the majority of hosts with the same GPU model.

    Checks: audited hosts grouped by GPU model name (a host with two models is in both groups);
    in each group the driver version most hosts run is the reference (on a tie, the newest of
    the tied versions), and every host on another version gets one finding naming both
    versions and the hosts on each. Hosts without a known driver version are left out (GA101
    reports them).
    Why: the same job behaves differently on hosts with different drivers (seed 004:
    "inconsistent performance across nodes: firmware or driver mismatch"), and a half-finished
    upgrade is a fleet with two failure modes.
    Evidence: the host's version, the majority version, and the hosts on every version.
    Remediation: staged upgrade to the majority version, or declare the canary in the policy.
    """
    groups: dict[str, dict[str, list[HostSnapshot]]] = {}
    for snap in snapshots:
        version = host_driver_version(snap)
        if snap.status in NOT_COLLECTED or not version:
            continue
        for model in sorted({g.name for g in snap.gpus if g.name}):
            groups.setdefault(model, {}).setdefault(version, []).append(snap)

    drifts: dict[str, list[tuple[str, str, str, dict[str, list[HostSnapshot]]]]] = {}
    by_host: dict[str, HostSnapshot] = {}
    for model, versions in sorted(groups.items()):
        if len(versions) < 2:
            continue
        majority = max(versions, key=lambda v: (len(versions[v]), _version_key(v)))
        for version, snaps in versions.items():
            if version == majority:
                continue
            for snap in snaps:
                by_host[snap.host] = snap
                drifts.setdefault(snap.host, []).append((model, version, majority, versions))

    for host, entries in sorted(drifts.items()):
        snap = by_host[host]
        parts = []
        for model, version, majority, versions in entries:
            spread = "; ".join(
                f"{v} on {len(versions[v])} ({_names(versions[v])})"
                for v in sorted(versions, key=lambda v: (-len(versions[v]), v))
            )
            tie = sum(1 for v in versions if len(versions[v]) == len(versions[majority])) > 1
            reference = "newest of the tied versions" if tie else "majority version"
            parts.append(
                f"{model}: this host runs {version}, the {reference} is {majority} — {spread}."
            )
        model, version, majority, _ = entries[0]
        yield rule.finding(
            snap,
            "Driver drift. " + " ".join(parts),
            Evidence(
                fact="driver_version",
                actual=version,
                expected=majority,
                excerpt="\n".join(
                    f"{m}: "
                    + "; ".join(f"{v}: {_names(vs[v])}" for v in sorted(vs, key=_version_key))
                    for m, _, _, vs in entries
                ),
            ),
        )
