"""Enable and start systemd units that are installed but not running (GA403: DCGM)."""

from __future__ import annotations

from collections.abc import Generator, Iterable

from pyinfra import host
from pyinfra.api import QuoteString, StringCommand, operation

from gpuaudit.facts.remediation import SystemdUnits, unit_name


def needs_enable(state: dict[str, str]) -> bool:
    # A static unit has no [Install] section: it cannot be enabled, only started.
    return state.get("active") != "active" or state.get("enabled") not in ("enabled", "static")


@operation()
def enable(names: Iterable[str]) -> Generator[StringCommand, None, None]:
    """
    Enable and start the named systemd units where they are installed.

    + names: unit names (``nvidia-dcgm`` or ``nvidia-dcgm.service``)

    Units the host does not have are left alone: installing them is a package decision this
    operation does not make. One ``systemctl enable --now`` covers every unit that is stopped
    or disabled.

    .. code:: python

        services.enable(name="Run DCGM", names=["nvidia-dcgm", "dcgm-exporter"])
    """
    wanted = [unit_name(name) for name in names]
    units = host.get_fact(SystemdUnits, units=wanted)
    present = [unit for unit in wanted if unit in units]
    todo = [unit for unit in present if needs_enable(units[unit])]
    if todo:
        yield StringCommand("systemctl", "enable", "--now", *(QuoteString(u) for u in todo))
    elif present:
        host.noop(f"{', '.join(present)} already enabled and running")
    else:
        host.noop(f"none of {', '.join(wanted)} is installed")
