from __future__ import annotations

from gpuaudit.model.snapshot import HostStatus
from gpuaudit.rules.base import Severity

H100 = "NVIDIA H100 80GB HBM3"


def host(make_host, make_gpu, name, driver, model=H100, **changes):
    gpus = [make_gpu(i, name=model, driver_version=driver) for i in range(2)]
    return make_host(name, gpus=gpus, driver_version=driver, **changes)


def test_drift_names_both_versions_and_hosts(make_host, make_gpu, findings):
    fleet = [
        host(make_host, make_gpu, "h1", "550.127.05"),
        host(make_host, make_gpu, "h2", "550.127.05"),
        host(make_host, make_gpu, "h3", "550.127.05"),
        host(make_host, make_gpu, "h4", "535.216.01"),
        # Another model on another driver is its own group: no drift.
        host(make_host, make_gpu, "l1", "535.216.01", model="NVIDIA L4"),
        # Not audited: left out.
        make_host("h5", status=HostStatus.UNREACHABLE, gpus=(), driver_version=None),
    ]
    (f,) = findings("GA701", *fleet)
    assert (f.host, f.severity, f.gpu) == ("h4", Severity.MEDIUM, None)
    assert (f.evidence.actual, f.evidence.expected) == ("535.216.01", "550.127.05")
    assert "550.127.05 on 3 (h1, h2, h3)" in f.message
    assert "535.216.01 on 1 (h4)" in f.message


def test_tie_prefers_the_newest_version(make_host, make_gpu, findings):
    fleet = [
        host(make_host, make_gpu, "a", "550.127.05"),
        host(make_host, make_gpu, "b", "570.86.15"),
    ]
    (f,) = findings("GA701", *fleet)
    assert f.host == "a" and f.evidence.expected == "570.86.15"
    assert "newest of the tied" in f.message


def test_uniform_fleet_is_silent(make_host, make_gpu, findings):
    fleet = [host(make_host, make_gpu, n, "550.127.05") for n in ("a", "b", "c")]
    assert findings("GA701", *fleet) == []
