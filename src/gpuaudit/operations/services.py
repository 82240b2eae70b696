"""Enable and start systemd units that are installed but not running (GA403: DCGM)."""

from __future__ import annotations

from collections.abc import Generator, Iterable

from pyinfra import host, logger
from pyinfra.api import QuoteString, StringCommand, operation

from gpuaudit.facts.remediation import NvidiaDriverVersion, SystemdUnits, unit_name
from gpuaudit.operations.unit_state import RUNNING, is_masked


def installed_units(
    names: Iterable[str],
) -> tuple[list[str], dict[str, dict[str, str]], list[str]]:
    """(the unit names asked for, their states, those the host has), in the order asked. A
    masked unit is one the host has (it may even run: masking does not stop a unit)."""
    wanted = [unit_name(name) for name in names]
    units = host.get_fact(SystemdUnits, units=wanted)
    return wanted, units, [unit for unit in wanted if unit in units]


# Unit-file states `systemctl enable` cannot change: no [Install] section (static), made by a
# generator (a SysV script's, or a mount's) or at run time (transient), enabled only through
# the units its Also= names (indirect), or a name that is another unit's alias. Such a unit is
# only started; asking to enable it would fail, or change nothing and be asked again each run.
_ONLY_STARTED = ("static", "generated", "transient", "indirect", "alias")


def needs_enable(state: dict[str, str]) -> bool:
    """Whether a unit is to be enabled or started: stopped, or disabled (or enabled only until
    the next boot, enabled-runtime) where `systemctl enable` can enable it. Never a masked one."""
    if is_masked(state):
        return False
    if state.get("active") not in RUNNING:
        return True
    return state.get("enabled") not in ("enabled", *_ONLY_STARTED)


def enable_commands(
    units: dict[str, dict[str, str]], todo: Iterable[str]
) -> Generator[StringCommand, None, None]:
    """``systemctl enable --now`` for the units of ``todo`` that can be enabled, ``systemctl
    start`` for those that can only be started (:data:`_ONLY_STARTED`)."""
    todo = list(todo)
    start = [u for u in todo if units[u].get("enabled") in _ONLY_STARTED]
    enable = [u for u in todo if u not in start]
    if enable:
        yield StringCommand("systemctl", "enable", "--now", *(QuoteString(u) for u in enable))
    if start:
        yield StringCommand("systemctl", "start", *(QuoteString(u) for u in start))


def masked_note(units: Iterable[str]) -> str:
    names = ", ".join(units)
    return (
        f"{names} masked (turned off on purpose): left as it is; `systemctl unmask {names}` "
        "lets it be enabled"
    )


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
    operation does not make; so are masked ones, with the reason (someone turned them off on
    purpose). One ``systemctl enable --now`` covers every unit that is stopped or disabled; a
    unit that can only be started (static, made by a generator or at run time, indirect, an
    alias) is started with ``systemctl start`` and, once it runs, left as it is.

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
    masked = [unit for unit in present if is_masked(units[unit])]
    present = [unit for unit in present if unit not in masked]
    todo = [unit for unit in present if needs_enable(units[unit])]
    alike = {unit_name(name) for name in one_of}
    # Every engine the host has counts, a masked one too (masking stops nothing: it may run),
    # and one starting or reloading runs as much as an active one.
    engines = [unit for unit in (*present, *masked) if unit in alike]
    if engines:
        running = [unit for unit in engines if units[unit].get("active") in RUNNING]
        startable = [unit for unit in engines if unit not in masked]
        keep = running[0] if running else next(iter(startable), None)
        # The one that runs (or will) is enabled as the others are; the rest are left alone,
        # and none is started beside one that runs masked.
        todo = [unit for unit in todo if unit not in alike or unit == keep]
        present = [unit for unit in present if unit not in alike or unit == keep]
    if masked and not todo:
        host.noop(masked_note(masked))
    elif masked:
        logger.warning(f"{host.name}: {masked_note(masked)}")
    if todo:
        yield from enable_commands(units, todo)
    elif present and not masked:
        host.noop(f"{', '.join(present)} already enabled and running")
    elif not masked:
        host.noop(f"none of {', '.join(wanted)} is installed")
