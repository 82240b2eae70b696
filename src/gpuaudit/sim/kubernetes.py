"""The demo fleet's Kubernetes view: what ``kubectl get nodes -o json`` would print for it.

Derived from the demo fleet's profiles (profiles.py), not captured: each simulated host becomes
a node whose GPU resources and GPU Feature Discovery labels are what a device plugin and GFD
would publish for the host when it was healthy, laid out as kubectl prints a node list (the
label set follows the real GFD labels of tests/fixtures/kubernetes/). Then the view is made to
disagree with the hardware where the scheduler rules (GA9xx) should notice:

    a100-hgx-04    MIG strategy single, but GPU 7 is not in MIG mode (GA905)
    a100-hgx-05    still advertises 8 GPUs and stays schedulable: GPU 5 fell off the bus
                   (GA901, GA904, GA906)
    v100-01        labels from before its driver upgrade: 470.199.02 (GA902)
    v100-02        the driver is not loaded, the node still advertises its 2 GPUs (GA901, GA906)
    t4-01          an old GPU Feature Discovery: only the deprecated driver labels (GA902)
    rtx4000ada-01  left cordoned after a repair (GA907)
    h100-01        node named by its FQDN, h100-01.demo.internal (mapped by short name)
    p100-01        not joined to the cluster (GA909)
    a100-hgx-06    a GPU node the inventory lacks (GA908)

``python -m gpuaudit.sim.kubernetes`` prints it; src/gpuaudit/sim/data/kubernetes-nodes.json is
that output, and ``make demo`` audits the demo fleet against it (--kube-nodes).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from gpuaudit.sim.profiles import DEMO_FLEET, expected_gpu_count, get_profile

DEMO_NODES_FILE = Path(__file__).parent / "data" / "kubernetes-nodes.json"
_TIMESTAMP = "1764590400"  # 2025-12-01T12:00:00Z: the labels' generation time, fixed
_FAMILY = {"A100": "ampere", "A10G": "ampere", "H100": "hopper", "V100": "volta", "T4": "turing"}
_FAMILY.update({"P100": "pascal", "3090": "ampere", "Ada": "ada-lovelace"})
_COMPUTE = {"ampere": (8, 0), "hopper": (9, 0), "volta": (7, 0), "turing": (7, 5)}
_COMPUTE.update({"pascal": (6, 0), "ada-lovelace": (8, 9)})
_NODE_NAMES = {"h100-01": "h100-01.demo.internal"}
_NOT_IN_CLUSTER = ("p100-01", "a10g-02")


def _product(model: str) -> str:
    return "-".join(model.split())


def _family(model: str) -> str:
    return next((f for key, f in _FAMILY.items() if key in model), "ampere")


def _gfd_labels(profile: dict[str, Any], count: int, driver: str) -> dict[str, str]:
    """GFD's labels for a healthy host of this profile (current and deprecated sets)."""
    model = profile["gpu_model"]
    major, minor, *rest = driver.split(".")
    rev = rest[0] if rest else ""
    cuda_major, cuda_minor = str(profile.get("cuda", "12.2")).split(".")[:2]
    family = _family(model)
    compute = _COMPUTE[family]
    mig_capable = family in ("ampere", "hopper") and ("A100" in model or "H100" in model)
    labels = {
        "nvidia.com/cuda.driver-version.full": driver,
        "nvidia.com/cuda.driver-version.major": major,
        "nvidia.com/cuda.driver-version.minor": minor,
        "nvidia.com/cuda.driver-version.revision": rev,
        "nvidia.com/cuda.driver.major": major,
        "nvidia.com/cuda.driver.minor": minor,
        "nvidia.com/cuda.driver.rev": rev,
        "nvidia.com/cuda.runtime-version.full": f"{cuda_major}.{cuda_minor}",
        "nvidia.com/cuda.runtime-version.major": cuda_major,
        "nvidia.com/cuda.runtime-version.minor": cuda_minor,
        "nvidia.com/cuda.runtime.major": cuda_major,
        "nvidia.com/cuda.runtime.minor": cuda_minor,
        "nvidia.com/gfd.timestamp": _TIMESTAMP,
        "nvidia.com/gpu-driver-upgrade-state": "upgrade-done",
        "nvidia.com/gpu.compute.major": str(compute[0]),
        "nvidia.com/gpu.compute.minor": str(compute[1]),
        "nvidia.com/gpu.count": str(count),
        "nvidia.com/gpu.family": family,
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": _product(model),
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/mig.capable": "true" if mig_capable else "false",
        "nvidia.com/mig.strategy": "single",
    }
    if mig_capable:
        labels["nvidia.com/mig.config"] = "all-disabled"
        labels["nvidia.com/mig.config.state"] = "success"
    return labels


def _node(name: str, labels: dict[str, str], gpus: dict[str, int]) -> dict[str, Any]:
    resources = {"cpu": "64", "memory": "528262876Ki", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "labels": {
                "beta.kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                **labels,
            },
            "name": name,
        },
        "spec": {},
        "status": {
            "addresses": [{"address": name, "type": "Hostname"}],
            "allocatable": {**resources, **{k: str(v) for k, v in gpus.items()}},
            "capacity": {**resources, **{k: str(v) for k, v in gpus.items()}},
            "conditions": [
                {
                    "message": "kubelet is posting ready status",
                    "reason": "KubeletReady",
                    "status": "True",
                    "type": "Ready",
                }
            ],
            "nodeInfo": {"kubeletVersion": "v1.31.4", "operatingSystem": "linux"},
        },
    }


def _host_node(host: str) -> dict[str, Any]:
    profile = get_profile(host)
    name = _NODE_NAMES.get(host, host)
    count = expected_gpu_count(profile)
    if profile.get("vendor") == "amd":
        return _node(
            name, {"amd.com/gpu.product-name": "AMD_Instinct_MI100"}, {"amd.com/gpu": count}
        )
    labels = _gfd_labels(profile, count, str(profile["driver"]))
    gpus = {"nvidia.com/gpu": count}
    mig = {
        i: g["mig"]
        for i, g in (profile.get("gpus") or {}).items()
        if "instances" in g.get("mig", {})
    }
    if mig:
        # Strategy single: one nvidia.com/gpu per MIG device, and GFD's count and product
        # overridden to match (the MIG devices of the GPUs that are split).
        devices = Counter(p for g in mig.values() for p in g["instances"])
        profile_name = next(iter(devices))
        gpus = {"nvidia.com/gpu": sum(devices.values())}
        labels["nvidia.com/gpu.count"] = str(sum(devices.values()))
        labels["nvidia.com/gpu.product"] += f"-MIG-{profile_name}"
        labels["nvidia.com/mig.config"] = f"all-{profile_name}"
    node = _node(name, labels, gpus)
    return _apply_fault(host, node)


def _apply_fault(host: str, node: dict[str, Any]) -> dict[str, Any]:
    labels = node["metadata"]["labels"]
    if host == "v100-01":  # relabelled last before the upgrade to 470.223.02
        for key, value in (("full", "470.199.02"), ("minor", "199")):
            labels[f"nvidia.com/cuda.driver-version.{key}"] = value
        labels["nvidia.com/cuda.driver.minor"] = "199"
    if host == "t4-01":  # an old GFD: only the labels it has always written
        for key in [k for k in labels if "-version." in k]:
            del labels[key]
    if host == "rtx4000ada-01":  # cordoned for the slowdown repair, never uncordoned
        node["spec"] = {
            "taints": [{"effect": "NoSchedule", "key": "node.kubernetes.io/unschedulable"}],
            "unschedulable": True,
        }
    return node


def demo_node_list() -> dict[str, Any]:
    """The demo fleet's node list as kubectl prints it (a List of Nodes)."""
    items = [_host_node(h) for h in DEMO_FLEET if h not in _NOT_IN_CLUSTER]
    extra = _host_node("a100-hgx-01")
    extra["metadata"]["name"] = "a100-hgx-06"
    extra["metadata"]["labels"]["kubernetes.io/hostname"] = "a100-hgx-06"
    extra["status"]["addresses"] = [{"address": "a100-hgx-06", "type": "Hostname"}]
    items.append(extra)
    items.sort(key=lambda n: n["metadata"]["name"])
    return {"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}}


def demo_nodes_text() -> str:
    return json.dumps(demo_node_list(), indent=4, sort_keys=True) + "\n"


if __name__ == "__main__":
    print(demo_nodes_text(), end="")
