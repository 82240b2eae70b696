"""MIG on a simulated GPU: the profile table, placing and removing GPU / compute instances,
and the ``nvidia-smi mig -lgi`` / ``-lci`` tables.

Each GPU's MIG state lives in the host state as ``gpu["mig"]``::

    {"current": "Enabled", "pending": "Enabled",
     "gpu_instances": [{"id": 3, "profile": "1g.20gb", "start": 0,
                        "compute_instances": [{"id": 0}]}]}

Placement follows the A100 rules NVIDIA documents: a GPU instance takes a run of the 8
memory slices at an allowed start, at most 7 compute slices in all, and its ID follows from its
size and start (7g → 0; 4-slice → 1, 2; 2-slice → 3…6; 1-slice → 7…13), which is what the real
captures show (four 1g.20gb instances at 0, 2, 4, 6 are IDs 3, 4, 5, 6).
"""

from __future__ import annotations

from collections import namedtuple

from gpuaudit.sim.fixtures import read_fixture

# Typing names for the checker only: importing typing costs each tool call milliseconds.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# name ("1g.10gb"), profile_id, compute_slices, memory_slices, starts (allowed first slices)
MigProfile = namedtuple(
    "MigProfile", ["name", "profile_id", "compute_slices", "memory_slices", "starts"]
)


# NVIDIA MIG user guide, "A100-SXM4-80GB" supported profiles (the +me variants left out).
_A100_80GB = (
    MigProfile("1g.10gb", 19, 1, 1, (0, 1, 2, 3, 4, 5, 6)),
    MigProfile("1g.20gb", 15, 1, 2, (0, 2, 4, 6)),
    MigProfile("2g.20gb", 14, 2, 2, (0, 2, 4)),
    MigProfile("3g.40gb", 9, 3, 4, (0, 4)),
    MigProfile("4g.40gb", 5, 4, 4, (0,)),
    MigProfile("7g.80gb", 0, 7, 8, (0,)),
)
# The guide's H100 80GB table has the same names, IDs, sizes and placements.
PROFILES_BY_PRODUCT: dict[str, tuple[MigProfile, ...]] = {
    "NVIDIA A100-SXM4-80GB": _A100_80GB,
    "NVIDIA A100 80GB PCIe": _A100_80GB,
    "NVIDIA H100 80GB HBM3": _A100_80GB,
}
TOTAL_COMPUTE_SLICES = 7
TOTAL_MEMORY_SLICES = 8
# Compute-instance profile ID of a CI spanning its whole GPU instance, by compute slices.
_FULL_CI_PROFILE_ID = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}

# `nvidia-smi mig -lci` header as the driver prints it (NVIDIA MIG user guide; the same bytes
# appear in many published captures). No capture of it is packaged, only of -lgi.
_LCI_HEADER = """\
+--------------------------------------------------------------------+
| Compute instances:                                                 |
| GPU     GPU       Name             Profile   Instance   Placement  |
|       Instance                       ID        ID       Start:Size |
|         ID                                                         |
|====================================================================|"""
_LGI_FIXTURE = "summerlo-a30-class-mig-lgi-4x-1g.6gb.txt"


class MigError(Exception):
    """A MIG request the driver would refuse; the message is what nvidia-smi prints."""


def profiles_for(product: str) -> tuple[MigProfile, ...]:
    return PROFILES_BY_PRODUCT.get(product, ())


def find_profile(product: str, wanted: str) -> MigProfile:
    """A profile by ID (``19``) or name (``1g.10gb``, ``MIG 1g.10gb``)."""
    wanted = wanted.strip()
    name = wanted[4:] if wanted.upper().startswith("MIG ") else wanted
    for profile in profiles_for(product):
        if (name.isdigit() and int(name) == profile.profile_id) or name == profile.name:
            return profile
    raise MigError(f"Unable to find GPU instance profile {wanted!r}: Invalid Argument")


def gi_id_for(profile: MigProfile, start: int) -> int:
    base = {8: 0, 4: 1, 2: 3, 1: 7}[profile.memory_slices]
    return base + start // profile.memory_slices


def create_gpu_instance(product: str, mig: dict[str, Any], wanted: str) -> dict[str, Any]:
    """Place one GPU instance at the lowest free start; raises MigError when it does not fit."""
    profile = find_profile(product, wanted)
    used_memory: set[int] = set()
    used_compute = 0
    for gi in mig["gpu_instances"]:
        other = find_profile(product, gi["profile"])
        used_memory.update(range(gi["start"], gi["start"] + other.memory_slices))
        used_compute += other.compute_slices
    if used_compute + profile.compute_slices <= TOTAL_COMPUTE_SLICES:
        for start in profile.starts:
            span = set(range(start, start + profile.memory_slices))
            if not span & used_memory:
                gi = {
                    "id": gi_id_for(profile, start),
                    "profile": profile.name,
                    "start": start,
                    "compute_instances": [],
                }
                mig["gpu_instances"].append(gi)
                mig["gpu_instances"].sort(key=lambda item: item["id"])
                return gi
    raise MigError("Insufficient Resources")


def create_full_compute_instance(gi: dict[str, Any]) -> dict[str, Any]:
    ci = {"id": len(gi["compute_instances"])}
    gi["compute_instances"].append(ci)
    return ci


def full_ci_profile_id(product: str, gi: dict[str, Any]) -> int:
    return _FULL_CI_PROFILE_ID[find_profile(product, gi["profile"]).compute_slices]


def render_lgi(rows: list[tuple[int, dict[str, Any], MigProfile]]) -> str:
    """``mig -lgi``: header and row layout of a real capture, rows from the state."""
    fixture = read_fixture("mig", _LGI_FIXTURE).splitlines()
    header, separator = fixture[:5], fixture[0]
    lines = list(header)
    for gpu_index, gi, profile in rows:
        placement = f"{gi['start']}:{profile.memory_slices}"
        name = f"MIG {profile.name}"
        lines.append(
            f"|{gpu_index:>4}  {name:<20}{profile.profile_id:>2}{gi['id']:>9}{placement:>13}     |"
        )
        lines.append(separator)
    return "\n".join(lines) + "\n"


def render_lgipp(gpu_indexes: list[int], product: str) -> str:
    """``mig -lgipp``: each profile's possible placements, GPU by GPU, in the line layout of a
    real capture (tests/fixtures/mig/alizeechen-h100-nvl-mig-lgipp.txt): "Placements:" where
    there are several starts, "Placement :" where there is one."""
    lines = []
    for index in gpu_indexes:
        for profile in profiles_for(product):
            label = "Placements:" if len(profile.starts) > 1 else "Placement :"
            starts = ",".join(str(start) for start in profile.starts)
            lines.append(
                f"GPU {index:>2} Profile ID {profile.profile_id:>2} {label} "
                f"{{{starts}}}:{profile.memory_slices}"
            )
    return "\n".join(lines) + "\n"


def render_lci(rows: list[tuple[int, dict[str, Any], dict[str, Any], MigProfile]]) -> str:
    lines = _LCI_HEADER.splitlines()
    separator = lines[0]
    for gpu_index, gi, ci, profile in rows:
        name = f"MIG {profile.name}"
        ci_profile = _FULL_CI_PROFILE_ID[profile.compute_slices]
        placement = f"0:{profile.compute_slices}"
        lines.append(
            f"|{gpu_index:>4}{gi['id']:>7}       {name:<21}{ci_profile:>1}"
            f"{ci['id']:>10}{placement:>13}     |"
        )
        lines.append(separator)
    return "\n".join(lines) + "\n"
