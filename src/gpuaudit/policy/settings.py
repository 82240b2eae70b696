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

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from types import MappingProxyType
from typing import Any

from gpuaudit.policy.defaults import DEFAULT_POLICY, host_overrides, merge_policy
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
