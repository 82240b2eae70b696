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

# Public health-check projects whose thresholds the defaults follow.
NVSENTINEL_XID_MAP = (
    "https://github.com/NVIDIA/NVSentinel/blob/main/distros/kubernetes/nvsentinel/charts/"
    "gpu-health-monitor/xiderrorsmapping.csv"
)
DCGM_LIMITS = "https://github.com/NVIDIA/DCGM/blob/master/common/DcgmGPUHardwareLimits.h"
DCGM_HEALTH = "https://github.com/NVIDIA/DCGM/blob/master/modules/health/DcgmHealthWatch.cpp"
AZURE_HEALTH = "https://github.com/Azure/azurehpc-health-checks"

# Seed documents (shared/seeds/).
SEED_XID_TABLE = "seed 000: XID table (Common XID error codes)"
SEED_DRIVER_TABLE = "seed 000: Driver and runtime failures (error pattern table)"
SEED_NETWORK = "seed 000: Network bottlenecks in inference (TCP buffer sysctls)"
SEED_MIG = "seed 000: MIG (Multi-Instance GPU) for isolation"
SEED_ISOLATION = "seed 000: Multi-tenant GPU isolation (thermal throttling, PCIe contention)"
SEED_CHECKLIST = "seed 000: Failure mode checklist"
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
