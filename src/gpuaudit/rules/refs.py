"""References the rules cite, named once so every rule spells a source the same way.

A reference is one of two kinds, and a reader can follow either:

- a web address (``https://…``): vendor documentation and public health-check projects;
- a page of gpuaudit's own documentation, written as its path in the repository with the
  section's anchor (``docs/field-guide/xid.md#common-xid-codes``). ``GUIDE_*`` name sections
  of the field guide (docs/field-guide/), which states in gpuaudit's words the operational
  knowledge the rules and checklists rely on, and cites the public sources behind it;
  ``DOCS_*`` name other pages of docs/.

The HTML report links both kinds (the run directory carries a copy of the docs pages it cites);
tests/rules/test_references.py holds every reference to one of them.
"""

from __future__ import annotations

# NVIDIA documentation.
XID_CATALOG = "https://docs.nvidia.com/deploy/xid-errors/"
MEMORY_ERRORS = "https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/"
PAGE_RETIREMENT = "https://docs.nvidia.com/deploy/dynamic-page-retirement/"
NVIDIA_SMI = "https://docs.nvidia.com/deploy/nvidia-smi/"
PERSISTENCE = "https://docs.nvidia.com/deploy/driver-persistence/"
FABRIC_MANAGER = "https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/"
MIG_GUIDE = "https://docs.nvidia.com/datacenter/tesla/mig-user-guide/"
CUDA_COMPAT = "https://docs.nvidia.com/deploy/cuda-compatibility/"
NVML_NVLINK = "https://docs.nvidia.com/deploy/nvml-api/group__NvLink.html"
DCGM_GUIDE = "https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/"
DCGM_EXPORTER = "https://github.com/NVIDIA/dcgm-exporter"
MIG_PARTED = "https://github.com/NVIDIA/mig-parted"

# Public health-check projects whose thresholds the defaults follow.
NVSENTINEL_XID_MAP = (
    "https://github.com/NVIDIA/NVSentinel/blob/main/distros/kubernetes/nvsentinel/charts/"
    "gpu-health-monitor/xiderrorsmapping.csv"
)
DCGM_LIMITS = "https://github.com/NVIDIA/DCGM/blob/master/common/DcgmGPUHardwareLimits.h"
DCGM_HEALTH = "https://github.com/NVIDIA/DCGM/blob/master/modules/health/DcgmHealthWatch.cpp"
AZURE_HEALTH = "https://github.com/Azure/azurehpc-health-checks"
META_GCM = "https://github.com/facebookresearch/gcm"

# The Linux kernel's sysctl documentation.
KERNEL_NET_SYSCTL = "https://docs.kernel.org/admin-guide/sysctl/net.html"
KERNEL_IP_SYSCTL = "https://docs.kernel.org/networking/ip-sysctl.html"

# gpuaudit's field guide (docs/field-guide/), by page and section.
_GUIDE = "docs/field-guide/"

GUIDE_XID_LOG = _GUIDE + "xid.md#reading-an-xid-line"
GUIDE_XID_INIT_FAILED = _GUIDE + "xid.md#a-gpu-that-did-not-come-up"
GUIDE_XID_TABLE = _GUIDE + "xid.md#common-xid-codes"
GUIDE_XID_ACTIONS = _GUIDE + "xid.md#immediate-action-per-code"
GUIDE_XID_READINGS = _GUIDE + "xid.md#how-other-health-checks-read-xids"

GUIDE_ECC = _GUIDE + "gpu-memory-errors.md#correctable-and-uncorrectable-errors"
GUIDE_ROW_REMAPPING = _GUIDE + "gpu-memory-errors.md#row-remapping"
GUIDE_PAGE_RETIREMENT = _GUIDE + "gpu-memory-errors.md#page-retirement"
GUIDE_MEMORY_THRESHOLDS = _GUIDE + "gpu-memory-errors.md#thresholds-used-by-public-health-checks"
GUIDE_ECC_MODE = _GUIDE + "gpu-memory-errors.md#ecc-mode"

GUIDE_DRIVER_ERRORS = _GUIDE + "driver-failures.md#error-patterns"
GUIDE_DRIVER_DEBUGGING = _GUIDE + "driver-failures.md#debugging-a-driver-problem"
GUIDE_DRIVER_CRASH = _GUIDE + "driver-failures.md#driver-crashes"
GUIDE_LIBRARY_MISMATCH = _GUIDE + "driver-failures.md#library-version-mismatch"
GUIDE_CUDA_COMPAT = _GUIDE + "driver-failures.md#cuda-compatibility"
GUIDE_DRIVER_SERVICES = _GUIDE + "driver-failures.md#services-the-driver-needs"

GUIDE_PIN_VERSIONS = _GUIDE + "driver-upgrades.md#pin-driver-versions"
GUIDE_CANARY = _GUIDE + "driver-upgrades.md#canary-upgrades"
GUIDE_UNIFORM_VERSIONS = _GUIDE + "driver-upgrades.md#one-version-per-gpu-model"
GUIDE_VERSION_AUDIT = _GUIDE + "driver-upgrades.md#audit-driver-and-firmware-versions"

GUIDE_TEMPERATURE = _GUIDE + "thermal.md#watching-temperature"
GUIDE_THROTTLING = _GUIDE + "thermal.md#thermal-throttling"

GUIDE_PCIE_DEGRADED = _GUIDE + "pcie-and-nvlink.md#degraded-pcie-links"
GUIDE_PCIE_ERRORS = _GUIDE + "pcie-and-nvlink.md#pcie-link-errors"
GUIDE_NVLINK = _GUIDE + "pcie-and-nvlink.md#nvlink-and-collective-topology"

GUIDE_MIG_ISOLATION = _GUIDE + "mig.md#what-mig-isolates"
GUIDE_MIG_MODE = _GUIDE + "mig.md#enabling-mig-mode"
GUIDE_MIG_INSTANCES = _GUIDE + "mig.md#creating-instances"
GUIDE_MIG_LAYOUT = _GUIDE + "mig.md#declaring-the-layout"
GUIDE_MIG_SCHEDULING = _GUIDE + "mig.md#scheduling-mig-slices"
GUIDE_MIG_FRAGMENTATION = _GUIDE + "mig.md#fragmentation"

GUIDE_ISOLATION = _GUIDE + "multi-tenant-isolation.md#isolation-problems-on-shared-gpus"
GUIDE_NOISY_NEIGHBOURS = _GUIDE + "multi-tenant-isolation.md#noisy-neighbours"
GUIDE_DEVICE_PERMISSIONS = _GUIDE + "multi-tenant-isolation.md#device-permissions"

GUIDE_OOM = _GUIDE + "memory-and-oom.md#gpu-oom-and-system-oom"
GUIDE_MEMORY_HEADROOM = _GUIDE + "memory-and-oom.md#keep-memory-headroom"
GUIDE_REPEATED_OOMS = _GUIDE + "memory-and-oom.md#repeated-ooms"
GUIDE_FRAMEWORK_MEMORY = _GUIDE + "memory-and-oom.md#framework-settings"

GUIDE_LLM_MEMORY = _GUIDE + "llm-memory.md#memory-a-model-needs"
GUIDE_QUANTIZATION = _GUIDE + "llm-memory.md#quantization"
GUIDE_CAPACITY = _GUIDE + "llm-memory.md#how-gpuaudit-checks-capacity"

GUIDE_NETWORK_BOUND = _GUIDE + "network-tuning.md#when-inference-is-network-bound"
GUIDE_TCP_BUFFERS = _GUIDE + "network-tuning.md#tcp-socket-buffer-limits"

GUIDE_METRICS = _GUIDE + "monitoring.md#metrics-to-collect"
GUIDE_ALERTS = _GUIDE + "monitoring.md#alert-rules"
GUIDE_DCGM = _GUIDE + "monitoring.md#running-dcgm"
GUIDE_MONITORING_GAPS = _GUIDE + "monitoring.md#blind-spots"
GUIDE_DRIVER_LOGS = _GUIDE + "monitoring.md#collect-driver-logs"
GUIDE_ERROR_RATES = _GUIDE + "monitoring.md#error-rates"

GUIDE_FIRST_CHECKS = _GUIDE + "failure-checklist.md#first-checks-by-symptom"
GUIDE_INCIDENT = _GUIDE + "failure-checklist.md#incident-checklist"

GUIDE_PREPRODUCTION = _GUIDE + "readiness-checklists.md#pre-production-checklist"
GUIDE_PRODUCTION = _GUIDE + "readiness-checklists.md#production-readiness-checklist"

# How gpuaudit reports what it could not check (docs/audit-coverage.md).
DOCS_PARTIAL_FAILURE = "docs/audit-coverage.md#partial-failure-is-data"
DOCS_RULE_FAILURE = "docs/audit-coverage.md#a-rule-that-fails"
