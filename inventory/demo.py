"""Demo fleet of simulated GPU hosts: runs anywhere, no GPU needed.

    pyinfra -y inventory/demo.py deploys/audit.py

Every host is ``@sim/<name>``: the gpuaudit simulator (gpuaudit.sim) builds it from the profile
of the same name (real nvidia-smi / rocm-smi captures plus the faults listed below) under
``$GPUAUDIT_SIM_DIR`` (default ``./.gpuaudit-sim``) and keeps its state between runs; set
``sim_reset=True`` on a host (or delete the directory) to start it afresh.

Groups: one per GPU model, with the host data the rules read (``gpu_model``, ``gpu_vendor``,
``expected_gpu_count``, ``desired_driver_version``), and ``demo`` for the whole fleet. Group
names differ from inventory/prod.py's on purpose so that group_data/ of the production fleet
does not apply here.

    a100-hgx-01    healthy                          v100-01        healthy
    a100-hgx-02    row remap pending on GPU 3       v100-02        driver not loaded
    a100-hgx-03    driver drift, no fabric manager  t4-01          healthy
    a100-hgx-04    MIG layout, GPU 7 MIG pending    t4-02          persistence off, low rmem_max
    a100-hgx-05    GPU fallen off the bus, XID 79   t4-03          nvidia-smi missing
    h100-01        healthy, MIG layout to apply
    a10g-01        XID storm                        p100-01        0666 device nodes, no holds
    a10g-02        unreachable                      rtx3090-01     PCIe x8 of x16 under load
    rtx4000ada-01  HW slowdown                      mi100-01       AMD, rocm-smi only
"""

a100_sxm4_80gb = (
    [
        "@sim/a100-hgx-01",
        "@sim/a100-hgx-02",
        "@sim/a100-hgx-03",
        "@sim/a100-hgx-04",
        "@sim/a100-hgx-05",
    ],
    {
        "gpu_model": "NVIDIA A100-SXM4-80GB",
        "gpu_vendor": "nvidia",
        "expected_gpu_count": 8,
        "desired_driver_version": "535.161.08",
        "required_cuda_versions": ["12.2"],
    },
)

# Hosts whose MIG layout the demo policy names (its groups mig_a100 and h100_80gb_hbm3).
mig_a100 = ["@sim/a100-hgx-04"]

h100_80gb_hbm3 = (
    ["@sim/h100-01"],
    {
        "gpu_model": "NVIDIA H100 80GB HBM3",
        "gpu_vendor": "nvidia",
        "expected_gpu_count": 8,
        "desired_driver_version": "535.161.08",
        "required_cuda_versions": ["12.2"],
    },
)

v100_pcie_32gb = (
    [("@sim/v100-01", {"rollout_stage": "wave1"}), "@sim/v100-02"],
    {
        "gpu_model": "Tesla V100-PCIE-32GB",
        "gpu_vendor": "nvidia",
        "expected_gpu_count": 2,
        "desired_driver_version": "470.223.02",
    },
)

# Rollout stages of a rehearsed driver upgrade (gpuaudit upgrade inventory/demo.py --to
# 535.161.08 --policy policies/demo.yaml): t4-01 is the canary, the other hosts the package
# repositories offer 535.161.08 to follow in two waves; the rest are already on it or are
# skipped by the plan with the reason.
tesla_t4 = (
    [
        ("@sim/t4-01", {"rollout_stage": "canary"}),
        ("@sim/t4-02", {"rollout_stage": "wave1"}),
        "@sim/t4-03",
    ],
    {
        "gpu_model": "Tesla T4",
        "gpu_vendor": "nvidia",
        "expected_gpu_count": 1,
        "desired_driver_version": "515.105.01",
    },
)

a10g = (
    [("@sim/a10g-01", {"rollout_stage": "wave1"}), "@sim/a10g-02"],
    {
        "gpu_model": "NVIDIA A10G",
        "gpu_vendor": "nvidia",
        "expected_gpu_count": 1,
        "desired_driver_version": "515.105.01",
    },
)

tesla_p100 = (
    [("@sim/p100-01", {"rollout_stage": "wave2"})],
    {"gpu_model": "Tesla P100-PCIE-16GB", "gpu_vendor": "nvidia", "expected_gpu_count": 1},
)

rtx3090 = (
    [("@sim/rtx3090-01", {"rollout_stage": "wave2"})],
    {"gpu_model": "NVIDIA GeForce RTX 3090", "gpu_vendor": "nvidia", "expected_gpu_count": 2},
)

rtx4000_ada = (
    [("@sim/rtx4000ada-01", {"rollout_stage": "wave2"})],
    {
        "gpu_model": "NVIDIA RTX 4000 SFF Ada Generation",
        "gpu_vendor": "nvidia",
        "expected_gpu_count": 1,
    },
)

mi100 = (
    ["@sim/mi100-01"],
    {"gpu_model": "AMD Instinct MI100", "gpu_vendor": "amd", "expected_gpu_count": 6},
)

# The site policy the demo fleet is audited by and remediated to (GPUAUDIT_POLICY overrides).
demo = (
    a100_sxm4_80gb[0]
    + h100_80gb_hbm3[0]
    + v100_pcie_32gb[0]
    + tesla_t4[0]
    + a10g[0]
    + tesla_p100[0]
    + rtx3090[0]
    + rtx4000_ada[0]
    + mi100[0],
    {"gpuaudit_policy": "policies/demo.yaml"},
)
