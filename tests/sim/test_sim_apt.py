"""The simulated apt-get / apt-cache refuse what apt refuses and follow holds and pins."""

from __future__ import annotations

import itertools
from collections.abc import Callable

from simhelpers import run_on

from gpuaudit.sim.apt import _Version
from gpuaudit.sim.host import SimHost
from gpuaudit.sim.profiles import get_profile

NEW = "515.105.02-0ubuntu1"
OLD = "515.105.01-0ubuntu1"


def _host(make_host: Callable[..., SimHost], held: bool = False) -> SimHost:
    profile = {**get_profile("t4-02"), "repository": ["515.105.02"], "packages_held": held}
    return make_host("apt-host", profile)


def _versions(host: SimHost) -> dict[str, str]:
    return {p["name"]: p["version"] for p in host.state()["packages"]}


def test_debian_version_order() -> None:
    ordered = ["1.0~rc1", "1.0", "1.0-1", "1.0-1ubuntu1", "1.0a", "1.0.1", "2.0", "10.0", "1:0.1"]
    for lower, higher in itertools.pairwise(ordered):
        assert _Version(lower) < _Version(higher), (lower, higher)
        assert not _Version(higher) < _Version(lower)
    assert _Version("1.0") == _Version("1.0-0")


def test_upgrade_moves_every_unheld_package(make_host: Callable[..., SimHost]) -> None:
    host = _host(make_host)
    dry = run_on(host, "apt-get", "-s", "upgrade")
    assert "6 upgraded, 0 newly installed, 0 to remove and 0 not upgraded." in dry.stdout
    assert _versions(host)["nvidia-driver-515"] == OLD  # a dry run changes nothing
    done = run_on(host, "apt-get", "-y", "upgrade")
    assert done.returncode == 0, done.stderr
    assert _versions(host)["nvidia-driver-515"] == NEW
    assert _versions(host)["libnvidia-compute-515"] == NEW
    state = host.state()
    assert state["nvidia"]["driver"]["installed"] == "515.105.02"
    assert state["nvidia"]["driver"]["loaded"] == "515.105.01"  # until the reboot


def test_holds_keep_packages_back_and_refuse_installs(make_host: Callable[..., SimHost]) -> None:
    host = _host(make_host, held=True)
    upgrade = run_on(host, "apt-get", "-y", "upgrade")
    assert "have been kept back" in upgrade.stdout and upgrade.returncode == 0
    assert _versions(host)["nvidia-driver-515"] == OLD
    install = run_on(host, "apt-get", "-y", "install", f"nvidia-driver-515={NEW}")
    assert install.returncode == 100
    assert "--allow-change-held-packages" in install.stderr
    assert _versions(host)["nvidia-driver-515"] == OLD
    forced = run_on(
        host, "apt-get", "-y", "--allow-change-held-packages", "install", f"nvidia-driver-515={NEW}"
    )
    assert forced.returncode == 0 and _versions(host)["nvidia-driver-515"] == NEW


def test_a_version_the_repository_lacks_is_refused(make_host: Callable[..., SimHost]) -> None:
    host = _host(make_host)
    done = run_on(host, "apt-get", "-y", "install", "nvidia-driver-515=550.127.05-0ubuntu1")
    assert done.returncode == 100
    assert "Version '550.127.05-0ubuntu1' for 'nvidia-driver-515' was not found" in done.stderr
    missing = run_on(host, "apt-get", "-y", "install", "no-such-package")
    assert missing.returncode == 100 and "Unable to locate package" in missing.stderr


def test_a_pin_makes_the_installed_version_the_candidate(make_host: Callable[..., SimHost]) -> None:
    host = _host(make_host)
    pin = host.upper("/etc/apt/preferences.d/gpuaudit-nvidia-driver")
    pin.write_text(
        "# managed by gpuaudit\n"
        "Package: nvidia-driver-515 libnvidia-*\nPin: version 515.105.01*\nPin-Priority: 1001\n"
    )
    policy = run_on(host, "apt-cache", "policy", "nvidia-driver-515")
    assert f"Candidate: {OLD}" in policy.stdout
    assert f" *** {OLD} 1001" in policy.stdout and f"     {NEW} 500" in policy.stdout
    run_on(host, "apt-get", "-y", "upgrade")
    versions = _versions(host)
    assert versions["nvidia-driver-515"] == OLD and versions["libnvidia-compute-515"] == OLD
    assert versions["nvidia-utils-515"] == NEW  # not named by the pin: it drifts
