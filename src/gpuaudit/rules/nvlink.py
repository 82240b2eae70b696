"""GA510–GA511: NVLink — links that are down, and links that keep correcting errors.

Both read ``snapshot.nvlink`` (nvidia-smi nvlink -s / -e) and are not evaluated when it was
not collected.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from gpuaudit.model.snapshot import Gpu, GpuNvLink, HostSnapshot
from gpuaudit.rules import refs
from gpuaudit.rules.audit import NVLINK
from gpuaudit.rules.base import Evidence, Finding, Owner, Rule, RuleContext, Severity, rule
from gpuaudit.rules.evidence import gpu_label
from gpuaudit.rules.services import is_sxm_board_gpu, nvswitch_reason

_NVLINK_REFS = (
    refs.NVML_NVLINK,
    refs.FABRIC_MANAGER,
    refs.AZURE_HEALTH,
    refs.DCGM_LIMITS,
    refs.GUIDE_NVLINK,
)
_GPU_LINE = re.compile(r"^GPU (\d+):")


def _excerpt(snap: HostSnapshot, gpu: int, *sections: str) -> str:
    """The lines one GPU has in the nvlink sections, as the host printed them."""
    lines: list[str] = []
    for name in sections:
        section = snap.sections.get(name)
        inside = False
        for line in (section.stdout if section else "").splitlines():
            header = _GPU_LINE.match(line.strip())
            if header:
                inside = int(header.group(1)) == gpu
            if inside and line.strip():
                lines.append(line.strip())
    return "\n".join(lines[:24])


def _gpu_of(snap: HostSnapshot, entry: GpuNvLink) -> Gpu | None:
    """The GPU of the snapshot an NVLink entry is about: the one with its UUID, else the one
    with its nvidia-smi index. The listing numbers GPUs as nvidia-smi does; a GPU whose
    nvidia-smi index is not known (``HostSnapshot.unnumbered_gpus``) is matched by UUID only."""
    if entry.uuid:
        same = next((g for g in snap.gpus if g.uuid == entry.uuid), None)
        if same is not None:
            return same
    return next((g for g in snap.gpus if snap.nvidia_smi_index(g) == entry.gpu), None)


def _label(gpu: Gpu | None, entry: GpuNvLink) -> str:
    if gpu is None:
        return f"GPU {entry.gpu}"
    label = gpu_label(gpu)
    return label if gpu.index == entry.gpu else f"{label} (nvidia-smi nvlink GPU {entry.gpu})"


def _nvlink_expected(snap: HostSnapshot, gpu: Gpu | None, policy: Mapping[str, Any]) -> bool:
    declared = policy.get("nvlink_expected")
    if declared is not None:
        return bool(declared)
    return nvswitch_reason(snap, policy) is not None or (
        gpu is not None and is_sxm_board_gpu(gpu, policy)
    )


@rule(
    "GA510",
    "NVLink links inactive",
    category="topology",
    needs=(NVLINK,),
    owner=Owner.INFRA,
    severity=Severity.HIGH,
    likelihood=4,
    impact=4,
    remediation=(
        "Drain the GPU's jobs, reset the GPU (and on NVSwitch systems restart "
        "nvidia-fabricmanager), then check the links again with nvidia-smi nvlink -s; if they "
        "stay down, reseat the GPU or the NVLink bridge and open a hardware case."
    ),
    references=_NVLINK_REFS,
)
def nvlink_inactive(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[Finding]:
    """A GPU whose NVLinks are partly or entirely down.

    Checks: per GPU of ``nvidia-smi nvlink -s``, links listed ``<inactive>`` next to active
    ones, or NVML's "all links are inactive". All links down counts only where NVLink is
    expected: ``nvlink_expected`` when the policy sets it, else an NVSwitch system or an
    SXM-board GPU model (a PCIe card without a bridge has inactive links by design). Silent
    everywhere when ``nvlink_expected`` is false.
    Why: collectives between the GPUs fall back to slower paths or fail (training that does not
    scale with GPUs); on an NVSwitch system a GPU without links cannot
    join the fabric. Azure's health checks fail a node for any inactive link.
    Evidence: the inactive links, the active count, and the GPU's lines of the listing.
    Remediation: reset the GPU (restart fabric manager), then reseat or replace.
    """
    if snap.nvlink is None:
        return
    policy = ctx.settings_for(snap)
    if policy.get("nvlink_expected") is False:
        return
    for entry in snap.nvlink:
        gpu = _gpu_of(snap, entry)
        active = [link.link for link in entry.links if link.active]
        inactive = [link.link for link in entry.links if link.active is False]
        all_down = entry.all_inactive or (inactive and not active)
        if all_down and not _nvlink_expected(snap, gpu, policy):
            continue
        if not (all_down or inactive):
            continue
        what = (
            "all of its NVLinks are inactive"
            if all_down
            else f"NVLink {', '.join(map(str, inactive))} inactive ({len(active)} active)"
        )
        yield rule.finding(
            snap,
            f"{_label(gpu, entry)}: {what}.",
            Evidence(
                fact=f"nvlink[{entry.gpu}]",
                actual={"active": len(active), "inactive": inactive or "all"},
                expected="every link active",
                excerpt=_excerpt(snap, entry.gpu, "nvlink_status"),
            ),
            gpu=gpu.index if gpu is not None else entry.gpu,
        )


@rule(
    "GA511",
    "NVLink error counters above limits",
    category="topology",
    needs=(NVLINK,),
    owner=Owner.INFRA,
    severity=Severity.MEDIUM,
    likelihood=3,
    impact=3,
    remediation=(
        "Note the counts, reset them (nvidia-smi nvlink -r) and watch whether they grow; if "
        "they do, drain the GPU, reset it, and reseat the GPU or NVLink bridge at the next "
        "maintenance window."
    ),
    references=_NVLINK_REFS,
)
def nvlink_errors(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[Finding]:
    """NVLinks that had to replay, recover or discard data since the driver loaded.

    Checks: per link of ``nvidia-smi nvlink -e``, the replay, recovery and CRC counters against
    ``nvlink_error_limits`` (replay 1, recovery 1, CRC 100). DCGM fails a link on any replay or
    recovery error and on 100 CRC errors a second; the counters have no time base, so a total
    under these limits cannot have crossed DCGM's. One finding per GPU naming its links.
    Why: replays and CRC errors are corrupted flits the link resent (bandwidth lost); a
    recovery is the link retraining, a stall every collective on it waits for. Growing counts
    precede NVLink XIDs (74, 144–150) and links going down (GA510).
    Evidence: the counters over their limits, per link, and the GPU's lines of the listing.
    Remediation: reset the counters and watch; reseat if they grow.
    """
    if snap.nvlink is None:
        return
    limits = {str(k): int(v) for k, v in ctx.settings_for(snap)["nvlink_error_limits"].items()}
    for entry in snap.nvlink:
        over: dict[str, dict[str, int]] = {}
        for link in entry.links:
            for counter, limit in limits.items():
                value = getattr(link, counter, None)
                if isinstance(value, int) and value >= limit:
                    over.setdefault(f"link {link.link}", {})[counter] = value
        if not over:
            continue
        gpu = _gpu_of(snap, entry)
        listed = "; ".join(
            f"{where}: " + ", ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in counts.items())
            for where, counts in over.items()
        )
        yield rule.finding(
            snap,
            f"{_label(gpu, entry)} NVLink errors since the driver loaded: {listed}.",
            Evidence(
                fact=f"nvlink[{entry.gpu}].links",
                actual=over,
                expected={k: f"< {v}" for k, v in limits.items()},
                excerpt=_excerpt(snap, entry.gpu, "nvlink_errors"),
            ),
            gpu=gpu.index if gpu is not None else entry.gpu,
        )
