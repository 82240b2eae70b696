"""Small pyinfra facts the remediation operations read (gpuaudit.operations).

The audit reads everything through one collector command (:mod:`gpuaudit.facts.gpu`); an
operation instead asks for just the state it is about to change, right before changing it, so
that what it yields is the difference from the host as it is now.
"""

from __future__ import annotations

import re

from pyinfra.api import FactBase, QuoteString, StringCommand

from gpuaudit.parsers.errors import ParseError
from gpuaudit.parsers.system import parse_driver_proc

# "0, Enabled": nvidia-smi's CSV without header, one GPU a line.
_PERSISTENCE_LINE = re.compile(r"^\s*(\d+)\s*,\s*(.+?)\s*$")
# Properties of one unit as `systemctl show` prints them, blocks separated by blank lines.
_UNIT_PROPERTIES = ("Id", "LoadState", "ActiveState", "UnitFileState")


class PersistenceModes(FactBase[dict[str, str]]):
    """
    Persistence mode of each NVIDIA GPU, by GPU index.

    .. code:: python

        {"0": "Enabled", "1": "Disabled"}

    Empty when nvidia-smi is not installed or does not answer (driver not loaded): the
    operation then has no GPU to change, and the audit reports why.
    """

    @staticmethod
    def default() -> dict[str, str]:
        return {}

    def requires_command(self) -> str:
        return "nvidia-smi"

    def command(self) -> str:
        # A sick driver makes nvidia-smi exit non-zero; that is a finding for the audit, not
        # a reason to stop the whole remediation run.
        return (
            "LANG=C nvidia-smi --query-gpu=index,persistence_mode --format=csv,noheader "
            "2>/dev/null || true"
        )

    def process(self, output: list[str]) -> dict[str, str]:
        modes: dict[str, str] = {}
        for line in output:
            match = _PERSISTENCE_LINE.match(line)
            if match:
                modes[match.group(1)] = match.group(2)
        return modes


class NvidiaDriverVersion(FactBase["str | None"]):
    """
    The version of the NVIDIA kernel module that is loaded, from /proc/driver/nvidia/version;
    None when no NVIDIA module is loaded.

    .. code:: python

        "535.161.08"
    """

    @staticmethod
    def default() -> str | None:
        return None

    def command(self) -> str:
        return "cat /proc/driver/nvidia/version 2>/dev/null || true"

    def process(self, output: list[str]) -> str | None:
        if not any(line.strip() for line in output):
            return None
        try:
            return parse_driver_proc("\n".join(output))
        except ParseError:
            return None


class AptHolds(FactBase[list[str]]):
    """
    Packages held with ``apt-mark hold``, sorted.

    .. code:: python

        ["nvidia-driver-535", "nvidia-utils-535"]
    """

    @staticmethod
    def default() -> list[str]:
        return []

    def requires_command(self) -> str:
        return "apt-mark"

    def command(self) -> str:
        return "LANG=C apt-mark showhold"

    def process(self, output: list[str]) -> list[str]:
        return sorted({line.strip() for line in output if line.strip()})


class SystemdUnits(FactBase[dict[str, dict[str, str]]]):
    """
    Load, active and unit-file state of the named systemd units that exist on the host.

    .. code:: python

        host.get_fact(SystemdUnits, units=["nvidia-persistenced"])
        {"nvidia-persistenced.service": {"active": "inactive", "enabled": "disabled"}}

    A unit the host does not have is left out; a masked one (someone turned it off on
    purpose) is there with ``"enabled": "masked"``, so that an operation can say so instead of
    calling it missing. pyinfra's ``SystemdStatus`` and
    ``SystemdEnabled`` cannot tell a missing unit from a stopped, disabled one (systemctl shows
    properties for any name), and the operations must not try to start what is not installed.
    """

    @staticmethod
    def default() -> dict[str, dict[str, str]]:
        return {}

    def requires_command(self, units: list[str]) -> str:
        return "systemctl"

    def command(self, units: list[str]) -> StringCommand:
        properties: list[str] = []
        for name in _UNIT_PROPERTIES:
            properties += ["--property", name]
        return StringCommand(
            "LANG=C systemctl show",
            *properties,
            *(QuoteString(unit_name(unit)) for unit in units),
        )

    def process(self, output: list[str]) -> dict[str, dict[str, str]]:
        units: dict[str, dict[str, str]] = {}
        block: dict[str, str] = {}
        for line in [*output, ""]:
            key, sep, value = line.strip().partition("=")
            if sep:
                block[key] = value
                continue
            unit = block.get("Id")
            load = block.get("LoadState", "loaded")
            if unit and load != "not-found":
                units[unit] = {
                    "active": block.get("ActiveState", ""),
                    "enabled": "masked" if load == "masked" else block.get("UnitFileState", ""),
                }
            block = {}
        return units


def unit_name(name: str) -> str:
    """``nvidia-dcgm`` → ``nvidia-dcgm.service``, as systemctl reads a bare name."""
    return name if "." in name else f"{name}.service"
