"""Named profiles of simulated GPU hosts: the demo fleet (``inventory/demo.py``) and a few
hosts that only tests use.

A profile names a real captured ``nvidia-smi -q -x`` (or rocm-smi JSON) and states how this
host differs from a healthy one of that model; ``build.build_state`` fills in the rest. The
demo fleet has one or more hosts per GPU model, most carrying one fault an audit must find:

    a100-hgx-01    8× A100-SXM4-80GB, healthy (NVSwitch, fabric manager, DCGM)
    a100-hgx-02    row remap pending on GPU 3 + its XID 63 (values of a real A100 capture)
    a100-hgx-03    driver drift (535.54.03 among 535.161.08 peers), fabric manager missing
    a100-hgx-04    MIG: GPUs 0-6 in 4× 1g.20gb, GPU 7 has MIG enable pending
    a100-hgx-05    GPU 5 fell off the bus: XID 79 in the kernel log, 7 of 8 GPUs answer
    v100-01        2× Tesla V100-PCIE-32GB, healthy
    v100-02        driver not loaded: nvidia-smi exits 9, daemons failed
    t4-01          Tesla T4, healthy
    t4-02          persistence mode off (nvidia-persistenced stopped), net.core.rmem_max default
    t4-03          nvidia-smi missing (driver loaded, nvidia-utils removed)
    a10g-01        NVIDIA A10G, XID storm (629 lines of XID 13 / 43)
    a10g-02        unreachable
    p100-01        Tesla P100, world-writable /dev/nvidia*, driver packages not held
    rtx3090-01     2× RTX 3090, GPU 1 PCIe link x8 of x16 under load
    rtx4000ada-01  RTX 4000 SFF Ada, HW slowdown + HW power brake active
    mi100-01       6× AMD Instinct MI100 (rocm-smi), no NVIDIA tooling

Test-only: ``t4-hang`` (nvidia-smi hangs), ``a10g-truncated`` (-q -x cut short).

Ready for the demo, not yet in it: ``h100-01`` (8× H100 80GB HBM3 HGX, healthy, MIG disabled;
the MIG remediation's Hopper host), which joins ``DEMO_FLEET`` once inventory/demo.py lists it.
"""

from __future__ import annotations

import copy
from typing import Any

_A100_XML = "telegraf-a100-sxm4-80gb-mig-enabled-driver535.xml"
# DGX A100 GPU bus ids, in nvidia-smi index order.
_DGX_A100_BUS_IDS = [
    f"00000000:{bus}:00.0" for bus in ("07", "0F", "47", "4E", "87", "90", "B7", "BD")
]
_A100_CLEAN_REMAP = {
    "correctable": 0,
    "uncorrectable": 0,
    "pending": False,
    "failure": False,
    "histogram": {"max": 640, "high": 0, "partial": 0, "low": 0, "none": 0},
}
# Cloud captures (g4dn, g5) show x8 links; a healthy demo host has its full x16.
_FULL_X16 = {"pcie": {"width_current": 16}}
_UNDER_LOAD = {
    "utilization": {"gpu_util": "100 %", "memory_util": "63 %"},
    "performance_state": "P0",
}
_CHIA = "issue-chia-gigahorse-301-xid31-ce2-priv-violation-xid62-xid45-dmesg.log"


def _slurm_node(
    fields: dict[str, str], drop: tuple[str, ...] | list[str] = (), gres_conf: dict | None = None
) -> dict[str, Any]:
    """A Slurm view (sim/slurm.py) from real captures: the drained RTX 3090 node record of
    awslabs/awsome-distributed-ai#195 with this host's fields, slurmd -C of an H100 node, and
    an 8-line static gres.conf (words replaced by ``gres_conf``) that slurmd -G echoes."""
    spec: dict[str, Any] = {
        "node": {
            "fixture": "awsome-distributed-ai-195-rtx3090-idle-drain-gres-lower.txt",
            "set": fields,
            "drop": list(drop),
        },
        "slurmd_c": {"fixture": "ansible-slurm-appliance-pr656-h100.txt"},
    }
    if gres_conf is not None:
        spec["gres_conf"] = {
            "fixture": "slinky-operator-101-8x-h100-file-lines.conf",
            "replace": gres_conf,
        }
        spec["slurmd_g"] = {"fixture": "ansible-slurm-appliance-docs-mig-h100-wrapped.txt"}
    return spec


def _a100(**extra: Any) -> dict[str, Any]:
    profile: dict[str, Any] = {
        "gpu_model": "NVIDIA A100-SXM4-80GB",
        "groups": ["a100_sxm4_80gb"],
        "xml": _A100_XML,
        "gpu_count": 8,
        "bus_ids": _DGX_A100_BUS_IDS,
        "driver": "535.161.08",
        "cuda": "12.2",
        # The only packaged 8-GPU NVSwitch matrix is an H100 one: A100 has 12 NVLinks per GPU.
        "topology": {
            "fixture": "mleng-8x-h100-nv18-ht-cpu-affinity.txt",
            "replace": {"NV18": "NV12"},
        },
        "nvswitches": 6,
        # A100 SXM4: 12 third-generation NVLinks of 25 GB/s each, all to the NVSwitches.
        "nvlink": {"links": 12, "speed_gb_s": 25.0},
        "gpu": {"remapped_rows": _A100_CLEAN_REMAP, "mig": {"current": "Disabled"}},
    }
    profile.update(extra)
    return profile


# The driver release the demo's package repositories offer beside the installed one, so that a
# staged upgrade can be rehearsed on the demo fleet (README: gpuaudit upgrade inventory/demo.py).
DEMO_UPGRADE_TARGET = "535.161.08"


def _single(model: str, group: str, xml: str, driver: str, cuda: str, **extra: Any) -> dict:
    profile: dict[str, Any] = {
        "gpu_model": model,
        "groups": [group],
        "xml": xml,
        "gpu_count": 1,
        "driver": driver,
        "cuda": cuda,
        "topology": {"fixture": "utk-1x-h100-mig-vm-ansi-header.txt"},
    }
    if driver != DEMO_UPGRADE_TARGET:
        profile["repository"] = [DEMO_UPGRADE_TARGET]
    profile.update(extra)
    return profile


# No `nvidia-smi -q -x` of an H100 is packaged, only plain `-q` text. The H100 host keeps the
# A100 capture's XML layout and takes the values that tell the models apart from
# tests/fixtures/nvidia-smi-q/gpud-8x-h100-80gb-hbm3-driver535.161.08-hw-slowdown.nvidia-smi-q.txt
# (GPU 0, same driver branch as the A100 capture; its HW slowdown is left out: a healthy host).
# Values the capture has no counterpart for in that layout (supported clocks, MIG device sizes)
# stay the A100 capture's.
_PCIE_GEN_FIELDS = (
    "max_link_gen", "current_link_gen", "device_current_link_gen", "max_device_link_gen",
    "max_host_link_gen",
)  # fmt: skip
_H100_CAPTURE = {
    "product_name": "NVIDIA H100 80GB HBM3",
    "product_architecture": "Hopper",
    "vbios_version": "96.00.74.00.0D",
    "board_part_number": "692-2G520-0200-000",
    "gpu_part_number": "2330-885-A1",
    "inforom_version/img_version": "G520.0200.00.05",
    "inforom_version/oem_object": "2.1",
    "inforom_version/ecc_object": "7.16",
    "pci/pci_device_id": "233010DE",
    "pci/pci_sub_system_id": "16C110DE",
    **{f"pci/pci_gpu_link_info/pcie_gen/{gen}": "5" for gen in _PCIE_GEN_FIELDS},
    "fb_memory_usage/total": "81559 MiB",
    "fb_memory_usage/reserved": "551 MiB",
    "fb_memory_usage/used": "0 MiB",
    "fb_memory_usage/free": "81007 MiB",
    "gpu_power_readings/current_power_limit": "700.00 W",
    "gpu_power_readings/requested_power_limit": "700.00 W",
    "gpu_power_readings/default_power_limit": "700.00 W",
    "gpu_power_readings/min_power_limit": "200.00 W",
    "gpu_power_readings/max_power_limit": "700.00 W",
    "max_clocks/graphics_clock": "1980 MHz",
    "max_clocks/sm_clock": "1980 MHz",
    "max_clocks/mem_clock": "2619 MHz",
    "max_clocks/video_clock": "1545 MHz",
    "max_customer_boost_clocks/graphics_clock": "1980 MHz",
    "fabric/state": "Completed",
    "fabric/status": "Success",
}
# The capture's bus ids, in nvidia-smi index order.
_HGX_H100_BUS_IDS = [
    f"00000000:{bus}:00.0" for bus in ("19", "3B", "4C", "5D", "9B", "BB", "CB", "DB")
]
_H100_CLEAN_REMAP = {
    **_A100_CLEAN_REMAP,
    "histogram": {"max": 2560, "high": 0, "partial": 0, "low": 0, "none": 0},
}


def _h100(**extra: Any) -> dict[str, Any]:
    profile: dict[str, Any] = {
        "gpu_model": "NVIDIA H100 80GB HBM3",
        "groups": ["h100_80gb_hbm3"],
        "xml": _A100_XML,
        "xml_values": _H100_CAPTURE,
        "gpu_count": 8,
        "bus_ids": _HGX_H100_BUS_IDS,
        "driver": "535.161.08",
        "cuda": "12.2",
        "topology": {"fixture": "mleng-8x-h100-nv18-ht-cpu-affinity.txt"},
        "nvswitches": 4,
        # H100 SXM5: 18 fourth-generation NVLinks per GPU, all to the NVSwitches.
        "nvlink": {"links": 18, "speed_gb_s": 26.562},
        "gpu": {"remapped_rows": _H100_CLEAN_REMAP, "mig": {"current": "Disabled"}},
    }
    profile.update(extra)
    return profile


def _t4(**extra: Any) -> dict[str, Any]:
    extra.setdefault("gpu", _FULL_X16)
    return _single(
        "Tesla T4", "tesla_t4", "telegraf-tesla-t4-driver515.xml", "515.105.01", "11.7", **extra
    )


def _a10g(**extra: Any) -> dict[str, Any]:
    extra.setdefault("gpu", _FULL_X16)
    return _single(
        "NVIDIA A10G", "a10g", "telegraf-a10g-driver515.xml", "515.105.01", "11.7", **extra
    )


def _v100(**extra: Any) -> dict[str, Any]:
    profile: dict[str, Any] = {
        "gpu_model": "Tesla V100-PCIE-32GB",
        "groups": ["v100_pcie_32gb"],
        "xml": "datakit-tesla-v100-pcie-32gb-driver460.xml",
        "gpu_count": 2,
        "bus_ids": ["00000000:3B:00.0", "00000000:D8:00.0"],
        "driver": "470.223.02",
        "cuda": "11.4",
        "os": "ubuntu-20.04",
        "kernel": "5.4.0-182-generic",
        "topology": {"fixture": "mleng-2gpu-phb-no-nvlink.txt"},
        "repository": [DEMO_UPGRADE_TARGET],
    }
    profile.update(extra)
    return profile


PROFILES: dict[str, dict[str, Any]] = {
    "a100-hgx-01": _a100(description="8× A100-SXM4-80GB HGX, healthy"),
    "a100-hgx-02": _a100(
        description="row remap pending on GPU 3 (DRAM CE 177), XID 63 in the kernel log",
        gpus={
            3: {
                "remapped_rows": {
                    "correctable": 1,
                    "uncorrectable": 0,
                    "pending": True,
                    "failure": False,
                    "histogram": {"max": 639, "high": 1, "partial": 0, "low": 0, "none": 0},
                },
                "ecc": {
                    "volatile": {"dram_correctable": 177},
                    "aggregate": {"dram_correctable": 177},
                },
            }
        },
        kernel_log=[{"fixture": "mleng-xid63-row-remapper-a100.log", "gpus": [3]}],
    ),
    "a100-hgx-03": _a100(
        description="driver 535.54.03 among 535.161.08 peers; nvidia-fabricmanager not installed",
        driver="535.54.03",
        services={"nvidia-fabricmanager": None},
    ),
    "a100-hgx-04": _a100(
        description="MIG 4× 1g.20gb on GPUs 0-6; GPU 7 has MIG enable pending",
        gpus={
            **{i: {"mig": {"current": "Enabled", "instances": ["1g.20gb"] * 4}} for i in range(7)},
            7: {"mig": {"current": "Disabled", "pending": "Enabled"}},
        },
    ),
    "a100-hgx-05": _a100(
        description="GPU 5 fell off the bus (XID 79); nvidia-smi sees 7 of 8 GPUs",
        gpus={5: {"lost": True}},
        kernel_log=[
            {"fixture": _CHIA, "lines": [1, 1], "gpus": [5]},
            {
                "fixture": _CHIA,
                "lines": [3, 3],
                "gpus": [5],
                "xid": {"from": 62, "to": 79, "message": "GPU has fallen off the bus."},
            },
        ],
        # A static gres.conf still names /dev/nvidia5: Slurm schedules 8 GPUs on 7.
        slurm=_slurm_node(
            {"Gres": "gpu:a100:8", "State": "IDLE", "CfgTRES": "cpu=8,mem=1M,billing=8,gres/gpu=8"},
            drop=["Reason"],
            gres_conf={"h100": "a100"},
        ),
    ),
    "v100-01": _v100(description="2× Tesla V100-PCIE-32GB, healthy"),
    "v100-02": _v100(
        description="kernel module not loaded (DKMS did not build for the new kernel)",
        kernel="5.4.0-187-generic",
        faults={"driver_not_loaded": {}},
        # slurmd found no GPU without its driver: slurmctld drained the node.
        slurm=_slurm_node(
            {
                "Gres": "gpu:v100:2",
                "CfgTRES": "cpu=8,mem=1M,billing=8,gres/gpu=2",
                "Reason": "gres/gpu count reported lower than configured (0 < 2) "
                "[slurm@2024-12-19T11:03:34]",
            }
        ),
    ),
    "t4-01": _t4(description="Tesla T4, healthy"),
    "t4-02": _t4(
        description="persistence mode off (nvidia-persistenced stopped), rmem_max at default",
        services={"nvidia-persistenced": {"active": "inactive", "enabled": "disabled"}},
        sysctls={"net.core.rmem_max": "212992", "net.core.wmem_max": "212992"},
    ),
    "t4-03": _t4(
        description="driver loaded but nvidia-smi missing (nvidia-utils removed)",
        faults={"nvidia_smi_missing": {}},
    ),
    "a10g-01": _a10g(
        description="XID storm: 629 kernel-log lines of XID 13 and 43; its dcgm-exporter "
        "counters file exports no XID and no ECC field",
        faults={"xid_storm": {"gpu": 0}},
        # A site's own six-field counters file (a GCP L4 host's, tests/fixtures/monitoring).
        dcgm_exporter={
            "counters": "dojangkok-l4-default-counters.csv",
            "argv": [
                "/usr/local/bin/dcgm-exporter",
                "-f",
                "/etc/dcgm-exporter/default-counters.csv",
            ],
        },
    ),
    "a10g-02": _a10g(description="unreachable", faults={"unreachable": {}}),
    "p100-01": _single(
        "Tesla P100-PCIE-16GB",
        "tesla_p100",
        "netdata-tesla-p100-pcie-16gb-driver510.xml",
        "510.47.03",
        "11.6",
        description="world-writable /dev/nvidia* (0666), driver packages not held",
        os="ubuntu-20.04",
        kernel="5.4.0-182-generic",
        device_nodes={"mode": "666"},
        packages_held=False,
    ),
    "rtx3090-01": {
        "description": "2× RTX 3090 with NVLink bridge; GPU 1 link x8 of x16 under load",
        "gpu_model": "NVIDIA GeForce RTX 3090",
        "groups": ["rtx3090"],
        "xml": "telegraf-rtx3090-driver525-v12.xml",
        "gpu_count": 2,
        "bus_ids": ["00000000:01:00.0", "00000000:21:00.0"],
        "driver": "525.147.05",
        "cuda": "12.0",
        "dcgm": False,
        "topology": {"fixture": "mleng-2gpu-nv2-nvlink-bridge.txt"},
        "gpus": {1: {"pcie": {"width_current": 8, "gen_current": 4}, **_UNDER_LOAD}},
        "repository": [DEMO_UPGRADE_TARGET],
    },
    "rtx4000ada-01": _single(
        "NVIDIA RTX 4000 SFF Ada Generation",
        "rtx4000_ada",
        "telegraf-rtx4000-sff-ada-driver595-v13.xml",
        "595.84",
        "13.2",
        description="HW slowdown and HW power brake slowdown active under load",
        dcgm=False,
        kernel="6.8.0-45-generic",
        gpu={
            "clock_reasons": {"hw_slowdown": "Active", "hw_power_brake_slowdown": "Active"},
            **_UNDER_LOAD,
        },
    ),
    "mi100-01": {
        "description": "6× AMD Instinct MI100 (ROCm 5.7.1), no NVIDIA tooling",
        "vendor": "amd",
        "gpu_model": "AMD Instinct MI100",
        "groups": ["mi100"],
        "rocm_json": "telegraf-mi100-rocm5.7.1.json",
    },
    "h100-01": _h100(description="8× H100 80GB HBM3 HGX, healthy, MIG disabled"),
    # Test-only hosts: faults that would slow down or derail a demo run.
    "t4-hang": _t4(description="nvidia-smi hangs", faults={"hang": {"seconds": 3600}}),
    "a10g-truncated": _a10g(
        description="nvidia-smi -q -x stops half way", faults={"truncated_xml": {"fraction": 0.5}}
    ),
    # dcgmi diag answers from real failing runs (sim/dcgmi.py): -r 1 -j with the stress test
    # failed on GPUs 0, 2 and 3 and the memory test skipped on GPU 0 (ECC off), -r 3 as the
    # table of a run whose memory test failed on every GPU.
    "a100-diag-fail": _a100(
        description="DCGM diagnostic fails (per-GPU stress failures, memory failure)",
        dcgm_diag={
            1: ["dcgm-testdiagmanager-per-gpu-fail-skip.json"],
            3: ["nccl-tests-264-h100x8-r3-memory-fail-dcgm338.txt"],
        },
    ),
}

_NOT_IN_DEMO = ("t4-hang", "a10g-truncated", "a100-diag-fail")
DEMO_FLEET: tuple[str, ...] = tuple(name for name in PROFILES if name not in _NOT_IN_DEMO)


def get_profile(name: str) -> dict[str, Any]:
    """A copy of a named profile (callers may change it); KeyError for an unknown name."""
    return copy.deepcopy(PROFILES[name])


def expected_gpu_count(profile: dict[str, Any]) -> int:
    """GPUs the host physically holds (what an inventory says it should have)."""
    if profile.get("vendor") == "amd":
        from gpuaudit.sim.build import build_state

        return len(build_state("count", profile)["amd"]["bus_ids"])
    return int(profile.get("gpu_count", 1))
