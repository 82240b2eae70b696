"""``kubectl get nodes -o json`` → ClusterView, on real GPU Feature Discovery labels.

The captures in tests/fixtures/kubernetes/ are real ``kubectl get node -o json | jq`` outputs
of a node's labels (NVIDIA's cloud-native docs). The parser reads whole node lists, so the
tests below wrap each real label map in a Node of a kubectl ``List`` (derived here: labels as
captured, the rest of the Node built by :func:`_node_list`). The expectations name what each
raw file shows. The demo view (src/gpuaudit/sim/data/kubernetes-nodes.json) is derived from
the demo fleet (sim/kubernetes.py), not captured.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuaudit.model.cluster import NodeCondition, Taint
from gpuaudit.parsers.errors import ParseError
from gpuaudit.parsers.kube import parse_nodes
from gpuaudit.parsers.warnings import collecting
from gpuaudit.rules.kube_view import cuda_from_labels, driver_from_labels, mig_strategy
from gpuaudit.sim.kubernetes import DEMO_NODES_FILE, demo_nodes_text

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "kubernetes"
H100_SINGLE = FIXTURES / "cloud-native-docs-h100-mig-single-all-disabled-labels.json"
H100_MIXED = FIXTURES / "cloud-native-docs-h100-mig-mixed-all-balanced-labels.json"
A100_NONE = FIXTURES / "cloud-native-docs-a100-mig-none-driver450-labels.json"
A100_SINGLE = FIXTURES / "cloud-native-docs-a100-mig-single-1g5gb-driver450-labels.json"


def _node_list(labels: dict[str, str], name: str, **status: Any) -> str:
    """A kubectl List with one Node carrying ``labels`` (derived: see the module docstring)."""
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": status.pop("spec", {}),
        "status": status,
    }
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": [node], "metadata": {}})


def _labels(path: Path) -> dict[str, str]:
    data: dict[str, str] = json.loads(path.read_text())
    return data


# Per capture: what the raw file says (node name from its kubernetes.io/hostname label where it
# has one), and what the label readers make of it.
CAPTURES = {
    H100_SINGLE: {
        "hostname": "s4124-0073",
        "labels": 158,
        "nvidia_labels": 39,
        "driver": "550.54.15",
        "driver_deprecated": "550.54.15",
        "cuda": "12.4",
        "cuda_deprecated": "12.4",
        "product": "NVIDIA-H100-80GB-HBM3",
        "count": "1",
        "strategy": "single",
        "config": "all-disabled",
        "state": "success",
    },
    H100_MIXED: {
        "hostname": "s4124-0073",
        "labels": 197,
        "nvidia_labels": 78,
        "driver": "550.54.15",
        "driver_deprecated": "550.54.15",
        "cuda": "12.4",
        "cuda_deprecated": "12.4",
        "product": "NVIDIA-H100-80GB-HBM3",
        "count": "1",
        "strategy": "mixed",
        "config": "all-balanced",
        "state": "success",
    },
    A100_NONE: {
        "hostname": None,
        "labels": 13,
        "nvidia_labels": 13,
        "driver": None,  # an old GFD: no nvidia.com/cuda.driver-version.* labels
        "driver_deprecated": "450.80.02",
        "cuda": None,
        "cuda_deprecated": "11.0",
        "product": "A100-SXM4-40GB",
        "count": "1",
        "strategy": "none",  # no nvidia.com/mig.strategy label at all
        "config": None,
        "state": None,
    },
    A100_SINGLE: {
        "hostname": None,
        "labels": 22,
        "nvidia_labels": 22,
        "driver": None,
        "driver_deprecated": "450.80.02",
        "cuda": None,
        "cuda_deprecated": "11.0",
        "product": "A100-SXM4-40GB-MIG-1g.5gb",
        "count": "7",
        "strategy": "single",
        "config": None,
        "state": None,
    },
}


@pytest.mark.parametrize("path", list(CAPTURES), ids=lambda p: p.name)
def test_real_gfd_labels_read_field_by_field(path: Path) -> None:
    want = CAPTURES[path]
    labels = _labels(path)
    name = want["hostname"] or "dgx-a100"
    view = parse_nodes(_node_list(labels, name), "test")
    assert [n.name for n in view.nodes] == [name]
    node = view.nodes[0]
    assert len(node.labels) == want["labels"]
    assert len(node.nvidia_labels()) == want["nvidia_labels"]
    assert node.labels == labels  # every label kept, values as strings
    assert driver_from_labels(node, deprecated=False) == want["driver"]
    assert driver_from_labels(node, deprecated=True) == want["driver_deprecated"]
    assert cuda_from_labels(node, deprecated=False) == want["cuda"]
    assert cuda_from_labels(node, deprecated=True) == want["cuda_deprecated"]
    assert node.labels.get("nvidia.com/gpu.product") == want["product"]
    assert node.labels.get("nvidia.com/gpu.count") == want["count"]
    assert mig_strategy(node) == want["strategy"]
    assert node.labels.get("nvidia.com/mig.config") == want["config"]
    assert node.labels.get("nvidia.com/mig.config.state") == want["state"]
    assert node.hostnames == ((want["hostname"],) if want["hostname"] else ())
    assert node.is_gpu_node  # GFD's nvidia.com/gpu.* labels make it one
    assert node.capacity == {} and node.allocatable == {}


def test_mixed_capture_mig_profile_counts() -> None:
    labels = _labels(H100_MIXED)
    counts = {
        k: v for k, v in labels.items() if k.startswith("nvidia.com/mig-") and k.endswith(".count")
    }
    assert counts == {
        "nvidia.com/mig-1g.10gb.count": "2",
        "nvidia.com/mig-2g.20gb.count": "1",
        "nvidia.com/mig-3g.40gb.count": "1",
    }
    assert labels["nvidia.com/gpu.replicas"] == "0"


def test_a_bare_label_map_is_refused() -> None:
    # What the captures are as found (jq's .metadata.labels): not a node list.
    for path in CAPTURES:
        with pytest.raises(ParseError, match="not a NodeList, List or Node"):
            parse_nodes(path.read_text())


@pytest.mark.parametrize(
    "text, reason",
    [
        ("", "not JSON"),
        ("error: You must be logged in to the server (Unauthorized)", "not JSON"),
        ("[]", "not a JSON object"),
        ('{"kind": "PodList", "items": []}', "kind 'PodList'"),
        ('{"kind": "NodeList"}', "without an items list"),
        (
            '{"kind": "List", "items": [{"kind": "Pod", "metadata": {"name": "p"}}]}',
            "holds no Node",
        ),
        ("[" * 100_000, "not JSON"),
    ],
)
def test_refused_inputs(text: str, reason: str) -> None:
    with pytest.raises(ParseError, match=reason):
        parse_nodes(text)


def test_status_spec_and_odd_values() -> None:
    text = _node_list(
        {"kubernetes.io/hostname": "gpu-01"},
        "gpu-01.example.com",
        spec={
            "unschedulable": True,
            "taints": [
                {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
                {"effect": "NoExecute"},
                "junk",
            ],
        },
        capacity={
            "cpu": "64",
            "nvidia.com/gpu": "8",
            "nvidia.com/mig-1g.10gb": "7",
            "amd.com/gpu": "x",
        },
        allocatable={"nvidia.com/gpu": "7", "nvidia.com/gpu.shared": "16"},
        conditions=[{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}, {}],
        addresses=[
            {"type": "InternalIP", "address": "10.0.0.1"},
            {"type": "Hostname", "address": "gpu-01x"},
        ],
    )
    with collecting() as warnings:
        view = parse_nodes(text)
    node = view.nodes[0]
    assert node.capacity == {"nvidia.com/gpu": 8, "nvidia.com/mig-1g.10gb": 7}
    assert node.allocatable == {"nvidia.com/gpu": 7, "nvidia.com/gpu.shared": 16}
    assert node.unschedulable is True
    assert node.taints == (Taint("nvidia.com/gpu", "present", "NoSchedule"),)
    assert node.conditions == (NodeCondition("Ready", "False", "KubeletNotReady"),)
    assert node.ready is False
    assert node.hostnames == ("gpu-01", "gpu-01x")
    messages = [w.message for w in warnings]
    assert any("amd.com/gpu is not a count" in m for m in messages)
    assert sum("without a key" in m for m in messages) == 2
    assert any("condition without a type" in m for m in messages)


def test_single_node_and_nameless_nodes() -> None:
    one = json.dumps({"kind": "Node", "metadata": {"name": "n1"}, "status": {}})
    assert [n.name for n in parse_nodes(one).nodes] == ["n1"]
    listed = json.dumps(
        {"kind": "NodeList", "items": [{"metadata": {}}, {"metadata": {"name": "n2"}}, 3]}
    )
    with collecting() as warnings:
        view = parse_nodes(listed)
    assert [n.name for n in view.nodes] == ["n2"]
    assert len(warnings) == 2
    assert parse_nodes('{"kind": "List", "items": []}').nodes == ()


def test_demo_view_is_the_generators_output() -> None:
    assert DEMO_NODES_FILE.read_text() == demo_nodes_text()
    view = parse_nodes(DEMO_NODES_FILE.read_text())
    names = {n.name for n in view.nodes}
    assert "a100-hgx-06" in names and "p100-01" not in names and "h100-01.demo.internal" in names
    by_name = {n.name: n for n in view.nodes}
    assert by_name["a100-hgx-05"].allocatable == {"nvidia.com/gpu": 8}
    assert by_name["mi100-01"].allocatable == {"amd.com/gpu": 6}
    assert by_name["rtx4000ada-01"].unschedulable is True
