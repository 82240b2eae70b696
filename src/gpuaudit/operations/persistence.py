"""Turn GPU persistence mode on (GA401)."""

from __future__ import annotations

from collections.abc import Generator

from pyinfra import host, logger
from pyinfra.api import QuoteString, StringCommand, operation

from gpuaudit.facts.remediation import (
    NvidiaDriverVersion,
    PersistenceModes,
    SystemdUnits,
    unit_name,
)
from gpuaudit.operations.services import enable_commands, masked_note, needs_enable
from gpuaudit.operations.unit_state import is_masked


@operation()
def enable(daemon: str = "nvidia-persistenced") -> Generator[StringCommand, None, None]:
    """
    Keep persistence mode on for every NVIDIA GPU, across reboots where the host allows it.

    + daemon: the systemd unit that holds persistence mode

    A host whose NVIDIA driver is not loaded is left alone with the reason (no GPU can hold a
    mode, and the daemon would not start); the audit reports the driver (GA101), and the next
    run after the driver loads turns persistence on.

    Where the daemon's unit is installed it is the fix, NVIDIA's supported way:
    ``systemctl enable --now`` when it is stopped or disabled. Once it runs it turns
    persistence on for every GPU, so no ``nvidia-smi -pm`` is issued alongside it.
    ``nvidia-smi -i <gpus> -pm 1`` is used only for GPUs still off while the daemon runs
    (switched off by hand) or on hosts without the unit, or with the unit masked (left masked:
    someone turned it off on purpose). That is NVIDIA's legacy setting,
    lost at reboot: the operation warns, and the audit keeps reporting a host without the
    daemon.

    .. code:: python

        persistence.enable(name="Enable GPU persistence mode")
    """
    loaded = host.get_fact(NvidiaDriverVersion)
    if loaded is None:
        host.noop(
            "the NVIDIA driver is not loaded (no /proc/driver/nvidia/version): no GPU can "
            "hold persistence mode until it loads; persistence left as it is"
        )
        return
    unit = unit_name(daemon)
    units = host.get_fact(SystemdUnits, units=[unit])
    state = units.get(unit)
    if state is not None and needs_enable(state):
        yield from enable_commands(units, [unit])
        return
    modes = host.get_fact(PersistenceModes)
    off = [index for index, mode in modes.items() if mode == "Disabled"]
    if off:
        if state is None:
            logger.warning(
                f"{host.name}: {unit} is not installed: persistence set with nvidia-smi -pm 1, "
                "NVIDIA's legacy setting, which a reboot loses; install the daemon"
            )
        elif is_masked(state):
            logger.warning(
                f"{host.name}: {masked_note([unit])}; persistence set with nvidia-smi -pm 1, "
                "NVIDIA's legacy setting, which a reboot loses"
            )
        yield StringCommand("nvidia-smi", "-i", QuoteString(",".join(off)), "-pm", "1")
    elif modes:
        host.noop(f"persistence mode already enabled on all GPUs ({len(modes)})")
    else:
        host.noop("no NVIDIA GPU answered nvidia-smi; nothing to enable")
