from __future__ import annotations

from gpuaudit.model.snapshot import DeviceNode, MigDevice, MigInstance, Section
from gpuaudit.rules import evaluate
from gpuaudit.rules.base import Severity

# --- GA501 / GA502 PCIe ---------------------------------------------------------------------


def test_narrow_link_flagged_even_when_idle(make_host, make_gpu, findings):
    gpu = make_gpu(1, pcie_width_current=8, pcie_width_max=16)
    (f,) = findings("GA501", make_host(gpus=[make_gpu(0), gpu]))
    assert (f.gpu, f.severity, f.evidence.actual, f.evidence.expected) == (
        1,
        Severity.MEDIUM,
        8,
        16,
    )


def test_a_slot_wired_narrower_by_design_is_compared_with_its_wiring(make_host, make_gpu, findings):
    narrow = dict(pcie_width_current=8, pcie_width_max=16)
    gpus = [
        make_gpu(0, pci_bus_id="0000:1B:00.0", **narrow),
        make_gpu(1, pci_bus_id="0000:41:00.0", pcie_width_current=4, pcie_width_max=16),
        make_gpu(2, pci_bus_id="0000:61:00.0", **narrow),
    ]
    # One width for the host: the x8 links are as wired, the x4 one is still narrow.
    (f,) = findings("GA501", make_host(gpus=gpus), policy={"pcie_expected_width": 8})
    assert (f.gpu, f.evidence.actual, f.evidence.expected) == (
        1,
        4,
        {"width": 8, "gpu_maximum": 16},
    )
    assert "its slot is wired for x8 (pcie_expected_width)" in f.message
    # Per slot, keys spelled as nvidia-smi prints bus ids; a slot not named keeps the maximum.
    per_slot = {"00000000:1b:00.0": 8, "0000:41:00.0": 4}
    found = findings("GA501", make_host(gpus=gpus), policy={"pcie_expected_width": per_slot})
    assert [(f.gpu, f.evidence.expected) for f in found] == [(2, 16)]
    # From the inventory's host data, as any setting.
    host = make_host(gpus=gpus, host_data={"pcie_expected_width": 4})
    assert findings("GA501", host) == []
    # A width at or above the GPU's own maximum changes nothing.
    assert len(findings("GA501", make_host(gpus=gpus), policy={"pcie_expected_width": 16})) == 3


def test_an_expected_width_that_is_no_pcie_width_is_a_rule_error(make_host, make_gpu):
    gpus = [make_gpu(0, pcie_width_current=8, pcie_width_max=16)]
    host = make_host(gpus=gpus, host_data={"pcie_expected_width": "x8"})
    (error,) = [f for f in evaluate([host]) if f.rule == "GA000"]
    assert "pcie_expected_width: 'x8' is not a PCIe link width" in str(error.evidence.actual)


def test_low_generation_only_flagged_under_load(make_host, make_gpu, findings):
    busy = make_gpu(0, pcie_gen_current=3, utilization_gpu_pct=87.0, clock_event_reasons=())
    idle_flag = make_gpu(1, pcie_gen_current=1, utilization_gpu_pct=5.0)  # gpu_idle active
    idle_util = make_gpu(2, pcie_gen_current=1, utilization_gpu_pct=0.0, clock_event_reasons=())
    unknown = make_gpu(3, pcie_gen_current=1, utilization_gpu_pct=None, clock_event_reasons=())
    full = make_gpu(4, pcie_gen_current=4, utilization_gpu_pct=90.0, clock_event_reasons=())
    snap = make_host(gpus=[busy, idle_flag, idle_util, unknown, full], host_data={})
    (f,) = findings("GA502", snap)
    assert f.gpu == 0
    assert f.evidence.actual == {"generation": 3, "utilization_gpu_pct": 87.0}
    assert f.evidence.expected["generation"] == 4
    assert "idle GPUs lower their PCIe generation" in f.evidence.expected["caveat"]


# --- GA601 sysctl --------------------------------------------------------------------------


def test_sysctl_below_baseline_and_unreadable(make_host, findings):
    snap = make_host(
        sysctls={"net.core.rmem_max": "212992"},
        sections={"sysctl": Section(rc=0, stdout="net.core.rmem_max = 212992\n")},
    )
    result = findings("GA601", snap)
    by_key = {f.evidence.fact: f for f in result}
    low = by_key["sysctls[net.core.rmem_max]"]
    assert (low.severity, low.evidence.actual) == (Severity.MEDIUM, 212992)
    assert low.evidence.excerpt == "net.core.rmem_max = 212992"
    missing = by_key["sysctls[net.core.wmem_max]"]
    assert missing.severity is Severity.LOW and "Could not read" in missing.message


def test_sysctl_baseline_extendable_by_policy(make_host, findings):
    policy = {"sysctl_baseline": {"vm.max_map_count": 262144}}
    (f,) = findings("GA601", make_host(), policy=policy)
    assert f.evidence.fact == "sysctls[vm.max_map_count]"


# --- GA602 device nodes --------------------------------------------------------------------


def test_world_writable_device_nodes(make_host, findings):
    nodes = (
        DeviceNode("/dev/nvidiactl", "666", "root", "root"),
        DeviceNode("/dev/nvidia0", "666", "root", "root"),
        DeviceNode("/dev/nvidia1", "660", "root", "video"),
        DeviceNode("/dev/kfd", "666", "root", "render"),
    )
    (f,) = findings("GA602", make_host(device_nodes=nodes))
    assert f.severity is Severity.LOW
    assert f.evidence.actual == {"/dev/nvidiactl": "666", "/dev/nvidia0": "666"}
    allowed = {"world_writable_device_nodes_allowed": True}
    assert findings("GA602", make_host(device_nodes=nodes), policy=allowed) == []


# --- GA201 / GA202 MIG ---------------------------------------------------------------------


def test_mig_mode_change_pending(make_host, make_gpu, findings):
    gpus = [
        make_gpu(0, mig_mode_current="Disabled", mig_mode_pending="Enabled"),
        make_gpu(1, mig_mode_current="Enabled", mig_mode_pending="Enabled",
                 mig_devices=(MigDevice(0, 1, 0, "1g.10gb"),)),
    ]  # fmt: skip
    (f,) = findings("GA201", make_host(gpus=gpus))
    assert (f.gpu, f.severity) == (0, Severity.MEDIUM)
    assert f.evidence.actual == {"current": "Disabled", "pending": "Enabled"}


def test_mig_enabled_without_instances(make_host, make_gpu, findings):
    gpus = [
        make_gpu(0, mig_mode_current="Enabled", mig_mode_pending="Enabled"),
        make_gpu(1, mig_mode_current="Enabled", mig_mode_pending="Enabled"),
    ]
    none_found = Section(rc=6, stdout="No GPU instances found: Not Found")
    instances = (MigInstance(gpu=1, profile_name="MIG 1g.10gb", profile_id=19, instance_id=9),)
    snap = make_host(gpus=gpus, mig_gpu_instances=instances, sections={"mig_gi": none_found})
    (f,) = findings("GA202", snap)
    assert f.gpu == 0
    # Without a usable -lgi answer the rule cannot tell, and says nothing.
    assert findings("GA202", make_host(gpus=gpus)) == []
