"""Enable and start systemd units that are installed but not running (GA403: DCGM)."""

from __future__ import annotations

from collections.abc import Generator, Iterable

from pyinfra import host
from pyinfra.api import QuoteString, StringCommand, operation

from gpuaudit.facts.remediation import NvidiaDriverVersion, SystemdUnits, unit_name


def installed_units(
    names: Iterable[str],
) -> tuple[list[str], dict[str, dict[str, str]], list[str]]:
    """(the unit names asked for, their states, those the host has), in the order asked."""
    wanted = [unit_name(name) for name in names]
    units = host.get_fact(SystemdUnits, units=wanted)
    return wanted, units, [unit for unit in wanted if unit in units]


def needs_enable(state: dict[str, str]) -> bool:
    # A static unit has no [Install] section: it cannot be enabled, only started.
    return state.get("active") != "active" or state.get("enabled") not in ("enabled", "static")


@operation()
def enable(
    names: Iterable[str], needs_driver: bool = False, one_of: Iterable[str] = ()
) -> Generator[StringCommand, None, None]:
    """
    Enable and start the named systemd units where they are installed.

    + names: unit names (``nvidia-dcgm`` or ``nvidia-dcgm.service``)
    + needs_driver: the units need the NVIDIA driver (DCGM does): on a host whose driver is
      not loaded they are left alone with the reason, since they would fail to start
    + one_of: names among ``names`` that are the same daemon under other names (DCGM's host
      engine is ``nvidia-dcgm``, before DCGM 4 also the legacy ``dcgm``): at most one of them
      runs, the first installed, and none is started while one of them runs already. Two host
      engines on one node are not a configuration DCGM supports (they can deadlock in the
      driver).

    Units the host does not have are left alone: installing them is a package decision this
    operation does not make. One ``systemctl enable --now`` covers every unit that is stopped
    or disabled.

    .. code:: python

        services.enable(name="Run DCGM", names=["nvidia-dcgm", "dcgm-exporter"])
    """
    wanted = [unit_name(name) for name in names]
    if needs_driver and host.get_fact(NvidiaDriverVersion) is None:
        host.noop(
            f"the NVIDIA driver is not loaded: {', '.join(wanted)} would not start; "
            "left as they are until the driver loads"
        )
        return
    wanted, units, present = installed_units(wanted)
    todo = [unit for unit in present if needs_enable(units[unit])]
    alike = {unit_name(name) for name in one_of}
    engines = [unit for unit in present if unit in alike]
    if engines:
        running = [unit for unit in engines if units[unit].get("active") == "active"]
        keep = running[0] if running else engines[0]
        # The one that runs (or will) is enabled as the others are; the rest are left alone.
        todo = [unit for unit in todo if unit not in alike or unit == keep]
        present = [unit for unit in present if unit not in alike or unit == keep]
    if todo:
        yield StringCommand("systemctl", "enable", "--now", *(QuoteString(u) for u in todo))
    elif present:
        host.noop(f"{', '.join(present)} already enabled and running")
    else:
        host.noop(f"none of {', '.join(wanted)} is installed")
