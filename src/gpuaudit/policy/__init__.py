"""Site policy: what a site expects of its GPU hosts, per inventory group, as a versioned YAML file.

Format (every key is optional except ``version``; unknown keys and wrong types are refused with
the file, line and column)::

    version: 1                          # required; the only version this gpuaudit reads
    defaults:                           # settings for every host
      desired_driver_branch: "550"      # or desired_driver_version: "550.127.05" (quoted)
      required_cuda_versions: ["12.4"]  # quoted: 12.10 unquoted would read as 12.1
      expected_gpu_count: 8
      gpu_vendor: nvidia                # nvidia | amd
      sysctl_baseline: {net.core.rmem_max: 134217728}   # merged key by key with the built-in
      thresholds: {retired_pages_limit: 63, remapped_rows_uncorrectable_limit: 512}
      mig_config_name: all-1g.10gb      # a name in mig-configs
      disabled_rules: [GA602]           # prefer a waiver: it has an owner and an end date
      # ... and every other key the rules read (see policy/defaults.py)
    groups:                             # per inventory group, applied in file order
      h100_sxm: {desired_driver_version: "550.127.05"}
    mig-configs: {...}                  # NVIDIA mig-parted's format, see migparted.py
    mig_parted_file: mig/config.yaml    # or a mig-parted file, relative to this file
    severity_overrides:
      rules: {GA602: {severity: medium, reason: "shared lab hosts"}}
      xid: {63: {severity: high, reason: "we RMA on first remap"}}
    waivers:
      - {rule: GA401, hosts: "gpu-l40s-*", reason: "...", expires: 2027-03-31, owner: ml-infra}
        # hosts: a pattern or a list (fnmatch, case-insensitive); optional gpu: 3 or [0, 1]
    upgrade:                            # staged driver upgrades (docs/staged-upgrades.md)
      max_parallel: 2                   # hosts upgraded at once (default 1)
      max_unavailable: "25%"            # a count, or a percentage of the inventory's hosts
                                        # (rounded down, at least 1); default 1
      failure_budget: 1                 # failed hosts the waves may have (default 0)
      canary_failure_budget: 0          # failed hosts the first stage may have (default 0)
      soak_seconds: 3600                # wait after the first stage (default 0)
      drain: {kind: kubectl, kubectl_context: prod, timeout_seconds: 600}
        # kind: none | kubectl | slurm | command (command: and undrain_command: required)
      gate: {dcgm_diag_level: 1, command: "/usr/local/bin/smoke", timeout_seconds: 900,
             wait_for_host_seconds: 900}  # dcgm_diag_level: 1-4 or null (no dcgmi diag)
      reboot: auto                      # auto (reload modules, reboot if that fails) | always
                                        # | never
      stages: [canary, wave1, wave2, wave3]   # the stage order; the first is the canary

Settings are the keys the rules read (``policy.defaults.DEFAULT_POLICY``, with their
built-in defaults); keys with a numeric default are thresholds and go under ``thresholds:``.
Precedence (later wins): built-in defaults, ``defaults:``, the matching ``groups:`` in file
order, then the host's inventory data; see model.py for why the inventory wins.

Severity overrides change a finding's severity after the rules ran and keep the reason in the
finding (``override_reason`` and its message); an XID code's override beats its rule's.
A waiver accepts one rule's risk on some hosts until ``expires`` (inclusive); an expired
waiver hides nothing and the register shows the risk as open with the date it lapsed.

``upgrade:`` is read into :class:`gpuaudit.policy.upgrade.UpgradeSettings` (``Policy.upgrade``;
a policy without the section gets its defaults). Stages are inventory group names: a host's
stage is its ``rollout_stage`` host data, else its first group listed in ``stages``, else the
last stage. ``max_unavailable`` counts hosts already unhealthy before the rollout.

Public API: :func:`load_policy`, :meth:`Policy.from_text`, :meth:`Policy.settings_for`,
:meth:`Policy.override_for`, :meth:`Policy.waiver_for`, :meth:`Policy.waiver_status`,
:meth:`Policy.copy_to`, :class:`Waiver`, :class:`SeverityOverride`, :class:`PolicyError`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuaudit.policy.loader import load_policy as load_policy
    from gpuaudit.policy.model import MIG_PARTED_COPY as MIG_PARTED_COPY
    from gpuaudit.policy.model import POLICY_FILE as POLICY_FILE
    from gpuaudit.policy.model import POLICY_FILE_VERSION as POLICY_FILE_VERSION
    from gpuaudit.policy.model import XID_RULE as XID_RULE
    from gpuaudit.policy.model import Policy as Policy
    from gpuaudit.policy.model import SeverityOverride as SeverityOverride
    from gpuaudit.policy.model import Waiver as Waiver
    from gpuaudit.policy.model import WaiverStatus as WaiverStatus
    from gpuaudit.policy.nodes import PolicyError as PolicyError
    from gpuaudit.policy.nodes import Problem as Problem

# The public names are those these modules export, imported on first use (PEP 562): what needs
# only a submodule (the `policy check` parser, on every start of `gpuaudit`) does not load the
# policy model, its YAML parser and the rules. Searched in this order, the lightest first.
_HOMES = ("nodes", "model", "loader")


def __getattr__(name: str) -> Any:
    for home in _HOMES:
        module = importlib.import_module(f"{__name__}.{home}")
        if name in module.__all__:
            value = getattr(module, name)
            globals()[name] = value
            return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
