"""Hosts the audit cannot get into, or that do not finish: each is a status and a finding.

One fleet, audited once by the real pyinfra deploy with a 20 s limit per host: a healthy host,
one that is down, one that refuses the login, one whose collector hangs as a whole (lspci stuck
on a dead device: nothing in the collector bounds it) and one whose nvidia-smi hangs (the
collector's own timeout bounds that: 20 s / 5 = 4 s per call).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sickfleet import SICK_HOST_RULES, FleetRun, audit_fleet, profile

HANG = {"seconds": 900}
HOSTS = {
    "healthy": {"sim_profile": "t4-01", "expected_gpu_count": 1},
    "down": {"sim_profile": profile("t4-01", faults={"unreachable": {}})},
    "refused": {"sim_profile": profile("t4-01", faults={"auth_refused": {}})},
    "stuck": {"sim_profile": profile("t4-01", faults={"hang": {"tool": "lspci", **HANG}})},
    "wedged": {
        "sim_profile": profile("t4-01", faults={"hang": HANG}),
        "expected_gpu_count": 1,
    },
}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> FleetRun:
    tmp = tmp_path_factory.mktemp("sick-connection")
    return audit_fleet(tmp, HOSTS, env={"GPUAUDIT_TIMEOUT": "20"})


def test_every_host_is_in_the_register_with_its_own_status(fleet: FleetRun) -> None:
    status = {name: host["status"] for name, host in fleet.hosts.items()}
    assert status == {
        "@sim/healthy": "ok",
        "@sim/down": "unreachable",
        "@sim/refused": "auth_failed",
        "@sim/stuck": "timed_out",
        "@sim/wedged": "driver_not_responding",
    }, fleet.output
    assert len(list((fleet.run_dir / "hosts").glob("*.json"))) == len(HOSTS)
    for name, host in fleet.hosts.items():
        assert host["status_detail"] and "\n" not in host["status_detail"], name


def test_healthy_host_is_untouched(fleet: FleetRun) -> None:
    assert {rule for rule, _ in fleet.codes("@sim/healthy")} & SICK_HOST_RULES == set()


def test_host_that_is_down(fleet: FleetRun) -> None:
    assert fleet.codes("@sim/down") == {("GA001", None)}
    finding = fleet.finding("@sim/down", "GA001")
    assert "could not be reached" in finding["message"]
    assert "Could not connect" in fleet.hosts["@sim/down"]["status_detail"]
    assert "firewall" in finding["remediation"]


def test_host_that_refuses_the_login(fleet: FleetRun) -> None:
    detail = fleet.hosts["@sim/refused"]["status_detail"]
    assert "refused the audit's credentials" in detail and "Authentication failed" in detail
    assert fleet.codes("@sim/refused") == {("GA001", None)}
    finding = fleet.finding("@sim/refused", "GA001")
    assert "refused the audit's login" in finding["message"]
    assert "authorized_keys" in finding["remediation"]


def test_collection_that_never_finishes(fleet: FleetRun) -> None:
    detail = fleet.hosts["@sim/stuck"]["status_detail"]
    assert "did not finish within 20s" in detail
    assert fleet.snapshot("@sim/stuck")["sections"] == {}
    assert fleet.codes("@sim/stuck") == {("GA001", None)}
    finding = fleet.finding("@sim/stuck", "GA001")
    assert "did not finish its collection in time" in finding["message"]
    assert "collect-script" in finding["remediation"]


def test_hung_nvidia_smi_is_a_driver_that_does_not_answer(fleet: FleetRun) -> None:
    detail = fleet.hosts["@sim/wedged"]["status_detail"]
    assert detail.startswith("nvidia-smi timed out (exit status 124)")
    assert ("GA101", None) in fleet.codes("@sim/wedged")
    sections = fleet.snapshot("@sim/wedged")["sections"]
    assert sections["nvidia_smi_xml"]["rc"] == 124
    # The later nvidia-smi calls are skipped instead of each waiting for the timeout again,
    # and the host's other sections still arrive.
    assert sections["nvidia_topo"]["rc"] == 124
    assert "skipped: nvidia-smi timed out" in sections["nvidia_topo"]["stderr"]
    assert sections["os_release"]["rc"] == 0 and sections["lspci"]["rc"] == 0


def test_each_not_audited_status_has_its_own_remediation(fleet: FleetRun) -> None:
    remediations = {
        fleet.finding(host, "GA001")["remediation"]
        for host in ("@sim/down", "@sim/refused", "@sim/stuck")
    }
    assert len(remediations) == 3


def test_a_hung_host_leaves_no_process_behind(fleet: FleetRun) -> None:
    if not Path("/proc/self/environ").exists():
        pytest.skip("needs /proc to see other processes' environment")
    sim_dir = str(fleet.run_dir.parents[1] / "sim").encode()
    left = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue  # gone, or another user's
        if sim_dir in environ:
            left.append(proc.name)
    assert left == [], f"processes of the simulated hosts still running: {left}"
