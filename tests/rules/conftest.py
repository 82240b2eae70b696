"""Factories for rule tests: healthy snapshots that a test then breaks in one place.

``make_gpu`` and ``make_host`` build a host every rule is silent on; a test passes the one field
it wants faulty (``make_gpu(1, persistence_mode=False)``). ``findings`` runs the whole rule set
through ``evaluate()`` and keeps one code, so tests exercise the same path the audit does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from gpuaudit.model.snapshot import (
    DeviceNode,
    EccCounts,
    Gpu,
    HostSnapshot,
    HostStatus,
    Package,
    RemappedRows,
    Service,
)
from gpuaudit.rules import evaluate
from gpuaudit.rules.base import Finding

H100 = "NVIDIA H100 80GB HBM3"
DRIVER = "550.127.05"


def _gpu(index: int = 0, **changes: Any) -> Gpu:
    fields: dict[str, Any] = {
        "index": index,
        "name": "NVIDIA L40S",
        "uuid": f"GPU-0000000{index}",
        "pci_bus_id": f"0000:{0x18 + index:02X}:00.0",
        "driver_version": DRIVER,
        "memory_total_mib": 81559,
        "ecc_mode_current": "Enabled",
        "ecc_mode_pending": "Enabled",
        "ecc_volatile": EccCounts(corrected=0, uncorrected=0),
        "ecc_aggregate": EccCounts(corrected=0, uncorrected=0),
        "remapped_rows": RemappedRows(correctable=0, uncorrectable=0, pending=False, failure=False),
        "temperature_c": 41.0,
        "temperature_slowdown_c": 87.0,
        "power_draw_w": 120.0,
        "power_limit_w": 350.0,
        "utilization_gpu_pct": 0.0,
        "clock_event_reasons": ("gpu_idle",),
        "pcie_gen_current": 1,
        "pcie_gen_max": 4,
        "pcie_width_current": 16,
        "pcie_width_max": 16,
        "mig_mode_current": None,
        "mig_mode_pending": None,
        "persistence_mode": True,
    }
    fields.update(changes)
    return Gpu(**fields)


def _host(
    name: str = "gpu-01",
    gpus: int | Sequence[Gpu] = 2,
    **changes: Any,
) -> HostSnapshot:
    gpu_list = tuple(_gpu(i) for i in range(gpus)) if isinstance(gpus, int) else tuple(gpus)
    fields: dict[str, Any] = {
        "host": name,
        "status": HostStatus.OK,
        "collected_at": "2025-06-01T00:00:00Z",
        "host_data": {"expected_gpu_count": len(gpu_list), "vendor": "nvidia"},
        "driver_version": DRIVER,
        "driver_version_proc": DRIVER,
        "gpus": gpu_list,
        "packages": (
            Package("nvidia-driver-550-server", f"{DRIVER}-0ubuntu1", held=True),
            Package("libnvidia-compute-550-server", f"{DRIVER}-0ubuntu1", held=True),
        ),
        "sysctls": {"net.core.rmem_max": "134217728", "net.core.wmem_max": "268435456"},
        "services": (
            Service("nvidia-persistenced", "active", "enabled"),
            Service("nvidia-fabricmanager", "inactive", "not-found"),
            Service("nvidia-dcgm", "active", "enabled"),
        ),
        "device_nodes": (
            DeviceNode("/dev/nvidiactl", "660", "root", "video"),
            DeviceNode("/dev/nvidia0", "660", "root", "video"),
        ),
        "tools": {
            "nvidia-smi": True,
            "rocm-smi": False,
            "amd-smi": False,
            "dmesg": True,
            "journalctl": True,
        },
    }
    fields.update(changes)
    return HostSnapshot(**fields)


@pytest.fixture
def make_gpu() -> Callable[..., Gpu]:
    return _gpu


@pytest.fixture
def make_host() -> Callable[..., HostSnapshot]:
    return _host


@pytest.fixture
def findings() -> Callable[..., list[Finding]]:
    """``findings(code, *snapshots, policy=None)``: the evaluated findings of one rule."""

    def run(code: str, *snapshots: HostSnapshot, policy: dict[str, Any] | None = None):
        return [f for f in evaluate(snapshots, policy) if f.rule == code]

    return run
