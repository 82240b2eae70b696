"""GA7xx: consistency across the fleet — hosts that should match and do not."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from gpuaudit.model.snapshot import HostSnapshot
from gpuaudit.rules import refs
from gpuaudit.rules.audit import GPU_LIST, NOT_COLLECTED, PACKAGES
from gpuaudit.rules.base import Evidence, Finding, Need, Owner, Rule, RuleContext, Severity, rule
from gpuaudit.rules.services import fabric_manager_packages
from gpuaudit.rules.software import DRIVER_VERSION, host_driver_version
from gpuaudit.rules.versions import version_key

_MAX_NAMES = 10


def _names(snaps: Sequence[HostSnapshot]) -> str:
    hosts = sorted(s.host for s in snaps)
    extra = f", … {len(hosts) - _MAX_NAMES} more" if len(hosts) > _MAX_NAMES else ""
    return ", ".join(hosts[:_MAX_NAMES]) + extra


@rule(
    "GA701",
    "Driver version drift among hosts with the same GPU model",
    category="fleet",
    needs=(GPU_LIST, DRIVER_VERSION),
    owner=Owner.INFRA,
    severity=Severity.MEDIUM,
    likelihood=3,
    impact=3,
    remediation=(
        "Bring the host to the model's majority driver with the staged upgrade (canary, waves, "
        "health gates), or, if the odd host is the intended canary, record that in the policy "
        "(desired_driver_version per group)."
    ),
    references=(refs.GUIDE_UNIFORM_VERSIONS, refs.GUIDE_CANARY, refs.GUIDE_DRIVER_CRASH),
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
    Why: the same job behaves differently on hosts with different drivers (performance that
    differs from node to node is often a driver or firmware mismatch), and a half-finished
    upgrade is a fleet with two failure modes.
    Evidence: the host's version, the majority version, and the hosts on every version.
    Remediation: staged upgrade to the majority version, or declare the canary in the policy.
    """
    yield from _drift(
        rule, snapshots, lambda snap, _model: host_driver_version(snap), "driver_version", "Driver"
    )


# (snapshot, GPU model) -> the host's value for that model, or None when it has none.
ValueOf = Callable[[HostSnapshot, str], str | None]


def _drift(
    rule: Rule, snapshots: Sequence[HostSnapshot], value_of: ValueOf, fact: str, what: str
) -> Iterator[Finding]:
    """One finding per host whose value differs from its GPU model's majority value.

    Hosts are grouped by GPU model name (a host with two models is in both groups); in each
    group the value most hosts have is the reference (on a tie, the newest of the tied values),
    and every host with another value gets one finding naming both and the hosts on each.
    Hosts not collected, and hosts without a value, are left out.
    """
    groups: dict[str, dict[str, list[HostSnapshot]]] = {}
    for snap in snapshots:
        if snap.status in NOT_COLLECTED:
            continue
        for model in sorted({g.name for g in snap.gpus if g.name}):
            value = value_of(snap, model)
            if value:
                groups.setdefault(model, {}).setdefault(value, []).append(snap)

    drifts: dict[str, list[tuple[str, str, str]]] = {}
    by_host: dict[str, HostSnapshot] = {}
    # What a model's group says is the same for every drifting host in it: made once per model
    # (a fleet of thousands has thousands of drifting hosts, each naming the group's hosts).
    said: dict[str, tuple[str, str, str]] = {}
    for model, values in sorted(groups.items()):
        if len(values) < 2:
            continue
        majority = max(values, key=lambda v: (len(values[v]), version_key(v)))
        said[model] = _group_text(model, values, majority)
        for value, snaps in values.items():
            if value == majority:
                continue
            for snap in snaps:
                by_host[snap.host] = snap
                drifts.setdefault(snap.host, []).append((model, value, majority))

    for host, entries in sorted(drifts.items()):
        snap = by_host[host]
        parts = []
        for model, value, majority in entries:
            reference, spread, _listing = said[model]
            parts.append(
                f"{model}: this host has {value}, the {reference} is {majority} — {spread}."
            )
        model, value, majority = entries[0]
        yield rule.finding(
            snap,
            f"{what} drift. " + " ".join(parts),
            Evidence(
                fact=fact,
                actual=value,
                expected=majority,
                excerpt="\n".join(said[m][2] for m, *_ in entries),
            ),
        )


def _group_text(
    model: str, values: dict[str, list[HostSnapshot]], majority: str
) -> tuple[str, str, str]:
    """(what the reference value is, the values by how many hosts have each, the hosts on each
    value by version) for one model's group of hosts."""
    spread = "; ".join(
        f"{v} on {len(values[v])} ({_names(values[v])})"
        for v in sorted(values, key=lambda v: (-len(values[v]), v))
    )
    tie = sum(1 for v in values if len(values[v]) == len(values[majority])) > 1
    reference = "newest of the tied versions" if tie else "majority version"
    listing = f"{model}: " + "; ".join(
        f"{v}: {_names(values[v])}" for v in sorted(values, key=version_key)
    )
    return reference, spread, listing


def _gpu_values(field: str) -> ValueOf:
    """The host's distinct values of a GPU field among its GPUs of one model, joined."""

    def value_of(snap: HostSnapshot, model: str) -> str | None:
        values = {getattr(g, field) for g in snap.gpus if g.name == model and getattr(g, field)}
        return ", ".join(sorted(values, key=version_key)) or None

    return value_of


def _fabric_manager_version(snap: HostSnapshot, _model: str) -> str | None:
    versions = {p.version.split(":", 1)[-1] for p in fabric_manager_packages(snap)}
    return ", ".join(sorted(versions, key=version_key)) or None


@dataclass(frozen=True)
class _Drift:
    code: str
    thing: str  # what drifts, as the title and message name it
    fact: str
    value_of: ValueOf
    severity: Severity
    likelihood: int
    impact: int
    why: str
    remediation: str
    # What the value is read from besides the GPU list (whose models group the hosts).
    needs: tuple[Need, ...] = ()


_FIRMWARE_FIX = (
    "Flash the model's majority {thing} with the vendor's firmware tool during a maintenance "
    "window (or update the fleet to the newest one the vendor supports for the driver), and "
    "keep firmware versions in the site's hardware baseline."
)

_DRIFTS = (
    _Drift(
        "GA702", "VBIOS version", "gpus[].vbios_version", _gpu_values("vbios_version"),
        Severity.MEDIUM, 2, 3,
        "the VBIOS sets clocks, power limits and link training: hosts of one model on "
        "different VBIOS versions perform differently and fail differently, and vendor "
        "fixes arrive only on the updated ones",
        _FIRMWARE_FIX.format(thing="VBIOS"),
    ),
    _Drift(
        "GA703", "InfoROM version", "gpus[].inforom_image", _gpu_values("inforom_image"),
        Severity.LOW, 2, 2,
        "the InfoROM holds the GPU's configuration and error records (ECC, retired pages); a "
        "different image means a board from another batch or a missed firmware update",
        _FIRMWARE_FIX.format(thing="InfoROM image"),
    ),
    _Drift(
        "GA704", "Kernel version", "os.kernel", lambda snap, _model: snap.os.kernel,
        Severity.MEDIUM, 3, 3,
        "the NVIDIA kernel module is built per kernel (DKMS): another kernel is another driver "
        "build, and a kernel update without its module build is a host whose driver does not "
        "load after the next reboot",
        "Bring the host to the model's majority kernel with the OS image or the staged "
        "upgrade, and hold kernel packages along with the driver's.",
    ),
    _Drift(
        "GA705", "Fabric manager version", "packages[fabricmanager]", _fabric_manager_version,
        Severity.MEDIUM, 3, 3,
        "fabric manager must match its host's driver (GA402), so two fabric manager versions "
        "in one model are two driver versions on NVSwitch systems, or one left behind by an "
        "upgrade of the driver alone",
        "Install nvidia-fabricmanager at the driver's version on every NVSwitch host of the "
        "model, as part of the same staged driver upgrade.",
        needs=(PACKAGES,),
    ),
)  # fmt: skip


def _register_drift(spec: _Drift) -> None:
    def check(rule: Rule, snapshots: Sequence[HostSnapshot], ctx: RuleContext) -> Iterator[Finding]:
        yield from _drift(rule, snapshots, spec.value_of, spec.fact, spec.thing)

    # Mid-sentence, "Kernel version" reads "kernel version"; VBIOS and InfoROM keep their case.
    acronym = any(c.isupper() for c in spec.thing.split()[0][1:])
    noun = spec.thing if acronym else spec.thing[0].lower() + spec.thing[1:]
    check.__doc__ = (
        f"Hosts whose {noun} differs from the majority of hosts with the same GPU model.\n\n"
        f"Checks: audited hosts grouped by GPU model name; in each group the {noun} most "
        "hosts have is the reference (on a tie, the newest), and every host with another one "
        "gets a finding naming both and the hosts on each (a host whose GPUs of one model "
        "differ shows them joined). Hosts without the value are left out.\n"
        f"Why: {spec.why}.\n"
        f"Evidence: the host's {noun}, the majority one, and the hosts on every one.\n"
        f"Remediation: {spec.remediation}"
    )
    check.__name__ = check.__qualname__ = f"{spec.thing.lower().replace(' ', '_')}_drift"
    rule(
        spec.code,
        f"{spec.thing} drift among hosts with the same GPU model",
        category="fleet",
        owner=Owner.INFRA,
        severity=spec.severity,
        likelihood=spec.likelihood,
        impact=spec.impact,
        remediation=spec.remediation,
        references=(refs.GUIDE_UNIFORM_VERSIONS, refs.GUIDE_VERSION_AUDIT, refs.GUIDE_CANARY),
        fleet=True,
        needs=(GPU_LIST, *spec.needs),
    )(check)


for _spec in _DRIFTS:
    _register_drift(_spec)
