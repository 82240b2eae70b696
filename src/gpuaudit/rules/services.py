"""GA4xx: host services the GPUs depend on (persistence daemon, fabric manager)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from gpuaudit.model.snapshot import Gpu, HostSnapshot, Package, Service
from gpuaudit.rules import refs
from gpuaudit.rules.audit import GPU_LIST, PACKAGES, SERVICES
from gpuaudit.rules.base import (
    CheckResult,
    Evidence,
    Finding,
    NotEvaluated,
    Owner,
    Rule,
    RuleContext,
    Severity,
    rule,
)
from gpuaudit.rules.evidence import gpu_label, section_excerpt
from gpuaudit.rules.hardware import is_datacenter_gpu
from gpuaudit.rules.software import host_driver_version
from gpuaudit.rules.versions import same_version

PERSISTENCED = "nvidia-persistenced"
FABRIC_MANAGER = "nvidia-fabricmanager"
_NVSWITCH_NODE = re.compile(r"/dev/nvidia-nvswitch\d+$")
_NVLINK_CELL = re.compile(r"^NV\d+$")


def _service(snap: HostSnapshot, name: str) -> Service | None:
    return next((s for s in snap.services if s.name == name), None)


@rule(
    "GA401",
    "Persistence mode off",
    category="services",
    needs=(GPU_LIST,),
    per_gpu=True,
    owner=Owner.INFRA,
    severity=Severity.MEDIUM,
    likelihood=4,
    impact=2,
    remediation=(
        "Enable and start nvidia-persistenced with gpuaudit.operations.persistence.enable "
        "(deploys/remediate.py; by hand: systemctl enable --now nvidia-persistenced) so "
        "persistence mode is on for every GPU and survives reboots."
    ),
    references=(refs.PERSISTENCE, refs.GUIDE_DRIVER_SERVICES, refs.GUIDE_DRIVER_CRASH),
    operation="gpuaudit.operations.persistence.enable",
)
def persistence_off(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[Finding]:
    """Persistence mode is off on a GPU, or kept on without nvidia-persistenced.

    Checks: each NVIDIA GPU's persistence mode (one finding per GPU that has it off, naming the
    daemon's state); when every GPU has it on but nvidia-persistenced is not running, one
    low-severity host finding (set by the legacy ``nvidia-smi -pm 1``, lost at reboot).
    Silent when policy ``persistence_mode_required`` is false.
    Why: without persistence the driver tears a GPU's state down whenever no process holds it:
    every job start pays the initialisation (seconds per GPU), nvidia-smi is slow, and NVIDIA
    recommends it on every compute node.
    Evidence: the persistence mode per GPU and the daemon's systemctl state.
    Remediation: enable nvidia-persistenced (gpuaudit.operations.persistence.enable).
    """
    if not ctx.settings_for(snap).get("persistence_mode_required", True):
        return
    daemon = _service(snap, PERSISTENCED)
    daemon_state = (
        "unknown (no service list)"
        if daemon is None
        else ("not installed" if not daemon.present else f"{daemon.active}/{daemon.enabled}")
    )
    nvidia = [g for g in snap.gpus if g.vendor == "nvidia"]
    off = [g for g in nvidia if g.persistence_mode is False]
    for gpu in off:
        yield rule.finding(
            snap,
            f"{gpu_label(gpu)} has persistence mode off (nvidia-persistenced: {daemon_state}).",
            Evidence(
                fact=f"gpus[{gpu.index}].persistence_mode",
                actual=False,
                expected=True,
                excerpt=f"{PERSISTENCED}: {daemon_state}",
            ),
            gpu=gpu.index,
        )
    if off or daemon is None or daemon.running:
        return
    if any(g.persistence_mode for g in nvidia):
        yield rule.finding(
            snap,
            f"Persistence mode is on, but {PERSISTENCED} is {daemon_state}: the setting was made "
            "with nvidia-smi -pm 1 and is lost at the next reboot.",
            Evidence(
                fact=f"services[{PERSISTENCED}]",
                actual=daemon_state,
                expected="active/enabled",
                excerpt=section_excerpt(snap, "services"),
            ),
            severity=Severity.LOW,
            likelihood=3,
        )


def nvswitch_reason(snap: HostSnapshot, policy: Mapping[str, Any]) -> str | None:
    """Why the host looks like an NVSwitch (HGX/DGX) system, or None.

    In order of strength: NVSwitch device nodes (/dev/nvidia-nvswitchN, created by the nvswitch
    driver for the switches it found); SXid lines (only NVSwitches log them); at least
    ``nvswitch_min_gpus`` GPUs whose name matches ``nvswitch_gpu_name_patterns`` (models sold as
    SXM boards) and none of ``nvswitch_gpu_name_exclusions`` (their PCIe / NVL cards); or
    ``topo -m`` showing NV# links between every pair of at least ``nvswitch_min_gpus`` GPUs.
    The count threshold (default 8) is deliberate: 4-GPU HGX boards and DGX Stations wire NVLink
    directly between GPUs, with no switch and no fabric manager.
    """
    nodes = [n.path for n in snap.device_nodes if _NVSWITCH_NODE.search(n.path)]
    if nodes:
        return f"NVSwitch device nodes present ({', '.join(sorted(nodes)[:4])})"
    if any(e.kind == "sxid" for e in snap.xid_events):
        return "the kernel log has NVSwitch SXid lines"
    min_gpus = int(policy.get("nvswitch_min_gpus", 8))
    sxm_board = sxm_board_matcher(policy)
    sxm = [g for g in snap.gpus if sxm_board(g)]
    if len(sxm) >= min_gpus:
        return f"{len(sxm)} × {sxm[0].name} (an NVSwitch baseboard model)"
    linked = _all_to_all_nvlink_gpus(snap)
    if linked >= min_gpus:
        return f"topo -m shows NVLink between every pair of {linked} GPUs"
    return None


def is_sxm_board_gpu(gpu: Gpu, policy: Mapping[str, Any]) -> bool:
    """A GPU model sold only as an SXM (HGX/DGX) board, whose GPUs are wired with NVLink.

    By name: one of ``nvswitch_gpu_name_patterns`` and none of
    ``nvswitch_gpu_name_exclusions`` (the PCIe and NVL cards of the same models).
    """
    return sxm_board_matcher(policy)(gpu)


def sxm_board_matcher(policy: Mapping[str, Any]) -> Callable[[Gpu], bool]:
    """:func:`is_sxm_board_gpu` under ``policy``, its name patterns read once for many GPUs."""
    patterns = [str(p).lower() for p in policy.get("nvswitch_gpu_name_patterns", ())]
    exclusions = [str(p).lower() for p in policy.get("nvswitch_gpu_name_exclusions", ())]

    def matches(gpu: Gpu) -> bool:
        name = (gpu.name or "").lower()
        return any(p in name for p in patterns) and not any(x in name for x in exclusions)

    return matches


def _all_to_all_nvlink_gpus(snap: HostSnapshot) -> int:
    topo = snap.topology
    if topo is None:
        return 0
    rows = {d: i for i, d in enumerate(topo.devices) if d.startswith("GPU")}
    cols = {c: j for j, c in enumerate(topo.columns) if c.startswith("GPU")}
    gpus = [g for g in rows if g in cols]
    for a in gpus:
        for b in gpus:
            if a == b:
                continue
            row = topo.matrix[rows[a]] if rows[a] < len(topo.matrix) else ()
            cell = row[cols[b]] if cols[b] < len(row) else ""
            if not _NVLINK_CELL.match(cell.strip()):
                return 0
    return len(gpus)


def fabric_manager_packages(snap: HostSnapshot) -> list[Package]:
    return [p for p in snap.packages if "fabricmanager" in p.name or "fabric-manager" in p.name]


@rule(
    "GA402",
    "Fabric manager missing or not running on an NVSwitch system",
    category="services",
    owner=Owner.INFRA,
    severity=Severity.CRITICAL,
    likelihood=5,
    impact=5,
    remediation=(
        "Install nvidia-fabricmanager at exactly the driver's version (e.g. "
        "nvidia-fabricmanager-535 535.129.03 for driver 535.129.03), enable and start it "
        "(systemctl enable --now nvidia-fabricmanager), and check /var/log/fabricmanager.log."
    ),
    references=(refs.FABRIC_MANAGER, refs.GUIDE_DRIVER_SERVICES),
)
def fabric_manager(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[CheckResult]:
    """An NVSwitch system whose fabric manager is missing, stopped, or at another version.

    Checks: on hosts that look like NVSwitch systems (``nvswitch_reason``: switch device nodes,
    SXid lines, ≥ 8 SXM-board GPUs by name, or all-to-all NVLink among ≥ 8 GPUs), the
    nvidia-fabricmanager service is installed and active, and its package version matches the
    driver version. Not evaluated when neither the service list nor the packages say anything
    of fabric manager, or when no GPU and no device node tells whether it is such a system.
    Why: on NVSwitch systems the GPUs are not usable for CUDA until fabric manager has trained
    the NVLink fabric; CUDA init fails ("system not yet initialized"), and fabric manager
    refuses to start against a driver of another version.
    Evidence: why the host is taken for an NVSwitch system, the service state, the package and
    driver versions.
    Remediation: install fabric manager at the driver's version and start it.
    """
    reason = nvswitch_reason(snap, ctx.settings_for(snap))
    if reason is None:
        if not snap.gpus and not snap.device_nodes:
            yield NotEvaluated(
                "whether this is an NVSwitch system is unknown: "
                + (GPU_LIST.missing(snap) or "no GPU listed")
                + " and no device node listed"
            )
        return
    service = _service(snap, FABRIC_MANAGER)
    packages = fabric_manager_packages(snap)
    if service is None and not snap.packages:
        unknown = [m for m in (SERVICES.missing(snap), PACKAGES.missing(snap)) if m]
        yield NotEvaluated(
            f"NVSwitch system ({reason}), but its fabric manager's state is unknown: "
            + ("; ".join(unknown) or "neither its service nor a package is listed")
        )
        return
    driver = host_driver_version(snap)
    problems: list[str] = []
    severity = Severity.CRITICAL
    if service is not None and not service.present:
        problems.append(f"{FABRIC_MANAGER} is not installed")
    elif service is not None and not service.running:
        problems.append(f"{FABRIC_MANAGER} is {service.active} ({service.enabled})")
    elif service is None and snap.packages and not packages:
        problems.append("no fabric manager package is installed")
    wrong = [p for p in packages if driver and not same_version(p.version, driver)]
    if wrong:
        problems.append(
            "its package is at another version than the driver "
            f"({', '.join(f'{p.name} {p.version}' for p in wrong)} vs driver {driver})"
        )
        if len(problems) == 1:
            severity = Severity.HIGH
    if not problems:
        return
    state = f"{service.active}/{service.enabled}" if service else "unknown"
    yield rule.finding(
        snap,
        f"NVSwitch system ({reason}), but " + "; ".join(problems) + ".",
        Evidence(
            fact=f"services[{FABRIC_MANAGER}]",
            actual={
                "service": state,
                "packages": {p.name: p.version for p in packages},
                "driver": driver,
            },
            expected={"service": "active/enabled", "package_version": driver or "= driver"},
            excerpt=section_excerpt(snap, "services"),
        ),
        severity=severity,
        likelihood=5 if severity is Severity.CRITICAL else 4,
    )


@rule(
    "GA403",
    "GPU monitoring agent not running (DCGM / dcgm-exporter)",
    category="services",
    needs=(GPU_LIST, SERVICES),
    owner=Owner.INFRA,
    severity=Severity.MEDIUM,
    likelihood=4,
    impact=3,
    remediation=(
        "Install DCGM (datacenter-gpu-manager) and enable its host engine "
        "(gpuaudit.operations.services.enable, or systemctl enable --now nvidia-dcgm), run "
        "dcgm-exporter for Prometheus, and load GPU alert rules "
        "(temperature, memory pressure, XID: docs/field-guide/monitoring.md#alert-rules); or "
        "declare the Kubernetes DaemonSet that does it with monitoring_required: false."
    ),
    references=(
        refs.GUIDE_DCGM,
        refs.GUIDE_METRICS,
        refs.GUIDE_ALERTS,
        refs.GUIDE_MONITORING_GAPS,
        refs.DCGM_GUIDE,
        refs.DCGM_EXPORTER,
    ),
    operation="gpuaudit.operations.services.enable",
)
def monitoring_absent(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[Finding]:
    """A host with datacenter GPUs runs none of the DCGM monitoring agents.

    Checks: on hosts with at least one datacenter GPU (``datacenter_gpu_name_patterns``), that
    one of ``monitoring_services`` (nvidia-dcgm, dcgm, dcgm-exporter) is active. Not evaluated
    when the service list or the GPU list was not collected; silent when ``monitoring_required``
    is false (sites whose dcgm-exporter runs as a Kubernetes DaemonSet have no host unit to
    find).
    Why: without DCGM nothing records the GPU metrics the alerts read (temperature, memory
    pressure, XIDs) or the utilisation, power and error rates a fleet is run by; failures are
    found by the jobs that hit them. The audit is a snapshot; monitoring is the history between
    audits.
    Evidence: the monitoring units and their states, and whether DCGM packages are installed.
    Remediation: enable the DCGM host engine and dcgm-exporter
    (gpuaudit.operations.services.enable).
    """
    policy = ctx.settings_for(snap)
    if not policy.get("monitoring_required", True) or not snap.services:
        return
    if not any(is_datacenter_gpu(g, policy) for g in snap.gpus):
        return
    wanted = [str(s) for s in policy.get("monitoring_services", ())]
    states = {name: _service(snap, name) for name in wanted}
    if any(s is not None and s.running for s in states.values()):
        return
    shown = {
        name: (f"{s.active}/{s.enabled}" if s is not None else "not listed")
        for name, s in states.items()
    }
    dcgm_packages = [p for p in snap.packages if "datacenter-gpu-manager" in p.name]
    installed = (
        "DCGM is installed (" + ", ".join(f"{p.name} {p.version}" for p in dcgm_packages) + ")"
        if dcgm_packages
        else "no DCGM package is installed"
    )
    yield rule.finding(
        snap,
        f"No GPU monitoring agent is running ({', '.join(f'{n}: {v}' for n, v in shown.items())}"
        f"); {installed}.",
        Evidence(
            fact="services",
            actual=shown,
            expected=f"one of {', '.join(wanted)} active",
            excerpt=section_excerpt(snap, "services"),
        ),
    )
