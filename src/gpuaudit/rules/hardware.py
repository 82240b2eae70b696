"""What kind of GPU a snapshot shows, as far as the rules need to know it."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gpuaudit.model.snapshot import Gpu


def is_datacenter_gpu(gpu: Gpu, policy: Mapping[str, Any]) -> bool:
    """An NVIDIA datacenter part by name (policy ``datacenter_gpu_name_patterns`` / exclusions).

    Datacenter GPUs ship with ECC on and are what DCGM supports; workstation and consumer cards
    (RTX, GeForce, Quadro) may run without ECC by design.
    """
    if gpu.vendor != "nvidia" or not gpu.name:
        return False
    name = gpu.name
    exclusions = policy.get("datacenter_gpu_name_exclusions", ())
    if any(str(x).lower() in name.lower() for x in exclusions):
        return False
    return any(re.search(str(p), name) for p in policy.get("datacenter_gpu_name_patterns", ()))
