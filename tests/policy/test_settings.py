"""One resolver of a host's settings: the rules and the remediation read the same values."""

from __future__ import annotations

from datetime import date

from gpuaudit.policy import Policy
from gpuaudit.policy.settings import resolve_settings

POLICY = """
version: 1
defaults:
  sysctl_baseline: {net.core.rmem_max: 268435456}
  driver_package_patterns: ["^nvidia-driver-", "^cuda-drivers"]
groups:
  lab:
    disabled_rules: [GA602]
    mig_config_name: all-1g.10gb
mig-configs:
  all-1g.10gb:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
waivers:
  - {rule: GA601, hosts: "t4-*", reason: "lab host", expires: 2030-12-31, owner: research-it}
  - {rule: GA401, hosts: "t4-*", gpu: [0], reason: "one GPU", expires: 2030-12-31, owner: x}
  - {rule: GA106, hosts: "t4-*", reason: "lapsed", expires: 2025-01-31, owner: x}
"""


def test_precedence_defaults_groups_then_host_data() -> None:
    policy = Policy.from_text(POLICY)
    settings = resolve_settings(
        policy, "@sim/t4-02", {"groups": ["lab"], "sysctl_baseline": {"vm.swappiness": 10}}
    )
    assert settings.sysctl_baseline == {
        "net.core.rmem_max": "268435456",  # the policy's defaults over the built-in value
        "net.core.wmem_max": "134217728",  # built in
        "vm.swappiness": "10",  # host data, merged key by key
    }
    assert settings.driver_package_patterns == ("^nvidia-driver-", "^cuda-drivers")
    assert settings.mig_config_name == "all-1g.10gb"
    assert settings.mig_configs["all-1g.10gb"][0]["mig-devices"] == {"1g.10gb": 7}
    assert settings.disabled_rules == frozenset({"GA602"})
    outside = resolve_settings(policy, "@sim/a100-01", {})
    assert outside.mig_config_name is None and outside.disabled_rules == frozenset()


def test_skip_reasons_for_disabled_and_waived_rules() -> None:
    settings = resolve_settings(Policy.from_text(POLICY), "@sim/t4-02", {"groups": ["lab"]})
    on = date(2026, 12, 1)
    assert "disabled for this host by the site policy" in str(settings.skip_reason("GA602", on))
    waived = settings.skip_reason("GA601", on)
    assert waived is not None and "until 2030-12-31 by research-it" in waived
    assert "lab host" in waived
    assert settings.skip_reason("GA401", on) is None  # waived for GPU 0 only: still fixed
    assert settings.skip_reason("GA106", on) is None  # the waiver lapsed
    assert settings.skip_reason("GA601", date(2031, 1, 1)) is None
    other = resolve_settings(Policy.from_text(POLICY), "@sim/a100-01", {})
    assert other.skip_reason("GA601", on) is None


def test_without_a_policy_host_data_still_counts() -> None:
    settings = resolve_settings(None, "h", {"disabled_rules": ["GA601"]})
    assert settings.skip_reason("GA601") is not None
    assert settings.sysctl_baseline["net.core.rmem_max"] == "134217728"
