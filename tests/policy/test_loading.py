"""Strict loading: every mistake is refused with file:line:col and a useful message."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest
from policy_helpers import ROOT, parse, problems

from gpuaudit.policy import PolicyError, load_policy
from gpuaudit.policy.defaults import DEFAULT_POLICY
from gpuaudit.rules.base import REGISTRY, Severity

BRIEF = """
version: 1
defaults:
  desired_driver_branch: "550"
  required_cuda_versions: ["12.4"]
  expected_gpu_count: 8
  sysctl_baseline: {net.core.rmem_max: 134217728, net.core.wmem_max: 134217728}
  thresholds: {retired_pages_limit: 63, remapped_rows_uncorrectable_limit: 512}
  mig_config_name: all-1g.10gb
groups:
  h100_sxm: {expected_gpu_count: 8, desired_driver_version: "550.127.05"}
mig-configs:
  all-1g.10gb:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
severity_overrides:
  rules: {GA602: {severity: medium, reason: "shared lab hosts"}}
  xid: {63: {severity: high, reason: "we RMA on first remap"}}
waivers:
  - {rule: GA401, hosts: "gpu-l40s-*", reason: "persistenced replaced by DCGM",
     expires: 2027-03-31, owner: "ml-infra"}
"""


def test_the_documented_format_loads():
    policy = parse(BRIEF)
    assert policy.version == 1
    assert policy.defaults["desired_driver_branch"] == "550"
    assert policy.defaults["required_cuda_versions"] == ["12.4"]
    # thresholds are flattened into the settings the rules read
    assert policy.defaults["retired_pages_limit"] == 63
    assert dict(policy.groups)["h100_sxm"] == {
        "expected_gpu_count": 8,
        "desired_driver_version": "550.127.05",
    }
    assert policy.rule_overrides["GA602"] == (Severity.MEDIUM, "shared lab hosts")
    assert policy.xid_overrides[63].reason == "we RMA on first remap"
    (waiver,) = policy.waivers
    assert waiver.expires == date(2027, 3, 31) and waiver.hosts == ("gpu-l40s-*",)
    assert waiver.location == "site.yaml:20"


@pytest.mark.parametrize("name", ["example.yaml", "demo.yaml"])
def test_shipped_policies_load(name):
    policy = load_policy(ROOT / "policies" / name)
    assert policy.source.endswith(name) and policy.waivers


def test_unknown_key_has_its_line_and_a_suggestion():
    (line,) = problems("version: 1\ndefaults:\n  expected_gpus: 8\n")
    assert line == (
        "site.yaml:3:3: unknown key 'expected_gpus' in defaults; did you mean 'expected_gpu_count'?"
    )


def test_unknown_top_level_key():
    (line,) = problems("version: 1\nwaiver: []\n")
    assert line.startswith("site.yaml:2:1: unknown key 'waiver' in the policy")
    assert "did you mean 'waivers'" in line


def test_wrong_type():
    (line,) = problems("version: 1\ngroups:\n  l40s: {expected_gpu_count: eight}\n")
    assert line == (
        "site.yaml:3:30: groups.l40s.expected_gpu_count must be an integer, not the string 'eight'"
    )


def test_unquoted_versions_must_be_quoted():
    lines = problems("version: 1\ndefaults:\n  required_cuda_versions: [12.4]\n")
    assert lines == [
        'site.yaml:3:28: defaults.required_cuda_versions[0] must be a quoted string (write "12.4")'
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("version: 2\n", "site.yaml:1:10: unsupported policy version (the number 2)"),
        ('version: "1"\n', "unsupported policy version (the string '1')"),
        ("defaults: {}\n", "site.yaml:1:1: the policy needs 'version: 1' at the top"),
        ("version: v1\nmig-configs: {}\n", "version v1 is a mig-parted file"),
        ("", "site.yaml:1:1: the policy is empty"),
        ("- version: 1\n", "the policy must be a mapping, not a list"),
    ],
)
def test_version_is_required_and_only_1(text, expected):
    (line,) = problems(text)
    assert expected in line
    assert line.startswith("site.yaml:")


@pytest.mark.parametrize(
    ("expires", "shown"),
    [
        ("2027-02-30", "the string '2027-02-30'"),
        ("next spring", "the string 'next spring'"),
        ("20270331", "the number 20270331"),
    ],
)
def test_bad_date(expires, shown):
    body = (
        "version: 1\nwaivers:\n"
        f"  - {{rule: GA401, hosts: h, reason: r, owner: o, expires: {expires}}}\n"
    )
    assert problems(body) == [
        f"site.yaml:3:59: waivers[0].expires must be a date like 2027-03-31, not {shown}"
    ]


def test_bad_severity():
    body = "version: 1\nseverity_overrides:\n  rules: {GA602: {severity: urgent, reason: x}}\n"
    (line,) = problems(body)
    assert line == (
        "site.yaml:3:29: severity_overrides.rules.GA602.severity must be one of critical, "
        "high, medium, low, info, not the string 'urgent'"
    )


@pytest.mark.parametrize(
    "body",
    [
        "waivers:\n  - {rule: GA9999, hosts: h, reason: r, expires: 2027-01-01, owner: o}\n",
        "severity_overrides:\n  rules: {GA9999: {severity: low, reason: r}}\n",
        "defaults:\n  disabled_rules: [GA9999]\n",
    ],
)
def test_unknown_rule_lists_the_known_codes(body):
    (line,) = problems("version: 1\n" + body)
    assert "unknown rule 'GA9999'; known rules: " in line
    listed = line.split("known rules: ")[1].split(", ")
    assert listed == sorted(REGISTRY)


def test_waiver_needs_its_accountability_fields():
    lines = problems("version: 1\nwaivers:\n  - {rule: GA401, hosts: 'h*'}\n")
    assert [line.split(": ", 1)[1] for line in lines] == [
        "waivers[0] needs 'reason'",
        "waivers[0] needs 'expires'",
        "waivers[0] needs 'owner'",
    ]


def test_every_problem_is_reported_in_file_order():
    lines = problems(
        """\
        version: 1
        defaults:
          retired_pages_limit: 3
          thresholds: {expected_gpu_count: 2, retired_pages_limit: 1.5}
          desired_driver_version: "550.54"
          desired_driver_branch: "550"
        groups:
          x: {gpu_vendor: intel}
        """
    )
    assert [line.split(":")[1] for line in lines] == ["3", "4", "4", "6", "8"]
    assert "retired_pages_limit is a threshold: set it under thresholds:" in lines[0]
    assert "expected_gpu_count is not a threshold" in lines[1]
    assert "retired_pages_limit must be an integer, not the number 1.5" in lines[2]
    assert "sets both desired_driver_version and desired_driver_branch" in lines[3]
    assert "gpu_vendor must be one of nvidia, amd" in lines[4]


def test_duplicate_keys_and_yaml_syntax():
    (dup,) = problems("version: 1\ndefaults: {}\ndefaults: {}\n")
    assert dup == "site.yaml:3:1: 'defaults' is given twice in the policy (first on line 2)"
    (syntax,) = problems("version: 1\ndefaults: {expected_gpu_count: 8\n")
    assert syntax.startswith("site.yaml:3:1: not valid YAML: ")


def test_settings_follow_the_rules_defaults(monkeypatch):
    # A rule that adds a numeric default gets a settable threshold without touching the schema.
    monkeypatch.setitem(DEFAULT_POLICY, "fan_speed_limit_pct", 90)
    policy = parse("defaults:\n  thresholds: {fan_speed_limit_pct: 70}\n")
    assert policy.settings_for({})["fan_speed_limit_pct"] == 70
    for key in ("severity_overrides", "xid_overrides", "mig_configs", "policy_version"):
        (line,) = problems(f"version: 1\ndefaults:\n  {key}: {{}}\n")
        assert f"unknown key {key!r} in defaults: " in line


def test_regexes_and_sysctls_are_checked():
    lines = problems(
        "version: 1\ndefaults:\n  driver_package_patterns: ['nvidia-(']\n"
        "  sysctl_baseline: {net.core.rmem_max: lots}\n"
    )
    assert "driver_package_patterns[0] is not a regular expression" in lines[0]
    assert "sysctl_baseline.net.core.rmem_max must be an integer" in lines[1]


def test_pcie_expected_width_is_a_width_or_one_per_bus_id():
    policy = parse(
        "groups:\n  chassis_x8:\n    pcie_expected_width: 8\n"
        "  mixed:\n    pcie_expected_width: {'00000000:41:00.0': 8, '61:00.0': 4}\n"
    )
    assert policy.settings_for({"groups": ["chassis_x8"]})["pcie_expected_width"] == 8
    assert policy.settings_for({"groups": ["mixed"]})["pcie_expected_width"] == {
        "0000:41:00.0": 8,
        "0000:61:00.0": 4,
    }
    assert policy.settings_for({})["pcie_expected_width"] is None
    lines = problems(
        "version: 1\ndefaults:\n  pcie_expected_width: 6\n"
        "groups:\n  g:\n    pcie_expected_width: {slot-3: 8}\n"
    )
    assert "pcie_expected_width must be a PCIe link width (1, 2, 4, 8, 12, 16, 32)" in lines[0]
    assert "pcie_expected_width: 'slot-3' is not a PCI bus id" in lines[1]


def test_load_policy_names_the_file(tmp_path: Path):
    path = tmp_path / "site.yaml"
    path.write_text("version: 1\ndefaults:\n  expected_gpus: 8\n", encoding="utf-8")
    with pytest.raises(PolicyError) as caught:
        load_policy(path)
    assert str(caught.value).startswith(f"{path}:3:3: unknown key 'expected_gpus'")
    with pytest.raises(PolicyError, match="cannot read the policy"):
        load_policy(tmp_path / "missing.yaml")


def test_no_python_objects_from_yaml():
    # The safe loader refuses application-specific tags instead of constructing them.
    (line,) = problems("version: 1\ndefaults:\n  gpu_vendor: !!python/object/apply:os.getcwd []\n")
    assert line == (
        "site.yaml:3:15: defaults.gpu_vendor: the YAML tag "
        "tag:yaml.org,2002:python/object/apply:os.getcwd is not allowed in a policy"
    )
    (line,) = problems("version: 1\n!!python/name:os.getcwd k: 1\n")
    assert "a key in the policy must be a name, not a value tagged" in line


def test_pyinfras_all_group_is_refused():
    (line,) = problems("version: 1\ngroups:\n  all: {expected_gpu_count: 8}\n")
    assert line == "site.yaml:3:3: groups.all: use defaults: for settings of every host"
