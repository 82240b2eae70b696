"""A synthetic GPU fleet built from the snapshot model, for benchmarks and large-page tests.

Hosts are HGX-like (8 GPUs, NVLink topology, NIC affinity) and deterministic: host ``n`` always
gets the same faults, spread through the fleet so the rules produce a realistic register
(a few percent of hosts with memory errors, XIDs, narrow PCIe links, persistence off, driver
drift, unreachable hosts). Raw sections are left out: this measures the report, not JSON
storage of collector output.
"""

from __future__ import annotations

from gpuaudit.model.snapshot import (
    EccCounts,
    Gpu,
    HostSnapshot,
    HostStatus,
    OsInfo,
    RemappedRows,
    Service,
    Topology,
    XidEvent,
)

GPU_NAME = "NVIDIA H100 80GB HBM3"
DRIVER = "550.127.05"
OLD_DRIVER = "535.161.08"
COLLECTED_AT = "2026-11-29T16:05:00Z"
_SYSCTLS = ("net.core.rmem_max", "net.core.wmem_max")


def _bus(index: int) -> str:
    return f"0000:{0x18 + 0x10 * index:02X}:00.0"


def _gpu(host_number: int, index: int, driver: str) -> Gpu:
    remap_pending = host_number % 50 == 3 and index == 3
    narrow = host_number % 13 == 5 and index == 2
    return Gpu(
        index=index,
        name=GPU_NAME,
        uuid=f"GPU-{host_number:08x}-{index:04x}-4000-8000-{host_number * 8 + index:012x}",
        pci_bus_id=_bus(index),
        vbios_version="96.00.89.00.01",
        driver_version=driver,
        cuda_version="12.4",
        memory_total_mib=81559,
        memory_used_mib=1,
        ecc_mode_current="Enabled",
        ecc_volatile=EccCounts(corrected=0, uncorrected=0),
        ecc_aggregate=EccCounts(corrected=12 if remap_pending else 0, uncorrected=0),
        remapped_rows=RemappedRows(
            correctable=1 if remap_pending else 0, uncorrectable=0, pending=remap_pending
        ),
        temperature_c=35.0 + (host_number + index) % 20,
        power_draw_w=70.0 + index,
        power_limit_w=700.0,
        pcie_gen_current=5,
        pcie_gen_max=5,
        pcie_width_current=8 if narrow else 16,
        pcie_width_max=16,
        mig_mode_current="Disabled",
        persistence_mode=host_number % 7 != 1,
    )


def _topology(gpus: int) -> Topology:
    names = (*(f"GPU{i}" for i in range(gpus)), "NIC0")
    matrix = tuple(
        tuple(
            "X" if row == col else ("PIX" if "NIC0" in (names[row], names[col]) else "NV18")
            for col in range(len(names))
        )
        for row in range(len(names))
    )
    half = max(gpus // 2, 1)
    return Topology(
        devices=names,
        columns=names,
        matrix=matrix,
        cpu_affinity={f"GPU{i}": "0-47" if i < half else "48-95" for i in range(gpus)},
        numa_affinity={f"GPU{i}": "0" if i < half else "1" for i in range(gpus)},
        legend={"NIC0": "mlx5_0"},
    )


def _xids(host_number: int) -> tuple[XidEvent, ...]:
    events = []
    if host_number % 97 == 11:
        events.append(
            XidEvent(
                kind="xid",
                code=79,
                pci_bus_id=_bus(5),
                message="GPU has fallen off the bus.",
                raw=f"[ 7201.5] NVRM: Xid (PCI:{_bus(5)[5:]}): 79, GPU has fallen off the bus.",
                timestamp="[ 7201.500000]",
                gpu_index=5,
            )
        )
    if host_number % 50 == 3:
        events.append(
            XidEvent(
                kind="xid",
                code=63,
                pci_bus_id=_bus(3),
                message="Row remapping event",
                raw=f"[ 100.2] NVRM: Xid (PCI:{_bus(3)[5:]}): 63, Row remapping event",
                timestamp="[  100.200000]",
                gpu_index=3,
            )
        )
    return tuple(events)


def synthetic_host(number: int, gpus: int = 8) -> HostSnapshot:
    name = f"gpu-{number:05d}.dc1.example.com"
    if number % 400 == 17:
        return HostSnapshot(
            host=name,
            status=HostStatus.UNREACHABLE,
            collected_at=COLLECTED_AT,
            status_detail=f"ssh: connect to host {name} port 22: No route to host",
            host_data={"expected_gpu_count": gpus},
        )
    driver = OLD_DRIVER if number % 11 == 4 else DRIVER
    return HostSnapshot(
        host=name,
        status=HostStatus.OK,
        collected_at=COLLECTED_AT,
        status_detail=f"{gpus} GPU(s) reported (nvidia), NVIDIA driver {driver}",
        host_data={"expected_gpu_count": gpus, "gpu_model": GPU_NAME},
        os=OsInfo(
            pretty_name="Ubuntu 22.04.4 LTS",
            id="ubuntu",
            version_id="22.04",
            kernel="5.15.0-105-generic",
            hostname=name,
        ),
        driver_version=driver,
        cuda_version="12.4",
        gpus=tuple(_gpu(number, i, driver) for i in range(gpus)),
        xid_events=_xids(number),
        topology=_topology(gpus),
        services=(
            Service("nvidia-persistenced", "active", "enabled"),
            Service("nvidia-fabricmanager", "active", "enabled"),
            Service("nvidia-dcgm", "active", "enabled"),
        ),
        # Every ninth host keeps the distribution's small socket buffers.
        sysctls={key: "212992" if number % 9 == 2 else "268435456" for key in _SYSCTLS},
        tools={"nvidia-smi": True, "lspci": True},
        attached_gpus=gpus,
    )


def synthetic_fleet(hosts: int, gpus: int = 8) -> list[HostSnapshot]:
    return [synthetic_host(number, gpus) for number in range(hosts)]
