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
NVML_UNREPAIRABLE_MEMORY = (
    "https://docs.nvidia.com/deploy/nvml-api/structnvmlUnrepairableMemoryStatus__v1__t.html"
)
NVML_DEVICE_QUERIES = "https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceQueries.html"
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

# systemd's journal: where the kernel log of earlier boots is kept (journald.conf Storage=).
JOURNALCTL = "https://www.freedesktop.org/software/systemd/man/latest/journalctl.html"
JOURNALD_STORAGE = "https://www.freedesktop.org/software/systemd/man/latest/journald.conf.html"

# gpuaudit's field guide (docs/field-guide/), by page and section.
_GUIDE = "docs/field-guide/"

GUIDE_XID_LOG = _GUIDE + "xid.md#reading-an-xid-line"
GUIDE_XID_INIT_FAILED = _GUIDE + "xid.md#a-gpu-that-did-not-come-up"
GUIDE_XID_TABLE = _GUIDE + "xid.md#common-xid-codes"
GUIDE_XID_ACTIONS = _GUIDE + "xid.md#immediate-action-per-code"
GUIDE_XID_READINGS = _GUIDE + "xid.md#how-other-health-checks-read-xids"
GUIDE_XID_PREVIOUS_BOOT = _GUIDE + "xid.md#errors-before-the-last-reboot"

GUIDE_ECC = _GUIDE + "gpu-memory-errors.md#correctable-and-uncorrectable-errors"
GUIDE_ROW_REMAPPING = _GUIDE + "gpu-memory-errors.md#row-remapping"
GUIDE_MEMORY_REPAIR = _GUIDE + "gpu-memory-errors.md#memory-repair-and-the-sram-threshold"
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
GUIDE_EXPORTER_COUNTERS = _GUIDE + "monitoring.md#dcgm-exporter-counters"
GUIDE_ALERT_COVERAGE = _GUIDE + "monitoring.md#alert-coverage"
GUIDE_TEXTFILE = _GUIDE + "monitoring.md#the-register-in-prometheus"
# Monitoring documentation (dcgm-exporter's field names are DCGM's; Prometheus' formats).
DCGM_FIELDS = "https://docs.nvidia.com/datacenter/dcgm/latest/dcgm-api/dcgm-api-field-ids.html"
PROMETHEUS_ALERTING = "https://prometheus.io/docs/prometheus/latest/configuration/alerting_rules/"
NODE_EXPORTER_TEXTFILE = "https://github.com/prometheus/node_exporter#textfile-collector"

GUIDE_FIRST_CHECKS = _GUIDE + "failure-checklist.md#first-checks-by-symptom"
GUIDE_INCIDENT = _GUIDE + "failure-checklist.md#incident-checklist"

GUIDE_PREPRODUCTION = _GUIDE + "readiness-checklists.md#pre-production-checklist"
GUIDE_PRODUCTION = _GUIDE + "readiness-checklists.md#production-readiness-checklist"

# Slurm's documentation, and the field guide's page on what gpuaudit checks of it.
SLURM_GRES = "https://slurm.schedmd.com/gres.html"
SLURM_GRES_CONF = "https://slurm.schedmd.com/gres.conf.html"
SLURM_SCONTROL = "https://slurm.schedmd.com/scontrol.html"
SLURM_MIG = "https://slurm.schedmd.com/gres.html#MIG_Management"
GUIDE_SLURM_COUNTS = _GUIDE + "slurm.md#gpu-counts-slurm-and-the-hardware"
GUIDE_SLURM_DRAIN = _GUIDE + "slurm.md#drained-and-down-nodes"
GUIDE_SLURM_SLURMD = _GUIDE + "slurm.md#what-slurmd-reports"
GUIDE_SLURM_MIG = _GUIDE + "slurm.md#mig-slices-in-slurm"
GUIDE_SLURM_AUTODETECT = _GUIDE + "slurm.md#autodetect"

# Kubernetes, NVIDIA's device plugin and GPU Feature Discovery, and the field guide's page on
# what gpuaudit checks of the cluster's view.
K8S_SCHEDULING_GPUS = "https://kubernetes.io/docs/tasks/manage-gpus/scheduling-gpus/"
K8S_TAINTS = "https://kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/"
K8S_DRAIN = "https://kubernetes.io/docs/tasks/administer-cluster/safely-drain-node/"
NVIDIA_DEVICE_PLUGIN = "https://github.com/NVIDIA/k8s-device-plugin"
NVIDIA_GFD_LABELS = (
    "https://github.com/NVIDIA/k8s-device-plugin/blob/main/docs/gpu-feature-discovery/"
    "README.md#generated-labels"
)
GPU_OPERATOR_MIG = (
    "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-operator-mig.html"
)
GUIDE_KUBE_VIEW = _GUIDE + "kubernetes.md#how-gpuaudit-reads-the-cluster"
GUIDE_KUBE_MAPPING = _GUIDE + "kubernetes.md#nodes-and-hosts"
GUIDE_KUBE_COUNTS = _GUIDE + "kubernetes.md#advertised-gpus-and-healthy-gpus"
GUIDE_KUBE_LABELS = _GUIDE + "kubernetes.md#gpu-feature-discovery-labels"
GUIDE_KUBE_DEPRECATED = _GUIDE + "kubernetes.md#current-and-deprecated-labels"
GUIDE_KUBE_MIG = _GUIDE + "kubernetes.md#mig-strategy-and-layout"
GUIDE_KUBE_DRAIN = _GUIDE + "kubernetes.md#cordons-taints-and-drains"

# DCGM's active diagnostic (dcgmi diag), and the field guide's page on running it in the audit.
DCGM_DIAGNOSTICS = "https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/dcgm-diagnostics.html"
DCGM_DIAG_ERRORS = (
    "https://docs.nvidia.com/datacenter/dcgm/latest/reference/diagnostics/errors.html"
)
GUIDE_DIAG_LEVELS = _GUIDE + "dcgm-diag.md#levels-and-how-long-they-take"
GUIDE_DIAG_BUSY = _GUIDE + "dcgm-diag.md#never-on-a-busy-gpu"
GUIDE_DIAG_FAILURES = _GUIDE + "dcgm-diag.md#reading-a-failed-test"
GUIDE_DIAG_SETUP = _GUIDE + "dcgm-diag.md#when-the-diagnostic-cannot-run"

# How gpuaudit reports what it could not check (docs/audit-coverage.md).
DOCS_PARTIAL_FAILURE = "docs/audit-coverage.md#partial-failure-is-data"
DOCS_RULE_FAILURE = "docs/audit-coverage.md#a-rule-that-fails"
