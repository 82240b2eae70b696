from __future__ import annotations

import pytest

from gpuaudit.model.snapshot import HostStatus, Package, Section
from gpuaudit.rules.base import Severity

# --- GA120 driver vs the CUDA versions the site requires -----------------------------------


def test_cuda_major_newer_than_driver_is_high(make_host, findings):
    snap = make_host(cuda_version="11.4", host_data={"required_cuda_versions": ["11.2", "12.4"]})
    (f,) = findings("GA120", snap)
    assert (f.severity, f.gpu) == (Severity.HIGH, None)
    assert f.evidence.actual == "11.4" and f.evidence.expected == ">= 12.4"
    assert "CUDA 12.4" in f.message and "11.2" not in f.message.split("requires")[1]
    assert "driver version is insufficient" in f.message


def test_cuda_minor_newer_is_medium_and_names_minor_compatibility(make_host, findings):
    snap = make_host(cuda_version="12.2")
    (f,) = findings("GA120", snap, policy={"required_cuda_versions": ["12.4"]})
    assert f.severity is Severity.MEDIUM
    assert "minor version compatibility" in f.message


@pytest.mark.parametrize("required", [["12.2"], ["11.8", "12.0"], "12.1", [12.1], None, []])
def test_supported_or_unset_cuda_is_silent(make_host, findings, required):
    snap = make_host(cuda_version="12.2", host_data={"required_cuda_versions": required})
    assert findings("GA120", snap) == []


def test_cuda_falls_back_to_the_gpus_version_and_is_silent_without_one(
    make_host, make_gpu, findings
):
    gpus = [make_gpu(0, cuda_version="12.0")]
    policy = {"required_cuda_versions": ["12.4"]}
    assert findings("GA120", make_host(gpus=gpus), policy=policy)[0].evidence.actual == "12.0"
    assert findings("GA120", make_host(), policy=policy) == []  # no CUDA version reported


def test_malformed_required_cuda_version_fails_loudly(make_host, findings):
    snap = make_host(cuda_version="12.2")
    (f,) = findings("GA000", snap, policy={"required_cuda_versions": ["latest"]})
    assert "GA120" in f.message and "latest" in f.message


# --- GA121 installed packages vs loaded kernel module --------------------------------------


def test_upgraded_packages_under_a_loaded_module(make_host, findings):
    packages = (
        Package("nvidia-driver-550-server", "550.144.03-0ubuntu1", held=False),
        Package("libnvidia-compute-550-server", "550.144.03-0ubuntu1", held=False),
        Package("nvidia-driver-local-repo-ubuntu2204", "1.0-1"),  # its own version: left out
        Package("nvidia-container-toolkit", "1.17.4-1"),  # not a driver package
    )
    proc = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.127.05  Tue Oct 22 UTC 2024\n"
    snap = make_host(
        status=HostStatus.DRIVER_NOT_RESPONDING,
        packages=packages,
        sections={"driver_proc": Section(rc=0, stdout=proc)},
    )
    (f,) = findings("GA121", snap)
    assert f.severity is Severity.HIGH
    assert f.evidence.actual == {
        "nvidia-driver-550-server": "550.144.03-0ubuntu1",
        "libnvidia-compute-550-server": "550.144.03-0ubuntu1",
    }
    assert "Driver/library version mismatch" in f.message
    assert "550.127.05" in f.evidence.excerpt


def test_packages_at_the_loaded_version_or_no_module_are_silent(make_host, findings):
    assert findings("GA121", make_host()) == []  # factory packages match the driver
    rpm = (Package("kmod-nvidia-latest-dkms", "3:550.127.05-1.el9"),)
    assert findings("GA121", make_host(packages=rpm)) == []
    unloaded = make_host(
        driver_version_proc=None, packages=(Package("nvidia-driver-550", "550.144.03-1"),)
    )
    assert findings("GA121", unloaded) == []
