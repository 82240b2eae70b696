from __future__ import annotations

from gpuaudit.model.snapshot import HostStatus, OsInfo, Package
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


# --- GA702–GA705: firmware, kernel and fabric manager drift within a GPU model ---------------


def firmware_host(make_host, make_gpu, name, vbios="96.00.89.00.01", inforom="G520.0200.00.05",
                  kernel="5.15.0-119-generic", fm=None, model=H100):  # fmt: skip
    gpus = [make_gpu(i, name=model, vbios_version=vbios, inforom_image=inforom) for i in range(2)]
    packages = (Package("nvidia-fabricmanager-550", fm),) if fm else ()
    return make_host(name, gpus=gpus, os=OsInfo(kernel=kernel), packages=packages)


def test_vbios_drift_names_the_odd_host(make_host, make_gpu, findings):
    fleet = [
        firmware_host(make_host, make_gpu, "h1"),
        firmware_host(make_host, make_gpu, "h2"),
        firmware_host(make_host, make_gpu, "h3", vbios="96.00.74.00.0B"),
        firmware_host(make_host, make_gpu, "l1", vbios="95.02.18.80.5F", model="NVIDIA L4"),
    ]
    (f,) = findings("GA702", *fleet)
    assert (f.host, f.severity, f.category) == ("h3", Severity.MEDIUM, "fleet")
    assert (f.evidence.fact, f.evidence.actual) == ("gpus[].vbios_version", "96.00.74.00.0B")
    assert f.evidence.expected == "96.00.89.00.01"
    assert f.message.startswith("VBIOS version drift.")


def test_mixed_vbios_within_one_host_reads_as_its_own_value(make_host, make_gpu, findings):
    mixed = firmware_host(make_host, make_gpu, "h3")
    gpus = (mixed.gpus[0], make_gpu(1, name=H100, vbios_version="96.00.74.00.0B"))
    fleet = [
        firmware_host(make_host, make_gpu, "h1"),
        firmware_host(make_host, make_gpu, "h2"),
        make_host("h3", gpus=gpus, os=mixed.os),
    ]
    (f,) = findings("GA702", *fleet)
    assert f.evidence.actual == "96.00.74.00.0B, 96.00.89.00.01"


def test_inforom_kernel_and_fabric_manager_drift(make_host, make_gpu, findings):
    fleet = [
        firmware_host(make_host, make_gpu, "h1", fm="550.127.05-1"),
        firmware_host(make_host, make_gpu, "h2", fm="550.127.05-1"),
        firmware_host(
            make_host,
            make_gpu,
            "h3",
            inforom="G520.0200.00.01",
            kernel="5.15.0-105-generic",
            fm="1:550.90.07-1",
        ),
        firmware_host(make_host, make_gpu, "h4"),  # no fabric manager: not in GA705's count
    ]
    (inforom,) = findings("GA703", *fleet)
    (kernel,) = findings("GA704", *fleet)
    (fm,) = findings("GA705", *fleet)
    assert {inforom.host, kernel.host, fm.host} == {"h3"}
    assert (inforom.severity, kernel.severity, fm.severity) == (
        Severity.LOW,
        Severity.MEDIUM,
        Severity.MEDIUM,
    )
    assert kernel.evidence.expected == "5.15.0-119-generic"
    assert (fm.evidence.actual, fm.evidence.expected) == ("550.90.07-1", "550.127.05-1")


def test_uniform_firmware_is_silent(make_host, make_gpu, findings):
    fleet = [firmware_host(make_host, make_gpu, n) for n in ("a", "b", "c")]
    for code in ("GA702", "GA703", "GA704", "GA705"):
        assert findings(code, *fleet) == []


def test_drift_text_is_made_once_per_model_group(make_host, make_gpu, findings, monkeypatch):
    """Every drifting host names its group's hosts; a fleet of thousands has thousands of
    them, so what the group says is made once, not once per drifting host."""
    from gpuaudit.rules import fleet as fleet_rules

    calls = []
    names = fleet_rules._names
    monkeypatch.setattr(fleet_rules, "_names", lambda snaps: calls.append(1) or names(snaps))
    hosts = [host(make_host, make_gpu, f"a{i:03d}", "550.127.05") for i in range(60)]
    hosts += [host(make_host, make_gpu, f"b{i:03d}", "535.216.01") for i in range(40)]
    found = findings("GA701", *hosts)
    assert sorted(f.host for f in found) == [f"b{i:03d}" for i in range(40)]
    assert all("550.127.05 on 60 (a000, a001" in f.message for f in found)
    assert all(
        "535.216.01 on 40 (b000, b001" in f.message and "… 30 more" in f.message for f in found
    )
    assert all(f.evidence.excerpt.startswith(f"{H100}: 535.216.01: b000") for f in found)
    assert len(calls) == 4  # two values, each named in the message and in the excerpt
