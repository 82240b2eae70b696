from __future__ import annotations

from pathlib import Path

from gpuaudit.model.snapshot import Package, Section, Service
from gpuaudit.parsers.nvlink import merge_nvlink, parse_nvlink
from gpuaudit.rules.base import Severity

H100 = "NVIDIA H100 80GB HBM3"
NVLINK = Path(__file__).parents[1] / "fixtures" / "nvlink"
PERSIST = Service("nvidia-persistenced", "active", "enabled")

# --- GA403 monitoring agent -------------------------------------------------------------------


def test_no_dcgm_agent_on_a_datacenter_host(make_host, findings):
    services = (
        PERSIST,
        Service("nvidia-dcgm", "inactive", "disabled"),
        Service("dcgm-exporter", "inactive", "not-found"),
    )
    packages = (Package("datacenter-gpu-manager", "1:3.3.9"),)
    (f,) = findings("GA403", make_host(services=services, packages=packages))
    assert (f.severity, f.gpu, f.owner.value) == (Severity.MEDIUM, None, "infra")
    assert f.operation == "gpuaudit.operations.services.enable"
    assert f.evidence.actual == {
        "nvidia-dcgm": "inactive/disabled",
        "dcgm": "not listed",
        "dcgm-exporter": "inactive/not-found",
    }
    assert "DCGM is installed (datacenter-gpu-manager 1:3.3.9)" in f.message


def test_monitoring_silent_when_running_waived_or_not_a_datacenter_gpu(
    make_host, make_gpu, findings
):
    exporter = (PERSIST, Service("dcgm-exporter", "active", "enabled"))
    assert findings("GA403", make_host(services=exporter)) == []
    bare = (PERSIST,)
    waived = {"monitoring_required": False}
    assert findings("GA403", make_host(services=bare), policy=waived) == []
    desktop = [make_gpu(0, name="NVIDIA GeForce RTX 3090")]
    assert findings("GA403", make_host(gpus=desktop, services=bare)) == []
    assert findings("GA403", make_host(services=())) == []  # services not collected


# --- GA503 PCIe replays -----------------------------------------------------------------------


def test_pcie_replays_at_the_limit(make_host, make_gpu, findings):
    gpus = [make_gpu(0, pcie_replay_count=12), make_gpu(1, pcie_replay_count=4096)]
    (f,) = findings("GA503", make_host(gpus=gpus))
    assert (f.gpu, f.severity, f.evidence.actual) == (1, Severity.MEDIUM, 4096)
    assert "DCGM: 8 a minute" in f.message
    assert findings("GA503", make_host(gpus=gpus), policy={"pcie_replay_limit": 10_000}) == []


# --- GA510 / GA511 NVLink ---------------------------------------------------------------------

STATUS = """GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)
\t Link 0: 26.562 GB/s
\t Link 1: 26.562 GB/s
GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-1)
\t Link 0: 26.562 GB/s
\t Link 1: <inactive>
"""
ERRORS = """GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)
\t Link 0: Replay Errors: 0
\t Link 0: Recovery Errors: 0
\t Link 0: CRC Errors: 0

\t Link 1: Replay Errors: 0
\t Link 1: Recovery Errors: 2
\t Link 1: CRC Errors: 150
GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-1)
\t Link 0: Replay Errors: 0
\t Link 0: Recovery Errors: 0
\t Link 0: CRC Errors: 99
"""
ALL_DOWN = (
    "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n"
    "NVML: Unable to retrieve NVLink information as all links are inActive\n"
)


def nvlink_host(make_host, make_gpu, status=STATUS, errors=ERRORS, name=H100, **changes):
    sections = {
        "nvlink_status": Section(rc=0, stdout=status),
        "nvlink_errors": Section(rc=0, stdout=errors),
    }
    nvlink = merge_nvlink(parse_nvlink(status), parse_nvlink(errors))
    gpus = [make_gpu(i, name=name) for i in range(2)]
    return make_host(gpus=gpus, nvlink=nvlink, sections=sections, **changes)


def test_some_links_inactive(make_host, make_gpu, findings):
    (f,) = findings("GA510", nvlink_host(make_host, make_gpu))
    assert (f.gpu, f.severity, f.gpu_name) == (1, Severity.HIGH, H100)
    assert f.evidence.actual == {"active": 1, "inactive": [1]}
    assert "NVLink 1 inactive (1 active)" in f.message
    assert f.evidence.excerpt.splitlines() == [
        "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-1)",
        "Link 0: 26.562 GB/s",
        "Link 1: <inactive>",
    ]


def test_all_links_inactive_only_where_nvlink_is_expected(make_host, make_gpu, findings):
    sxm = nvlink_host(make_host, make_gpu, status=ALL_DOWN, errors="")
    (f,) = findings("GA510", sxm)
    assert f.gpu == 1 and "all of its NVLinks are inactive" in f.message
    pcie = nvlink_host(
        make_host, make_gpu, status=ALL_DOWN, errors="", name="NVIDIA A100-PCIE-40GB"
    )
    assert findings("GA510", pcie) == []  # a PCIe card without a bridge
    assert findings("GA510", pcie, policy={"nvlink_expected": True})[0].gpu == 1
    assert findings("GA510", sxm, policy={"nvlink_expected": False}) == []


def test_nvlink_error_counters_over_limits(make_host, make_gpu, findings):
    (f,) = findings("GA511", nvlink_host(make_host, make_gpu))
    assert (f.gpu, f.severity) == (0, Severity.MEDIUM)
    assert f.evidence.actual == {"link 1": {"recovery_errors": 2, "crc_errors": 150}}
    assert "link 1: recovery errors 2, crc errors 150" in f.message
    assert "Link 1: CRC Errors: 150" in f.evidence.excerpt


def test_nvlink_rules_silent_when_not_collected_or_healthy(make_host, make_gpu, findings):
    assert findings("GA510", make_host()) == [] and findings("GA511", make_host()) == []
    healthy = STATUS.replace("<inactive>", "26.562 GB/s")
    snap = nvlink_host(make_host, make_gpu, status=healthy, errors=ERRORS.replace("150", "0"))
    assert findings("GA510", snap) == []
    assert findings("GA511", snap, policy={"nvlink_error_limits": {"recovery_errors": 5}}) == []


def test_nvlink_entries_are_matched_to_gpus_by_uuid(make_host, make_gpu, findings):
    # Derived from the real 3x RTX A6000 listing, GPU 0's block left out, as nvidia-smi leaves
    # out a GPU that fell off the bus: the GPU list numbers the two that answer 0 and 1, the
    # listing keeps calling them GPU 1 and GPU 2.
    text = (NVLINK / "siboehm-3x-rtx-a6000-nvlink-s-gpu2-all-inactive.txt").read_text()
    status = text[text.index("GPU 1:") :]
    listed = parse_nvlink(status)
    assert [entry.gpu for entry in listed] == [1, 2]
    gpus = [make_gpu(i, name="NVIDIA RTX A6000", uuid=entry.uuid) for i, entry in enumerate(listed)]
    snap = make_host(
        gpus=gpus, nvlink=listed, sections={"nvlink_status": Section(rc=0, stdout=status)}
    )
    (f,) = findings("GA510", snap, policy={"nvlink_expected": True})
    assert f.gpu == 1 and f.gpu_name == "NVIDIA RTX A6000"
    assert gpus[1].pci_bus_id in f.message and "nvidia-smi nvlink GPU 2" in f.message
    assert f.evidence.excerpt.splitlines()[0].startswith("GPU 2: NVIDIA RTX A6000 (UUID: GPU-02c05")
