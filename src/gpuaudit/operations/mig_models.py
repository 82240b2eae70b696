"""What gpuaudit knows of each MIG-capable GPU model: its generation and its MIG profiles.

From NVIDIA's MIG user guide ("Supported GPUs", "Supported MIG Profiles"); a model missing
here is still handled (its generation read from its name, its profiles left to the driver and
to the read-back check of :mod:`gpuaudit.operations.mig_commands`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_AMPERE_NAME = re.compile(r"\bA(?:100|30|800)\b")
PROFILE = re.compile(r"^(?P<g>\d+)g\.(?P<gb>\d+)gb(?:\+(?P<attrs>\S+))?$")


@dataclass(frozen=True)
class MigFamily:
    """The MIG profiles of a GPU model (NVIDIA MIG user guide, "Supported MIG Profiles")."""

    architecture: str
    full_memory_gb: int
    compute_slices: int
    memory_slices: int
    profiles: frozenset[str]

    def memory_slices_of(self, profile: str) -> int:
        match = PROFILE.match(profile)
        gb = int(match["gb"]) if match else 0
        return max(1, round(gb * self.memory_slices / self.full_memory_gb))


def _family(arch: str, full: int, profiles: str, compute: int = 7, memory: int = 8) -> MigFamily:
    return MigFamily(arch, full, compute, memory, frozenset(profiles.split()))


_A100_80 = _family("Ampere", 80, "1g.10gb 1g.10gb+me 1g.20gb 2g.20gb 3g.40gb 4g.40gb 7g.80gb")
_A100_40 = _family("Ampere", 40, "1g.5gb 1g.5gb+me 1g.10gb 2g.10gb 3g.20gb 4g.20gb 7g.40gb")
_A30 = _family("Ampere", 24, "1g.6gb 1g.6gb+me 2g.12gb 2g.12gb+me 4g.24gb", 4, 4)
_H100_80 = _family("Hopper", 80, "1g.10gb 1g.10gb+me 1g.20gb 2g.20gb 3g.40gb 4g.40gb 7g.80gb")
_H100_94 = _family("Hopper", 94, "1g.12gb 1g.12gb+me 1g.24gb 2g.24gb 3g.47gb 4g.47gb 7g.94gb")
_H200 = _family("Hopper", 141, "1g.18gb 1g.18gb+me 1g.35gb 2g.35gb 3g.71gb 4g.71gb 7g.141gb")
# Product names as nvidia-smi prints them, without the "NVIDIA " some drivers put in front.
FAMILIES: dict[str, MigFamily] = {
    "A100-SXM4-80GB": _A100_80, "A100 80GB PCIe": _A100_80, "A100-SXM4-40GB": _A100_40,
    "A100-PCIE-40GB": _A100_40, "A30": _A30, "H100 80GB HBM3": _H100_80, "H100 PCIe": _H100_80,
    "H100 NVL": _H100_94, "H200": _H200, "H200 NVL": _H200,
}  # fmt: skip


def family_of(name: str) -> MigFamily | None:
    return FAMILIES.get(name.strip().removeprefix("NVIDIA ").strip())


def resets_to_change_mode(name: str) -> bool:
    """Ampere applies a MIG mode change through a GPU reset; Hopper and later do not. A model
    missing from the table counts as Ampere only by its name (A100, A30, A800)."""
    family = family_of(name)
    return family.architecture == "Ampere" if family else bool(_AMPERE_NAME.search(name))
