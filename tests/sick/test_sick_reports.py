"""Hosts that answer, but sick: a driver down, a tool missing, a GPU erroring, a PCI bus and a
driver that disagree, nvidia-smi output cut short, not UTF-8 or carrying an entity bomb, and a
200 MiB kernel log. Each gives its status and finding; the healthy host gets neither.

One fleet, audited once by the real pyinfra deploy.
"""

from __future__ import annotations

import pytest
from sickfleet import SICK_HOST_RULES, FleetRun, audit_fleet, profile

EXTRA_BUS_ID = "00000000:C1:00.0"
HOSTS = {
    "healthy": {"sim_profile": "t4-01", "expected_gpu_count": 1},
    "nodriver": {"sim_profile": "v100-02", "expected_gpu_count": 2},
    "nosmi": {"sim_profile": "t4-03", "expected_gpu_count": 1},
    "gpuerror": {"sim_profile": profile("v100-01", gpus={1: {"unknown_error": True}})},
    "hidden": {"sim_profile": profile("v100-01", lspci={"drop": [1]})},
    "extra": {"sim_profile": profile("t4-01", lspci={"add": [EXTRA_BUS_ID]})},
    "cut": {"sim_profile": "a10g-truncated", "expected_gpu_count": 1},
    "latin1": {"sim_profile": profile("a10g-01", faults={"xid_storm": {}, "non_utf8": {}})},
    "entities": {"sim_profile": profile("t4-01", faults={"xml_entities": {}})},
    "hugelog": {"sim_profile": profile("t4-01", faults={"huge_kernel_log": {}})},
}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> FleetRun:
    return audit_fleet(tmp_path_factory.mktemp("sick-reports"), HOSTS)


def test_every_host_is_in_the_register_with_its_own_status(fleet: FleetRun) -> None:
    status = {name.removeprefix("@sim/"): host["status"] for name, host in fleet.hosts.items()}
    assert status == {
        "healthy": "ok",
        "nodriver": "driver_not_responding",
        "nosmi": "no_gpu_tooling",
        "gpuerror": "degraded",
        "hidden": "degraded",
        "extra": "degraded",
        "cut": "degraded",
        "latin1": "ok",
        "entities": "degraded",
        "hugelog": "ok",
    }, fleet.output
    for name, host in fleet.hosts.items():
        assert host["status_detail"] and "\n" not in host["status_detail"], name


def test_healthy_host_is_untouched(fleet: FleetRun) -> None:
    assert {rule for rule, _ in fleet.codes("@sim/healthy")} & SICK_HOST_RULES == set()
    assert fleet.snapshot("@sim/healthy")["parse_errors"] == {}


def test_driver_that_does_not_answer(fleet: FleetRun) -> None:
    detail = fleet.hosts["@sim/nodriver"]["status_detail"]
    assert "couldn't communicate with the NVIDIA driver" in detail
    codes = fleet.codes("@sim/nodriver")
    assert ("GA101", None) in codes
    # The GPUs it cannot list and the sections that failed with it are the same fault.
    assert ("GA102", None) not in codes and ("GA002", None) not in codes


def test_nvidia_smi_missing(fleet: FleetRun) -> None:
    assert "neither nvidia-smi nor rocm-smi" in fleet.hosts["@sim/nosmi"]["status_detail"]
    assert ("GA104", None) in fleet.codes("@sim/nosmi")


def test_one_gpu_answering_unknown_error(fleet: FleetRun) -> None:
    detail = fleet.hosts["@sim/gpuerror"]["status_detail"]
    assert "exited with status 255" in detail
    assert "GPU 1: nvidia-smi reported 'Unknown Error'" in detail
    gpus = {g["index"]: g for g in fleet.snapshot("@sim/gpuerror")["gpus"]}
    assert (gpus[0]["status"], gpus[1]["status"]) == ("ok", "error")
    # The other GPU's data is intact (the V100 capture's values); the erroring one keeps only
    # what the driver caches.
    assert gpus[0]["memory_total_mib"] == 32510 and gpus[0]["temperature_c"] is not None
    assert gpus[1]["memory_total_mib"] is None and gpus[1]["uuid"].startswith("GPU-")
    ga103 = [f for f in fleet.findings("@sim/gpuerror") if f["rule"] == "GA103"]
    assert [f["gpu"] for f in ga103] == [1]


def test_gpu_missing_from_the_bus_listing(fleet: FleetRun) -> None:
    detail = fleet.hosts["@sim/hidden"]["status_detail"]
    assert detail.startswith("nvidia-smi lists 2 GPU(s), lspci shows 1 NVIDIA GPU(s)")
    finding = fleet.finding("@sim/hidden", "GA108")
    assert "0000:D8:00.0" in finding["message"]
    assert ("GA102", None) not in fleet.codes("@sim/hidden")


def test_gpu_on_the_bus_the_driver_does_not_list(fleet: FleetRun) -> None:
    detail = fleet.hosts["@sim/extra"]["status_detail"]
    assert "lspci shows 2 NVIDIA GPU(s), nvidia-smi lists 1" in detail
    # No expected_gpu_count in this host's data: the bus is the expectation.
    finding = fleet.finding("@sim/extra", "GA102")
    assert finding["evidence"]["actual"] == {"visible": 1, "on_pci_bus": 2}
    assert "0000:C1:00.0" in finding["message"]


def test_xml_cut_short(fleet: FleetRun) -> None:
    snap = fleet.snapshot("@sim/cut")
    assert "truncated" in snap["parse_errors"]["nvidia_smi_xml"]
    finding = fleet.finding("@sim/cut", "GA002")
    assert "nvidia_smi_xml" in finding["message"] and finding["severity"] == "medium"
    # The GPU is not missing, its report is: no "0 of 1 GPUs visible" on top.
    assert ("GA102", None) not in fleet.codes("@sim/cut")


def test_bytes_that_are_not_utf8(fleet: FleetRun) -> None:
    snap = fleet.snapshot("@sim/latin1")
    assert snap["gpus"][0]["name"] == "NVIDIA A10G\ufffd"
    assert set(snap["parse_errors"]) == {"nvidia_smi_xml", "kernel_log"}
    assert "not UTF-8" in snap["parse_errors"]["kernel_log"]
    finding = fleet.finding("@sim/latin1", "GA002")
    assert "nvidia_smi_xml" in finding["message"] and "kernel_log" in finding["message"]
    # The XID lines with a Latin-1 process name are still read.
    assert ("GA301", 0) in fleet.codes("@sim/latin1")


def test_xml_with_an_entity_bomb_is_refused_not_expanded(fleet: FleetRun) -> None:
    assert fleet.snapshot_path("@sim/entities").stat().st_size < 1_000_000
    snap = fleet.snapshot("@sim/entities")
    assert "refused unsafe XML, nothing expanded" in snap["parse_errors"]["nvidia_smi_xml"]
    assert "<!ENTITY lol9" in snap["sections"]["nvidia_smi_xml"]["stdout"]
    assert snap["gpus"] == []
    finding = fleet.finding("@sim/entities", "GA002")
    assert "unsafe" in finding["message"]


def test_200_mib_kernel_log_is_bounded_and_says_so(fleet: FleetRun) -> None:
    snap = fleet.snapshot("@sim/hugelog")
    section = snap["sections"]["kernel_log"]
    lines = section["stdout"].splitlines()
    assert len(lines) == 5000 and max(len(line) for line in lines) <= 2048
    assert section["truncated"] and snap["kernel_log_truncated"]
    seen = int(section["stderr"].split("lines=")[1].split()[0])
    assert seen > 5000
    xid = [f for f in fleet.findings("@sim/hugelog") if f["rule"] == "GA301"]
    assert xid and all("cut to its newest lines" in f["message"] for f in xid)
