"""References the rules cite, named once so every rule spells a source the same way.

URLs are the vendor documents listed in the project's reference notes
(shared/reference/xid-ecc-rules.md); ``SEED_*`` names a section of the source documents the
register's checklists come from; ``REF_*`` names a section of the reference notes themselves.
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

# Seed documents (shared/seeds/).
SEED_XID_TABLE = "seed 000: XID table (Common XID error codes)"
SEED_DRIVER_TABLE = "seed 000: Driver and runtime failures (error pattern table)"
SEED_NETWORK = "seed 000: Network bottlenecks in inference (TCP buffer sysctls)"
SEED_MIG = "seed 000: MIG (Multi-Instance GPU) for isolation"
SEED_ISOLATION = "seed 000: Multi-tenant GPU isolation (thermal throttling, PCIe contention)"
SEED_CHECKLIST = "seed 000: Failure mode checklist"
SEED_OOM = "seed 000: OOM: GPU memory vs system memory"
SEED_LLM_MEMORY = "seed 000: Memory calculation for LLMs (model memory, KV cache per request)"
SEED_QUANTIZATION = "seed 000: Quantization to reduce memory (FP16 / INT8 / INT4)"
SEED_OBSERVABILITY = "seed 000: Observability (DCGM metrics, dcgm-exporter deployment)"
SEED_ALERTS = "seed 000: Alert rules for GPU workloads (temperature > 80 °C, memory > 95 %)"
SEED_M2_HEADROOM = "seed 004: M2 GPU memory usage (keep headroom 20 %)"
SEED_M3_TEMPERATURE = "seed 004: M3 GPU temperature / M13 temperature throttles"
SEED_F1_OOM = "seed 004: F1 OOM"
SEED_F5_NOISY = "seed 004: F5 Noisy neighbor"
SEED_F7_MISMATCH = "seed 004: F7 DLL version mismatch"
SEED_TOOLS_DCGM = "seed 004: Best tools to measure gpu (NVIDIA DCGM; host agents required)"
SEED_PREPROD = "seed 004: Pre-production checklist (model fits GPU memory, driver/runtime compat)"
SEED_ANTI_1 = "seed 004: anti-pattern 1 (repeated OOMs)"
SEED_ANTI_3 = "seed 004: anti-pattern 3 (sudden throughput drop: thermal throttling)"
SEED_ANTI_5 = "seed 004: anti-pattern 5 (noisy neighbour: dedicated nodes or MIG)"
SEED_ANTI_6 = "seed 004: anti-pattern 6 (slow training scaling: poor NCCL topology, use NVLink)"
SEED_ANTI_8 = "seed 004: anti-pattern 8 (inaccurate metrics: missing exporters)"
SEED_ANTI_11 = "seed 004: anti-pattern 11 (PCIe errors: hardware or cabling)"
SEED_ANTI_18 = "seed 004: anti-pattern 18 (scheduler fragmentation: small GPU allocations)"
SEED_SECURITY = "seed 004: Security basics (audit driver and runtime versions)"
SEED_F2_THERMAL = "seed 004: F2 Thermal throttle"
SEED_F3_DRIVER = "seed 004: F3 Driver crash"
SEED_F4_PCIE = "seed 004: F4 PCIe error"
SEED_M14_ERRORS = "seed 004: M14 GPU error rates"
SEED_SAFE_DEPLOY = "seed 004: Safe deployments (canary driver updates)"
SEED_ANTI_10 = "seed 004: anti-pattern 10 (firmware or driver mismatch across nodes)"
SEED_ANTI_4 = "seed 004: anti-pattern 4 (driver crashes after upgrade: pin versions)"
SEED_ANTI_23 = "seed 004: anti-pattern 23 (unauthorized GPU access, device permissions)"
SEED_ANTI_24 = "seed 004: anti-pattern 24 / observability pitfalls (not collecting driver logs)"
SEED_INCIDENT = "seed 004: Incident checklist (check driver and kernel logs)"

# Sections of shared/reference/xid-ecc-rules.md.
REF_XID = "reference: xid-ecc-rules.md, XID catalogue"
REF_MEMORY = "reference: xid-ecc-rules.md, Memory errors"
REF_PCIE_SERVICES = "reference: xid-ecc-rules.md, PCIe, thermal, services"
REF_MIG = "reference: xid-ecc-rules.md, MIG"
