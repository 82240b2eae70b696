"""The rules read each host's settings and never change them.

Hosts of one group list share one merged mapping of settings, and the nested values (lists of
package patterns, maps of thresholds and severities) are shared between hosts without a copy
(policy/settings.py ``SettingsResolver``): a rule that changed one in place would change what
the rules judge every later host by. Here every rule runs over the committed example run (the
demo fleet, with its site policy: groups, host data, overrides) and over the same fleet with
the built-in defaults, and every host's settings, and the defaults, are what they were when
they were resolved.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

import gpuaudit.rules
from gpuaudit.policy import load_policy
from gpuaudit.policy import settings as settings_module
from gpuaudit.policy.defaults import DEFAULT_POLICY
from gpuaudit.policy.settings import HostSettings
from gpuaudit.report.run import RunDir

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "reports" / "example"


def _resolved_during(
    monkeypatch: pytest.MonkeyPatch,
) -> list[tuple[HostSettings, dict[str, Any]]]:
    """Every host's settings as the resolver hands them out, with a deep copy taken then."""
    seen: list[tuple[HostSettings, dict[str, Any]]] = []
    resolve = settings_module.SettingsResolver.resolve

    def recording(self: Any, host: str, host_data: Any) -> HostSettings:
        settings = resolve(self, host, host_data)
        seen.append((settings, copy.deepcopy(dict(settings.values))))
        return settings

    monkeypatch.setattr(settings_module.SettingsResolver, "resolve", recording)
    return seen


@pytest.mark.parametrize("with_policy", [True, False], ids=["site-policy", "defaults"])
def test_no_rule_changes_the_settings_hosts_share(
    monkeypatch: pytest.MonkeyPatch, with_policy: bool
) -> None:
    snapshots = RunDir(EXAMPLE).load_snapshots()
    policy = load_policy(EXAMPLE / "policy.yaml") if with_policy else None
    defaults = copy.deepcopy(DEFAULT_POLICY)
    seen = _resolved_during(monkeypatch)
    evaluation = gpuaudit.rules.assess(snapshots, policy=policy)
    assert len(seen) == len(snapshots) >= 10
    assert evaluation.findings  # the rules did run and found things
    # Hosts of one group list did share one mapping: the case this guards.
    assert len({id(s.values.get("driver_package_patterns")) for s, _ in seen}) < len(seen)
    for settings, then in seen:
        assert dict(settings.values) == then, settings.host
    assert defaults == DEFAULT_POLICY
