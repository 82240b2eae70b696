"""One host's settings, resolved once: what the rules judge it by and what remediation applies.

Precedence, later wins: the built-in defaults (``policy.defaults``), the site policy's
``defaults:``, its ``groups:`` the host belongs to (file order), then the host's inventory
data. The rules (``rules.evaluate``), the remediation operations (``gpuaudit.operations``) and
``deploys/remediate.py`` all read the same :class:`HostSettings`, so a site that sets
``driver_package_patterns`` or a ``sysctl_baseline`` gets findings and fixes about the same
packages and values.

A rule the policy disables for the host, or whose risk a waiver accepts on it, is not fixed by
remediation behind the site's back: :meth:`HostSettings.skip_reason` says why, and the
remediation plan shows that reason instead of a change.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from types import MappingProxyType
from typing import Any

from gpuaudit.policy.defaults import DEFAULT_POLICY, host_overrides, merge_policy, policy_keys
from gpuaudit.policy.model import Policy, Waiver


@dataclass(frozen=True)
class HostSettings:
    """The resolved settings of one host (read only)."""

    host: str
    values: Mapping[str, Any] = field(default_factory=dict)
    waivers: tuple[Waiver, ...] = ()

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def as_dict(self) -> dict[str, Any]:
        """A plain copy, for code that takes a policy mapping (the rules' RuleContext)."""
        return dict(self.values)

    # --- what the operations read -----------------------------------------------------------

    @property
    def driver_package_patterns(self) -> tuple[str, ...]:
        return tuple(str(p) for p in self.values.get("driver_package_patterns") or ())

    @property
    def sysctl_baseline(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in (self.values.get("sysctl_baseline") or {}).items()}

    @property
    def mig_config_name(self) -> str | None:
        name = self.values.get("mig_config_name")
        return str(name) if name else None

    @property
    def mig_configs(self) -> Mapping[str, list[dict[str, Any]]]:
        return self.values.get("mig_configs") or {}

    @property
    def desired_driver_version(self) -> str | None:
        version = self.values.get("desired_driver_version")
        return str(version) if version else None

    @property
    def disabled_rules(self) -> frozenset[str]:
        return frozenset(str(code) for code in self.values.get("disabled_rules") or ())

    # --- what remediation must not do behind the site's back ---------------------------------

    def waiver_for(self, rule: str, on: date) -> Waiver | None:
        """A waiver in force on ``on`` that accepts ``rule`` on every GPU of this host."""
        for waiver in self.waivers:
            if waiver.rule == rule and waiver.gpus is None and not waiver.expired(on):
                return waiver
        return None

    def skip_reason(self, rule: str, on: date | None = None) -> str | None:
        """Why remediation leaves ``rule`` alone on this host (None: fix it)."""
        if rule in self.disabled_rules:
            return f"{rule} is disabled for this host by the site policy: not remediated"
        waiver = self.waiver_for(rule, on or date.today())
        if waiver is not None:
            where = f" ({waiver.location})" if waiver.location else ""
            return (
                f"{rule} is waived on this host until {waiver.expires.isoformat()} by "
                f"{waiver.owner}{where}: {waiver.reason}; not remediated"
            )
        return None


def resolve_settings(
    policy: Policy | Mapping[str, Any] | None, host: str, host_data: Mapping[str, Any]
) -> HostSettings:
    """The settings of host ``host`` whose inventory data is ``host_data``."""
    if isinstance(policy, Policy):
        values = policy.settings_for(host_data)
        waivers = tuple(w for w in policy.waivers if w.covers_host(host))
    else:
        values = merge_policy(DEFAULT_POLICY, policy, host_overrides(host_data))
        waivers = ()
    return HostSettings(host=host, values=MappingProxyType(values), waivers=waivers)


class SettingsResolver:
    """:func:`resolve_settings` for the many hosts of one policy, as the audit's rules need it.

    The same values, merged with less work: the layers under a host's data (the built-in
    defaults, the site's defaults and the groups it is in) are merged once per distinct group
    list, and each host then only lays its own data over them, copying what it changes. Hosts
    whose data sets nothing share one mapping; nested values are shared between hosts too, so
    the settings are read only (as :class:`HostSettings` says).
    """

    def __init__(self, policy: Policy | Mapping[str, Any] | None) -> None:
        self._policy = policy
        self._bases: dict[tuple[str, ...], dict[str, Any]] = {}
        self._keys = frozenset(policy_keys())

    def resolve(self, host: str, host_data: Mapping[str, Any]) -> HostSettings:
        policy = self._policy
        groups: tuple[str, ...] = ()
        if isinstance(policy, Policy):
            named = host_data.get("groups") or ()
            groups = (named,) if isinstance(named, str) else tuple(named)
            if not all(isinstance(g, str) for g in groups):
                return resolve_settings(policy, host, host_data)
            waivers = tuple(w for w in policy.waivers if w.covers_host(host))
        else:
            waivers = ()
        base = self._bases.get(groups)
        if base is None:
            if isinstance(policy, Policy):
                base = merge_policy(DEFAULT_POLICY, policy.layer_for(groups))
            else:
                base = merge_policy(DEFAULT_POLICY, policy)
            self._bases[groups] = base
        own = host_overrides(host_data) if not self._keys.isdisjoint(host_data) else {}
        values = _laid_over(base, own) if own else base
        return HostSettings(host=host, values=MappingProxyType(values), waivers=waivers)


def _laid_over(base: dict[str, Any], layer: Mapping[str, Any]) -> dict[str, Any]:
    """``merge_policy(base, layer)`` for a ``base`` that merge_policy made (it holds every key
    of the defaults): what ``layer`` leaves alone is shared with ``base``, not copied."""
    merged = dict(base)
    for key, value in layer.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = merge_policy(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    # A layer that pins one precision of the driver clears the other (policy.defaults).
    exclusive = {
        "desired_driver_version": "desired_driver_branch",
        "desired_driver_branch": "desired_driver_version",
    }
    for key, other in exclusive.items():
        if layer.get(key) is not None and other not in layer:
            merged[other] = None
    return merged
