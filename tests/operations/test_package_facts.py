"""The package pin facts (commands and parsing) and the pure pinning logic driver.pin uses."""

from __future__ import annotations

import re

import pytest
from pyinfra.context import ctx_host
from test_operations import FakeHost, rendered

from gpuaudit.facts.packages import (
    APT_PREFERENCES_HEADER,
    AptPinFile,
    DnfVersionlockPlugin,
    DnfVersionLocks,
    apt_pin_versions,
    driver_packages,
    locks_to_change,
    parse_versionlock_list,
    render_apt_preferences,
    valid_version,
    version_mismatches,
)
from gpuaudit.operations import driver

# --- facts --------------------------------------------------------------------------------


def test_apt_pin_file_command_quotes_the_path() -> None:
    command = AptPinFile().command(path="/etc/apt/preferences.d/x; reboot")
    assert command.get_raw_value() == (
        "if [ -f '/etc/apt/preferences.d/x; reboot' ]; then echo present; "
        "cat '/etc/apt/preferences.d/x; reboot' ; fi"
    )


def test_apt_pin_file_content_absent_and_empty() -> None:
    fact = AptPinFile()
    assert fact.default() is None
    assert fact.process([]) is None
    assert fact.process(["present"]) == ""
    assert fact.process(["present", "# x", "", "Package: a"]) == "# x\n\nPackage: a\n"
    # Output that is not the command's marker is no file content.
    assert fact.process(["cat: permission denied"]) is None


@pytest.mark.parametrize(
    ("manager", "plugin"),
    [("dnf", "python3-dnf-plugin-versionlock"), ("yum", "yum-plugin-versionlock")],
)
def test_versionlock_plugin_command(manager: str, plugin: str) -> None:
    fact = DnfVersionlockPlugin()
    assert fact.requires_command(manager=manager) == manager
    assert fact.command(manager=manager).get_raw_value() == (
        f"if rpm -q --quiet {plugin} || {manager} -q versionlock list >/dev/null 2>&1; "
        "then echo yes; else echo no; fi"
    )


def test_versionlock_plugin_answer() -> None:
    fact = DnfVersionlockPlugin()
    assert fact.process(["yes"]) is True
    assert fact.process(["no"]) is False
    assert fact.process([]) is False
    assert fact.default() is False


def test_versionlock_facts_refuse_an_unknown_manager() -> None:
    with pytest.raises(ValueError, match="zypper"):
        DnfVersionlockPlugin().command(manager="zypper")
    with pytest.raises(ValueError, match="zypper"):
        DnfVersionLocks().command(manager="zypper")


def test_version_locks_command() -> None:
    assert DnfVersionLocks().command(manager="dnf").get_raw_value() == "dnf -q versionlock list"
    assert DnfVersionLocks().requires_command(manager="yum") == "yum"
    assert DnfVersionLocks().default() == {}


def test_dnf4_lock_list() -> None:
    # dnf-plugins-core writes NAME-EPOCH:VERSION-RELEASE.* (pkgtup2spec), always with an epoch.
    output = [
        "nvidia-driver-3:550.127.05-1.el9.*",
        "nvidia-driver-cuda-libs-3:550.127.05-1.el9.*",
        "kmod-nvidia-open-dkms-3:550.127.05-1.el9.x86_64",
        "libnvidia-nscq-550-0:550.127.05-1.*",
        "!nvidia-driver-3:550.54.14-1.el9.*",  # an exclusion, not a lock
        "nvidia-settings-*",  # written by hand, names no version
        "",
    ]
    assert DnfVersionLocks().process(output) == {
        "kmod-nvidia-open-dkms": ["550.127.05-1.el9"],
        "libnvidia-nscq-550": ["550.127.05-1"],
        "nvidia-driver": ["550.127.05-1.el9"],
        "nvidia-driver-cuda-libs": ["550.127.05-1.el9"],
    }


def test_yum_lock_list() -> None:
    # yum-plugin-versionlock: EPOCH:NAME-VERSION-RELEASE.ARCH, then its own closing line.
    output = [
        "0:nvidia-driver-cuda-550.127.05-1.el7.*",
        "3:nvidia-driver-550.127.05-1.el7.x86_64",
        "versionlock list done",
    ]
    assert parse_versionlock_list(output) == {
        "nvidia-driver": ["550.127.05-1.el7"],
        "nvidia-driver-cuda": ["550.127.05-1.el7"],
    }


def test_dnf5_lock_list() -> None:
    # dnf 5: "Package name: …" then its conditions, one entry per block.
    output = [
        "# Added by 'versionlock add' command on 2025-01-10 09:12:01",
        "Package name: nvidia-driver",
        "evr = 3:550.127.05-1.fc41",
        "",
        "# Added by 'versionlock exclude' command on 2025-01-10 09:13:40",
        "Package name: nvidia-driver-libs",
        "evr != 3:550.54.14-1.fc41",
        "",
        "Package name: nvidia-kmod-common",
        "evr = 550.127.05-1.fc41",
    ]
    assert parse_versionlock_list(output) == {
        "nvidia-driver": ["550.127.05-1.fc41"],
        "nvidia-kmod-common": ["550.127.05-1.fc41"],
    }


def test_several_locks_of_one_package_are_all_kept() -> None:
    output = ["nvidia-driver-3:550.127.05-1.el9.*", "nvidia-driver-3:535.161.08-1.el9.*"]
    assert parse_versionlock_list(output) == {
        "nvidia-driver": ["535.161.08-1.el9", "550.127.05-1.el9"]
    }


# --- pure pinning logic -------------------------------------------------------------------

PATTERNS = [re.compile(p) for p in (r"nvidia-driver", r"libnvidia-(?!container)")]


def test_driver_packages_match_names_and_driver_versions() -> None:
    installed = {
        "nvidia-driver-550": {"550.127.05-0ubuntu1"},
        "libnvidia-compute-550": {"550.127.05-0ubuntu1"},
        "libnvidia-container1": {"1.16.2-1"},
        "nvidia-driver-local-repo-ubuntu2204-550.127.05": {"1.0-1"},
        "openssh-server": {"1:8.9p1-3"},
        "xnvidia-driver": {"550.127.05-1"},  # matched from the start only
    }
    assert driver_packages(installed, PATTERNS) == {
        "libnvidia-compute-550": "550.127.05-0ubuntu1",
        "nvidia-driver-550": "550.127.05-0ubuntu1",
    }


def test_driver_packages_take_the_highest_installed_version() -> None:
    installed = {"nvidia-driver": {"550.54.14-1.el9", "550.127.05-1.el9", "535.161.08-1.el9"}}
    assert driver_packages(installed, PATTERNS) == {"nvidia-driver": "550.127.05-1.el9"}


@pytest.mark.parametrize(
    ("installed", "matches"),
    [
        ("550.127.05-0ubuntu1", True),
        ("550.127.05-1", True),
        ("550.127.05-0ubuntu0.22.04.1", True),
        ("1:550.127.05-1", True),
        ("550.127.05-1.el9", True),
        ("550.127.051-1", False),
        ("550.127.05.1-1", False),
        ("535.161.08-0ubuntu1", False),
    ],
)
def test_version_matches_by_upstream_prefix(installed: str, matches: bool) -> None:
    mismatches = version_mismatches({"nvidia-driver-550": installed}, "550.127.05")
    assert (mismatches == {}) is matches


def test_valid_version() -> None:
    assert valid_version("550.127.05")
    assert valid_version("1:550.127.05-0ubuntu0.22.04.1")
    assert not valid_version("550.*")
    assert not valid_version("550.127.05\nPackage: *")
    assert not valid_version("")


def test_apt_pin_versions_exact_or_upstream_glob() -> None:
    packages = {"a": "550.127.05-0ubuntu1", "b": "1:550.127.05-1"}
    assert apt_pin_versions(packages, None) == packages
    assert apt_pin_versions(packages, "550.127.05") == {"a": "550.127.05*", "b": "1:550.127.05*"}


def test_render_apt_preferences_one_stanza_per_version() -> None:
    pins = {"nvidia-utils-550": "550.127.05-0ubuntu1", "nvidia-fabricmanager-550": "550.127.05-1"}
    pins["libnvidia-compute-550"] = "550.127.05-0ubuntu1"
    stanzas = (
        "\nPackage: libnvidia-compute-550 nvidia-utils-550\n"
        "Pin: version 550.127.05-0ubuntu1\n"
        "Pin-Priority: 1001\n"
        "\nPackage: nvidia-fabricmanager-550\n"
        "Pin: version 550.127.05-1\n"
        "Pin-Priority: 1001\n"
    )
    assert render_apt_preferences(pins) == APT_PREFERENCES_HEADER + stanzas
    assert all(line.startswith("# ") for line in APT_PREFERENCES_HEADER.splitlines())
    assert "gpuaudit" in APT_PREFERENCES_HEADER


def test_rendered_preferences_read_back_unchanged() -> None:
    # What AptPinFile reads back from the uploaded file equals what pin renders: no rewrite.
    content = render_apt_preferences({"nvidia-driver-550": "550.127.05-0ubuntu1"})
    assert AptPinFile().process(["present", *content.splitlines()]) == content


def test_locks_to_change() -> None:
    packages = {"a": "550.127.05-1.el9", "b": "550.127.05-1.el9", "c": "550.127.05-1.el9"}
    locks = {"a": ["550.127.05-1.el9"], "b": ["535.161.08-1.el9"], "z": ["1.0-1"]}
    assert locks_to_change(packages, locks) == (["b"], ["b", "c"])
    assert locks_to_change(packages, {name: [v] for name, v in packages.items()}) == ([], [])


# --- which packages the operations choose -------------------------------------------------


def _pin_commands(data: dict[str, object], **kwargs: object) -> list[object]:
    host = FakeHost(
        {
            "server.Which": {"apt-mark": "/usr/bin/apt-mark"},
            "deb.DebPackages": {
                "nvidia-driver-550": ["550.127.05-0ubuntu1"],
                "nvidia-fabricmanager-550": ["550.127.05-1"],
                "nvidia-utils-550": ["550.127.05-0ubuntu1"],
            },
            "packages.AptPinFile": None,
            "remediation.AptHolds": [],
        }
    )
    host.data = data
    with ctx_host.use(host):
        return [rendered(c) for c in driver.pin._inner(**kwargs)]


def test_host_data_patterns_keep_the_co_pinned_packages() -> None:
    commands = _pin_commands({"driver_package_patterns": ["nvidia-driver"]})
    assert commands[-1] == "apt-mark hold nvidia-driver-550 nvidia-fabricmanager-550"


def test_default_patterns_are_the_policy_and_the_co_pinned_packages() -> None:
    held = "nvidia-driver-550 nvidia-fabricmanager-550 nvidia-utils-550"
    assert _pin_commands({})[-1] == f"apt-mark hold {held}"


def test_patterns_given_are_used_alone() -> None:
    assert _pin_commands({}, patterns=["nvidia-utils"])[-1] == "apt-mark hold nvidia-utils-550"
