"""Precedence: built-in defaults < policy defaults < matching groups in file order < inventory."""

from __future__ import annotations

import pytest
from policy_helpers import parse

from gpuaudit.policy import PolicyError
from gpuaudit.rules.policy_defaults import DEFAULT_POLICY

POLICY = """
defaults:
  desired_driver_branch: "550"
  expected_gpu_count: 8
  sysctl_baseline: {net.core.rmem_max: 268435456, net.ipv4.tcp_mtu_probing: 1}
  thresholds: {retired_pages_limit: 40}
groups:
  a100_sxm:
    desired_driver_version: "550.127.05"
    expected_gpu_count: 8
  canary:
    desired_driver_branch: "560"
  repair:
    expected_gpu_count: 6
  amd:
    desired_driver_branch: null
"""


def test_host_in_no_group_gets_the_defaults_over_the_built_in_ones():
    settings = parse(POLICY).settings_for({"groups": ["unknown"]})
    assert settings["desired_driver_branch"] == "550"
    assert settings["retired_pages_limit"] == 40
    # untouched keys keep the built-in default
    assert (
        settings["remapped_rows_uncorrectable_limit"]
        == DEFAULT_POLICY["remapped_rows_uncorrectable_limit"]
    )


def test_groups_apply_in_file_order_not_in_the_hosts_order():
    policy = parse(POLICY)
    # "repair" comes after "a100_sxm" in the file: its 6 wins whatever order the host lists.
    for groups in (["a100_sxm", "repair"], ["repair", "a100_sxm"]):
        assert policy.settings_for({"groups": groups})["expected_gpu_count"] == 6
    assert policy.groups_for(["repair", "canary", "a100_sxm"]) == ["a100_sxm", "canary", "repair"]


def test_the_inventory_wins_over_the_policy():
    policy = parse(POLICY)
    settings = policy.settings_for({"groups": ["repair"], "expected_gpu_count": 7, "vendor": "amd"})
    assert settings["expected_gpu_count"] == 7
    assert settings["gpu_vendor"] == "amd"  # host_data's "vendor" alias
    # connection settings and other host data are not policy
    assert "ssh_user" not in policy.settings_for({"ssh_user": "root"})


def test_a_driver_pin_replaces_the_other_precision():
    policy = parse(POLICY)
    exact = policy.settings_for({"groups": ["a100_sxm"]})
    assert exact["desired_driver_version"] == "550.127.05"
    assert exact["desired_driver_branch"] is None
    # canary comes later in the file: its branch replaces a100_sxm's exact version
    canary = policy.settings_for({"groups": ["a100_sxm", "canary"]})
    assert canary["desired_driver_branch"] == "560"
    assert canary["desired_driver_version"] is None
    # and the inventory's exact version replaces any policy branch
    pinned = policy.settings_for({"groups": ["canary"], "desired_driver_version": "560.35.03"})
    assert (pinned["desired_driver_version"], pinned["desired_driver_branch"]) == (
        "560.35.03",
        None,
    )


def test_null_restores_no_opinion():
    assert parse(POLICY).settings_for({"groups": ["amd"]})["desired_driver_branch"] is None


def test_nested_maps_merge_key_by_key():
    baseline = parse(POLICY).settings_for({})["sysctl_baseline"]
    assert baseline == {
        "net.core.rmem_max": 268435456,
        "net.core.wmem_max": DEFAULT_POLICY["sysctl_baseline"]["net.core.wmem_max"],
        "net.ipv4.tcp_mtu_probing": 1,
    }


def test_settings_for_a_snapshot_reads_its_host_data(make_host):
    policy = parse(POLICY)
    host = make_host("gpu-a100-003", groups=["a100_sxm"])
    # the factory's host_data sets expected_gpu_count to the host's 2 GPUs: inventory wins
    assert policy.settings_for(host)["expected_gpu_count"] == 2
    assert policy.settings_for(host)["desired_driver_version"] == "550.127.05"


def test_settings_are_copies():
    policy = parse(POLICY)
    policy.settings_for({})["sysctl_baseline"]["net.core.rmem_max"] = 1
    assert policy.settings_for({})["sysctl_baseline"]["net.core.rmem_max"] == 268435456


CAPACITY = """
defaults:
  capacity_model_sizes_b: [7, 70.5]
  nvlink_expected: null
  datacenter_gpu_name_patterns: ["^NVIDIA [ABHL]\\\\d"]
  required_models:
    - {name: llama-70b, params_b: 70, precision: int8, kv_cache_gib: 8}
groups:
  h100_sxm:
    nvlink_expected: true
    required_models:
      - {params_b: 405, layers: 126, heads: 8, head_dim: 128, context_length: 8192}
"""


def test_capacity_and_nvlink_settings_are_typed():
    policy = parse(CAPACITY)
    settings = policy.settings_for({"groups": ["h100_sxm"]})
    assert settings["capacity_model_sizes_b"] == [7, 70.5]
    assert settings["nvlink_expected"] is True
    assert settings["required_models"] == [
        {"params_b": 405, "layers": 126, "heads": 8, "head_dim": 128, "context_length": 8192}
    ]
    assert policy.settings_for({"groups": []})["required_models"][0]["precision"] == "int8"


def test_bad_capacity_settings_name_their_line():
    bad = CAPACITY.replace("layers: 126", "layerz: 126").replace("[7, 70.5]", "[7, big]")
    with pytest.raises(PolicyError) as error:
        parse(bad)
    text = str(error.value)
    assert "unknown key 'layerz'" in text and "did you mean 'layers'" in text
    assert "capacity_model_sizes_b[1]" in text
