from __future__ import annotations

import pytest

from gpuaudit.parsers.errors import ParseError
from gpuaudit.parsers.system import (
    count_pci_gpus,
    os_info,
    parse_device_nodes,
    parse_driver_proc,
    parse_lspci,
    parse_meta,
    parse_os_release,
    parse_package_holds,
    parse_packages,
    parse_services,
    parse_sysctl,
    parse_tools,
)

# Section texts in the shapes collect/collector.sh prints them.
META = "hostname=gpu-a01\nkernel=5.15.0-119-generic\ndate=2024-11-15T12:00:00Z\nuid=0\n"
TOOLS = "nvidia-smi=1\nrocm-smi=0\namd-smi=0\ndmesg=1\n"
OS_RELEASE = (
    'PRETTY_NAME="Ubuntu 22.04.4 LTS"\nNAME="Ubuntu"\nVERSION_ID="22.04"\n'
    "ID=ubuntu\nID_LIKE=debian\n# comment\n"
)
PACKAGES = (
    "nvidia-driver-550\t550.127.05-0ubuntu1\tinstall ok installed\n"
    "libnvidia-compute-550:amd64\t550.127.05-0ubuntu1\tinstall ok installed\n"
    "nvidia-fabricmanager-550\t550.127.05-1\tinstall ok installed\n"
    "garbage line without tabs\n"
)
SERVICES = (
    "nvidia-persistenced\tactive\tenabled\n"
    "nvidia-fabricmanager\tinactive\tdisabled\nnot-found\n"
    "nvidia-dcgm\t\tnot-found\n"
)


def test_meta_and_os_info() -> None:
    meta = parse_meta(META)
    assert meta["hostname"] == "gpu-a01" and meta["uid"] == "0"
    info = os_info(parse_os_release(OS_RELEASE), meta)
    assert info.pretty_name == "Ubuntu 22.04.4 LTS"
    assert (info.id, info.version_id) == ("ubuntu", "22.04")
    assert (info.kernel, info.hostname) == ("5.15.0-119-generic", "gpu-a01")


def test_tools() -> None:
    assert parse_tools(TOOLS) == {
        "nvidia-smi": True,
        "rocm-smi": False,
        "amd-smi": False,
        "dmesg": True,
    }


def test_os_release_never_evaluates_shell() -> None:
    assert parse_os_release('NAME="$(reboot)"\n')["NAME"] == "$(reboot)"


@pytest.mark.parametrize(
    ("line", "version"),
    [
        ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.127.05  Tue Oct  8 03:22:07 UTC 2024",
         "550.127.05"),
        ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  565.57.01  Release Build  "
         "(dvs-builder@U16-I3-B03-4-3)  Thu Oct 10 12:02:38 UTC 2024", "565.57.01"),
        ("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  560.35.03  Release Build",
         "560.35.03"),
    ],
)  # fmt: skip
def test_driver_proc(line: str, version: str) -> None:
    assert parse_driver_proc(line + "\nGCC version:  gcc version 12.3.0\n") == version


def test_driver_proc_garbage() -> None:
    with pytest.raises(ParseError):
        parse_driver_proc("cat: /proc/driver/nvidia/version: No such file or directory")


def test_packages_with_holds() -> None:
    holds = parse_package_holds("nvidia-driver-550\nlibnvidia-compute-550:amd64\n")
    packages = parse_packages(PACKAGES, holds)
    assert [(p.name, p.held) for p in packages] == [
        ("nvidia-driver-550", True),
        ("libnvidia-compute-550:amd64", False),
        ("nvidia-fabricmanager-550", False),
    ]
    assert packages[0].version == "550.127.05-0ubuntu1"
    assert "libnvidia-compute-550" in holds


def test_dnf_versionlock_holds() -> None:
    text = (
        "Last metadata expiration check: 0:12:01 ago on Fri 15 Nov 2024.\n"
        "nvidia-driver-3:550.127.05-1.el9.*\n"
        "kmod-nvidia-latest-dkms-3:550.127.05-1.el9.*\n"
    )
    assert parse_package_holds(text) == {"nvidia-driver", "kmod-nvidia-latest-dkms"}
    rpm = "nvidia-driver\t550.127.05-1.el9\tinstall ok installed\n"
    assert parse_packages(rpm, parse_package_holds(text))[0].held is True


def test_sysctl() -> None:
    values = parse_sysctl("vm.swappiness = 10\nnet.ipv4.tcp_rmem = 4096 131072  6291456\njunk\n")
    assert values == {"vm.swappiness": "10", "net.ipv4.tcp_rmem": "4096 131072 6291456"}


def test_services_ignores_is_enabled_fallback_line() -> None:
    services = parse_services(SERVICES)
    assert [(s.name, s.active, s.enabled) for s in services] == [
        ("nvidia-persistenced", "active", "enabled"),
        ("nvidia-fabricmanager", "inactive", "disabled"),
        ("nvidia-dcgm", "unknown", "not-found"),
    ]
    assert services[0].running and services[1].present and not services[2].present


def test_device_nodes() -> None:
    nodes = parse_device_nodes(
        "666 root root /dev/nvidia0\n660 root video /dev/dri/renderD128\nstat: cannot stat\n"
    )
    assert [(n.path, n.mode, n.group) for n in nodes] == [
        ("/dev/nvidia0", "666", "root"),
        ("/dev/dri/renderD128", "660", "video"),
    ]
    assert nodes[0].world_writable and not nodes[1].world_writable


def test_lspci_counts_display_and_3d_functions_only() -> None:
    text = (
        "0000:3b:00.0 0302: 10de:2330 (rev a1)\n"
        "0000:3c:00.0 0302: 10de:2330 (rev ff)\n"
        "0000:05:00.0 0680: 10de:22a3 (rev a1)\n"
        "0000:01:00.1 0403: 10de:10f8 (rev a1)\n"
        "0000:c1:00.0 0380: 1002:74a1\n"
        "not a pci line\n"
    )
    devices = parse_lspci(text)
    assert len(devices) == 5 and count_pci_gpus(devices) == 3
    assert devices[0].bus_id == "0000:3B:00.0"
    assert devices[1].revision == "ff"  # config space unreadable: device gone from the bus
    assert devices[4].vendor_id == "1002" and devices[4].revision is None


def test_packages_keep_held_and_skip_not_installed() -> None:
    text = (
        "nvidia-driver-550\t550.127.05-0ubuntu1\thold ok installed\n"
        "libnvidia-compute-550\t550.127.05-0ubuntu1\tinstall ok installed\n"
        "nvidia-driver-535\t\tunknown ok not-installed\n"
        "nvidia-dkms-535\t535.183.01-0ubuntu1\tdeinstall ok config-files\n"
    )
    packages = parse_packages(text, holds=frozenset())
    assert [(p.name, p.held) for p in packages] == [
        ("nvidia-driver-550", True),
        ("libnvidia-compute-550", False),
    ]


def test_boot_time_from_proc_stat_btime() -> None:
    from gpuaudit.parsers.system import boot_time

    assert boot_time(parse_meta("kernel=6.1\nbtime=1717200000\n")) == "2024-06-01T00:00:00Z"
    assert boot_time(parse_meta("kernel=6.1\n")) is None  # an older collector: not said
    for wrong in ("btime=", "btime=-5", "btime=12", "btime=99999999999999", "btime=1e9"):
        assert boot_time(parse_meta(wrong)) is None, wrong
