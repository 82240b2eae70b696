"""The pieces behind the sick-host statuses, without a fleet run: how a connection error is
classified, which sections GA002 leaves to other rules, and what the simulator refuses."""

from __future__ import annotations

import os
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from sickfleet import profile

from gpuaudit.model.snapshot import HostSnapshot, HostStatus, Section
from gpuaudit.model.status import connection_failed_snapshot, timed_out_snapshot
from gpuaudit.rules import evaluate
from gpuaudit.sim.build import ProfileError, build_state
from gpuaudit.sim.host import materialize

# The texts pyinfra's SSH connector raises (connectors/ssh.py), by what went wrong.
AUTH_ERRORS = [
    "Authentication error (username=audit, key=/home/audit/.ssh/id_ed25519) "
    "(Authentication failed.)",
    "SSH error (No authentication methods available)",
    "SSH host key error (Host key for gpu-07 does not match.)",
    "PyinfraError: Invalid key: /home/audit/.ssh/id_rsa",
]
NETWORK_ERRORS = [
    "Could not connect ([Errno 111] Connection refused)",
    "Could not connect (timed out)",
    "Could not resolve hostname ([Errno -2] Name or service not known)",
    "EOF error ()",
]


@pytest.mark.parametrize("error", AUTH_ERRORS)
def test_a_refused_login_is_auth_failed(error: str) -> None:
    snap = connection_failed_snapshot("gpu-07", error)
    assert snap.status is HostStatus.AUTH_FAILED
    assert snap.status_detail == f"the host refused the audit's credentials: {error}"


@pytest.mark.parametrize("error", NETWORK_ERRORS)
def test_a_host_that_does_not_answer_is_unreachable(error: str) -> None:
    snap = connection_failed_snapshot("gpu-07", error, host_data={"rack": "r1"})
    assert (snap.status, snap.status_detail, snap.host_data) == (
        HostStatus.UNREACHABLE,
        error,
        {"rack": "r1"},
    )


def test_timed_out_snapshot_names_the_limit() -> None:
    snap = timed_out_snapshot("gpu-08", 300)
    assert snap.status is HostStatus.TIMED_OUT
    assert "within 300s (GPUAUDIT_TIMEOUT)" in snap.status_detail
    assert snap.sections == {} and snap.gpus == ()


def _collected(status: HostStatus, **sections: Section) -> HostSnapshot:
    errors = {name: f"exit status {s.rc}: failed" for name, s in sections.items()}
    return HostSnapshot(
        host="gpu-09",
        status=status,
        collected_at="2025-06-01T00:00:00Z",
        sections=dict(sections),
        parse_errors=errors,
    )


def _ga002(snap: HostSnapshot) -> list[str]:
    return [f.message for f in evaluate([snap]) if f.rule == "GA002"]


def test_ga002_leaves_failures_that_are_findings_of_their_own_to_their_rules() -> None:
    down = Section(rc=9, stdout="NVIDIA-SMI has failed")
    missing = Section(rc=1, stderr="/proc/driver/nvidia/version: No such file or directory")
    no_log = Section(rc=127, stderr="no readable kernel log")
    snap = _collected(
        HostStatus.DRIVER_NOT_RESPONDING,
        nvidia_smi_xml=down,
        nvidia_topo=down,
        driver_proc=missing,
        kernel_log=no_log,
    )
    assert _ga002(snap) == []
    # The same nvidia-smi failure on a host judged otherwise is a gap in the audit.
    (message,) = _ga002(_collected(HostStatus.DEGRADED, nvidia_topo=down))
    assert "(nvidia_topo)" in message


def test_ga001_does_not_run_on_collected_hosts_nor_ga002_on_empty_ones() -> None:
    collected = _collected(HostStatus.OK)
    assert [f.rule for f in evaluate([collected]) if f.rule in ("GA001", "GA002")] == []
    codes = {f.rule for f in evaluate([timed_out_snapshot("gpu-08", 300)])}
    assert "GA001" in codes and "GA002" not in codes


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"faults": {"hang": {"tool": "dmesg"}}}, "hang names 'dmesg'"),
        ({"lspci": {"drop": [3]}}, "lspci.drop names a GPU the host does not have"),
        ({"lspci": {"add": ["00000000:3B:00.0"]}}, "lspci.add needs new bus ids"),
        ({"lspci": {"hide": [0]}}, "unknown lspci key(s): hide"),
        ({"gpus": {0: {"unknown_eror": True}}}, "unknown GPU 0 key(s): unknown_eror"),
    ],
)
def test_simulator_refuses_faults_it_cannot_play(changes: dict, message: str) -> None:
    with pytest.raises(ProfileError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build_state("bad", profile("v100-01", **changes))


def test_gpu_in_unknown_error_renders_as_nvidia_smi_prints_it(tmp_path: Path) -> None:
    host = materialize("err", profile("v100-01", gpus={1: {"unknown_error": True}}), tmp_path)
    env = {**os.environ, **host.env()}
    xml = subprocess.run(["nvidia-smi", "-q", "-x"], env=env, capture_output=True, check=False)
    assert xml.returncode == 255
    first, second = ET.fromstring(xml.stdout).findall("gpu")
    assert first.findtext("fb_memory_usage/total") == "32510 MiB"
    assert second.findtext("fb_memory_usage/total") == "Unknown Error"
    assert second.findtext("temperature/gpu_temp") == "Unknown Error"
    # What the driver caches still prints.
    assert second.findtext("product_name") == "Tesla V100-PCIE-32GB"
    assert (second.findtext("uuid") or "").startswith("GPU-")
    csv = subprocess.run(
        ["nvidia-smi", "--query-gpu=index,memory.total", "--format=csv,noheader"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert csv.stdout.splitlines() == ["0, 32510 MiB", "1, [Unknown Error]"]
