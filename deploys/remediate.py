"""Bring hosts to the site policy: fix what the audit reports and gpuaudit has an operation for.

    pyinfra -y inventory/prod.py deploys/remediate.py
    pyinfra --dry inventory/prod.py deploys/remediate.py        # list the changes, make none
    GPUAUDIT_POLICY=policies/site.yaml pyinfra -y inventory/prod.py deploys/remediate.py

Each step reads the host first and changes only what differs, so a second run changes nothing.
Every step reads the host's settings from the same resolver the audit's rules use (the site
policy named by ``GPUAUDIT_POLICY`` or the inventory's ``gpuaudit_policy``, its groups, the
host's data); a rule the policy disables for the host, or whose risk a waiver accepts, is left
alone and the plan says why:

- GA106  driver packages pinned (apt preferences or dnf versionlock) and held, together
- GA601  the sysctl baseline as one drop-in file, applied live
- GA203  the MIG layout the policy names (``mig_config_name``), where one is named; before
         the two steps below, because a mode change that needs a GPU reset is refused while
         nvidia-persistenced or DCGM holds the GPUs, and those steps start them
- GA401  persistence: nvidia-persistenced enabled and running (``nvidia-smi -pm 1`` only
         where the daemon is absent); hosts whose driver is not loaded are left with the reason;
         skipped where the settings say ``persistence_mode_required: false``, as GA401 then is
- GA403  the units of ``monitoring_services`` (DCGM, dcgm-exporter) where they are installed;
         skipped where the settings say ``monitoring_required: false`` (DCGM run by Kubernetes:
         a host engine started beside it would compete for the GPUs), as GA403 then is

A step that refuses a host (a MIG layout it cannot apply safely, a driver pin at another
version than the one installed) fails that host's step with the reason; pyinfra runs no later
step on that host, and the other hosts go on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuaudit.operations import driver, mig, persistence, plan, services, sysctl
from gpuaudit.operations.settings import host_settings

settings = host_settings()
# DCGM's host engine: nvidia-dcgm, and before DCGM 4 the legacy dcgm unit beside it (an alias
# of nvidia-dcgm since). Only one of them is started.
DCGM_HOST_ENGINES = ("nvidia-dcgm", "dcgm")


def fix(
    rule: str,
    name: str,
    operation: Callable[..., Any],
    required: str | None = None,
    **arguments: Any,
) -> None:
    """Run ``operation`` for ``rule`` unless the host's settings leave the rule alone: the
    policy disables or waives it, or the setting ``required`` (which the rule obeys too) is
    false for the host."""
    reason = settings.skip_reason(rule)
    if reason is None and required is not None and not settings.get(required, True):
        reason = f"{required} is false for this host: {rule} does not apply; not remediated"
    if reason is not None:
        plan.skipped(name=name, rule=rule, reason=reason)
    else:
        operation(name=name, **arguments)


fix("GA106", "Pin and hold the NVIDIA driver packages", driver.pin)
fix("GA601", "Apply the sysctl baseline", sysctl.baseline)
if settings.mig_config_name:
    fix("GA203", "Apply the MIG layout", mig.apply)
fix(
    "GA401",
    "Enable GPU persistence mode",
    persistence.enable,
    required="persistence_mode_required",
)
fix(
    "GA403",
    "Run the DCGM monitoring units",
    services.enable,
    required="monitoring_required",
    names=[str(name) for name in settings.get("monitoring_services") or ()],
    needs_driver=True,
    one_of=DCGM_HOST_ENGINES,
)
