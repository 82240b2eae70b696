"""What the scheduler rules (scheduler_kube.py) share: which node is a host, what a node should
advertise given the GPUs the audit saw, what GPU Feature Discovery's labels say, and why a host
must be drained.

Node ↔ host: the host data ``kubernetes_node: NAME`` wins; else the node whose name (or
``kubernetes.io/hostname`` label, or Hostname address) is the inventory name without its
connector prefix (``@ssh/``, ``@sim/`` …) or the name the host gave itself; else the same by
short name (``gpu-01.example.com`` ↔ ``gpu-01``). Names compare case-insensitively, as DNS names
do.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuaudit.model.cluster import (
    AMD_GPU,
    NVIDIA_GPU,
    NVIDIA_MIG_PREFIX,
    ClusterView,
    KubeNode,
    short_name,
)
from gpuaudit.model.findings import Outcome
from gpuaudit.model.snapshot import Gpu, HostSnapshot, HostStatus
from gpuaudit.rules.mig import gpu_instance_counts
from gpuaudit.rules.xid_catalog import XidAction, lookup

NO_VIEW = (
    "no Kubernetes view given (gpuaudit audit --kube-nodes FILE, or --kubeconfig PATH / "
    "--kube-context NAME)"
)
_CONNECTOR = re.compile(r"^@[\w.-]+/")
_DRAIN_ACTIONS = (XidAction.RESET_GPU, XidAction.RESTART_BM)


def view_outcome(cluster: ClusterView | None) -> Outcome:
    """The outcome of a rule that cannot judge against ``cluster``: not applicable without a
    view (the run was given none), not evaluated when one was asked for and not read."""
    return Outcome.NOT_APPLICABLE if cluster is None else Outcome.NOT_EVALUATED


def view_problem(cluster: ClusterView | None) -> str | None:
    """Why the rules cannot judge against this view (None: they can)."""
    if cluster is None:
        return NO_VIEW
    if cluster.error is not None:
        return f"the Kubernetes view could not be read: {cluster.error}"
    return None


def host_names(snap: HostSnapshot) -> list[str]:
    """The names a host may have in the cluster, most specific first, lower case."""
    names = [_CONNECTOR.sub("", snap.host), snap.os.hostname or ""]
    found: list[str] = []
    for name in names:
        name = name.strip().lower().rstrip(".")
        if name and name not in found:
            found.append(name)
    return found


def find_node(
    snap: HostSnapshot, settings: Mapping[str, Any], cluster: ClusterView
) -> tuple[KubeNode | None, str]:
    """The host's node and how it was matched ("" when none: then the second item says why)."""
    override = settings.get("kubernetes_node")
    if isinstance(override, str) and override:
        node = cluster.node(override)
        if node is None:
            return None, f"kubernetes_node: {override} names no node of the cluster"
        return node, f"kubernetes_node: {override}"
    names = host_names(snap)
    for name in names:
        node = cluster.node_answering_to(name)
        if node is not None:
            return node, f"by name ({name})"
    for name in names:
        node = cluster.node_answering_to_short(short_name(name))
        if node is not None:
            return node, f"by short name ({short_name(name)})"
    return None, f"no node of the cluster is named {' or '.join(names) or snap.host}"


def mapping(
    snapshots: tuple[HostSnapshot, ...] | list[HostSnapshot],
    settings_for: Any,
    cluster: ClusterView,
) -> dict[str, KubeNode | None]:
    """Host name → its node (None: none), for a whole fleet."""
    return {s.host: find_node(s, settings_for(s), cluster)[0] for s in snapshots}


def label_int(node: KubeNode, key: str) -> int | None:
    value = node.labels.get(key, "").strip()
    return int(value) if value.isdigit() else None


def mig_strategy(node: KubeNode) -> str:
    return node.labels.get("nvidia.com/mig.strategy", "").strip().lower() or "none"


def nvidia_gpus(snap: HostSnapshot) -> list[Gpu]:
    return [g for g in snap.gpus if g.vendor == "nvidia"]


def mig_enabled(gpu: Gpu) -> bool:
    return (gpu.mig_mode_current or "").strip().lower() == "enabled"


def mig_devices(snap: HostSnapshot, gpu: Gpu) -> dict[str, int]:
    """MIG devices per profile the device plugin would advertise for one GPU."""
    return gpu_instance_counts(snap, gpu) or {}


@dataclass(frozen=True)
class Expected:
    """What a node should advertise for the GPUs the audit saw healthy, and how it got there."""

    resources: dict[str, int]
    basis: str


def expected_resources(snap: HostSnapshot, node: KubeNode) -> Expected:
    """The GPU resources a node should advertise for the host's healthy GPUs (status ok), by
    the device plugin's MIG strategy (the node's ``nvidia.com/mig.strategy`` label) and its
    time-slicing replicas (``nvidia.com/gpu.replicas``)."""
    resources: dict[str, int] = {}
    notes: list[str] = []
    nvidia = [g for g in nvidia_gpus(snap) if g.status == "ok"]
    amd = [g for g in snap.gpus if g.vendor == "amd" and g.status == "ok"]
    if nvidia:
        replicas = max(label_int(node, "nvidia.com/gpu.replicas") or 1, 1)
        full = [g for g in nvidia if not mig_enabled(g)]
        migs = [g for g in nvidia if mig_enabled(g)]
        strategy = mig_strategy(node)
        by_profile: Counter[str] = Counter()
        for gpu in migs:
            by_profile.update(mig_devices(snap, gpu))
        if strategy == "mixed":
            resources[NVIDIA_GPU] = len(full) * replicas
            for profile, count in sorted(by_profile.items()):
                resources[NVIDIA_MIG_PREFIX + profile] = count
        elif strategy == "single" and migs:
            resources[NVIDIA_GPU] = sum(by_profile.values())
            notes.append("MIG strategy single: one nvidia.com/gpu per MIG device")
        else:
            resources[NVIDIA_GPU] = len(nvidia) * replicas
        notes.insert(0, f"{len(nvidia)} healthy NVIDIA GPUs ({len(migs)} in MIG mode)")
        if replicas > 1:
            notes.append(f"{replicas} time-slicing replicas each")
    if amd:
        resources[AMD_GPU] = len(amd)
        notes.append(f"{len(amd)} healthy AMD GPUs")
    return Expected(resources, "; ".join(notes))


def advertised(node: KubeNode) -> dict[str, int]:
    """The node's GPU resources as the scheduler counts them (allocatable, else capacity);
    time-sliced replicas renamed to ``nvidia.com/gpu.shared`` count as nvidia.com/gpu."""
    counts = node.gpu_resources()
    shared = counts.pop(NVIDIA_GPU + ".shared", None)
    if shared is not None:
        counts[NVIDIA_GPU] = counts.get(NVIDIA_GPU, 0) + shared
    return counts


def driver_from_labels(node: KubeNode, deprecated: bool) -> str | None:
    """The driver version GPU Feature Discovery labelled: the current labels
    (``nvidia.com/cuda.driver-version.*``) or the deprecated ones (``cuda.driver.*``)."""
    labels = node.labels
    if not deprecated:
        full = labels.get("nvidia.com/cuda.driver-version.full", "").strip()
        if full:
            return full
        parts = [labels.get(f"nvidia.com/cuda.driver-version.{p}") for p in _PARTS]
    else:
        parts = [labels.get(f"nvidia.com/cuda.driver.{p}") for p in ("major", "minor", "rev")]
    if parts[0] is None or parts[1] is None:
        return None
    return ".".join(p.strip() for p in parts if p is not None and p.strip())


_PARTS = ("major", "minor", "revision")


def cuda_from_labels(node: KubeNode, deprecated: bool) -> str | None:
    labels = node.labels
    if not deprecated:
        full = labels.get("nvidia.com/cuda.runtime-version.full", "").strip()
        if full:
            return full
        major = labels.get("nvidia.com/cuda.runtime-version.major")
        minor = labels.get("nvidia.com/cuda.runtime-version.minor")
    else:
        major = labels.get("nvidia.com/cuda.runtime.major")
        minor = labels.get("nvidia.com/cuda.runtime.minor")
    if major is None or minor is None:
        return None
    return f"{major.strip()}.{minor.strip()}"


def product_key(name: str) -> str:
    """A GPU model as GPU Feature Discovery writes it (characters other than letters, digits,
    ``-_.`` and spaces dropped, runs of spaces turned into one ``-``), upper case, without a
    leading ``NVIDIA-`` (older drivers name the A100 without it), a ``-SHARED`` suffix
    (time-slicing) or a ``-MIG-<profile>`` part (MIG strategy single)."""
    text = re.sub(r"[^A-Za-z0-9_. -]", "", name)
    text = "-".join(text.split()).upper()
    text = text.removesuffix("-SHARED")
    text = re.sub(r"-MIG-.*$", "", text)
    return text.removeprefix("NVIDIA-")


def drain_reasons(snap: HostSnapshot, settings: Mapping[str, Any]) -> list[str]:
    """Why the audit says no new work belongs on this host (empty: it does not say so).

    A driver that does not answer, a GPU that answers with an error, GPUs missing against the
    attached or expected count (fallen off the bus), a GPU the driver says needs a reset or a
    drain, a failed row remap, and XIDs whose NVIDIA immediate action is a GPU reset or a
    reboot.
    """
    reasons: list[str] = []
    if snap.status is HostStatus.DRIVER_NOT_RESPONDING:
        reasons.append("the NVIDIA driver does not answer")
    nvidia = nvidia_gpus(snap)
    for gpu in nvidia:
        if gpu.status != "ok":
            reasons.append(f"GPU {gpu.index} answers with an error")
        if gpu.drain_and_reset_recommended or gpu.reset_required:
            reasons.append(f"GPU {gpu.index}: the driver asks for a reset")
        if gpu.remapped_rows.failure:
            reasons.append(f"GPU {gpu.index}: row remapping failed")
    expected = settings.get("expected_gpu_count")
    attached = snap.attached_gpus
    if nvidia and attached and len(nvidia) < attached:
        reasons.append(f"nvidia-smi lists {len(nvidia)} of {attached} attached GPUs")
    elif nvidia and isinstance(expected, int) and 0 < len(nvidia) < expected:
        reasons.append(f"{len(nvidia)} of the expected {expected} GPUs are visible")
    codes = sorted(
        {
            (e.code, e.gpu_index)
            for e in snap.xid_events
            if e.kind == "fallen_off_bus"
            or (e.kind == "xid" and lookup(e.code).action in _DRAIN_ACTIONS)
        },
        key=lambda x: (x[0] or 0, -1 if x[1] is None else x[1]),
    )
    for code, gpu_index in codes:
        where = f" on GPU {gpu_index}" if gpu_index is not None else ""
        action = lookup(code).action.value if code is not None else "RESTART_BM"
        reasons.append(f"XID {code if code is not None else 79}{where} ({action})")
    return list(dict.fromkeys(reasons))


def blocking_taints(node: KubeNode, settings: Mapping[str, Any]) -> list[str]:
    """NoSchedule / NoExecute taints other than those the site expects on GPU nodes
    (``kubernetes_expected_taints``: the dedicated-GPU-node taint and the like)."""
    expected = {str(t) for t in settings.get("kubernetes_expected_taints") or ()}
    blocking = ("NoSchedule", "NoExecute")
    return [str(t) for t in node.taints if t.effect in blocking and t.key not in expected]
