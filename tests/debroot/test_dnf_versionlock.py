"""gpuaudit.operations.driver.pin / unpin on an rpm host: real dnf 4 with its versionlock plugin
(Debian's dnf and dnf-plugins-core) and a real rpm database in a Debian root without apt, run
through pyinfra's ``@chroot`` connector. Dummy packages are named as in NVIDIA's RHEL
repositories, at an old (installed) and a new (available) version."""

from __future__ import annotations

from debroot_packages import CANARY, RPM_CANARY_NEW, RPM_CANARY_OLD, RPM_NEW, RPM_OLD, RPM_PACKAGES

PIN = "Pin the NVIDIA driver packages"
UNPIN = "Release the NVIDIA driver packages"
DRIVER = sorted(RPM_PACKAGES)


def deploy(call: str) -> str:
    return f"from gpuaudit.operations import driver\n\n{call}\n"


def pin_call(**kwargs: object) -> str:
    arguments = "".join(f", {key}={value!r}" for key, value in kwargs.items())
    return f"driver.pin(name={PIN!r}{arguments})"


UNPIN_CALL = f"driver.unpin(name={UNPIN!r})"


def at(version: str) -> dict[str, str]:
    return {name: f"{version}-{RPM_PACKAGES[name][1]}" for name in DRIVER}


def lock_entries(version: str) -> list[str]:
    """dnf 4's lock list lines for the driver set at ``version`` (epoch 0 written out)."""
    return sorted(
        f"{name}-{epoch or 0}:{version}-{release}.*"
        for name, (epoch, release, _) in RPM_PACKAGES.items()
    )


def driver_versions(dnfroot) -> dict[str, str]:
    return {name: v for name, v in dnfroot.versions().items() if name in RPM_PACKAGES}


def pinned(dnfroot, **kwargs: object):
    run = dnfroot.pyinfra(deploy(pin_call(**kwargs)))
    assert run.returncode == 0, run.output
    assert run.changed(PIN), run.output
    return run


def test_root_is_an_rpm_host_with_the_old_driver_installed(dnfroot) -> None:
    assert dnfroot.versions() == {**at(RPM_OLD), CANARY: f"{RPM_CANARY_OLD}-1"}
    assert dnfroot.run("sh", "-c", "command -v apt-mark", check=False).returncode != 0
    assert dnfroot.locks() == []
    available = dnfroot.run("dnf", "-q", "list", "--upgrades").stdout
    assert all(name in available for name in DRIVER), available
    assert list((dnfroot.path / "var/lib/rpm").iterdir()), "no rpm database at /var/lib/rpm"


def test_pin_locks_every_driver_package_at_the_installed_version(dnfroot) -> None:
    pinned(dnfroot)
    assert dnfroot.locks() == lock_entries(RPM_OLD)

    upgrade = dnfroot.run("dnf", "-y", "upgrade")
    assert driver_versions(dnfroot) == at(RPM_OLD), upgrade.stdout
    # Only the driver set is locked: the unrelated package still upgrades.
    assert dnfroot.versions()[CANARY] == f"{RPM_CANARY_NEW}-1", upgrade.stdout

    again = dnfroot.pyinfra(deploy(pin_call()))
    assert again.returncode == 0, again.output
    assert not again.changed(PIN), again.output
    assert dnfroot.locks() == lock_entries(RPM_OLD)


def test_a_locked_library_does_not_upgrade_alone(dnfroot) -> None:
    pinned(dnfroot)
    for name in ("nvidia-driver-libs", "libnvidia-nscq-550"):
        release = RPM_PACKAGES[name][1]
        run = dnfroot.run("dnf", "-y", "install", f"{name}-{RPM_NEW}-{release}", check=False)
        assert run.returncode != 0, run.stdout
        assert "filtered out by exclude filtering" in run.stdout + run.stderr, run.stdout
    assert driver_versions(dnfroot) == at(RPM_OLD)


def test_pin_at_a_version_not_installed_is_refused(dnfroot) -> None:
    locks = dnfroot.read("/etc/dnf/plugins/versionlock.list")
    run = dnfroot.pyinfra(deploy(pin_call(version=RPM_NEW)))
    assert run.returncode != 0, run.output
    assert f"cannot pin driver {RPM_NEW}" in run.output, run.output
    assert dnfroot.read("/etc/dnf/plugins/versionlock.list") == locks
    assert driver_versions(dnfroot) == at(RPM_OLD)


def test_unpin_lets_the_driver_packages_upgrade_together(dnfroot) -> None:
    pinned(dnfroot)
    run = dnfroot.pyinfra(deploy(UNPIN_CALL))
    assert run.returncode == 0, run.output
    assert run.changed(UNPIN), run.output
    assert dnfroot.locks() == []
    again = dnfroot.pyinfra(deploy(UNPIN_CALL))
    assert again.returncode == 0, again.output
    assert not again.changed(UNPIN), again.output

    upgrade = dnfroot.run("dnf", "-y", "upgrade")
    assert driver_versions(dnfroot) == at(RPM_NEW), upgrade.stdout

    pinned(dnfroot, version=RPM_NEW)
    assert dnfroot.locks() == lock_entries(RPM_NEW)
