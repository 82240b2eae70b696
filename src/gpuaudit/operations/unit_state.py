"""What a systemd unit's state (as :class:`gpuaudit.facts.remediation.SystemdUnits` reads it)
means to an operation. Plain values only: the plans that use it import no pyinfra."""

from __future__ import annotations

from collections.abc import Mapping

RUNNING = ("active", "activating", "reloading")  # ActiveState of a unit that runs


def is_masked(state: Mapping[str, str]) -> bool:
    """Masked (``systemctl mask``): turned off on purpose; it cannot be enabled or started
    until someone unmasks it, and no operation here does. Masking stops nothing: a masked unit
    may still run."""
    return state.get("enabled", "").startswith("masked")
