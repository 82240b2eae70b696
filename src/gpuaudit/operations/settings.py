"""The settings of the host an operation runs on, resolved once per host and run.

The same resolver the audit's rules use (:func:`gpuaudit.policy.settings.resolve_settings`),
over the same inventory data the audit copies into snapshots, with the site policy the run
names (``GPUAUDIT_POLICY``, else the inventory's ``gpuaudit_policy`` host data). So a host
that the audit judges by a ``sysctl_baseline`` or ``driver_package_patterns`` is remediated
to those same values.
"""

from __future__ import annotations

import weakref
from typing import Any

from pyinfra.context import ctx_host, ctx_state

from gpuaudit.deploy import host_data_for_snapshot, policy_path
from gpuaudit.policy import Policy, load_policy
from gpuaudit.policy.settings import HostSettings, resolve_settings

_policies: dict[str, Policy] = {}
# Keyed by the host object itself: a pyinfra Host lives for one run.
_settings: weakref.WeakKeyDictionary[Any, HostSettings] = weakref.WeakKeyDictionary()


def site_policy() -> Policy | None:
    """The run's site policy, loaded once per file (None outside a pyinfra run)."""
    if not ctx_state.isset():
        return None
    path = policy_path(ctx_state.get())
    if path is None:
        return None
    if path not in _policies:
        _policies[path] = load_policy(path)
    return _policies[path]


def host_settings() -> HostSettings:
    """The current host's settings (cached for the run: read them as often as needed)."""
    current = ctx_host.get()
    if current not in _settings:
        _settings[current] = resolve_settings(
            site_policy(), current.name, host_data_for_snapshot(current)
        )
    return _settings[current]


class HostSettingError(ValueError):
    """A value the host's settings give (its inventory data, which no schema checks as the
    policy file is checked) that an operation cannot use: the operation refuses that host
    (:func:`gpuaudit.operations.plan.refusal`) and the others go on."""
