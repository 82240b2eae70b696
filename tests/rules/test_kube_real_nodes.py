"""GA901–GA909 on real ``kubectl get nodes -o json`` outputs (whole node objects).

The captures (tests/fixtures/kubernetes/, provenance in tests/fixtures/SOURCES.md):

- ``edgexr-rke2-a16-4q-vgpu-driver550.90.07-nodelist.json``: a List of one RKE2 node "nori",
  a VM with one NVIDIA A16-4Q vGPU, GPU Operator v24.9.2 with a pre-installed driver
  550.90.07 (CUDA 12.4), GFD labels current and deprecated, MIG strategy single.
- ``edgexr-aks-3x-cpu-only-nodelist.json``: a List of three AKS agent-pool nodes without GPUs.

Every expectation below is read off the raw file, not off the parser's output. Where a test
changes a capture (one Node cut out of the List, a cordon written in, two lists joined) it is
derived and says so. Hosts come from the rule-test factories (conftest.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuaudit.inspect import inspect_file
from gpuaudit.model.cluster import ClusterView
from gpuaudit.model.snapshot import HostSnapshot
from gpuaudit.parsers.kube import parse_nodes
from gpuaudit.parsers.warnings import collecting
from gpuaudit.rules import FLEET_HOST, assess
from gpuaudit.rules.base import Finding, Outcome
from gpuaudit.rules.kube_view import (
    cuda_from_labels,
    driver_from_labels,
    mig_strategy,
    product_key,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "kubernetes"
A16 = FIXTURES / "edgexr-rke2-a16-4q-vgpu-driver550.90.07-nodelist.json"
AKS = FIXTURES / "edgexr-aks-3x-cpu-only-nodelist.json"
AKS_NODES = [f"aks-agentpool-30520393-vmss00000{i}" for i in range(3)]
A16_NAME = "NVIDIA A16-4Q"  # the vGPU profile as nvidia-smi names it in the VM
A16_DRIVER = "550.90.07"


def _read(path: Path) -> ClusterView:
    with collecting() as warnings:
        view = parse_nodes(path.read_text(), str(path))
    assert warnings == []  # nothing in a real node list is left unplaced
    return view


def _run(*snaps: HostSnapshot, cluster: ClusterView) -> tuple[list[Finding], dict[Any, Any]]:
    result = assess(snaps, None, cluster)
    found = [f for f in result.findings if f.rule.startswith("GA90")]
    outcomes = {(o.rule, o.host): o for o in result.outcomes if o.rule.startswith("GA90")}
    return found, outcomes


def _codes(found: list[Finding]) -> list[str]:
    return sorted(f.rule for f in found)


def _nori(make_host, make_gpu, **gpu: Any) -> HostSnapshot:
    """The host the A16 node is, as an audit that agrees with the node would see it."""
    changes = {"name": A16_NAME, "driver_version": A16_DRIVER, **gpu}
    return make_host(
        "nori", gpus=[make_gpu(0, **changes)], driver_version=A16_DRIVER, cuda_version="12.4"
    )


# --- the parser on the captures ---------------------------------------------------------


def test_a16_node_fields_as_the_file_shows_them() -> None:
    raw = json.loads(A16.read_text())
    assert raw["kind"] == "List" and len(raw["items"]) == 1
    view = _read(A16)
    assert view.source == str(A16) and view.error is None
    (node,) = view.nodes
    assert node.name == "nori"
    # status.capacity / allocatable: cpu 2, memory, pods 110 … and "nvidia.com/gpu": "1".
    assert node.capacity == {"nvidia.com/gpu": 1}
    assert node.allocatable == {"nvidia.com/gpu": 1}
    # spec holds podCIDR(s) and providerID only: no unschedulable, no taints.
    assert node.unschedulable is False and node.taints == ()
    conditions = [(c.type, c.status, c.reason, c.message) for c in node.conditions]
    assert conditions == [
        ("NetworkUnavailable", "False", "FlannelIsUp", "Flannel is running on this node"),
        ("EtcdIsVoter", "True", "MemberNotLearner", "Node is a voting member of the etcd cluster"),
        ("MemoryPressure", "False", "KubeletHasSufficientMemory",
         "kubelet has sufficient memory available"),
        ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
    ]  # fmt: skip
    assert node.ready is True
    # kubernetes.io/hostname "nori" and the Hostname address "nori": one name.
    assert node.hostnames == ("nori",)
    labels = node.labels
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A16-4Q"
    assert labels["nvidia.com/gpu.count"] == "1"
    assert labels["nvidia.com/gpu.replicas"] == "1"
    assert labels["nvidia.com/gpu.memory"] == "4096"
    assert labels["nvidia.com/gpu.mode"] == "graphics"
    assert labels["nvidia.com/gpu.deploy.driver"] == "pre-installed"
    assert labels["nvidia.com/gpu-driver-upgrade-state"] == "upgrade-done"
    assert labels["nvidia.com/vgpu.present"] == "true"
    assert labels["nvidia.com/vgpu.host-driver-version"] == "550.54.16"
    assert labels["nvidia.com/mig.capable"] == "false"
    assert labels["node-role.kubernetes.io/control-plane"] == "true"
    assert len(node.nvidia_labels()) == 39
    assert node.is_gpu_node
    # Driver and CUDA labels: the current set and the deprecated one say the same.
    assert labels["nvidia.com/cuda.driver-version.full"] == "550.90.07"
    assert (labels["nvidia.com/cuda.driver.major"], labels["nvidia.com/cuda.driver.minor"],
            labels["nvidia.com/cuda.driver.rev"]) == ("550", "90", "07")  # fmt: skip
    assert driver_from_labels(node, deprecated=False) == "550.90.07"
    assert driver_from_labels(node, deprecated=True) == "550.90.07"
    assert cuda_from_labels(node, deprecated=False) == "12.4"
    assert cuda_from_labels(node, deprecated=True) == "12.4"
    assert mig_strategy(node) == "single"
    assert product_key(labels["nvidia.com/gpu.product"]) == product_key(A16_NAME) == "A16-4Q"


def test_aks_nodes_fields_as_the_file_shows_them() -> None:
    raw = json.loads(AKS.read_text())
    assert raw["kind"] == "List" and len(raw["items"]) == 3
    view = _read(AKS)
    assert [n.name for n in view.nodes] == AKS_NODES
    for node in view.nodes:
        # cpu 2, memory, pods 110, attachable-volumes-azure-disk 4: no GPU resource at all.
        assert node.capacity == {} and node.allocatable == {}
        assert node.nvidia_labels() == {}
        assert not node.is_gpu_node
        assert node.unschedulable is False and node.taints == ()
        assert [(c.type, c.status) for c in node.conditions] == [
            ("NetworkUnavailable", "False"),
            ("MemoryPressure", "False"),
            ("DiskPressure", "False"),
            ("PIDPressure", "False"),
            ("Ready", "True"),
        ]
        assert node.hostnames == (node.name,)
        assert node.labels["node.kubernetes.io/instance-type"] == "Standard_D2s_v3"


def test_one_node_cut_out_of_the_list_reads_the_same() -> None:
    # Derived: items[0] of the A16 List alone, as `kubectl get node nori -o json` prints a Node.
    item = json.loads(A16.read_text())["items"][0]
    assert item["kind"] == "Node"
    (single,) = parse_nodes(json.dumps(item, indent=4)).nodes
    assert single == _read(A16).nodes[0]


def test_inspect_recognises_the_captures_as_node_lists() -> None:
    for path, names in ((A16, ["nori"]), (AKS, AKS_NODES)):
        result = inspect_file(path)
        assert result.get("error") is None
        assert result["kind"] == "kubernetes-nodes"
        assert [n["name"] for n in result["parsed"]["nodes"]] == names
        json.dumps(result)


# --- the rules against the A16 node -----------------------------------------------------


def test_a16_node_matching_its_host_passes(make_host, make_gpu) -> None:
    found, outcomes = _run(_nori(make_host, make_gpu), cluster=_read(A16))
    assert found == []
    assert len(outcomes) == 9  # GA901-GA909, every one judged on "nori" (GA908's pass too)
    assert {o.outcome for o in outcomes.values()} == {Outcome.PASS}


def test_a16_node_advertises_a_gpu_that_answers_with_an_error(make_host, make_gpu) -> None:
    host = _nori(make_host, make_gpu, status="error", status_detail="Unknown Error")
    found, _ = _run(host, cluster=_read(A16))
    by_rule = {f.rule: f for f in found}
    assert set(by_rule) == {"GA901", "GA906"}
    assert by_rule["GA901"].severity.value == "high"
    assert "nvidia.com/gpu 1 advertised, 0 expected" in by_rule["GA901"].message
    assert "GPU 0 answers with an error" in by_rule["GA906"].message


def test_a16_labels_stale_after_a_driver_upgrade(make_host, make_gpu) -> None:
    upgraded = make_host(
        "nori",
        gpus=[make_gpu(0, name=A16_NAME, driver_version="550.127.05")],
        driver_version="550.127.05",
        cuda_version="12.4",
    )
    found, _ = _run(upgraded, cluster=_read(A16))
    assert _codes(found) == ["GA902", "GA902"]  # the current and the deprecated set
    assert all("550.90.07" in f.message and "550.127.05" in f.message for f in found)
    assert {"deprecated" in f.message for f in found} == {True, False}


def test_a16_cuda_labels_stale(make_host, make_gpu) -> None:
    host = make_host(
        "nori",
        gpus=[make_gpu(0, name=A16_NAME, driver_version=A16_DRIVER)],
        driver_version=A16_DRIVER,
        cuda_version="12.8",
    )
    found, _ = _run(host, cluster=_read(A16))
    assert _codes(found) == ["GA903", "GA903"]
    assert all("CUDA 12.4" in f.message and "12.8" in f.message for f in found)


def test_a16_product_label_against_another_model(make_host, make_gpu) -> None:
    host = _nori(make_host, make_gpu, name="NVIDIA L40S")
    found, _ = _run(host, cluster=_read(A16))
    assert _codes(found) == ["GA904"]
    assert "product NVIDIA-A16-4Q" in found[0].message and "NVIDIA L40S" in found[0].message


def test_a16_node_cordoned_while_its_host_is_healthy(make_host, make_gpu) -> None:
    # Derived: the capture with `kubectl cordon nori` written in (spec.unschedulable and the
    # taint the node controller adds).
    raw = json.loads(A16.read_text())
    raw["items"][0]["spec"]["unschedulable"] = True
    raw["items"][0]["spec"]["taints"] = [
        {"effect": "NoSchedule", "key": "node.kubernetes.io/unschedulable"}
    ]
    cordoned = parse_nodes(json.dumps(raw))
    assert cordoned.nodes[0].unschedulable
    found, _ = _run(_nori(make_host, make_gpu), cluster=cordoned)
    # upgrade-state upgrade-done: not an upgrade in progress, so medium, not low.
    assert [(f.rule, f.severity.value) for f in found] == [("GA907", "medium")]


def test_a16_node_and_an_inventory_that_does_not_name_it(make_host) -> None:
    found, outcomes = _run(make_host("gpu-01"), cluster=_read(A16))
    assert [(f.rule, f.host) for f in found] == [("GA908", FLEET_HOST), ("GA909", "gpu-01")]
    assert "nori" in found[0].message
    assert outcomes["GA901", "gpu-01"].outcome is Outcome.NOT_EVALUATED


# --- the rules against the AKS nodes ----------------------------------------------------


def test_aks_cpu_nodes_are_not_gpu_nodes_missing_from_the_inventory(make_host) -> None:
    found, outcomes = _run(make_host("gpu-01"), cluster=_read(AKS))
    assert [(f.rule, f.host) for f in found] == [("GA909", "gpu-01")]
    assert outcomes["GA908", "gpu-01"].outcome is Outcome.PASS


def test_aks_node_named_by_a_gpu_host_advertises_no_gpu(make_host) -> None:
    host = make_host(AKS_NODES[1])  # two healthy L40S by the factory
    found, _ = _run(host, cluster=_read(AKS))
    assert [(f.rule, f.severity.value) for f in found] == [("GA901", "medium")]
    assert "nvidia.com/gpu 0 advertised, 2 expected" in found[0].message
    assert "device plugin is not running" in found[0].message


def test_both_lists_joined_map_each_host_to_its_node(make_host, make_gpu) -> None:
    # Derived: the two captures' items in one List, as one cluster.
    items = [*json.loads(AKS.read_text())["items"], *json.loads(A16.read_text())["items"]]
    cluster = parse_nodes(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    assert [n.name for n in cluster.nodes] == [*AKS_NODES, "nori"]
    cpu_host = make_host(AKS_NODES[0], gpus=0, host_data={"expected_gpu_count": 0})
    found, outcomes = _run(_nori(make_host, make_gpu), cpu_host, cluster=cluster)
    assert found == []
    assert outcomes["GA901", "nori"].outcome is Outcome.PASS


@pytest.mark.parametrize(
    ("path", "list_metadata"),
    [(A16, {"resourceVersion": ""}), (AKS, {"resourceVersion": "", "selfLink": ""})],
    ids=["a16", "aks"],
)
def test_the_captures_are_kept_whole(path: Path, list_metadata: dict[str, str]) -> None:
    text = path.read_text()
    assert text.startswith("{\n") and text.endswith("}\n")
    # The List's own metadata as printed (the AKS cluster, kubelet v1.18.19, adds selfLink).
    assert json.loads(text)["metadata"] == list_metadata
