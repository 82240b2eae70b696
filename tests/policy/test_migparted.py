"""mig-parted configurations: accepted as NVIDIA writes them, refused as mig-parted refuses."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from policy_helpers import parse, problems

from gpuaudit.policy import MIG_PARTED_COPY, POLICY_FILE, Policy, load_policy

# The structure of NVIDIA mig-parted's examples/config.yaml (abridged) and of its
# dgx-station-80gb-config.yaml (device filters), as mig-parted users write them.
MIG_PARTED_CONFIG = """\
version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false

  all-enabled:
    - devices: all
      mig-enabled: true
      mig-devices: {}

  all-1g.5gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.5gb": 7

  all-balanced:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.5gb": 2
        "2g.10gb": 1
        "3g.20gb": 1

  custom-config:
    - devices: [0,1,2,3]
      mig-enabled: false
    - devices: [4]
      mig-enabled: true
      mig-devices:
        "1g.5gb": 7
    - devices: [7]
      mig-enabled: true
      mig-devices:
        "1g.5gb": 2
        "2g.10gb": 1
        "3g.20gb": 1

  balanced-k8s-dgx-station-80:
    - device-filter: "0x20B210DE"
      devices: [1]
      mig-enabled: true
      mig-devices:
        "3g.40gb": 2
    - device-filter: ["0x1FB010DE", "0x20B510DE"]
      devices: all
      mig-enabled: false
      mig-devices: {}
"""

EXPECTED = {
    "all-disabled": [{"devices": "all", "mig-enabled": False}],
    "all-enabled": [{"devices": "all", "mig-enabled": True, "mig-devices": {}}],
    "all-1g.5gb": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 7}}],
    "all-balanced": [
        {
            "devices": "all",
            "mig-enabled": True,
            "mig-devices": {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1},
        }
    ],
    "custom-config": [
        {"devices": [0, 1, 2, 3], "mig-enabled": False},
        {"devices": [4], "mig-enabled": True, "mig-devices": {"1g.5gb": 7}},
        {
            "devices": [7],
            "mig-enabled": True,
            "mig-devices": {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1},
        },
    ],
    "balanced-k8s-dgx-station-80": [
        {
            "device-filter": "0x20B210DE",
            "devices": [1],
            "mig-enabled": True,
            "mig-devices": {"3g.40gb": 2},
        },
        {
            "device-filter": ["0x1FB010DE", "0x20B510DE"],
            "devices": "all",
            "mig-enabled": False,
            "mig-devices": {},
        },
    ],
}


def _inline(configs: str) -> str:
    """A policy with mig-parted's mig-configs block pasted in as is."""
    block = configs.split("mig-configs:\n", 1)[1]
    return "version: 1\nmig-configs:\n" + block


def test_the_mig_configs_block_is_accepted_as_is():
    policy = Policy.from_text(_inline(MIG_PARTED_CONFIG))
    assert policy.mig_configs == EXPECTED
    assert policy.settings_for({})["mig_configs"] == EXPECTED


def test_a_mig_parted_file_is_read_relative_to_the_policy(tmp_path: Path):
    (tmp_path / "mig").mkdir()
    (tmp_path / "mig" / "config.yaml").write_text(MIG_PARTED_CONFIG, encoding="utf-8")
    site = tmp_path / "site.yaml"
    site.write_text(
        "version: 1\nmig_parted_file: mig/config.yaml\ndefaults:\n  mig_config_name: all-1g.5gb\n",
        encoding="utf-8",
    )
    policy = load_policy(site)
    assert policy.mig_configs == EXPECTED
    assert policy.settings_for({})["mig_config_name"] == "all-1g.5gb"


def test_the_run_copy_is_self_contained(tmp_path: Path):
    (tmp_path / "mig.yaml").write_text(MIG_PARTED_CONFIG, encoding="utf-8")
    site = tmp_path / "site.yaml"
    site.write_text("# ours\nversion: 1\nmig_parted_file: mig.yaml  # shared\n", encoding="utf-8")
    run = tmp_path / "run"
    copied = load_policy(site).copy_to(run)
    assert copied == run / POLICY_FILE
    assert (
        copied.read_text() == f"# ours\nversion: 1\nmig_parted_file: {MIG_PARTED_COPY}  # shared\n"
    )
    assert (run / MIG_PARTED_COPY).read_text() == MIG_PARTED_CONFIG
    assert load_policy(copied) == load_policy(site)


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ("a:\n  - {devices: all}\n", "mig-configs.a[0]: missing required field: mig-enabled"),
        ("a:\n  - {mig-enabled: false}\n", "mig-configs.a[0]: missing required field: devices"),
        (
            "a:\n  - {devices: all, mig-enabled: false, gpus: 2}\n",
            "mig-configs.a[0]: unexpected field: gpus",
        ),
        (
            "a:\n  - {devices: all, mig-enabled: true}\n",
            "missing required field 'mig-devices' when 'mig-enabled' is true",
        ),
        (
            "a:\n  - {devices: all, mig-enabled: false, mig-devices: {1g.5gb: 7}}\n",
            "MIG devices included when 'mig-enabled' is false",
        ),
        (
            "a:\n  - {devices: some, mig-enabled: false}\n",
            "invalid string input for 'mig-configs.a[0].devices': some",
        ),
        (
            "a:\n  - {devices: all, mig-enabled: true, mig-devices: {1c.5g.40gb: 1}}\n",
            "invalid format for '1c.5g.40gb': unknown GPU Instance slice size: 5",
        ),
        (
            "a:\n  - {devices: all, mig-enabled: true, mig-devices: {1g.5g: 1}}\n",
            "invalid format for '1g.5g': expected [<C>c.]<G>g.<MEM>gb",
        ),
        (
            "a:\n  - {devices: all, mig-enabled: true, mig-devices: {1g.5gb: -1}}\n",
            "mig-devices.1g.5gb must be at least 0, not -1",
        ),
        ("a: []\n", "at least one entry in 'a' is required"),
        ("{}\n", "at least one entry in 'mig-configs' is required"),
    ],
)
def test_what_mig_parted_refuses_is_refused(block, message):
    text = "version: 1\nmig-configs:\n" + textwrap.indent(block, "  ")
    lines = problems(text)
    assert any(message in line for line in lines), lines


def test_profiles_with_attributes_and_compute_slices():
    policy = parse(
        """
        mig-configs:
          media:
            - devices: all
              mig-enabled: true
              mig-devices: {"1g.10gb+me": 1, "1c.2g.20gb": 2, "1g.10gb+me.all": 1}
        """
    )
    assert policy.mig_configs["media"][0]["mig-devices"]["1c.2g.20gb"] == 2


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("mig-configs:\n  a:\n    - {devices: all, mig-enabled: false}\n",
         "mig.yaml:1:1: unable to parse with missing 'version' field"),
        ("version: v2\nmig-configs: {}\n", "mig.yaml:1:10: unknown version: v2"),
        ("version: v1\nmig-config: {}\n", "mig.yaml:2:1: unexpected field: mig-config"),
    ],
)  # fmt: skip
def test_mig_parted_file_errors_point_into_that_file(tmp_path: Path, content, message):
    (tmp_path / "mig.yaml").write_text(content, encoding="utf-8")
    (tmp_path / "site.yaml").write_text("version: 1\nmig_parted_file: mig.yaml\n")
    with pytest.raises(Exception) as caught:
        load_policy(tmp_path / "site.yaml")
    assert f"{tmp_path / message}" in str(caught.value)


def test_mig_config_name_must_be_a_configuration_and_sources_are_exclusive(tmp_path: Path):
    lines = problems(
        _inline(MIG_PARTED_CONFIG) + "groups:\n  a100: {mig_config_name: all-7g.80gb}\n"
    )
    assert lines == [
        "site.yaml:51:27: groups.a100.mig_config_name 'all-7g.80gb' is not in the policy's "
        "mig-configs (all-disabled, all-enabled, all-1g.5gb, all-balanced, custom-config, "
        "balanced-k8s-dgx-station-80)"
    ]
    (both,) = problems("version: 1\nmig-configs: {}\nmig_parted_file: x.yaml\n")
    assert both == "site.yaml:3:1: use mig-configs: or mig_parted_file:, not both"
    (missing,) = problems("version: 1\nmig_parted_file: nowhere.yaml\n")
    assert "cannot read mig_parted_file nowhere.yaml" in missing
