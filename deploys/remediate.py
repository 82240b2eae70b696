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
         where the daemon is absent); hosts whose driver is not loaded are left with the reason
- GA403  the DCGM units (skipped where host data sets ``monitoring_required: False``)

A step that refuses a host (a MIG layout it cannot apply safely, a driver pin at another
version than the one installed) fails that host's step with the reason; pyinfra runs no later
step on that host, and the other hosts go on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyinfra import host

from gpuaudit.operations import driver, mig, persistence, plan, services, sysctl
from gpuaudit.operations.settings import host_settings

settings = host_settings()


def fix(rule: str, name: str, operation: Callable[..., Any], **arguments: Any) -> None:
    reason = settings.skip_reason(rule)
    if reason is not None:
        plan.skipped(name=name, rule=rule, reason=reason)
    else:
        operation(name=name, **arguments)


fix("GA106", "Pin and hold the NVIDIA driver packages", driver.pin)
fix("GA601", "Apply the sysctl baseline", sysctl.baseline)
if settings.mig_config_name:
    fix("GA203", "Apply the MIG layout", mig.apply)
fix("GA401", "Enable GPU persistence mode", persistence.enable)
if host.data.get("monitoring_required") is not False:
    fix(
        "GA403",
        "Run the DCGM monitoring units",
        services.enable,
        names=["nvidia-dcgm", "dcgm-exporter"],
        needs_driver=True,
    )
