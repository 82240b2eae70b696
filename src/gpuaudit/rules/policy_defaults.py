"""Default thresholds and expectations the rules read, and how a site policy overrides them.

Three layers, later wins: these defaults, the site policy passed to ``evaluate()`` (a YAML file
loaded elsewhere), and per-host inventory data (``snapshot.host_data``, e.g. pyinfra
group_data) for any key that also exists here. Nested dicts merge key by key, so a site that
adds one sysctl keeps the two baseline ones; every other value is replaced whole.

Each default names its source. Where sources disagree the default follows NVIDIA and the
rule's message shows the other readings, so a site can override with a reason.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from gpuaudit.model.snapshot import HostSnapshot

POLICY_VERSION = "1"

DEFAULT_POLICY: dict[str, Any] = {
    "policy_version": POLICY_VERSION,
    # --- inventory expectations (normally set per host or group, not fleet-wide) ---
    # How many GPUs the host was bought with; fewer visible means one fell off the bus or
    # was never initialised. None = unknown, the count rule stays silent.
    "expected_gpu_count": None,
    # The driver the site wants; None = no opinion (fleet drift is still checked by GA701).
    "desired_driver_version": None,
    # "nvidia" | "amd" | None; when set, the vendor's CLI must be installed.
    "gpu_vendor": None,
    # --- memory errors ---
    # DCGM RMA rule: 63 retired pages in total (common/DcgmGPUHardwareLimits.h).
    "retired_pages_limit": 63,
    # Azure HPC health checks: the retirement table is full at 62 with a page still pending.
    "retired_pages_pending_limit": 62,
    # NVIDIA memory error management / DCGM: 512 uncorrectable row remaps means RMA.
    "remapped_rows_uncorrectable_limit": 512,
    # --- XID ---
    # Per-code site overrides of NVIDIA's catalogue, e.g.
    # {63: {"action": "RESET_GPU", "severity": "high", "reason": "we drain on any remap"}}.
    # The reason is printed in the finding so the register shows why it departs from NVIDIA.
    "xid_overrides": {},
    # --- clocks ---
    # Reference notes "PCIe, thermal, services": these clock-event reasons are risks;
    # sw_power_cap and gpu_idle are normal operation and are never flagged.
    "slowdown_reasons": [
        "hw_slowdown",
        "hw_thermal_slowdown",
        "hw_power_brake_slowdown",
        "sw_thermal_slowdown",
    ],
    # --- services ---
    # Reference notes: persistence mode should be enabled on compute nodes.
    "persistence_mode_required": True,
    # NVSwitch heuristic (see services.py): GPU names sold only as HGX/DGX SXM boards, and the
    # GPU count from which such a board carries NVSwitches (4-GPU HGX boards wire NVLink
    # directly, without switches or fabric manager).
    "nvswitch_gpu_name_patterns": [
        "A100-SXM",
        "A800-SXM",
        "H100-SXM",
        "H100 80GB HBM3",
        "H200",
        "H800",
        "B200",
        "B300",
    ],
    # PCIe and NVL variants carry the same model names but bridge pairs instead of switches.
    "nvswitch_gpu_name_exclusions": ["PCIe", "NVL"],
    "nvswitch_min_gpus": 8,
    # --- system ---
    # Seed 000 "Network bottlenecks in inference": TCP buffers for large payloads.
    "sysctl_baseline": {"net.core.rmem_max": 134217728, "net.core.wmem_max": 134217728},
    # The NVIDIA driver creates /dev/nvidia* as 0666 by default; sites that rely on that
    # (single-tenant hosts) can set this to True to silence GA602.
    "world_writable_device_nodes_allowed": False,
    # Package names (regular expressions, matched from the start) that make up the driver:
    # upgrading any of them alone breaks the kernel-module / user-space version match.
    "driver_package_patterns": [
        r"nvidia-driver",
        r"nvidia-dkms",
        r"nvidia-kernel",
        r"nvidia-open",
        r"nvidia-headless",
        r"nvidia-utils",
        r"nvidia-compute-utils",
        r"libnvidia-compute",
        r"kmod-nvidia",
        r"cuda-drivers",
    ],
    # --- register ---
    # Rule codes to leave out of the register, and per-code severity overrides
    # ({"GA602": "high"}); both are applied by evaluate(), after the rules ran.
    "disabled_rules": [],
    "severity_overrides": {},
}

# host_data keys that mean a policy key under another name (inventory conventions differ).
_HOST_ALIASES = {"vendor": "gpu_vendor"}


def merge_policy(*layers: Mapping[str, Any] | None) -> dict[str, Any]:
    """Merge policy layers left to right; nested dicts merge, other values are replaced."""
    merged: dict[str, Any] = {}
    for layer in layers:
        if layer:
            _merge_into(merged, layer)
    return merged


def _merge_into(target: dict[str, Any], layer: Mapping[str, Any]) -> None:
    for key, value in layer.items():
        if isinstance(value, Mapping) and isinstance(target.get(key), dict):
            _merge_into(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def effective_policy(policy: Mapping[str, Any] | None) -> dict[str, Any]:
    """Defaults with the site policy merged over them."""
    return merge_policy(DEFAULT_POLICY, policy)


def host_policy(snap: HostSnapshot, policy: Mapping[str, Any] | None) -> dict[str, Any]:
    """The policy for one host: defaults, then the site policy, then the host's own data.

    Only host_data keys that name a policy key (or an alias of one) override; the rest of
    host_data (groups, ssh settings) is not policy.
    """
    overrides: dict[str, Any] = {}
    for key, value in snap.host_data.items():
        name = _HOST_ALIASES.get(key, key)
        if name in DEFAULT_POLICY and value is not None:
            overrides[name] = value
    return merge_policy(DEFAULT_POLICY, policy, overrides)
