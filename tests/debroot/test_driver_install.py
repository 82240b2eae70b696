"""gpuaudit.operations.upgrade.install_driver against real package managers: real pyinfra
(``@chroot``), real apt and dpkg (and dnf and rpm), dummy packages named like NVIDIA's at an old
(installed) and a new (available) version: the upgrade step and the rollback after it."""

from __future__ import annotations

from debroot_packages import (
    CANARY,
    CANARY_OLD,
    DRIVER_PACKAGES,
    NEW,
    OLD,
    RPM_NEW,
    RPM_OLD,
    RPM_PACKAGES,
)

from gpuaudit.facts.upgrade import parse_apt_policy

DRIVER = sorted(DRIVER_PACKAGES)
RPM_DRIVER = sorted(RPM_PACKAGES)
INSTALL = "Install the NVIDIA driver"


def deploy(*calls: str) -> str:
    return "from gpuaudit.operations import driver, upgrade\n\n" + "\n".join(calls) + "\n"


def install(version: str) -> str:
    return f"upgrade.install_driver(name={INSTALL!r}, version={version!r})"


def versions(root, names: list[str]) -> dict[str, str]:
    return {name: v for name, v in root.versions().items() if name in names}


def test_apt_upgrade_then_rollback_moves_every_driver_package_together(debroot) -> None:
    unpin_and_install = deploy("driver.unpin(name='unpin')", install("550.127.05"))
    run = debroot.pyinfra(unpin_and_install)
    assert run.returncode == 0, run.output
    assert run.changed(INSTALL), run.output
    assert versions(debroot, DRIVER) == dict.fromkeys(DRIVER, NEW)
    assert debroot.versions()[CANARY] == CANARY_OLD  # only the driver moved

    again = debroot.pyinfra(deploy(install("550.127.05")))
    assert again.returncode == 0 and not again.changed(INSTALL), again.output

    # The rollback goes down: apt refuses that under -y unless told it may.
    back = debroot.pyinfra(
        deploy(install("550.90.07"), "driver.pin(name='pin', version='550.90.07')")
    )
    assert back.returncode == 0, back.output
    assert versions(debroot, DRIVER) == dict.fromkeys(DRIVER, OLD)
    assert debroot.holds() == DRIVER


def test_apt_policy_fact_reads_real_apt_cache_output(debroot) -> None:
    text = debroot.run("apt-cache", "policy", *DRIVER, "no-such-package", check=False).stdout
    assert parse_apt_policy(text.splitlines()) == {name: [NEW, OLD] for name in DRIVER}


def test_apt_held_packages_are_installed_through_their_holds(debroot) -> None:
    debroot.run("apt-mark", "hold", *DRIVER)
    run = debroot.pyinfra(deploy(install("550.127.05")))
    assert run.returncode == 0, run.output
    assert versions(debroot, DRIVER) == dict.fromkeys(DRIVER, NEW)


def test_apt_version_the_repository_lacks_is_refused_naming_the_packages(debroot) -> None:
    run = debroot.pyinfra(deploy(install("550.163.01")))
    assert run.returncode != 0
    assert "offer no 550.163.01 for libnvidia-compute-550 (offers " in run.output, run.output
    assert versions(debroot, DRIVER) == dict.fromkeys(DRIVER, OLD)


def test_dnf_upgrade_then_rollback(dnfroot) -> None:
    run = dnfroot.pyinfra(deploy(install(RPM_NEW)))
    assert run.returncode == 0, run.output
    new = versions(dnfroot, RPM_DRIVER)
    assert {name: v.split("-")[0] for name, v in new.items()} == dict.fromkeys(RPM_DRIVER, RPM_NEW)

    back = dnfroot.pyinfra(deploy(install(RPM_OLD)))
    assert back.returncode == 0, back.output
    old = versions(dnfroot, RPM_DRIVER)
    assert {name: v.split("-")[0] for name, v in old.items()} == dict.fromkeys(RPM_DRIVER, RPM_OLD)
