"""gpuaudit.operations.driver.pin / unpin against a real Debian root: real pyinfra (``@chroot``
connector), real apt and dpkg, dummy packages named like NVIDIA's at an old (installed) and a
new (available) version."""

from __future__ import annotations

import pytest
from debroot_packages import CANARY, CANARY_NEW, CANARY_OLD, DRIVER_PACKAGES, NEW, OLD

PIN_FILE = "/etc/apt/preferences.d/gpuaudit-nvidia-driver"
PIN = "Pin the NVIDIA driver packages"
UNPIN = "Release the NVIDIA driver packages"
DRIVER = sorted(DRIVER_PACKAGES)


def deploy(*calls: str) -> str:
    return "from gpuaudit.operations import driver\n\n" + "\n".join(calls) + "\n"


def pin_call(**kwargs: object) -> str:
    arguments = "".join(f", {key}={value!r}" for key, value in kwargs.items())
    return f"driver.pin(name={PIN!r}{arguments})"


UNPIN_CALL = f"driver.unpin(name={UNPIN!r})"


def at(version: str) -> dict[str, str]:
    return dict.fromkeys(DRIVER, version)


def driver_versions(debroot) -> dict[str, str]:
    return {name: v for name, v in debroot.versions().items() if name in DRIVER_PACKAGES}


def pinned(debroot, **kwargs: object):
    run = debroot.pyinfra(deploy(pin_call(**kwargs)))
    assert run.returncode == 0, run.output
    assert run.changed(PIN), run.output
    return run


def test_root_is_offline_with_the_old_driver_installed(debroot) -> None:
    assert debroot.versions() == {**at(OLD), CANARY: CANARY_OLD}
    policy = debroot.policy("nvidia-driver-550")
    assert (policy.installed, policy.candidate) == (OLD, NEW)
    sources = debroot.run("apt-get", "indextargets", "--format", "$(URI)").stdout.split()
    assert sources and all(uri.startswith("file:/srv/repo") for uri in sources), sources
    assert debroot.holds() == []
    assert not any((debroot.path / "proc").iterdir())


@pytest.mark.parametrize("version", [None, "550.90.07"], ids=["installed", "desired"])
def test_pin_keeps_every_driver_package_at_the_installed_version(
    debroot, version: str | None
) -> None:
    pinned(debroot, **({} if version is None else {"version": version}))

    for package in DRIVER:
        policy = debroot.policy(package)
        assert policy.installed == OLD, policy.text
        assert policy.candidate == OLD, policy.text
        assert policy.versions[OLD] == 1001, policy.text
        assert NEW in policy.versions and policy.versions[NEW] < 1001, policy.text
    assert debroot.holds() == DRIVER

    upgrade = debroot.run("apt-get", "-y", "upgrade")
    assert driver_versions(debroot) == at(OLD), upgrade.stdout
    # Only the driver set is pinned: the unrelated package still upgrades.
    assert debroot.versions()[CANARY] == CANARY_NEW, upgrade.stdout
    debroot.run("apt-get", "-y", "dist-upgrade")
    install = debroot.run("apt-get", "-y", "install", "nvidia-driver-550")
    assert "already the newest version (550.90.07-0ubuntu1)" in install.stdout, install.stdout
    assert driver_versions(debroot) == at(OLD)


def test_pin_file_is_readable_by_every_user(debroot) -> None:
    """apt run by any user (``apt list --upgradable``, monitoring) must see the pin."""
    pinned(debroot)
    mode = (debroot.path / PIN_FILE.lstrip("/")).stat().st_mode & 0o777
    view = debroot.run(
        "chroot", "--userspec=nobody:nogroup", "/", "apt-cache", "policy", "nvidia-driver-550"
    )
    assert "Candidate: 550.90.07-0ubuntu1" in view.stdout, view.stdout + view.stderr
    assert "Unable to read" not in view.stderr, view.stderr
    assert mode == 0o644, oct(mode)


def test_second_pin_changes_nothing(debroot) -> None:
    pinned(debroot)
    pin_file = debroot.read(PIN_FILE)
    status = debroot.read("/var/lib/dpkg/status")

    again = debroot.pyinfra(deploy(pin_call()))
    assert again.returncode == 0, again.output
    assert not again.changed(PIN), again.output
    assert again.results(PIN)["No Change"] == "1", again.output
    assert debroot.read(PIN_FILE) == pin_file
    assert debroot.read("/var/lib/dpkg/status") == status
    assert debroot.holds() == DRIVER


def test_pin_at_a_version_not_installed_is_refused(debroot) -> None:
    status = debroot.read("/var/lib/dpkg/status")
    preferences = sorted(p.name for p in (debroot.path / "etc/apt/preferences.d").iterdir())

    run = debroot.pyinfra(deploy(pin_call(version="550.127.05")))
    assert run.returncode != 0, run.output
    assert "cannot pin driver 550.127.05" in run.output, run.output
    assert "nvidia-driver-550 550.90.07-0ubuntu1" in run.output, run.output
    assert debroot.read(PIN_FILE) is None
    assert sorted(p.name for p in (debroot.path / "etc/apt/preferences.d").iterdir()) == (
        preferences
    )
    assert debroot.holds() == []
    assert debroot.read("/var/lib/dpkg/status") == status
    assert driver_versions(debroot) == at(OLD)


def test_unpin_lets_the_driver_packages_upgrade_together(debroot) -> None:
    pinned(debroot)
    run = debroot.pyinfra(deploy(UNPIN_CALL))
    assert run.returncode == 0, run.output
    assert run.changed(UNPIN), run.output

    assert debroot.read(PIN_FILE) is None
    assert debroot.holds() == []
    assert debroot.policy("nvidia-driver-550").candidate == NEW
    upgrade = debroot.run("apt-get", "-y", "upgrade")
    assert driver_versions(debroot) == at(NEW), upgrade.stdout

    again = debroot.pyinfra(deploy(UNPIN_CALL))
    assert again.returncode == 0, again.output
    assert not again.changed(UNPIN), again.output


def test_a_pinned_library_does_not_upgrade_alone(debroot) -> None:
    pinned(debroot)

    plain = debroot.run("apt-get", "-y", "install", "libnvidia-compute-550")
    assert "already the newest version" in plain.stdout, plain.stdout
    assert driver_versions(debroot) == at(OLD)

    for package in ("libnvidia-compute-550", "libnvidia-nscq-550"):
        forced = debroot.run("apt-get", "-y", "install", f"{package}={NEW}", check=False)
        assert forced.returncode != 0, forced.stdout
        # "Held packages were changed", or a broken Depends "caused by held packages".
        assert "held packages" in forced.stderr.lower(), forced.stdout + forced.stderr
        assert driver_versions(debroot) == at(OLD)


def test_staged_upgrade_pins_again_at_the_new_version(debroot) -> None:
    """unpin, install the new driver, pin at it: the new set is held, the old one unreachable."""
    pinned(debroot)
    assert debroot.pyinfra(deploy(UNPIN_CALL)).returncode == 0
    debroot.run("apt-get", "-y", "install", *(f"{p}={NEW}" for p in DRIVER))
    pinned(debroot, version="550.127.05")

    assert driver_versions(debroot) == at(NEW)
    assert debroot.holds() == DRIVER
    for package in DRIVER:
        policy = debroot.policy(package)
        assert (policy.installed, policy.candidate) == (NEW, NEW), policy.text
        assert policy.versions[NEW] == 1001, policy.text
    assert "550.90.07" not in (debroot.read(PIN_FILE) or "")
