"""Turn GPU persistence mode on (GA401)."""

from __future__ import annotations

from collections.abc import Generator

from pyinfra import host
from pyinfra.api import QuoteString, StringCommand, operation

from gpuaudit.facts.remediation import PersistenceModes, SystemdUnits, unit_name
from gpuaudit.operations.services import needs_enable


@operation()
def enable(daemon: str = "nvidia-persistenced") -> Generator[StringCommand, None, None]:
    """
    Keep persistence mode on for every NVIDIA GPU, across reboots where the host allows it.

    + daemon: the systemd unit that holds persistence mode

    Where the daemon's unit is installed it is the fix: ``systemctl enable --now`` when it is
    stopped or disabled. Once it runs it turns persistence on for every GPU, so no
    ``nvidia-smi -pm`` is issued alongside it. ``nvidia-smi -i <gpus> -pm 1`` is used only for
    GPUs still off while the daemon runs (switched off by hand) or on hosts without the unit;
    NVIDIA deprecates that setting and it is lost at reboot, so the audit keeps reporting a
    host without the daemon.

    .. code:: python

        persistence.enable(name="Enable GPU persistence mode")
    """
    unit = unit_name(daemon)
    state = host.get_fact(SystemdUnits, units=[unit]).get(unit)
    if state is not None and needs_enable(state):
        yield StringCommand("systemctl", "enable", "--now", QuoteString(unit))
        return
    modes = host.get_fact(PersistenceModes)
    off = [index for index, mode in modes.items() if mode == "Disabled"]
    if off:
        yield StringCommand("nvidia-smi", "-i", QuoteString(",".join(off)), "-pm", "1")
    elif modes:
        host.noop(f"persistence mode already enabled on all GPUs ({len(modes)})")
    else:
        host.noop("no NVIDIA GPU answered nvidia-smi; nothing to enable")
