"""GA901–GA909: the Kubernetes view against the snapshots.

Views are node lists built here (derived: a Node with the labels and resources a test needs,
laid out as kubectl prints them), some around the real GFD labels of
tests/fixtures/kubernetes/; hosts come from the rule-test factories (conftest.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuaudit.model.cluster import ClusterView
from gpuaudit.model.snapshot import HostSnapshot, HostStatus, MigDevice, XidEvent
from gpuaudit.parsers.kube import parse_nodes
from gpuaudit.rules import FLEET_HOST, all_rules, assess
from gpuaudit.rules.base import Finding, Outcome
from gpuaudit.rules.kube_view import NO_VIEW, product_key

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "kubernetes"
H100_SINGLE = FIXTURES / "cloud-native-docs-h100-mig-single-all-disabled-labels.json"
A100_NONE = FIXTURES / "cloud-native-docs-a100-mig-none-driver450-labels.json"
H100 = "NVIDIA H100 80GB HBM3"


def node(name: str, labels: dict[str, str] | None = None, gpus: int | None = None, **extra: Any):
    resources = {"cpu": "64", **({"nvidia.com/gpu": str(gpus)} if gpus is not None else {})}
    resources.update({k: str(v) for k, v in extra.pop("resources", {}).items()})
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": extra.pop("spec", {}),
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "conditions": extra.pop("conditions", [{"type": "Ready", "status": "True"}]),
        },
    }


def view(*nodes: dict[str, Any]) -> ClusterView:
    return parse_nodes(json.dumps({"apiVersion": "v1", "kind": "List", "items": list(nodes)}))


def gfd(
    driver: str = "550.127.05", cuda: str = "12.4", product: str = "NVIDIA-L40S", count: int = 2
):
    major, minor, rev = driver.split(".")
    return {
        "nvidia.com/cuda.driver-version.full": driver,
        "nvidia.com/cuda.driver.major": major,
        "nvidia.com/cuda.driver.minor": minor,
        "nvidia.com/cuda.driver.rev": rev,
        "nvidia.com/cuda.runtime-version.full": cuda,
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.count": str(count),
        "nvidia.com/mig.strategy": "single",
    }


Run = Callable[..., tuple[list[Finding], dict[tuple[str, str], Any]]]


@pytest.fixture
def run() -> Run:
    def evaluate(*snaps: HostSnapshot, cluster: ClusterView | None, policy: dict | None = None):
        result = assess(snaps, policy, cluster)
        found = [f for f in result.findings if f.rule.startswith("GA90")]
        outcomes = {(o.rule, o.host): o for o in result.outcomes if o.rule.startswith("GA90")}
        return found, outcomes

    return evaluate


def codes(found: list[Finding]) -> list[str]:
    return sorted(f.rule for f in found)


def test_rules_are_in_the_scheduler_category() -> None:
    mine = [r for r in all_rules() if "GA901" <= r.code <= "GA909"]
    assert [r.code for r in mine] == [f"GA90{i}" for i in range(1, 10)]
    assert {r.category for r in mine} == {"scheduler"}


def test_without_a_view_every_rule_is_not_applicable(make_host, run: Run) -> None:
    found, outcomes = run(make_host("gpu-01"), cluster=None)
    assert found == []
    assert len(outcomes) == 9
    assert {(o.outcome, o.reason) for o in outcomes.values()} == {(Outcome.NOT_APPLICABLE, NO_VIEW)}


def test_a_failed_read_is_the_reason(make_host, run: Run) -> None:
    failed = ClusterView(source="kubectl get nodes -o json", error="kubectl exited 1: Unauthorized")
    _, outcomes = run(make_host("gpu-01"), cluster=failed)
    assert all("Unauthorized" in o.reason for o in outcomes.values())


def test_a_matching_healthy_node_passes_everything(make_host, run: Run) -> None:
    host = make_host("@ssh/gpu-01", cuda_version="12.4")
    found, outcomes = run(host, cluster=view(node("gpu-01", gfd(), gpus=2)))
    assert found == []
    assert {o.outcome for o in outcomes.values()} == {Outcome.PASS}


def test_real_h100_labels_against_a_matching_and_an_upgraded_host(make_host, make_gpu, run: Run):
    labels = json.loads(H100_SINGLE.read_text())  # node s4124-0073: 1× H100, 550.54.15, CUDA 12.4
    cluster = view(node("s4124-0073", labels, gpus=1))
    gpu = make_gpu(0, name=H100, driver_version="550.54.15")
    host = make_host("s4124-0073", gpus=[gpu], driver_version="550.54.15", cuda_version="12.4")
    found, _ = run(host, cluster=cluster)
    assert found == []
    upgraded = make_host("s4124-0073", gpus=[make_gpu(0, name=H100)], cuda_version="12.4")
    found, _ = run(upgraded, cluster=cluster)
    assert codes(found) == ["GA902", "GA902"]  # the current and the deprecated set are stale
    assert "550.54.15" in found[0].message and "550.127.05" in found[0].message
    assert {"deprecated" in f.message for f in found} == {True, False}


def test_real_old_gfd_labels_are_flagged_deprecated(make_host, make_gpu, run: Run) -> None:
    labels = json.loads(A100_NONE.read_text())  # only nvidia.com/cuda.driver.* = 450.80.02
    gpu = make_gpu(0, name="A100-SXM4-40GB", driver_version="450.80.02")
    host = make_host("dgx", gpus=[gpu], driver_version="450.80.02", cuda_version="11.0")
    found, _ = run(host, cluster=view(node("dgx", labels, gpus=1)))
    assert [(f.rule, f.severity.value) for f in found] == [("GA902", "low")]
    assert "only the deprecated" in found[0].message


def test_gpu_fallen_off_the_bus_still_advertised(make_host, make_gpu, run: Run) -> None:
    gpus = [make_gpu(i) for i in range(7)]
    xid = XidEvent("fallen_off_bus", 79, "0000:1F:00.0", "GPU has fallen off the bus.", "NVRM: ...")
    host = make_host("gpu-01", gpus=gpus, attached_gpus=8, xid_events=(xid,),
                     host_data={"expected_gpu_count": 8})  # fmt: skip
    found, _ = run(host, cluster=view(node("gpu-01", gfd(count=8), gpus=8)))
    by_rule = {f.rule: f for f in found}
    assert set(by_rule) == {"GA901", "GA904", "GA906"}
    assert by_rule["GA901"].severity.value == "high"
    assert "nvidia.com/gpu 8 advertised, 7 expected" in by_rule["GA901"].message
    assert "7 of 8 attached" in by_rule["GA906"].message and "XID 79" in by_rule["GA906"].message
    # Cordoned, it is no longer GA906's; still over-advertised.
    cordoned = node("gpu-01", gfd(count=8), gpus=8, spec={"unschedulable": True})
    found, _ = run(host, cluster=view(cordoned))
    assert "GA906" not in codes(found) and "GA901" in codes(found)


def test_expected_taints_keep_a_node_schedulable(make_host, run: Run) -> None:
    host = make_host("gpu-01", status=HostStatus.DRIVER_NOT_RESPONDING, gpus=0)
    dedicated = {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]}
    found, _ = run(host, cluster=view(node("gpu-01", gfd(), gpus=2, spec=dedicated)))
    assert codes(found) == ["GA901", "GA906"]
    assert "driver does not answer" in next(f for f in found if f.rule == "GA906").message


def test_fewer_advertised_and_no_device_plugin(make_host, run: Run) -> None:
    found, _ = run(make_host("gpu-01"), cluster=view(node("gpu-01", gfd(), gpus=1)))
    assert [(f.rule, f.severity.value) for f in found] == [("GA901", "medium")]
    found, _ = run(make_host("gpu-01"), cluster=view(node("gpu-01", gfd())))
    assert "device plugin is not running" in found[0].message


def test_time_slicing_replicas(make_host, run: Run) -> None:
    labels = {
        **gfd(),
        "nvidia.com/gpu.replicas": "4",
        "nvidia.com/gpu.product": "NVIDIA-L40S-SHARED",
    }
    found, _ = run(make_host("gpu-01"), cluster=view(node("gpu-01", labels, gpus=8)))
    assert found == []


def _mig_gpu(make_gpu, index: int, profiles: list[str]):
    devices = tuple(MigDevice(i, i, 0, p) for i, p in enumerate(profiles))
    return make_gpu(index, name=H100, mig_mode_current="Enabled", mig_devices=devices)


def test_mig_strategies(make_host, make_gpu, run: Run) -> None:
    split = [_mig_gpu(make_gpu, i, ["1g.10gb"] * 7) for i in range(2)]
    labels = {**gfd(product="NVIDIA-H100-80GB-HBM3-MIG-1g.10gb", count=14)}
    host = make_host("gpu-01", gpus=split)
    found, _ = run(host, cluster=view(node("gpu-01", labels, gpus=14)))
    assert found == []
    # Mixed layout under single: GA905; under none: MIG devices not advertised.
    uneven = [split[0], make_gpu(1, name=H100)]
    found, _ = run(make_host("gpu-01", gpus=uneven), cluster=view(node("gpu-01", labels, gpus=14)))
    assert "GA905" in codes(found)
    assert "not split alike" in next(f for f in found if f.rule == "GA905").message
    none = {**labels, "nvidia.com/mig.strategy": "none"}
    found, _ = run(host, cluster=view(node("gpu-01", none, gpus=2)))
    assert "no MIG device is advertised" in next(f for f in found if f.rule == "GA905").message
    mixed = {
        **gfd(product="NVIDIA-H100-80GB-HBM3", count=2),
        "nvidia.com/mig.strategy": "mixed",
        "nvidia.com/mig.config": "all-1g.10gb",
        "nvidia.com/mig.config.state": "success",
    }
    good = node("gpu-01", mixed, resources={"nvidia.com/gpu": 0, "nvidia.com/mig-1g.10gb": 14})
    found, _ = run(host, cluster=view(good))
    assert found == []
    failed = {**mixed, "nvidia.com/mig.config.state": "failed"}
    short = node("gpu-01", failed, resources={"nvidia.com/gpu": 0, "nvidia.com/mig-1g.10gb": 7})
    found, _ = run(host, cluster=view(short))
    assert codes(found) == ["GA901", "GA905"]
    assert "failed to apply" in next(f for f in found if f.rule == "GA905").message


def test_stale_cuda_and_product_labels(make_host, run: Run) -> None:
    labels = gfd(cuda="12.2", product="NVIDIA-A100-SXM4-80GB")
    found, _ = run(
        make_host("gpu-01", cuda_version="12.4"), cluster=view(node("gpu-01", labels, gpus=2))
    )
    assert codes(found) == ["GA903", "GA904"]
    assert product_key("NVIDIA L40S") == product_key("NVIDIA-L40S-SHARED") == "L40S"
    assert product_key("A100-SXM4-40GB-MIG-1g.5gb") == product_key("NVIDIA A100-SXM4-40GB")


def test_cordoned_healthy_node(make_host, run: Run) -> None:
    cordon = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
    spec = {"unschedulable": True, "taints": [cordon]}
    found, _ = run(make_host("gpu-01"), cluster=view(node("gpu-01", gfd(), gpus=2, spec=spec)))
    assert [(f.rule, f.severity.value) for f in found] == [("GA907", "medium")]
    upgrading = {**gfd(), "nvidia.com/gpu-driver-upgrade-state": "cordon-required"}
    found, _ = run(make_host("gpu-01"), cluster=view(node("gpu-01", upgrading, gpus=2, spec=spec)))
    assert [(f.rule, f.severity.value) for f in found] == [("GA907", "low")]
    not_ready = node("gpu-01", gfd(), gpus=2, conditions=[{"type": "Ready", "status": "False"}])
    found, _ = run(make_host("gpu-01"), cluster=view(not_ready))
    assert "not Ready" in found[0].message


def test_mapping_by_short_name_override_and_fleet_rules(make_host, run: Run) -> None:
    cluster = view(
        node("gpu-01.example.com", gfd(), gpus=2),
        node("k8s-worker-7", gfd(), gpus=2),
        node("gpu-99", gfd(), gpus=2),  # in no inventory
        node("cpu-01", {}),  # no GPUs: not GA908's
    )
    a = make_host("gpu-01")
    b = make_host("gpu-02", host_data={"expected_gpu_count": 2, "kubernetes_node": "k8s-worker-7"})
    c = make_host("gpu-03", host_data={"expected_gpu_count": 2, "kubernetes_node": "gone"})
    d = make_host("gpu-04")
    found, outcomes = run(a, b, c, d, cluster=cluster)
    assert [(f.rule, f.host) for f in found if f.rule == "GA908"] == [("GA908", FLEET_HOST)]
    assert "gpu-99" in next(f for f in found if f.rule == "GA908").message
    missing = {f.host: f.message for f in found if f.rule == "GA909"}
    assert set(missing) == {"gpu-03", "gpu-04"}
    assert "kubernetes_node: gone names no node" in missing["gpu-03"]
    assert outcomes["GA901", "gpu-01"].outcome is Outcome.PASS  # short name
    assert outcomes["GA901", "gpu-02"].outcome is Outcome.PASS  # override
    assert outcomes["GA901", "gpu-04"].outcome is Outcome.NOT_EVALUATED
    assert "GA909" in outcomes["GA901", "gpu-04"].reason


def test_amd_gpus(make_host, make_gpu, run: Run) -> None:
    gpus = [make_gpu(i, vendor="amd", name="AMD Instinct MI100") for i in range(6)]
    host = make_host("mi100-01", gpus=gpus, driver_version=None)
    ok = node("mi100-01", resources={"amd.com/gpu": 6})
    assert run(host, cluster=view(ok))[0] == []
    found, _ = run(host, cluster=view(node("mi100-01", resources={"amd.com/gpu": 8})))
    assert codes(found) == ["GA901"] and "amd.com/gpu 8 advertised, 6 expected" in found[0].message


class _CountedNodes(tuple):
    """A view's nodes that count how often they are walked."""

    walks = 0

    def __iter__(self):
        type(self).walks += 1
        return super().__iter__()


def test_a_fleet_is_mapped_onto_the_nodes_walking_them_once(make_host, run: Run) -> None:
    """Thousands of hosts onto thousands of nodes: the nodes are indexed once for the run, not
    walked for each host and rule, and each host still finds the node it found before."""
    parsed = view(
        *(node(f"gpu-{i:04d}.dc1.example.com", gfd(), gpus=2) for i in range(300)),
        node("GPU-0007.other.example.com.", gfd(), gpus=2),  # a later node with the same short name
        node("K8S-Worker-1.", gfd(), gpus=2),
    )
    _CountedNodes.walks = 0
    cluster = ClusterView(nodes=_CountedNodes(parsed.nodes), source=parsed.source)
    hosts = [make_host(f"gpu-{i:04d}") for i in range(300)]
    hosts.append(make_host("k8s-worker-1"))
    hosts.append(make_host("gpu-0400.dc1.example.com"))
    found, outcomes = run(*hosts, cluster=cluster)
    assert _CountedNodes.walks <= 5  # the index, and the fleet rule that lists unmapped nodes
    # Matched by short name to the first node in the view's order that has it.
    assert outcomes["GA901", "gpu-0007"].outcome is Outcome.PASS
    assert cluster.node_answering_to_short("gpu-0007") is parsed.nodes[7]
    # Lower case, without the trailing dot, by its full name.
    assert outcomes["GA901", "k8s-worker-1"].outcome is Outcome.PASS
    assert cluster.node_answering_to("k8s-worker-1") is parsed.nodes[301]
    assert (
        cluster.node("K8S-Worker-1.") is parsed.nodes[301] and cluster.node("k8s-worker-1") is None
    )
    unmapped = {f.host for f in found if f.rule == "GA909"}
    assert unmapped == {"gpu-0400.dc1.example.com"}
    assert [f.host for f in found if f.rule == "GA908"] == [FLEET_HOST]  # GPU-0007.other…
