"""GA901–GA909: what Kubernetes believes about the hosts against what the audit saw.

The cluster's view comes from ``kubectl get nodes -o json`` (RuleContext.cluster, see
gpuaudit.kubeview); kube_view.py maps its nodes to the inventory's hosts. Without a view every
rule here is not evaluated, with the reason; a host the cluster has no node for is not
evaluated by the host rules and reported once by GA909.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from gpuaudit.model.cluster import KubeNode
from gpuaudit.model.snapshot import HostSnapshot, HostStatus
from gpuaudit.rules import refs
from gpuaudit.rules.audit import GPU_LIST, NOT_COLLECTED
from gpuaudit.rules.base import (
    FLEET_HOST,
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
from gpuaudit.rules.kube_view import (
    advertised,
    blocking_taints,
    cuda_from_labels,
    drain_reasons,
    driver_from_labels,
    expected_resources,
    find_node,
    label_int,
    mapping,
    mig_devices,
    mig_enabled,
    mig_strategy,
    nvidia_gpus,
    product_key,
    view_outcome,
    view_problem,
)
from gpuaudit.rules.software import host_driver_version
from gpuaudit.rules.versions import major_minor

CATEGORY = "scheduler"
_REFS_VIEW = (refs.GUIDE_KUBE_VIEW, refs.GUIDE_KUBE_MAPPING)


def _node_of(snap: HostSnapshot, ctx: RuleContext) -> KubeNode | NotEvaluated:
    problem = view_problem(ctx.cluster)
    if problem is not None or ctx.cluster is None:
        return NotEvaluated(problem or "", outcome=view_outcome(ctx.cluster))
    node, how = find_node(snap, ctx.settings_for(snap), ctx.cluster)
    if node is None:
        return NotEvaluated(f"no Kubernetes node for this host: {how} (GA909)")
    return node


def _excerpt(node: KubeNode, *keys: str) -> str:
    """The part of the node the finding is about, as JSON a reader can compare with kubectl."""
    shown: dict[str, object] = {"name": node.name}
    labels = {k: v for k, v in node.labels.items() if any(k.startswith(p) for p in keys)}
    if labels:
        shown["labels"] = labels
    if "capacity" in keys:
        shown["capacity"] = node.capacity
        shown["allocatable"] = node.allocatable
    if "spec" in keys:
        shown["unschedulable"] = node.unschedulable
        shown["taints"] = [str(t) for t in node.taints]
        shown["ready"] = node.ready
    return json.dumps(shown, indent=1, sort_keys=True)


def _counts(resources: dict[str, int]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in sorted(resources.items())) or "none"


@rule(
    "GA901",
    "Kubernetes advertises a different number of GPUs than the audit saw healthy",
    category=CATEGORY,
    owner=Owner.INFRA,
    severity=Severity.HIGH,
    likelihood=4,
    impact=4,
    remediation=(
        "Fewer healthy GPUs than advertised: cordon and drain the node, then fix the GPU "
        "(GA102 / GA301) and restart the device plugin so it re-registers. More healthy GPUs "
        "than advertised: check the device plugin's pod and log on the node and its MIG "
        "strategy, and restart it."
    ),
    references=(
        refs.GUIDE_KUBE_COUNTS,
        refs.K8S_SCHEDULING_GPUS,
        refs.NVIDIA_DEVICE_PLUGIN,
        *_REFS_VIEW,
    ),
)
def advertised_gpu_count(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[CheckResult]:
    """The node's allocatable GPUs differ from the GPUs the audit saw healthy.

    Checks: the node's allocatable (else capacity) ``nvidia.com/gpu`` (with time-sliced
    ``nvidia.com/gpu.shared``), ``nvidia.com/mig-<profile>`` and ``amd.com/gpu`` against what
    the device plugin should advertise for the GPUs that answered without error: one per GPU
    times ``nvidia.com/gpu.replicas`` (time-slicing); under MIG strategy ``mixed`` one
    ``nvidia.com/mig-<profile>`` per MIG device and ``nvidia.com/gpu`` for the GPUs not in MIG
    mode; under ``single`` one ``nvidia.com/gpu`` per MIG device. A host whose GPUs the audit
    could not list (driver down) while the node advertises some fails too.
    Why: advertising more GPUs than are healthy sends pods to a GPU that fell off the bus or
    errors ("a GPU fallen off the bus that Kubernetes keeps allocating"); advertising fewer
    leaves pods pending on "Insufficient nvidia.com/gpu" while GPUs sit idle.
    Evidence: advertised and expected resources, capacity and allocatable, the GPUs seen.
    Remediation: drain and repair the node, or restart the device plugin.
    """
    node = _node_of(snap, ctx)
    if isinstance(node, NotEvaluated):
        yield node
        return
    have = advertised(node)
    listed = GPU_LIST.missing(snap)
    if not snap.gpus:
        # A driver that does not answer leaves the device plugin's count standing; a host the
        # audit only lacks a tool on (nvidia-smi removed) may be fine: not judged there.
        if any(have.values()) and snap.status is HostStatus.DRIVER_NOT_RESPONDING:
            yield rule.finding(
                snap,
                f"Node {node.name} advertises {_counts(have)}, but the audit could list no GPU "
                f"on the host ({listed or snap.status.value}): the scheduler places GPU pods "
                "on a host whose GPUs do not answer.",
                Evidence("kubernetes.node.allocatable", have, "no GPU", _excerpt(node, "capacity")),
            )
        else:
            yield NotEvaluated(listed or "no GPU listed")
        return
    want = expected_resources(snap, node)
    keys = sorted(set(want.resources) | set(have))
    wrong = {k: (have.get(k, 0), want.resources.get(k, 0)) for k in keys}
    wrong = {k: v for k, v in wrong.items() if v[0] != v[1]}
    if not wrong:
        return
    over = [k for k, (h, w) in wrong.items() if h > w]
    parts = [f"{k} {h} advertised, {w} expected" for k, (h, w) in wrong.items()]
    if not any(have.values()):
        why = "no GPU resource advertised: the device plugin is not running or not registered"
    elif over:
        why = "the scheduler will place pods on GPUs the audit did not see healthy"
    else:
        why = "healthy GPUs the scheduler cannot hand out"
    if node.capacity != node.allocatable and node.allocatable:
        parts.append(f"capacity {_counts(node.capacity)}")
    yield rule.finding(
        snap,
        f"Node {node.name}: {'; '.join(parts)} ({want.basis}): {why}.",
        Evidence("kubernetes.node.allocatable", have, want.resources, _excerpt(node, "capacity")),
        severity=Severity.HIGH if over else Severity.MEDIUM,
    )


def _labelled_versions(
    rule: Rule,
    snap: HostSnapshot,
    node: KubeNode,
    actual: str,
    read: object,
    what: str,
    same: object,
) -> Iterable[Finding]:
    for deprecated in (False, True):
        labelled = read(node, deprecated)  # type: ignore[operator]
        if labelled is None or same(labelled, actual):  # type: ignore[operator]
            continue
        which = "deprecated " if deprecated else ""
        yield rule.finding(
            snap,
            f"Node {node.name}'s {which}GPU Feature Discovery labels say {what} {labelled}, the "
            f"host runs {actual}: node selectors and affinities on these labels pick the wrong "
            "nodes (GFD has not relabelled the node since the change, or is not running).",
            Evidence(f"kubernetes.node.labels ({which}{what})", labelled, actual),
        )


@rule(
    "GA902",
    "GPU Feature Discovery's driver labels differ from the running driver",
    category=CATEGORY,
    owner=Owner.INFRA,
    severity=Severity.MEDIUM,
    likelihood=3,
    impact=3,
    remediation=(
        "Restart gpu-feature-discovery on the node (it relabels at start and every "
        "sleep-interval); move node selectors from the deprecated nvidia.com/cuda.driver.* "
        "labels to nvidia.com/cuda.driver-version.*, and upgrade GFD where only the deprecated "
        "set is written."
    ),
    references=(refs.GUIDE_KUBE_LABELS, refs.GUIDE_KUBE_DEPRECATED, refs.NVIDIA_GFD_LABELS),
)
def driver_labels(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[CheckResult]:
    """GFD's driver labels, current and deprecated, against the driver the host runs.

    Checks: ``nvidia.com/cuda.driver-version.full`` (else ``.major/.minor/.revision``) and the
    deprecated ``nvidia.com/cuda.driver.major/minor/rev`` against the driver version nvidia-smi
    reports; each set that differs is a finding. A node that carries only the deprecated set
    (GFD older than the current labels) is a low finding of its own. Not evaluated when the
    host's driver version is unknown, or the node has no driver labels.
    Why: after a driver upgrade, labels that still advertise the old driver make workloads that
    select on them land on the wrong nodes or on none; the deprecated labels will go away.
    Evidence: the labelled and the running versions.
    Remediation: restart GFD; select on the current labels.
    """
    node = _node_of(snap, ctx)
    if isinstance(node, NotEvaluated):
        yield node
        return
    current, old = driver_from_labels(node, False), driver_from_labels(node, True)
    if current is None and old is None:
        if nvidia_gpus(snap):
            yield NotEvaluated(f"node {node.name} carries no GPU Feature Discovery driver labels")
        return
    actual = host_driver_version(snap)
    if actual is None:
        yield NotEvaluated(GPU_LIST.missing(snap) or "the host's driver version is unknown")
        return
    yield from _labelled_versions(rule, snap, node, actual, driver_from_labels, "driver", _same)
    if current is None and old is not None:
        yield rule.finding(
            snap,
            f"Node {node.name} carries only the deprecated nvidia.com/cuda.driver.* labels "
            f"(driver {old}): its GPU Feature Discovery predates the nvidia.com/"
            "cuda.driver-version.* labels that replace them.",
            Evidence(
                "kubernetes.node.labels",
                "nvidia.com/cuda.driver.*",
                "cuda.driver-version.*",
                _excerpt(node, "nvidia.com/cuda."),
            ),
            severity=Severity.LOW,
        )


def _same(labelled: str, actual: str) -> bool:
    return labelled.strip() == actual.strip()


def _same_cuda(labelled: str, actual: str) -> bool:
    return major_minor(labelled) is not None and major_minor(labelled) == major_minor(actual)


@rule(
    "GA903",
    "GPU Feature Discovery's CUDA labels differ from the driver's CUDA version",
    category=CATEGORY,
    owner=Owner.INFRA,
    severity=Severity.MEDIUM,
    likelihood=3,
    impact=3,
    remediation="Restart gpu-feature-discovery on the node so it relabels the CUDA version.",
    references=(refs.GUIDE_KUBE_LABELS, refs.NVIDIA_GFD_LABELS, refs.CUDA_COMPAT),
)
def cuda_labels(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[CheckResult]:
    """GFD's CUDA labels against the CUDA version the driver supports.

    Checks: ``nvidia.com/cuda.runtime-version.full`` (else ``.major/.minor``) and the
    deprecated ``nvidia.com/cuda.runtime.major/minor`` (GFD reads them from the driver: the
    CUDA version nvidia-smi shows) against the host's CUDA version, by major.minor.
    Why: images are matched to nodes by these labels; a stale value admits a CUDA runtime the
    driver cannot run ("CUDA driver version is insufficient").
    Evidence: the labelled and the driver's CUDA versions.
    Remediation: restart GFD.
    """
    node = _node_of(snap, ctx)
    if isinstance(node, NotEvaluated):
        yield node
        return
    if cuda_from_labels(node, False) is None and cuda_from_labels(node, True) is None:
        if nvidia_gpus(snap):
            yield NotEvaluated(f"node {node.name} carries no GPU Feature Discovery CUDA labels")
        return
    actual = snap.cuda_version or next((g.cuda_version for g in snap.gpus if g.cuda_version), None)
    if actual is None:
        yield NotEvaluated(GPU_LIST.missing(snap) or "the host reports no CUDA version")
        return
    yield from _labelled_versions(rule, snap, node, actual, cuda_from_labels, "CUDA", _same_cuda)


@rule(
    "GA904",
    "GPU Feature Discovery's product or GPU count labels differ from the GPUs",
    category=CATEGORY,
    owner=Owner.INFRA,
    severity=Severity.MEDIUM,
    likelihood=3,
    impact=3,
    remediation=(
        "Restart gpu-feature-discovery on the node; if the product differs, check that the "
        "inventory and the node are the same machine (kubernetes_node host data)."
    ),
    references=(refs.GUIDE_KUBE_LABELS, refs.NVIDIA_GFD_LABELS, *_REFS_VIEW),
)
def product_labels(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[CheckResult]:
    """GFD's ``nvidia.com/gpu.product`` and ``nvidia.com/gpu.count`` against the GPUs listed.

    Checks: the product label (``-SHARED`` and ``-MIG-<profile>`` suffixes set aside) against
    the model nvidia-smi names, both written as GFD writes them; the count label against the
    NVIDIA GPUs nvidia-smi lists (under MIG strategy single with MIG on, against the MIG
    devices).
    Why: workloads select GPU models by this label; a label of another model means the node is
    not the host the inventory says, or GFD labelled before a GPU was swapped or lost.
    Evidence: the labels and the GPUs seen.
    Remediation: restart GFD; fix the host ↔ node mapping.
    """
    node = _node_of(snap, ctx)
    if isinstance(node, NotEvaluated):
        yield node
        return
    gpus = nvidia_gpus(snap)
    product = node.labels.get("nvidia.com/gpu.product")
    count = label_int(node, "nvidia.com/gpu.count")
    if product is None and count is None:
        return
    if not gpus:
        yield NotEvaluated(GPU_LIST.missing(snap) or "no NVIDIA GPU listed")
        return
    names = sorted({g.name for g in gpus if g.name})
    problems = []
    if product and names and product_key(product) not in {product_key(n) for n in names}:
        problems.append(f"product {product}, the host's GPUs are {', '.join(names)}")
    migs = [g for g in gpus if mig_enabled(g)]
    seen = len(gpus)
    if mig_strategy(node) == "single" and migs:
        seen = sum(sum(mig_devices(snap, g).values()) for g in migs)
    if count is not None and count != seen:
        problems.append(f"gpu.count {count}, nvidia-smi lists {seen}")
    if problems:
        yield rule.finding(
            snap,
            f"Node {node.name}'s GPU Feature Discovery labels say {'; '.join(problems)}.",
            Evidence(
                "kubernetes.node.labels",
                {"product": product, "count": count},
                {"names": names, "count": seen},
                _excerpt(node, "nvidia.com/gpu."),
            ),
        )


@rule(
    "GA905",
    "MIG strategy or MIG config labels do not fit the GPUs' MIG layout",
    category=CATEGORY,
    owner=Owner.INFRA,
    severity=Severity.HIGH,
    likelihood=3,
    impact=4,
    remediation=(
        "Use MIG strategy mixed for a node whose GPUs are not all split alike (device plugin "
        "and GFD --mig-strategy, or the GPU Operator's mig.strategy), single only for identical "
        "layouts; set nvidia.com/mig.config to the layout the host should have and check "
        "nvidia-mig-manager's log where its state is failed."
    ),
    references=(refs.GUIDE_KUBE_MIG, refs.GPU_OPERATOR_MIG, refs.NVIDIA_DEVICE_PLUGIN),
)
def mig_labels(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[CheckResult]:
    """``nvidia.com/mig.strategy``, ``nvidia.com/mig.config`` and its state against MIG mode and
    the MIG devices the audit saw.

    Checks: GPUs in MIG mode on a node whose strategy is ``none`` (or unset: MIG devices are not
    advertised); strategy ``single`` with GPUs that are not all split into the same profiles
    (single requires identical layouts); ``nvidia.com/mig.config.state`` ``failed``; and
    ``nvidia.com/mig.config`` ``all-disabled`` with GPUs in MIG mode, or ``all-<profile>`` with a
    GPU not in MIG mode or holding other profiles.
    Why: the device plugin advertises MIG devices by its strategy; a strategy that does not fit
    the layout advertises nothing, the wrong resource, or whole GPUs that are split.
    Evidence: the labels, and each GPU's MIG mode and devices.
    Remediation: pick the strategy that fits; make mig.config and the layout agree.
    """
    node = _node_of(snap, ctx)
    if isinstance(node, NotEvaluated):
        yield node
        return
    gpus = [g for g in nvidia_gpus(snap) if g.status == "ok"]
    labels = node.labels
    if not gpus or not any(k.startswith("nvidia.com/") for k in labels):
        return
    strategy = mig_strategy(node)
    layouts = {g.index: mig_devices(snap, g) if mig_enabled(g) else {} for g in gpus}
    in_mig = [i for i in layouts if mig_enabled(next(g for g in gpus if g.index == i))]
    problems = []
    if in_mig and strategy == "none":
        problems.append(
            f"GPUs {_indexes(in_mig)} are in MIG mode but the MIG strategy is "
            f"{labels.get('nvidia.com/mig.strategy') or 'unset'}: no MIG device is advertised"
        )
    distinct = {tuple(sorted(v.items())) for v in layouts.values()}
    if strategy == "single" and in_mig and len(distinct) > 1:
        problems.append(
            "MIG strategy single, but the GPUs are not split alike ("
            + "; ".join(f"GPU {i}: {_layout(v)}" for i, v in sorted(layouts.items()))
            + ")"
        )
    state = labels.get("nvidia.com/mig.config.state", "")
    config = labels.get("nvidia.com/mig.config", "")
    if state == "failed":
        problems.append(f"nvidia-mig-manager failed to apply mig.config {config or '(unset)'}")
    if config == "all-disabled" and in_mig:
        problems.append(f"mig.config all-disabled, but GPUs {_indexes(in_mig)} are in MIG mode")
    elif config.startswith("all-") and config not in _NAMED_CONFIGS:
        profile = config.removeprefix("all-")
        off = [i for i, v in layouts.items() if set(v) != {profile}]
        if off:
            problems.append(f"mig.config {config}, but GPUs {_indexes(off)} hold other layouts")
    if problems:
        yield rule.finding(
            snap,
            f"Node {node.name}: " + "; ".join(problems) + ".",
            Evidence(
                "kubernetes.node.labels (MIG)",
                {"strategy": strategy, "config": config, "state": state},
                {str(i): _layout(v) for i, v in layouts.items()},
                _excerpt(node, "nvidia.com/mig", "capacity"),
            ),
        )


# mig-parted's configurations that name no single profile.
_NAMED_CONFIGS = ("all-disabled", "all-enabled", "all-balanced")


def _indexes(indexes: Sequence[int]) -> str:
    return ", ".join(str(i) for i in sorted(indexes))


def _layout(devices: dict[str, int]) -> str:
    return ", ".join(f"{n}× {p}" for p, n in sorted(devices.items())) or "no MIG"


@rule(
    "GA906",
    "Kubernetes keeps scheduling onto a host the audit says must be drained",
    category=CATEGORY,
    owner=Owner.INFRA,
    severity=Severity.HIGH,
    likelihood=4,
    impact=4,
    remediation=(
        "kubectl cordon the node and kubectl drain it (--ignore-daemonsets), repair the host "
        "(reset the GPU, reboot, reseat), audit again, then kubectl uncordon it."
    ),
    references=(refs.GUIDE_KUBE_DRAIN, refs.K8S_DRAIN, refs.GUIDE_XID_ACTIONS),
)
def schedulable_while_broken(
    rule: Rule, snap: HostSnapshot, ctx: RuleContext
) -> Iterable[CheckResult]:
    """A node open to new pods whose host has a GPU fault that calls for a drain.

    Checks: the host's drain reasons (the NVIDIA driver does not answer, a GPU answers with an
    error or asks for a reset, fewer GPUs listed than attached or expected, a failed row remap,
    an XID whose immediate action is a GPU reset or a reboot) against the node: not cordoned
    (``spec.unschedulable``) and without a NoSchedule / NoExecute taint beyond the site's
    ``kubernetes_expected_taints``.
    Why: the scheduler keeps placing pods that crash on the broken GPU, or wait on it; the
    node must be cordoned and drained before the repair.
    Evidence: the drain reasons and the node's schedulability.
    Remediation: cordon, drain, repair, uncordon.
    """
    node = _node_of(snap, ctx)
    if isinstance(node, NotEvaluated):
        yield node
        return
    settings = ctx.settings_for(snap)
    reasons = drain_reasons(snap, settings)
    if reasons and not node.unschedulable and not blocking_taints(node, settings):
        yield rule.finding(
            snap,
            f"Node {node.name} is schedulable, but the host must be drained: "
            + "; ".join(reasons)
            + ".",
            Evidence("kubernetes.node.spec.unschedulable", False, True, _excerpt(node, "spec")),
        )


@rule(
    "GA907",
    "A healthy host's node is cordoned, tainted or not ready",
    category=CATEGORY,
    owner=Owner.INFRA,
    severity=Severity.MEDIUM,
    likelihood=3,
    impact=3,
    remediation=(
        "If the repair is done, kubectl uncordon the node and remove the taint "
        "(kubectl taint nodes NODE KEY-); a NotReady node needs its kubelet looked at."
    ),
    references=(refs.GUIDE_KUBE_DRAIN, refs.K8S_TAINTS),
)
def blocked_while_healthy(
    rule: Rule, snap: HostSnapshot, ctx: RuleContext
) -> Iterable[CheckResult]:
    """A node closed to pods whose host the audit found fit for work.

    Checks: a node cordoned, with a NoSchedule / NoExecute taint beyond
    ``kubernetes_expected_taints``, or not Ready, while the host has no drain reason (GA906's)
    and answered the audit. A node the GPU Operator is upgrading
    (``nvidia.com/gpu-driver-upgrade-state`` other than upgrade-done) is reported low.
    Why: a node left cordoned after a repair is paid-for capacity nobody can use; pods pend.
    Evidence: the cordon, the taints, the Ready condition.
    Remediation: uncordon and untaint, or fix the kubelet.
    """
    node = _node_of(snap, ctx)
    if isinstance(node, NotEvaluated):
        yield node
        return
    settings = ctx.settings_for(snap)
    if drain_reasons(snap, settings) or snap.status is not HostStatus.OK or not snap.gpus:
        return
    blocked = []
    if node.unschedulable:
        blocked.append("cordoned")
    taints = blocking_taints(node, settings)
    if taints:
        blocked.append("tainted " + ", ".join(taints))
    if node.ready is False:
        blocked.append("not Ready")
    if not blocked:
        return
    upgrade = node.labels.get("nvidia.com/gpu-driver-upgrade-state", "")
    note = ""
    if upgrade and upgrade != "upgrade-done":
        note = f" The GPU Operator's driver upgrade is in progress ({upgrade})."
    yield rule.finding(
        snap,
        f"Node {node.name} is {' and '.join(blocked)}, but the audit found its host healthy: "
        f"its GPUs cannot be scheduled.{note}",
        Evidence("kubernetes.node.spec", blocked, "schedulable", _excerpt(node, "spec")),
        severity=Severity.LOW if note else None,
    )


@rule(
    "GA908",
    "GPU nodes in the cluster that the inventory lacks",
    category=CATEGORY,
    owner=Owner.INFRA,
    severity=Severity.MEDIUM,
    likelihood=3,
    impact=3,
    remediation=(
        "Add the host to the inventory (or map it with kubernetes_node host data), so that "
        "its GPUs are audited like the others'."
    ),
    references=(refs.GUIDE_KUBE_MAPPING, refs.GUIDE_KUBE_VIEW),
    fleet=True,
)
def nodes_not_in_inventory(
    rule: Rule, snapshots: Sequence[HostSnapshot], ctx: RuleContext
) -> Iterable[CheckResult]:
    """Nodes that advertise GPUs or carry GPU labels but map to no inventory host.

    Checks: every node that advertises a GPU resource or carries ``nvidia.com/gpu.*`` /
    ``amd.com/gpu.*`` labels, mapped to the inventory's hosts as the host rules map them; a
    node no host maps to gets one finding, filed under the fleet. CPU-only and control-plane
    nodes are not GPU hosts and are left out. (An audit limited with --limit lacks the other
    hosts by design: disable this rule for such runs.)
    Why: a GPU node the audit never sees is a GPU fleet nobody checks.
    Evidence: the node's name and GPU resources.
    Remediation: add it to the inventory.
    """
    problem = view_problem(ctx.cluster)
    if problem is not None or ctx.cluster is None:
        for snap in snapshots:
            yield NotEvaluated(problem or "", host=snap.host, outcome=view_outcome(ctx.cluster))
        return
    mapped = mapping(list(snapshots), ctx.settings_for, ctx.cluster)
    taken = {n.name for n in mapped.values() if n is not None}
    for node in ctx.cluster.nodes:
        if node.name in taken or not node.is_gpu_node:
            continue
        yield rule.finding_for(
            FLEET_HOST,
            f"Node {node.name} ({_counts(advertised(node))}) is in the cluster "
            "but no inventory host maps to it: its GPUs are not audited.",
            Evidence(
                "kubernetes.nodes",
                node.name,
                "an inventory host",
                _excerpt(node, "nvidia.com/gpu.product", "capacity"),
            ),
        )


@rule(
    "GA909",
    "Inventory hosts without a Kubernetes node",
    category=CATEGORY,
    owner=Owner.INFRA,
    severity=Severity.LOW,
    likelihood=3,
    impact=2,
    remediation=(
        "Join the host to the cluster, or name its node with kubernetes_node host data "
        "where node and inventory names differ; hosts that are not Kubernetes nodes by design "
        "can disable this rule in their group (disabled_rules)."
    ),
    references=(refs.GUIDE_KUBE_MAPPING,),
    fleet=True,
)
def hosts_without_node(
    rule: Rule, snapshots: Sequence[HostSnapshot], ctx: RuleContext
) -> Iterable[CheckResult]:
    """Inventory hosts that no node of the cluster maps to, when a view is given.

    Checks: each audited host mapped by ``kubernetes_node`` host data, by name or by short name;
    a host without a node gets a finding, one that names a missing node too.
    Why: GPUs the inventory counts on that Kubernetes cannot schedule, or a node renamed so the
    audit's cross-checks miss it.
    Evidence: the names tried.
    Remediation: join the host, or map its node.
    """
    problem = view_problem(ctx.cluster)
    for snap in snapshots:
        if problem is not None or ctx.cluster is None:
            yield NotEvaluated(problem or "", host=snap.host, outcome=view_outcome(ctx.cluster))
            continue
        if snap.status in NOT_COLLECTED:
            continue
        node, how = find_node(snap, ctx.settings_for(snap), ctx.cluster)
        if node is None:
            yield rule.finding(
                snap,
                f"The cluster has no node for this host: {how}.",
                Evidence("kubernetes.nodes", None, "a node for the host"),
            )
