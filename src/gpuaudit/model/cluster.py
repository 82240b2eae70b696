"""What a scheduler believes about the hosts: the Kubernetes cluster's view of its nodes.

The audit reads it once per run, from the control node (``kubectl get nodes -o json``) or from
a saved copy of that output, and keeps the text in the run directory
(``cluster/kubernetes-nodes.json``) so a rebuilt register judges the hosts against the same
view. :mod:`gpuaudit.parsers.kube` turns that text into a :class:`ClusterView`; the scheduler
rules (GA9xx) compare it with the snapshots.

Only what the rules read is kept: a node's labels (GPU Feature Discovery's ``nvidia.com/*``
among them), its GPU resources (``nvidia.com/gpu``, ``nvidia.com/mig-<profile>``,
``amd.com/gpu``) in capacity and allocatable, whether it is cordoned, its taints and its
conditions.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from gpuaudit.model.snapshot import ParseWarning

# Extended resources that count GPUs (or MIG devices) on a node.
NVIDIA_GPU = "nvidia.com/gpu"
NVIDIA_MIG_PREFIX = "nvidia.com/mig-"
AMD_GPU = "amd.com/gpu"


def is_gpu_resource(name: str) -> bool:
    """Whether a node resource counts GPUs or MIG devices (``nvidia.com/gpu.shared``, the
    device plugin's name for time-sliced replicas under ``renameByDefault``, counts too)."""
    return (
        name in (NVIDIA_GPU, AMD_GPU, NVIDIA_GPU + ".shared")
        or name.startswith(NVIDIA_MIG_PREFIX)
        or name.startswith("amd.com/gpu")
    )


@dataclass(frozen=True)
class Taint:
    key: str
    value: str = ""
    effect: str = ""  # NoSchedule | PreferNoSchedule | NoExecute

    def __str__(self) -> str:
        value = f"={self.value}" if self.value else ""
        return f"{self.key}{value}:{self.effect}"


@dataclass(frozen=True)
class NodeCondition:
    type: str  # Ready, MemoryPressure, DiskPressure, PIDPressure, NetworkUnavailable …
    status: str  # "True" | "False" | "Unknown", as the API spells it
    reason: str = ""
    message: str = ""


@dataclass(frozen=True)
class KubeNode:
    """One node as the API server reports it.

    ``capacity`` and ``allocatable`` hold the GPU resources only, as whole numbers (a device
    plugin advertises counts); a value that is not a count is left out with a parse warning.
    ``hostnames`` are the node's ``kubernetes.io/hostname`` label and its ``Hostname``
    addresses: the names the mapping to inventory hosts tries after the node's own name.
    """

    name: str
    labels: dict[str, str] = field(default_factory=dict)
    capacity: dict[str, int] = field(default_factory=dict)
    allocatable: dict[str, int] = field(default_factory=dict)
    unschedulable: bool = False
    taints: tuple[Taint, ...] = ()
    conditions: tuple[NodeCondition, ...] = ()
    hostnames: tuple[str, ...] = ()

    @property
    def answers_to(self) -> tuple[str, ...]:
        """The names the node answers to when inventory hosts are mapped onto it: its own name,
        then its hostnames, lower case and without a trailing dot."""
        return tuple(n.lower().rstrip(".") for n in (self.name, *self.hostnames))

    @property
    def ready(self) -> bool | None:
        """The Ready condition: True, False, or None when it is missing or Unknown."""
        cond = next((c for c in self.conditions if c.type == "Ready"), None)
        if cond is None or cond.status not in ("True", "False"):
            return None
        return cond.status == "True"

    def gpu_resources(self) -> dict[str, int]:
        """GPU resources advertised: allocatable where the node reports it, else capacity."""
        return dict(self.allocatable) if self.allocatable else dict(self.capacity)

    def nvidia_labels(self) -> dict[str, str]:
        return {k: v for k, v in self.labels.items() if k.startswith("nvidia.com/")}

    @property
    def is_gpu_node(self) -> bool:
        """Whether the node advertises GPUs or carries GPU Feature Discovery's labels."""
        return (
            any(n > 0 for n in self.capacity.values())
            or any(n > 0 for n in self.allocatable.values())
            or self.labels.get("nvidia.com/gpu.present") == "true"
            or any(k.startswith(("nvidia.com/gpu.", "amd.com/gpu.")) for k in self.labels)
        )


def short_name(name: str) -> str:
    """A host or node name's first label."""
    return name.split(".", 1)[0]


@dataclass(frozen=True)
class ClusterView:
    """The cluster's nodes as one read gave them, or why the read failed.

    ``source`` says where the view came from (a file, or the kubectl command with its
    context); ``error`` is set when it could not be read, and then ``nodes`` is empty: the
    rules are not evaluated, with the error as the reason, instead of judging an empty cluster.
    ``warnings`` are what the parser met in the node list and could not place.
    """

    nodes: tuple[KubeNode, ...] = ()
    source: str = ""
    error: str | None = None
    warnings: tuple[ParseWarning, ...] = ()

    def node(self, name: str) -> KubeNode | None:
        """The first node named exactly ``name``."""
        return self._index[0].get(name)

    def node_answering_to(self, name: str) -> KubeNode | None:
        """The first node that answers to ``name`` (lower case, no trailing dot): its own
        name or one of its hostnames."""
        return self._index[1].get(name)

    def node_answering_to_short(self, short: str) -> KubeNode | None:
        """The first node one of whose names has ``short`` as its first label."""
        return self._index[2].get(short)

    @functools.cached_property
    def _index(self) -> tuple[dict[str, KubeNode], dict[str, KubeNode], dict[str, KubeNode]]:
        # Each name to the first node in the view's order that has it, made once: a fleet of
        # thousands of hosts is mapped onto thousands of nodes without walking the nodes for
        # each host and rule.
        exact: dict[str, KubeNode] = {}
        full: dict[str, KubeNode] = {}
        short: dict[str, KubeNode] = {}
        for node in self.nodes:
            exact.setdefault(node.name, node)
            for name in node.answers_to:
                full.setdefault(name, node)
                short.setdefault(short_name(name), node)
        return exact, full, short
