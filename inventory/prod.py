"""Example production inventory for gpuaudit.

Groups by GPU model (rules compare drivers among hosts of one model) and by rollout stage
(staged driver upgrades go canary → wave1 → wave2). Per-host data that the audit reads:
``expected_gpu_count`` (fewer visible GPUs is a finding), ``desired_driver_version``,
``required_cuda_versions``. Group-wide values live in inventory/group_data/<group>.py.
"""

h100_sxm = [
    ("gpu-h100-001.prod.example.net", {"rack": "r12"}),
    ("gpu-h100-002.prod.example.net", {"rack": "r12"}),
    ("gpu-h100-003.prod.example.net", {"rack": "r13"}),
    ("gpu-h100-004.prod.example.net", {"rack": "r13"}),
]

a100_sxm = [
    ("gpu-a100-001.prod.example.net", {"rack": "r07"}),
    ("gpu-a100-002.prod.example.net", {"rack": "r07"}),
    # A host still being repaired: it holds six GPUs until the RMA returns.
    ("gpu-a100-003.prod.example.net", {"rack": "r08", "expected_gpu_count": 6}),
]

l40s = [
    ("gpu-l40s-001.prod.example.net", {"rack": "r21"}),
    ("gpu-l40s-002.prod.example.net", {"rack": "r21"}),
]

mi300x = [
    ("gpu-mi300x-001.prod.example.net", {"rack": "r30"}),
]

# Rollout stages for staged driver upgrades: one host of each model first.
canary = ["gpu-h100-001.prod.example.net", "gpu-a100-001.prod.example.net",
          "gpu-l40s-001.prod.example.net"]  # fmt: skip
wave1 = ["gpu-h100-002.prod.example.net", "gpu-h100-003.prod.example.net",
         "gpu-a100-002.prod.example.net", "gpu-l40s-002.prod.example.net"]  # fmt: skip
wave2 = ["gpu-h100-004.prod.example.net", "gpu-a100-003.prod.example.net",
         "gpu-mi300x-001.prod.example.net"]  # fmt: skip
