"""The small host sections: meta, tools, os-release, driver version, packages, sysctls, ...

Each parser reads exactly what ``collect/collector.sh`` prints for its section (see the comments
on each function) and skips lines it does not recognise rather than failing: these sections are
simple ``key=value`` or tab-separated lists, and one odd line (a locale warning, a package
manager notice) must not lose the rest.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

from gpuaudit.model.snapshot import DeviceNode, OsInfo, Package, PciDevice, Service, bus_key
from gpuaudit.parsers.errors import ParseError

_DRIVER_VERSION = re.compile(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)*)")
_ANY_VERSION = re.compile(r"\b(\d{3}\.\d+(?:\.\d+)?)\b")
_LSPCI = re.compile(
    r"^(?P<bus>(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+"
    r"(?:Class\s+)?(?P<cls>[0-9a-fA-F]{4}):\s+(?P<vendor>[0-9a-fA-F]{4}):(?P<device>[0-9a-fA-F]{4})"
    r"(?:\s+\(rev\s+(?P<rev>[0-9a-fA-F]{2})\))?"
)
# dnf/yum versionlock entries: [epoch:]name-[epoch:]version-release[.arch|.*]
_VERSIONLOCK = re.compile(r"^(?:\d+:)?(?P<name>.+?)-(?:\d+:)?\d[^-]*-[^-]+$")


def parse_key_values(text: str) -> dict[str, str]:
    """``key=value`` lines (the meta section); later keys win, blank/comment lines are skipped."""
    values: dict[str, str] = {}
    for line in (text or "").splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        values[key.strip()] = value.strip()
    return values


def parse_meta(text: str) -> dict[str, str]:
    """The meta section: ``hostname=``, ``kernel=``, ``date=``, ``uid=``, ``btime=``."""
    return parse_key_values(text)


# Boot times a host can give: after 1990, before 2100 (anything else is a clock gone wrong).
_BTIME_RANGE = (631152000, 4102444800)


def boot_time(meta: dict[str, str]) -> str | None:
    """When the host booted, in ISO 8601 UTC, from /proc/stat's ``btime`` (meta ``btime=``);
    None when the host did not say or said something no clock gives."""
    value = meta.get("btime", "").strip()
    if not value.isdigit() or not _BTIME_RANGE[0] <= int(value) < _BTIME_RANGE[1]:
        return None
    moment = datetime.fromtimestamp(int(value), timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_tools(text: str) -> dict[str, bool]:
    """The tools section: ``nvidia-smi=1`` / ``rocm-smi=0`` → {tool: present}."""
    return {key: value == "1" for key, value in parse_key_values(text).items()}


def parse_os_release(text: str) -> dict[str, str]:
    """/etc/os-release: shell-style assignments, values optionally quoted (never evaluated)."""
    values: dict[str, str] = {}
    for key, value in parse_key_values(text).items():
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        values[key] = value.replace('\\"', '"').replace("\\\\", "\\")
    return values


def os_info(os_release: dict[str, str], meta: dict[str, str]) -> OsInfo:
    return OsInfo(
        pretty_name=os_release.get("PRETTY_NAME") or None,
        id=os_release.get("ID") or None,
        version_id=os_release.get("VERSION_ID") or None,
        kernel=meta.get("kernel") or None,
        hostname=meta.get("hostname") or None,
        boot_time=boot_time(meta),
    )


def parse_driver_proc(text: str) -> str:
    """/proc/driver/nvidia/version → the loaded kernel module's version, e.g. ``"550.127.05"``.

    ``NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.127.05  Tue Oct  8 ...`` and the open
    module's ``NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.127.05  Release ...``.
    """
    first = next((line for line in (text or "").splitlines() if line.strip()), "")
    match = _DRIVER_VERSION.search(first) or _ANY_VERSION.search(first)
    if not match:
        raise ParseError("/proc/driver/nvidia/version", "no driver version on the first line", text)
    return match.group(1)


def parse_packages(
    text: str, holds: frozenset[str] | set[str] = frozenset()
) -> tuple[Package, ...]:
    """``name<TAB>version<TAB>install ok installed`` lines (dpkg-query, or rpm shaped alike)."""
    packages: list[Package] = []
    for line in (text or "").splitlines():
        parts = line.split("\t")
        if len(parts) < 2 or not parts[0].strip():
            continue
        # dpkg status "<want> ok installed": want is "install", or "hold" for a held package;
        # "not-installed" and "config-files" are not installed packages.
        status = parts[2].split() if len(parts) >= 3 else ["install", "ok", "installed"]
        if not status or status[-1] != "installed":
            continue
        name = parts[0].strip()
        held = name in holds or status[0] == "hold"
        packages.append(Package(name=name, version=parts[1].strip(), held=held))
    return tuple(packages)


def parse_package_holds(text: str) -> frozenset[str]:
    """Held package names from ``apt-mark showhold`` or ``dnf/yum versionlock list``."""
    held: set[str] = set()
    for line in (text or "").splitlines():
        line = line.strip()
        # dnf prints notices ("Last metadata expiration check: ...") among the entries.
        if not line or " " in line or line.startswith("#"):
            continue
        head, colon, tail = line.partition(":")
        # versionlock entries carry an epoch ("name-3:550.127.05-1.el9.*"); apt may print
        # "name:arch", whose tail has no dash.
        lock = _VERSIONLOCK.match(line) if colon and "-" in tail else None
        held.add(lock.group("name") if lock else head)
    return frozenset(held)


def parse_sysctl(text: str) -> dict[str, str]:
    """``key = value`` lines."""
    values: dict[str, str] = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip():
            values[key.strip()] = " ".join(value.split())
    return values


def parse_services(text: str) -> tuple[Service, ...]:
    """``name<TAB>is-active<TAB>is-enabled`` lines.

    ``systemctl is-enabled`` exits non-zero for disabled or masked units, so the collector's
    ``|| echo not-found`` fallback can add a second line holding ``not-found`` after the real
    state; such continuation lines are ignored and the first state printed is kept.
    """
    services: list[Service] = []
    for line in (text or "").splitlines():
        if "\t" not in line:
            continue
        name, active, enabled = ([*line.split("\t"), "", ""])[:3]
        if not name.strip():
            continue
        services.append(
            Service(
                name=name.strip(),
                active=active.strip() or "unknown",
                enabled=enabled.strip() or "not-found",
            )
        )
    return tuple(services)


def parse_device_nodes(text: str) -> tuple[DeviceNode, ...]:
    """``stat -c '%a %U %G %n'`` lines: mode, owner, group, path."""
    nodes: list[DeviceNode] = []
    for line in (text or "").splitlines():
        parts = line.split(None, 3)
        if len(parts) == 4 and re.fullmatch(r"[0-7]{3,4}", parts[0]):
            nodes.append(DeviceNode(path=parts[3], mode=parts[0], owner=parts[1], group=parts[2]))
    return tuple(nodes)


def parse_lspci(text: str) -> tuple[PciDevice, ...]:
    """``lspci -D -n -d 10de:`` lines: ``0000:3b:00.0 0302: 10de:2330 (rev a1)``."""
    devices: list[PciDevice] = []
    for line in (text or "").splitlines():
        match = _LSPCI.match(line.strip())
        if match:
            devices.append(
                PciDevice(
                    bus_id=bus_key(match["bus"]) or match["bus"],
                    class_code=match["cls"].lower(),
                    vendor_id=match["vendor"].lower(),
                    device_id=match["device"].lower(),
                    revision=match["rev"].lower() if match["rev"] else None,
                )
            )
    return tuple(devices)


def count_pci_gpus(devices: tuple[PciDevice, ...]) -> int:
    """Display/3D-class functions: what the bus says is a GPU, whatever the driver thinks."""
    return sum(1 for d in devices if d.is_gpu)
