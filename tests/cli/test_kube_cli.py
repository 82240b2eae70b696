"""The Kubernetes view through the command line: `gpuaudit audit --kube-nodes / --kubeconfig`,
kept in the run (cluster/kubernetes-nodes.json) and used again by `gpuaudit report RUN`.

The view is the demo fleet's (src/gpuaudit/sim/data/kubernetes-nodes.json, derived from the
demo fleet by gpuaudit.sim.kubernetes); the rebuild tests use the committed example run's
snapshots of the same fleet.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuaudit.cli import main
from gpuaudit.kubeview import load_cluster_view, read_kubectl, store
from gpuaudit.sim.kubernetes import DEMO_NODES_FILE

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "reports" / "example"
LABELS_ONLY = (
    REPO / "tests/fixtures/kubernetes/cloud-native-docs-h100-mig-single-all-disabled-labels.json"
)
# What the demo view disagrees with the demo fleet on (sim/kubernetes.py), as (rule, host).
DEMO_MISMATCHES = {
    ("GA901", "@sim/a100-hgx-05"),  # 8 advertised, 7 visible
    ("GA906", "@sim/a100-hgx-05"),  # XID 79, still schedulable
    ("GA901", "@sim/v100-02"),  # driver down, 2 still advertised
    ("GA902", "@sim/v100-01"),  # stale driver labels
    ("GA902", "@sim/t4-01"),  # deprecated labels only
    ("GA907", "@sim/rtx4000ada-01"),  # cordoned while healthy
    ("GA908", "(fleet)"),  # a100-hgx-06, in no inventory
    ("GA909", "@sim/p100-01"),  # not joined to the cluster
}


def _findings(run: Path) -> set[tuple[str, str]]:
    register = json.loads((run / "register.json").read_text())
    return {(f["rule"], f["host"]) for f in register["findings"] if f["rule"].startswith("GA90")}


def _example_copy(tmp_path: Path) -> Path:
    run = tmp_path / "reports" / "example-copy"
    shutil.copytree(EXAMPLE / "hosts", run / "hosts")
    shutil.copy(EXAMPLE / "policy.yaml", run / "policy.yaml")
    return run


def test_report_rebuild_reads_and_keeps_the_view(tmp_path: Path) -> None:
    run = _example_copy(tmp_path)
    assert main(["report", str(run)]) == 0
    assert _findings(run) == set()  # no view: the scheduler rules are not evaluated
    register = json.loads((run / "register.json").read_text())
    outcome = register["hosts"][0]["outcomes"]["GA901"]
    assert outcome["outcome"] == "not_applicable" and "no Kubernetes view" in outcome["reason"]
    assert main(["report", str(run), "--kube-nodes", str(DEMO_NODES_FILE)]) == 0
    assert (run / "cluster" / "kubernetes-nodes.json").read_text() == DEMO_NODES_FILE.read_text()
    found = _findings(run)
    assert {("GA901", "@sim/a100-hgx-05"), ("GA902", "@sim/v100-01"), ("GA908", "(fleet)")} <= found
    # A later rebuild without the option judges against the kept view.
    assert main(["report", str(run)]) == 0
    assert _findings(run) == found


def test_a_file_that_is_no_node_list_is_refused(tmp_path: Path, capsys) -> None:
    run = _example_copy(tmp_path)
    assert main(["report", str(run), "--kube-nodes", str(LABELS_ONLY)]) == 2
    assert "not a NodeList" in capsys.readouterr().err
    assert not (run / "cluster").exists()
    reports = tmp_path / "audits"
    code = main(["audit", "inventory/demo.py", "--reports-dir", str(reports),
                 "--kube-nodes", str(LABELS_ONLY)])  # fmt: skip
    assert code == 2
    assert not reports.exists()  # refused before a run directory was made


def test_kubectl_failure_is_recorded(tmp_path: Path, monkeypatch) -> None:
    fake = tmp_path / "kubectl"
    fake.write_text("#!/bin/sh\necho 'error: You must be logged in to the server' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("GPUAUDIT_KUBECTL", str(fake))
    text, command, error = read_kubectl("/nowhere/kubeconfig", "prod")
    assert text is None
    assert command.endswith("--kubeconfig=/nowhere/kubeconfig --context=prod get nodes -o json")
    assert error is not None and "exited 1: error: You must be logged in" in error
    store(tmp_path, text=text, source=command, error=error)
    view = load_cluster_view(tmp_path)
    assert view is not None and view.nodes == () and "logged in" in (view.error or "")
    monkeypatch.setenv("GPUAUDIT_KUBECTL", str(tmp_path / "absent"))
    assert "not installed" in (read_kubectl()[2] or "")
    hang = tmp_path / "hang"
    hang.write_text("#!/bin/sh\nexec sleep 30\n")
    hang.chmod(0o755)
    monkeypatch.setenv("GPUAUDIT_KUBECTL", str(hang))
    assert "did not answer within 0.5 s" in (read_kubectl(timeout=0.5)[2] or "")
    printer = tmp_path / "printer"
    printer.write_text(f"#!/bin/sh\ncat {DEMO_NODES_FILE}\n")
    printer.chmod(0o755)
    monkeypatch.setenv("GPUAUDIT_KUBECTL", str(printer))
    text, _command, error = read_kubectl()
    assert error is None and text == DEMO_NODES_FILE.read_text()
    store(tmp_path, text=text, source="kubectl get nodes -o json")
    assert not (tmp_path / "cluster" / "kubernetes-nodes.failed").exists()
    kept = load_cluster_view(tmp_path)
    assert kept is not None and kept.error is None and len(kept.nodes) == 16


def test_real_kubectl_against_no_server(tmp_path: Path) -> None:
    # Debian's kubectl (kubernetes-client, installed by make test's system-deps).
    assert shutil.which("kubectl"), "kubectl is not installed: run make system-deps"
    config = tmp_path / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n"
        "    server: https://127.0.0.1:1\ncontexts:\n- name: x\n  context:\n    cluster: c\n"
        "    user: u\ncurrent-context: x\nusers:\n- name: u\n  user: {token: t}\n"
    )
    text, _command, error = read_kubectl(str(config), "x", timeout=30)
    assert text is None and error is not None and "exited 1" in error


@pytest.mark.slow
def test_audit_of_the_demo_fleet_with_its_kubernetes_view(tmp_path: Path) -> None:
    env = dict(os.environ, GPUAUDIT_SIM_DIR=str(tmp_path / "sim"))
    env.pop("GPUAUDIT_POLICY", None)
    reports = tmp_path / "reports"
    command = [
        sys.executable, "-m", "gpuaudit.cli", "audit", "inventory/demo.py",
        "--policy", "policies/demo.yaml", "--reports-dir", str(reports), "--run-id", "kube",
        "--kube-nodes", str(DEMO_NODES_FILE),
    ]  # fmt: skip
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    run = reports / "kube"
    assert (run / "register.json").exists(), result.stdout[-3000:] + result.stderr[-3000:]
    assert (run / "cluster" / "kubernetes-nodes.json").read_text() == DEMO_NODES_FILE.read_text()
    assert "file " in (run / "cluster" / "kubernetes-nodes.source").read_text()
    found = _findings(run)
    assert found >= DEMO_MISMATCHES
    # GA905: a100-hgx-04's GPU 7 is not split, under MIG strategy single.
    assert ("GA905", "@sim/a100-hgx-04") in found
    # Rebuilt from the run alone, the register keeps them.
    rebuilt = subprocess.run(
        [sys.executable, "-m", "gpuaudit.cli", "report", str(run)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert rebuilt.returncode == 0, rebuilt.stderr[-2000:]
    assert _findings(run) == found


def test_a_kept_view_carries_its_parse_warnings(tmp_path: Path) -> None:
    odd = {
        "kind": "Node",
        "metadata": {"name": "n1"},
        "status": {"capacity": {"nvidia.com/gpu": "8x"}},
    }
    nodes = {"kind": "List", "items": [odd]}
    store(tmp_path, text=json.dumps(nodes), source="test")
    view = load_cluster_view(tmp_path)
    assert view is not None and view.source == "test"
    assert [w.message for w in view.warnings] == ["node n1: capacity nvidia.com/gpu is not a count"]
    assert load_cluster_view(tmp_path / "elsewhere") is None
