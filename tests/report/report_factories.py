"""Hand-built snapshots and findings for the report tests (no rules, no hosts, no GPU)."""

from __future__ import annotations

import dataclasses
from typing import Any

from gpuaudit.model.snapshot import (
    EccCounts,
    Gpu,
    HostSnapshot,
    HostStatus,
    OsInfo,
    RemappedRows,
    Section,
    Topology,
    XidEvent,
)
from gpuaudit.report.register import build_register
from gpuaudit.rules.base import Evidence, Finding, Owner, Severity

EVIL = "<script>alert(1)</script>"
GENERATED_AT = "2026-11-29T16:10:00Z"


def gpu(index: int, **changes: Any) -> Gpu:
    base = Gpu(
        index=index,
        name="NVIDIA H100 80GB HBM3",
        uuid=f"GPU-0000000{index}-aaaa-bbbb-cccc-dddddddddddd",
        pci_bus_id=f"0000:{0x18 + index:02X}:00.0",
        vbios_version="96.00.89.00.01",
        memory_total_mib=81559,
        temperature_c=41.0,
        power_draw_w=71.5,
        power_limit_w=700.0,
        pcie_gen_current=5,
        pcie_gen_max=5,
        pcie_width_current=16,
        pcie_width_max=16,
        mig_mode_current="Disabled",
        persistence_mode=True,
        ecc_mode_current="Enabled",
        ecc_aggregate=EccCounts(corrected=0, uncorrected=0),
        remapped_rows=RemappedRows(correctable=0, uncorrectable=0, pending=False),
    )
    return dataclasses.replace(base, **changes)


def healthy_host(name: str = "gpu-b01", gpus: int = 2) -> HostSnapshot:
    return HostSnapshot(
        host=name,
        status=HostStatus.OK,
        collected_at="2026-11-29T16:05:00Z",
        os=OsInfo(pretty_name="Ubuntu 22.04.4 LTS", kernel="5.15.0-105-generic"),
        driver_version="550.127.05",
        cuda_version="12.4",
        gpus=tuple(gpu(i) for i in range(gpus)),
        topology=Topology(
            devices=("GPU0", "GPU1", "NIC0"),
            columns=("GPU0", "GPU1", "NIC0"),
            matrix=(("X", "NV18", "PIX"), ("NV18", "X", "SYS"), ("PIX", "SYS", "X")),
            cpu_affinity={"GPU0": "0-47", "GPU1": "48-95"},
            numa_affinity={"GPU0": "0", "GPU1": "1"},
            legend={"NIC0": "mlx5_0"},
        ),
        xid_events=(
            XidEvent(
                kind="xid",
                code=79,
                pci_bus_id="0000:19:00.0",
                message="GPU has fallen off the bus.",
                raw="[ 200.5] NVRM: Xid (PCI:0000:19:00): 79, GPU has fallen off the bus.",
                timestamp="[  200.500000]",
                gpu_index=1,
            ),
            XidEvent(
                kind="xid",
                code=13,
                pci_bus_id="0000:18:00.0",
                message="Graphics SM Warp Exception",
                raw="[ 49.2] NVRM: Xid (PCI:0000:18:00): 13, Graphics SM Warp Exception",
                timestamp="[   49.261458]",
                gpu_index=0,
            ),
        ),
    )


def evil_host() -> HostSnapshot:
    """A host whose every string field tries to break out of the page."""
    return HostSnapshot(
        host=EVIL,
        status=HostStatus.DEGRADED,
        collected_at="2026-11-29T16:06:00Z",
        status_detail=f"one GPU errored: {EVIL}",
        os=OsInfo(pretty_name=EVIL, kernel="6.1 </script><script>alert(2)</script>"),
        driver_version=EVIL,
        gpus=(gpu(0, name=EVIL, status="error", status_detail=EVIL),),
        xid_events=(
            XidEvent(
                kind="xid",
                code=31,
                pci_bus_id="0000:18:00.0",
                message="MMU Fault </script><script>alert(3)</script>",
                raw="NVRM: Xid 31 </script><img src=x onerror=alert(4)>",
                timestamp="2025-01-21T02:21:33,498559+00:00",
                gpu_index=0,
            ),
        ),
        sections={"nvidia_smi": Section(rc=9, stderr=f"boom {EVIL}")},
    )


def unreachable_host(name: str = "gpu-z99") -> HostSnapshot:
    return HostSnapshot(
        host=name,
        status=HostStatus.UNREACHABLE,
        collected_at="2026-11-29T16:07:00Z",
        status_detail="ssh: connect to host gpu-z99 port 22: No route to host",
    )


def finding(
    rule: str = "GA301",
    severity: Severity = Severity.HIGH,
    host: str = "gpu-b01",
    *,
    category: str = "memory",
    owner: Owner = Owner.INFRA,
    gpu_index: int | None = 0,
    message: str = "Row remapping pending: reset the GPU",
    excerpt: str = "Pending : Yes",
) -> Finding:
    return Finding(
        rule=rule,
        title=f"Title of {rule}",
        severity=severity,
        category=category,
        owner=owner,
        host=host,
        message=message,
        evidence=Evidence(
            fact="gpus[0].remapped_rows.pending", actual=True, expected=False, excerpt=excerpt
        ),
        remediation="Drain the node and reset the GPU.",
        references=(
            "https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/",
            "docs/field-guide/gpu-memory-errors.md#row-remapping",
        ),
        gpu=gpu_index,
        gpu_name="NVIDIA H100 80GB HBM3" if gpu_index is not None else None,
        operation="gpuaudit.operations.gpu.reset",
    )


def register_document(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """register.json's document of the register ``build_register`` makes of the arguments."""
    return build_register(*args, **kwargs).to_dict()
