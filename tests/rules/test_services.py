from __future__ import annotations

from gpuaudit.model.snapshot import DeviceNode, Package, Service, Topology
from gpuaudit.rules.base import Severity

H100 = "NVIDIA H100 80GB HBM3"
FM_OK = Service("nvidia-fabricmanager", "active", "enabled")
FM_DOWN = Service("nvidia-fabricmanager", "failed", "enabled")
PERSIST = Service("nvidia-persistenced", "active", "enabled")


def hgx(make_host, make_gpu, name=H100, count=8, **changes):
    gpus = [make_gpu(i, name=name) for i in range(count)]
    return make_host(gpus=gpus, **changes)


def test_persistence_off_per_gpu(make_host, make_gpu, findings):
    snap = make_host(
        gpus=[make_gpu(0), make_gpu(1, persistence_mode=False)],
        services=(Service("nvidia-persistenced", "inactive", "disabled"),),
    )
    (f,) = findings("GA401", snap)
    assert (f.gpu, f.severity) == (1, Severity.MEDIUM)
    assert f.operation == "gpuaudit.operations.persistence.enable"
    assert "inactive/disabled" in f.message


def test_persistence_on_without_daemon_is_one_low_host_finding(make_host, findings):
    snap = make_host(services=(Service("nvidia-persistenced", "inactive", "not-found"),))
    (f,) = findings("GA401", snap)
    assert f.gpu is None and f.severity is Severity.LOW
    assert "lost at the next reboot" in f.message


def test_persistence_policy_can_waive(make_host, make_gpu, findings):
    snap = make_host(gpus=[make_gpu(0, persistence_mode=False)])
    assert findings("GA401", snap, policy={"persistence_mode_required": False}) == []


def test_fabric_manager_not_running_on_hgx(make_host, make_gpu, findings):
    snap = hgx(make_host, make_gpu, services=(PERSIST, FM_DOWN))
    (f,) = findings("GA402", snap)
    assert f.severity is Severity.CRITICAL
    assert "8 × NVIDIA H100 80GB HBM3" in f.message and "failed" in f.message
    assert findings("GA402", hgx(make_host, make_gpu, services=(PERSIST, FM_OK))) == []


def test_fabric_manager_not_installed(make_host, make_gpu, findings):
    snap = hgx(make_host, make_gpu, name="NVIDIA A100-SXM4-80GB")
    (f,) = findings("GA402", snap)
    assert "not installed" in f.message


def test_fabric_manager_version_must_match_driver(make_host, make_gpu, findings):
    packages = (
        Package("nvidia-driver-550-server", "550.127.05-0ubuntu1", held=True),
        Package("nvidia-fabricmanager-550", "550.90.07-1"),
    )
    snap = hgx(make_host, make_gpu, services=(PERSIST, FM_OK), packages=packages)
    (f,) = findings("GA402", snap)
    assert f.severity is Severity.HIGH
    assert "550.90.07-1 vs driver 550.127.05" in f.message
    matching = (packages[0], Package("nvidia-fabricmanager-550", "1:550.127.05-1"))
    ok = hgx(make_host, make_gpu, services=(PERSIST, FM_OK), packages=matching)
    assert findings("GA402", ok) == []


def test_four_gpu_boards_and_pcie_cards_are_not_nvswitch_systems(make_host, make_gpu, findings):
    assert findings("GA402", hgx(make_host, make_gpu, count=4)) == []
    assert findings("GA402", hgx(make_host, make_gpu, name="NVIDIA H100 PCIe")) == []
    assert findings("GA402", hgx(make_host, make_gpu, name="NVIDIA H100 NVL")) == []


def test_nvswitch_detected_from_device_nodes_and_topology(make_host, make_gpu, findings):
    nodes = (DeviceNode("/dev/nvidia-nvswitch0", "660"), DeviceNode("/dev/nvidia0", "660"))
    (f,) = findings("GA402", make_host(device_nodes=nodes))
    assert "/dev/nvidia-nvswitch0" in f.message

    labels = tuple(f"GPU{i}" for i in range(8))
    matrix = tuple(tuple("X" if i == j else "NV18" for j in range(8)) for i in range(8))
    topo = Topology(devices=labels, columns=labels, matrix=matrix)
    gpus = [make_gpu(i, name="Some Future GPU") for i in range(8)]
    (g,) = findings("GA402", make_host(gpus=gpus, topology=topo))
    assert "every pair of 8 GPUs" in g.message
    # One PCIe hop breaks the all-to-all pattern.
    broken = tuple(
        tuple("SYS" if (i, j) == (0, 7) else cell for j, cell in enumerate(row))
        for i, row in enumerate(matrix)
    )
    snap = make_host(gpus=gpus, topology=Topology(labels, labels, broken))
    assert findings("GA402", snap) == []
