"""Default thresholds and expectations the rules read, and how a site policy overrides them.

Three layers, later wins: these defaults, the site policy passed to ``evaluate()`` (a YAML file
read by gpuaudit.policy, whose defaults and per-group settings form this layer), and per-host
inventory data (``snapshot.host_data``, e.g. pyinfra group_data) for any key that also exists
here. Nested dicts merge key by key, so a site that adds one sysctl keeps the two baseline
ones; every other value is replaced whole.

Each default names its source. Where sources disagree the default follows NVIDIA and the
rule's message shows the other readings, so a site can override with a reason.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    # Or only its branch ("550"): any 550.x is fine. A layer that pins one of the two clears
    # the other (see _EXCLUSIVE), so a group's exact version replaces a site-wide branch.
    "desired_driver_branch": None,
    # CUDA versions the driver must support (quoted strings, "12.4"); None = no opinion.
    "required_cuda_versions": None,
    # --- MIG ---
    # The mig-parted configuration (a name in mig_configs) the host's GPUs should follow, and
    # the site's mig-parted ``mig-configs`` map (gpuaudit.policy reads it from the policy file).
    "mig_config_name": None,
    # Whether remediation may stop the daemons that hold the GPUs (nvidia-persistenced, DCGM)
    # around a MIG mode change that needs a GPU reset, and start them again after.
    "mig_stop_services": False,
    "mig_configs": {},
    # "nvidia" | "amd" | None; when set, the vendor's CLI must be installed.
    "gpu_vendor": None,
    # --- memory errors ---
    # DCGM RMA rule: 63 retired pages in total (common/DcgmGPUHardwareLimits.h).
    "retired_pages_limit": 63,
    # Azure HPC health checks: the retirement table is full at 62 with a page still pending.
    "retired_pages_pending_limit": 62,
    # NVIDIA memory error management / DCGM: 512 uncorrectable row remaps means RMA.
    "remapped_rows_uncorrectable_limit": 512,
    # Corrected-error volume (GA308). NVIDIA sets no limit on corrected errors; these are the
    # public health checks' (docs/field-guide/gpu-memory-errors.md): Meta gcm warns above 50 M
    # corrected errors, Azure fails an H100 above 10,000 SRAM or 20 M DRAM correctable errors.
    "ecc_corrected_limit": 50_000_000,
    "ecc_sram_corrected_limit": 10_000,
    "ecc_dram_corrected_limit": 20_000_000,
    # What makes a GPU a datacenter part (ECC expected on, DCGM supported): its name matches
    # one of these regular expressions and contains none of the exclusions (workstation and
    # consumer cards share the letters: RTX A400, Quadro T600).
    "datacenter_gpu_name_patterns": [
        r"\bTesla\b",
        r"\b[ABHL]\d{1,3}[A-Z]?\b",
        r"\bG[HB]\d{3}\b",
        r"\bT4\b",
    ],
    "datacenter_gpu_name_exclusions": ["RTX", "GeForce", "Quadro", "TITAN"],
    # --- state at collection time ---
    # The field guide's GPU temperature alert, above 80 °C (docs/field-guide/thermal.md).
    "temperature_alert_c": 80,
    # Keep 20 % of GPU memory free; the memory pressure alert fires above 95 % used
    # (docs/field-guide/memory-and-oom.md#keep-memory-headroom).
    # The headroom also sizes what the capacity rules count as usable (GA801, GA802).
    "memory_headroom_pct": 20,
    "memory_pressure_pct": 95,
    # --- XID ---
    # Per-code site overrides of NVIDIA's catalogue, e.g.
    # {63: {"action": "RESET_GPU", "severity": "high", "reason": "we drain on any remap"}}.
    # The reason is printed in the finding so the register shows why it departs from NVIDIA.
    "xid_overrides": {},
    # --- clocks ---
    # These clock-event reasons are risks; sw_power_cap and gpu_idle are normal operation and
    # are never flagged (docs/field-guide/thermal.md#thermal-throttling).
    "slowdown_reasons": [
        "hw_slowdown",
        "hw_thermal_slowdown",
        "hw_power_brake_slowdown",
        "sw_thermal_slowdown",
    ],
    # --- services ---
    # Persistence mode should be enabled on compute nodes
    # (docs/field-guide/driver-failures.md#services-the-driver-needs).
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
    # The GPU metrics and alerts of docs/field-guide/monitoring.md need a DCGM agent on every
    # datacenter-GPU host: any one of these systemd units running satisfies GA403. Sites that run
    # dcgm-exporter as a Kubernetes DaemonSet (no host unit) set monitoring_required: false.
    "monitoring_required": True,
    "monitoring_services": ["nvidia-dcgm", "dcgm", "dcgm-exporter"],
    # Monitoring coverage (GA921-GA924, docs/field-guide/monitoring.md#alert-coverage):
    # alert_rules: the site's Prometheus rules file (or PrometheusRule), relative to the
    # policy file, checked for an alert per GPU failure class (GA924); require_alerts: with no
    # file named, report every class unalerted; textfile_scrape: node_exporter should pick up
    # gpuaudit.prom from its textfile directory (GA923). The loader adds alert_rules_path,
    # alert_rules_loaded (the file's rules) and alert_rules_error (why it could not be read).
    "monitoring": {"alert_rules": None, "require_alerts": False, "textfile_scrape": False},
    # --- PCIe and NVLink ---
    # The replay counter counts since the driver loaded; DCGM's limit is a rate of 8 replays a
    # minute (DcgmGPUHardwareLimits.h), so 1000 is about two hours at that rate.
    "pcie_replay_limit": 1000,
    # The PCIe width the hosts' GPU slots are wired for, where it is narrower than the GPUs'
    # own maximum by design (a chassis whose slots or risers carry x8): GA501 then compares each
    # link with it. None = the GPU's maximum; a number (8) for every GPU of the host; or a
    # mapping of PCI bus ids to widths ({"0000:41:00.0": 8}) for a board whose slots differ,
    # a GPU not named being compared with its maximum.
    "pcie_expected_width": None,
    # Whether the host's GPUs should have active NVLinks: None = decide from the hardware (an
    # NVSwitch system, or SXM-board GPU names); true / false override.
    "nvlink_expected": None,
    # NVLink error counters since the driver loaded (nvidia-smi nvlink -e). DCGM fails a link
    # on any replay or recovery error and on CRC errors at 100 per second: a total below these
    # cannot have crossed DCGM's limits.
    "nvlink_error_limits": {"replay_errors": 1, "recovery_errors": 1, "crc_errors": 100},
    # --- MIG ---
    # Hosts whose GPUs serve several tenants (teams, customers): they should be isolated by MIG.
    "multi_tenant": False,
    # --- system ---
    # TCP buffers for large payloads (docs/field-guide/network-tuning.md).
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
    # --- capacity (docs/field-guide/llm-memory.md) ---
    # Model sizes in billions of parameters to summarise per host (GA801).
    "capacity_model_sizes_b": [7, 13, 34, 70, 405],
    # Bytes per parameter by precision (FP32 4, FP16 2, INT8 1, INT4 0.5).
    "capacity_precisions": {"fp16": 2, "int8": 1, "int4": 0.5},
    # KV cache added to every model size (GiB): one request of a 7B model at 4096 tokens,
    # 2 × 32 layers × 32 heads × 128 dim × 4096 × 2 bytes = 2 GiB for one request.
    "capacity_kv_cache_gib": 2.0,
    # Models the site must serve (GA802): [{"name": "llama-3-70b", "params_b": 70,
    # "precision": "fp16"}]; optional "kv_cache_gib", or the architecture for the KV formula
    # ("layers", "heads" = key/value heads, "head_dim", "context_length",
    # "concurrent_requests"), and
    # "placement": "host" (tensor parallel across the host's GPUs, the default) or "gpu".
    "required_models": [],
    # --- active readiness checks (docs/field-guide/dcgm-diag.md) ---
    # dcgmi diag -r LEVEL inside the audit's one remote command, on hosts where DCGM is
    # installed and no compute process runs: 0 = off, 1 = quick (about a minute), 2 and 3 load
    # the GPUs for minutes to most of an hour and run only with allow_long: true beside them.
    "dcgm_diag": {"level": 0, "allow_long": False},
    # --- Kubernetes (docs/field-guide/kubernetes.md) ---
    # The host's node name where it differs from the inventory name and the host's own name
    # (set per host); None = map by name, then by short name.
    "kubernetes_node": None,
    # Taint keys GPU nodes carry by design (dedicated GPU nodes, control planes): they do not
    # make a node unschedulable for GA906 / GA907.
    "kubernetes_expected_taints": [
        "nvidia.com/gpu",
        "amd.com/gpu",
        "node-role.kubernetes.io/control-plane",
        "node-role.kubernetes.io/master",
    ],
    # --- register ---
    # Rule codes to leave out of the register, and per-code severity overrides
    # ({"GA602": "high"}); both are applied by evaluate(), after the rules ran.
    "disabled_rules": [],
    "severity_overrides": {},
}

# The link widths the PCIe specification defines: what pcie_expected_width may be.
PCIE_WIDTHS = (1, 2, 4, 8, 12, 16, 32)

# host_data keys that mean a policy key under another name (inventory conventions differ).
_HOST_ALIASES = {"vendor": "gpu_vendor"}

# Keys that say the same thing at two precisions: a layer that sets one clears the other, so
# the most specific layer's pin is the only one in force.
_EXCLUSIVE = {
    "desired_driver_version": "desired_driver_branch",
    "desired_driver_branch": "desired_driver_version",
}


def merge_policy(*layers: Mapping[str, Any] | None) -> dict[str, Any]:
    """Merge policy layers left to right; nested dicts merge, other values are replaced."""
    merged: dict[str, Any] = {}
    for layer in layers:
        if layer:
            _merge_into(merged, layer)
            for key, other in _EXCLUSIVE.items():
                if layer.get(key) is not None and other not in layer:
                    merged[other] = None
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
    return merge_policy(DEFAULT_POLICY, policy, host_overrides(snap.host_data))


def policy_keys() -> tuple[str, ...]:
    """Every host-data key that sets a policy value (the settings and their aliases)."""
    return (*DEFAULT_POLICY, *_HOST_ALIASES)


def host_overrides(host_data: Mapping[str, Any]) -> dict[str, Any]:
    """The policy keys a host's inventory data sets (aliases resolved, None left out)."""
    overrides: dict[str, Any] = {}
    for key, value in host_data.items():
        name = _HOST_ALIASES.get(key, key)
        if name in DEFAULT_POLICY and value is not None:
            overrides[name] = value
    return overrides
