"""Facts the driver-upgrade operations (:mod:`gpuaudit.operations.upgrade`) read: what the host's
apt repositories offer, which NVIDIA kernel module is on disk, and which boot the host is in.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from pyinfra.api import FactBase, QuoteString, StringCommand

# `apt-cache policy` output: "pkg:" (at the start of the line), then the version table, whose
# version lines are " *** VERSION PRIORITY" (the installed one) or "     VERSION PRIORITY"; the
# origin lines under them are indented further.
_POLICY_PACKAGE = re.compile(r"^(?P<name>[a-z0-9][a-z0-9+.-]+)(?::[a-z0-9]+)?:$")
_POLICY_VERSION = re.compile(r"^ (?:\*\*\*| {3}) (?! )(?P<version>\S+)(?: -?\d+)?\s*$")
_MODULE_VERSION = re.compile(r"^\d+\.\d+(?:\.\d+)*$")
_BOOT_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


class AptPolicyVersions(FactBase[dict[str, list[str]]]):
    """
    The versions the host's apt sources (and dpkg status) offer for each named package, highest
    first, as ``apt-cache policy`` lists them.

    .. code:: python

        host.get_fact(AptPolicyVersions, packages=["nvidia-driver-550"])
        {"nvidia-driver-550": ["550.127.05-0ubuntu1", "550.90.07-0ubuntu1"]}

    A package apt does not know is left out.
    """

    @staticmethod
    def default() -> dict[str, list[str]]:
        return {}

    def requires_command(self, packages: Iterable[str]) -> str:
        return "apt-cache"

    def command(self, packages: Iterable[str]) -> StringCommand:
        # "N: Unable to locate package" goes to stderr and is no failure of the fact.
        return StringCommand(
            "LANG=C apt-cache policy",
            *(QuoteString(name) for name in packages),
            "2>/dev/null || true",
        )

    def process(self, output: list[str]) -> dict[str, list[str]]:
        return parse_apt_policy(output)


def parse_apt_policy(lines: Iterable[str]) -> dict[str, list[str]]:
    """Versions per package from ``apt-cache policy`` output, in the order it lists them."""
    offered: dict[str, list[str]] = {}
    current: str | None = None
    in_table = False
    for line in lines:
        package = _POLICY_PACKAGE.match(line)
        if package:
            current, in_table = package.group("name"), False
            offered.setdefault(current, [])
            continue
        if current is None:
            continue
        if line.strip() == "Version table:":
            in_table = True
            continue
        version = _POLICY_VERSION.match(line) if in_table else None
        if version and version.group("version") not in offered[current]:
            offered[current].append(version.group("version"))
    return {name: versions for name, versions in offered.items() if versions}


class NvidiaModuleVersion(FactBase["str | None"]):
    """
    Version of the NVIDIA kernel module installed for the running kernel (what ``modprobe
    nvidia`` would load), from ``modinfo``; None when there is none (no driver, or DKMS did not
    build it for this kernel).

    .. code:: python

        "550.127.05"
    """

    @staticmethod
    def default() -> str | None:
        return None

    def command(self) -> str:
        return "LANG=C modinfo -F version nvidia 2>/dev/null || true"

    def process(self, output: list[str]) -> str | None:
        for line in output:
            if _MODULE_VERSION.match(line.strip()):
                return line.strip()
        return None


class BootId(FactBase["str | None"]):
    """
    The kernel's id of the current boot (``/proc/sys/kernel/random/boot_id``): a new one at every
    boot, so a host reached again after a reboot is known to have rebooted. None where it
    cannot be read.

    .. code:: python

        "c95e1776-dc3f-4e5c-a632-48083739154a"
    """

    @staticmethod
    def default() -> str | None:
        return None

    def command(self) -> str:
        return "cat /proc/sys/kernel/random/boot_id 2>/dev/null || true"

    def process(self, output: list[str]) -> str | None:
        for line in output:
            if _BOOT_ID.match(line.strip().lower()):
                return line.strip().lower()
        return None
