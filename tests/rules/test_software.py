from __future__ import annotations

from pathlib import Path

from gpuaudit.model.snapshot import HostStatus, Package, Section
from gpuaudit.parsers.nvidia_xml import parse_nvidia_smi_xml
from gpuaudit.parsers.rocm_smi import parse_rocm_smi_showallinfo
from gpuaudit.parsers.system import parse_lspci
from gpuaudit.rules import assess
from gpuaudit.rules.base import Outcome, Severity

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
MI300X = "thamada-4x-mi300x-rocm-smi-showallinfo.txt"
A100_ONE_OF_FOUR = "telegraf-a100-sxm4-80gb-mig-enabled-driver535.xml"

NOT_RESPONDING = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure "
    "that the latest NVIDIA driver is installed and running."
)
LSPCI_8 = "\n".join(f"0000:{0x18 + i:02x}:00.0 0302: 10de:2330 (rev a1)" for i in range(8))


def test_driver_not_responding_is_critical(make_host, findings):
    snap = make_host(
        status=HostStatus.DRIVER_NOT_RESPONDING,
        gpus=(),
        driver_version=None,
        driver_version_proc=None,
        host_data={"expected_gpu_count": 8},
        sections={"nvidia_smi_xml": Section(rc=9, stdout=NOT_RESPONDING)},
    )
    (f,) = findings("GA101", snap)
    assert f.severity is Severity.CRITICAL
    assert "not loaded" in f.message
    assert "couldn't communicate" in f.evidence.excerpt
    # The missing GPUs are the same fault: the count rule stays silent.
    assert findings("GA102", snap) == []


def test_fewer_gpus_than_expected_uses_lspci_to_say_where(make_host, findings):
    on_bus = make_host(
        host_data={"expected_gpu_count": 8},
        sections={"lspci": Section(rc=0, stdout=LSPCI_8)},
        pci_devices=parse_lspci(LSPCI_8),
    )
    (f,) = findings("GA102", on_bus)
    assert f.severity is Severity.HIGH
    assert f.evidence.actual == {"visible": 2, "on_pci_bus": 8}
    assert f.evidence.expected == 8
    assert "not initialised by the driver" in f.message
    two = "\n".join(LSPCI_8.splitlines()[:2])
    off_bus = make_host(
        host_data={"expected_gpu_count": 8},
        sections={"lspci": Section(rc=0, stdout=two)},
        pci_devices=parse_lspci(two),
    )
    (g,) = findings("GA102", off_bus)
    assert "missing from the PCIe bus" in g.message


def test_gpu_count_silent_without_expectation_or_when_met(make_host, findings):
    assert findings("GA102", make_host(host_data={})) == []
    assert findings("GA102", make_host(host_data={"expected_gpu_count": 2})) == []
    # A policy-wide expectation applies when the host says nothing.
    assert len(findings("GA102", make_host(host_data={}), policy={"expected_gpu_count": 4})) == 1


def test_gpu_in_error_state(make_host, make_gpu, findings):
    bad = make_gpu(1, status="error", status_detail="nvidia-smi reported 'Unknown Error'")
    (f,) = findings("GA103", make_host(gpus=[make_gpu(0), bad]))
    assert (f.gpu, f.severity) == (1, Severity.HIGH)
    assert "Unknown Error" in f.message


def test_nvidia_smi_missing_on_gpu_host(make_host, findings):
    tools = {"nvidia-smi": False, "rocm-smi": False, "dmesg": True, "journalctl": True}
    snap = make_host(status=HostStatus.NO_GPU_TOOLING, gpus=(), tools=tools)
    (f,) = findings("GA104", snap)
    assert f.severity is Severity.HIGH and "nvidia-smi" in f.message
    assert findings("GA102", snap) == []
    # Same host known only by its GPU count.
    counted = make_host(gpus=(), tools=tools, host_data={"expected_gpu_count": 4})
    assert len(findings("GA104", counted)) == 1
    # An AMD host needs rocm-smi or amd-smi, not nvidia-smi.
    amd = make_host(gpus=(), tools={**tools, "amd-smi": True}, host_data={"expected_gpu_count": 4})
    assert findings("GA104", amd) == []
    # No expectation, no tool list: nothing to say.
    assert findings("GA104", make_host(gpus=(), tools=tools, host_data={})) == []
    assert findings("GA104", make_host(tools={})) == []


def test_kernel_log_unreadable(make_host, findings):
    both_missing = make_host(tools={"nvidia-smi": True, "dmesg": False, "journalctl": False})
    (f,) = findings("GA105", both_missing)
    assert f.severity is Severity.MEDIUM and "neither dmesg nor journalctl" in f.message
    restricted = make_host(
        sections={
            "kernel_log": Section(rc=127, stderr="no readable kernel log (dmesg, journalctl -k)")
        }
    )
    (g,) = findings("GA105", restricted)
    assert "rc=127" in g.message and "no readable kernel log" in g.evidence.excerpt
    assert findings("GA105", make_host(sections={"kernel_log": Section(rc=0)})) == []


def test_driver_packages_not_held(make_host, findings):
    packages = (
        Package("nvidia-driver-550-server", "550.127.05-0ubuntu1"),
        Package("libnvidia-compute-550-server", "550.127.05-0ubuntu1"),
        Package("nvidia-fabricmanager-550", "550.127.05-1", held=True),
    )
    (f,) = findings("GA106", make_host(packages=packages))
    assert f.severity is Severity.MEDIUM
    assert f.operation == "gpuaudit.operations.driver.pin"
    assert set(f.evidence.actual) == {"nvidia-driver-550-server", "libnvidia-compute-550-server"}
    held = (Package("nvidia-driver-550-server", "550.127.05-0ubuntu1", held=True), *packages[1:])
    assert findings("GA106", make_host(packages=held)) == []
    assert findings("GA106", make_host(packages=())) == []


def test_a_missing_amd_gpu_is_not_judged_by_the_nvidia_bus_count(make_host, findings):
    """4 MI300X listed by rocm-smi (the real report) of 5 expected, lspci listing 5 AMD GPUs
    and no NVIDIA one: the finding stands, without saying the GPU is missing from the bus."""
    gpus = parse_rocm_smi_showallinfo((FIXTURES / "rocm-smi" / MI300X).read_text())
    lspci = "\n".join(f"0000:{0x11 + i:02x}:00.0 1200: 1002:74a1" for i in range(5))
    amd = make_host(
        "amd-01", gpus=gpus, driver_version=None, driver_version_proc=None,
        host_data={"expected_gpu_count": 5, "vendor": "amd"},
        sections={"lspci": Section(rc=0, stdout=lspci)}, pci_devices=parse_lspci(lspci),
    )  # fmt: skip
    (f,) = findings("GA102", amd)
    assert f.message == "4 of 5 expected GPUs are visible to the driver."
    assert f.evidence.actual == {"visible": 4, "on_pci_bus": None}


def test_gpus_the_driver_counts_but_does_not_list_without_lspci(make_host, findings):
    """The real report of an A100 host whose nvidia-smi counts 4 attached GPUs and lists one
    (attached_gpus 4): no expected count and no lspci, and GA102 still says so."""
    text = (FIXTURES / "nvidia-smi-xml" / A100_ONE_OF_FOUR).read_text()
    log = parse_nvidia_smi_xml(text)
    assert (log.attached_gpus, len(log.gpus)) == (4, 1)
    snap = make_host(
        gpus=log.gpus, attached_gpus=log.attached_gpus, pci_devices=(), host_data={},
        sections={
            "nvidia_smi_xml": Section(rc=0, stdout=text),
            "lspci": Section(rc=127, stderr="lspci: not found"),
        },
    )  # fmt: skip
    (f,) = findings("GA102", snap)
    assert f.message.startswith("nvidia-smi counts 4 attached GPUs but lists only 1")
    assert (f.evidence.actual["visible"], f.evidence.expected) == (1, 4)
    complete = make_host(gpus=log.gpus, attached_gpus=1, pci_devices=(), host_data={})
    assert findings("GA102", complete) == []


def test_driver_not_the_desired_version(make_host, findings):
    (f,) = findings("GA107", make_host(host_data={"desired_driver_version": "570.86.15"}))
    assert (f.evidence.actual, f.evidence.expected) == ("550.127.05", "570.86.15")
    assert findings("GA107", make_host(), policy={"desired_driver_version": "550.127.05"}) == []


def test_driver_not_of_the_desired_branch(make_host, findings):
    (f,) = findings("GA107", make_host(), policy={"desired_driver_branch": "560"})
    assert (f.evidence.actual, f.evidence.expected) == ("550.127.05", "560.x")
    assert f.message == "Driver 550.127.05 is installed; the policy wants the 560 branch."
    assert findings("GA107", make_host(), policy={"desired_driver_branch": "550"}) == []
    # A host's own branch clears a site-wide exact version (one of the two is in force).
    host = make_host(host_data={"desired_driver_branch": "550"})
    assert findings("GA107", host, policy={"desired_driver_version": "550.90.07"}) == []
    host = make_host(host_data={"desired_driver_branch": "535"})
    (f,) = findings("GA107", host, policy={"desired_driver_version": "550.127.05"})
    assert f.evidence.expected == "535.x"


def test_an_amd_host_is_not_held_to_an_nvidia_driver_version(make_host):
    """The real rocm-smi report of a 4× MI300X host: its ROCm version is not an NVIDIA driver,
    and a site-wide desired driver does not make a finding of it, even where the inventory
    says the host is AMD."""
    gpus = parse_rocm_smi_showallinfo((FIXTURES / "rocm-smi" / MI300X).read_text())
    amd = make_host(
        "amd-01", gpus=gpus, driver_version=None, driver_version_proc=None,
        host_data={"vendor": "amd"},
    )  # fmt: skip
    assert gpus and {g.vendor for g in gpus} == {"amd"} and gpus[0].driver_version
    for policy in ({"desired_driver_version": "550.127.05"}, {"desired_driver_branch": "550"}):
        evaluation = assess([amd, make_host("nv-01")], policy)
        assert [f.host for f in evaluation.findings if f.rule == "GA107"] == []
        (outcome,) = [o for o in evaluation.outcomes if (o.host, o.rule) == ("amd-01", "GA107")]
        assert outcome.outcome is Outcome.NOT_APPLICABLE
        assert "the host's GPUs are AMD" in outcome.reason
