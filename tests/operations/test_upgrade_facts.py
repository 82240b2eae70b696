"""The driver-upgrade facts (commands and parsing), the pure package choice install_driver makes,
and the reconnect loop of reboot_and_wait against a stand-in host."""

from __future__ import annotations

from typing import Any

import pytest
from pyinfra.api.exceptions import ConnectError

from gpuaudit.facts.upgrade import AptPolicyVersions, BootId, NvidiaModuleVersion, parse_apt_policy
from gpuaudit.operations import upgrade

# apt 2.4 (Ubuntu 22.04) as it prints two packages, one installed and pinned, one it lacks.
POLICY = """\
nvidia-driver-550:
  Installed: 550.90.07-0ubuntu0.22.04.1
  Candidate: 550.90.07-0ubuntu0.22.04.1
  Version table:
     550.127.05-0ubuntu0.22.04.1 500
        500 http://archive.ubuntu.com/ubuntu jammy-updates/restricted amd64 Packages
 *** 550.90.07-0ubuntu0.22.04.1 1001
        500 http://archive.ubuntu.com/ubuntu jammy-updates/restricted amd64 Packages
        100 /var/lib/dpkg/status
libnvidia-compute-550:i386:
  Installed: (none)
  Candidate: 550.127.05-0ubuntu0.22.04.1
  Version table:
     550.127.05-0ubuntu0.22.04.1 500
        500 http://archive.ubuntu.com/ubuntu jammy-updates/restricted i386 Packages
"""
# apt before 1.1 printed no priority on the version lines.
OLD_APT_POLICY = """\
nvidia-384:
  Installed: 384.130-0ubuntu0.16.04.1
  Candidate: 384.130-0ubuntu0.16.04.1
  Version table:
 *** 384.130-0ubuntu0.16.04.1 0
        500 http://archive.ubuntu.com/ubuntu xenial-updates/restricted amd64 Packages
        100 /var/lib/dpkg/status
     384.111-0ubuntu0.16.04.1 0
        500 http://archive.ubuntu.com/ubuntu xenial-security/restricted amd64 Packages
"""


def test_apt_policy_versions_highest_first_origins_left_out() -> None:
    assert parse_apt_policy(POLICY.splitlines()) == {
        "nvidia-driver-550": ["550.127.05-0ubuntu0.22.04.1", "550.90.07-0ubuntu0.22.04.1"],
        "libnvidia-compute-550": ["550.127.05-0ubuntu0.22.04.1"],
    }
    assert parse_apt_policy(OLD_APT_POLICY.splitlines()) == {
        "nvidia-384": ["384.130-0ubuntu0.16.04.1", "384.111-0ubuntu0.16.04.1"]
    }
    assert parse_apt_policy([]) == {}
    assert AptPolicyVersions().process(["N: Unable to locate package nvidia-driver-999"]) == {}


def test_apt_policy_command_quotes_every_package() -> None:
    command = AptPolicyVersions().command(packages=["nvidia-driver-550", "x; reboot"])
    assert command.get_raw_value() == (
        "LANG=C apt-cache policy nvidia-driver-550 'x; reboot' 2>/dev/null || true"
    )


def test_module_version_and_boot_id() -> None:
    assert NvidiaModuleVersion().process(["550.127.05"]) == "550.127.05"
    assert NvidiaModuleVersion().process(["595.84"]) == "595.84"
    assert NvidiaModuleVersion().process([]) is None
    assert NvidiaModuleVersion().process(["modinfo: ERROR: Module nvidia not found."]) is None
    boot = "c95e1776-dc3f-4e5c-a632-48083739154a"
    assert BootId().process([boot]) == boot
    assert BootId().process([]) is None
    assert BootId().process(["cat: /proc/sys/kernel/random/boot_id: No such file"]) is None


@pytest.mark.parametrize(
    ("installed", "version", "names"),
    [
        ({"nvidia-driver-535": "535.161.08-0ubuntu1"}, "535.183.01", ["nvidia-driver-535"]),
        ({"nvidia-driver-535": "535.161.08-0ubuntu1"}, "550.127.05", ["nvidia-driver-550"]),
        (
            {"nvidia-dkms-535-server": "535.161.08-0ubuntu1"},
            "550.127.05",
            ["nvidia-dkms-550-server"],
        ),
        ({"nvidia-driver": "3:535.161.08-1.el9"}, "550.127.05", ["nvidia-driver"]),
        # The branch is renamed as a whole word only: nothing else in the name changes.
        ({"libnvidia-nscq-535": "535.161.08-1"}, "550.127.05", ["libnvidia-nscq-550"]),
        (
            {"nvidia-driver-550": "550.127.05-0ubuntu1", "nvidia-utils-535": "535.161.08-0ubuntu1"},
            "550.127.05",
            ["nvidia-driver-550", "nvidia-utils-550"],
        ),
    ],
)
def test_target_packages(installed: dict[str, str], version: str, names: list[str]) -> None:
    assert upgrade.target_packages(installed, version) == names


def test_choose_versions_takes_the_release_of_the_driver_version() -> None:
    offered = {
        "a": ["550.127.05-0ubuntu0.22.04.1", "550.127.05-0ubuntu1", "550.90.07-0ubuntu1"],
        "b": ["550.127.050-1", "1:550.127.05-1"],
        "c": ["550.90.07-1"],
    }
    chosen, missing = upgrade.choose_versions(["a", "b", "c", "d"], offered, "550.127.05")
    assert chosen == {"a": "550.127.05-0ubuntu0.22.04.1", "b": "1:550.127.05-1"}
    assert missing == {"c": ["550.90.07-1"], "d": []}


class FlakyHost:
    """Refuses ``refusals`` connections, then answers with ``boot`` as its boot id."""

    print_prefix = "[@fake] "

    def __init__(self, refusals: int, boot: str | None) -> None:
        self.refusals = refusals
        self.boot = boot
        self.connects = 0
        self.disconnects = 0

    def connect(self, show_errors: bool = True, raise_exceptions: bool = False) -> None:
        self.connects += 1
        if self.connects <= self.refusals:
            raise ConnectError("Could not connect (Connection refused)")

    def disconnect(self) -> None:
        self.disconnects += 1

    def get_fact(self, cls: type, *args: Any) -> Any:
        assert cls is BootId
        return self.boot


def test_wait_for_new_boot_retries_until_the_host_answers_in_a_new_boot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(upgrade, "clear_askpass_cache", lambda host: None)
    host = FlakyHost(refusals=3, boot="new")
    assert upgrade.wait_for_new_boot(host, "old", timeout=30, delay=0, interval=0)
    assert host.connects == 4


def test_wait_for_new_boot_fails_when_the_old_boot_or_nothing_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(upgrade, "clear_askpass_cache", lambda host: None)
    same = FlakyHost(refusals=0, boot="old")
    assert not upgrade.wait_for_new_boot(same, "old", timeout=0.05, delay=0, interval=0.01)
    assert same.disconnects >= 2  # each time the old boot answered
    down = FlakyHost(refusals=10**6, boot="new")
    assert not upgrade.wait_for_new_boot(down, "old", timeout=0.05, delay=0, interval=0.01)
