"""GA50x: the GPUs' PCIe links — width, generation, replays (NVLink: nvlink.py)."""

from __future__ import annotations

from collections.abc import Iterable

from gpuaudit.model.snapshot import Gpu, HostSnapshot
from gpuaudit.rules import refs
from gpuaudit.rules.audit import GPU_LIST
from gpuaudit.rules.base import Evidence, Finding, Owner, Rule, RuleContext, Severity, rule
from gpuaudit.rules.evidence import gpu_label, gpu_xml_excerpt

_PCIE_REFS = (
    refs.NVIDIA_SMI,
    refs.GUIDE_PCIE_DEGRADED,
    refs.GUIDE_PCIE_ERRORS,
    refs.GUIDE_ISOLATION,
)
_IDLE_CAVEAT = (
    "idle GPUs lower their PCIe generation to save power; compared only while the GPU was busy"
)


def _link_excerpt(snap: HostSnapshot, gpu: Gpu) -> str:
    return gpu_xml_excerpt(snap, gpu, "pci_gpu_link_info")


@rule(
    "GA501",
    "PCIe link narrower than the GPU supports",
    category="topology",
    needs=(GPU_LIST,),
    per_gpu=True,
    owner=Owner.INFRA,
    severity=Severity.MEDIUM,
    likelihood=4,
    impact=3,
    remediation=(
        "Reseat the GPU (or its riser / cable), check the slot's wiring and the BIOS lane "
        "settings; replace the riser or GPU if the link stays narrow."
    ),
    references=_PCIE_REFS,
)
def pcie_width(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[Finding]:
    """The GPU's PCIe link trained at fewer lanes than its maximum.

    Checks: ``pcie_width_current`` < ``pcie_width_max``, regardless of load (unlike the
    generation, the width does not drop to save power).
    Why: an x8 link halves host↔GPU bandwidth (data loading, checkpoints, NCCL over PCIe); it
    usually means a badly seated card, a damaged riser, or a slot wired narrower than it looks.
    Evidence: current and maximum width, and the raw link block.
    Remediation: reseat the card or riser; check slot wiring and BIOS.
    """
    for gpu in snap.gpus:
        current, maximum = gpu.pcie_width_current, gpu.pcie_width_max
        if current is None or maximum is None or current >= maximum:
            continue
        yield rule.finding(
            snap,
            f"{gpu_label(gpu)} PCIe link runs at x{current} of x{maximum}.",
            Evidence(
                fact=f"gpus[{gpu.index}].pcie_width_current",
                actual=current,
                expected=maximum,
                excerpt=_link_excerpt(snap, gpu),
            ),
            gpu=gpu.index,
        )


@rule(
    "GA502",
    "PCIe link generation below max under load",
    category="topology",
    needs=(GPU_LIST,),
    per_gpu=True,
    owner=Owner.INFRA,
    severity=Severity.MEDIUM,
    likelihood=3,
    impact=3,
    remediation=(
        "Check the BIOS PCIe speed setting for the slot, reseat the GPU / riser, and look for "
        "PCIe replay counts and AER errors; replace the riser or GPU if it persists."
    ),
    references=_PCIE_REFS,
)
def pcie_generation(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[Finding]:
    """The GPU's PCIe link runs below its maximum generation while the GPU is busy.

    Checks: ``pcie_gen_current`` < ``pcie_gen_max`` only when the GPU is not idle: its
    clock-event reasons lack gpu_idle and its utilisation is above 0. Idle or unknown
    utilisation: silent, because idle GPUs legitimately downshift.
    Why: a busy GPU stuck at a lower generation has half (or less) of its PCIe bandwidth; it
    points at a BIOS setting, a marginal riser or signal-integrity problems.
    Evidence: current and maximum generation, utilisation, and the idle caveat.
    Remediation: check BIOS link speed, reseat, watch replays.
    """
    for gpu in snap.gpus:
        current, maximum = gpu.pcie_gen_current, gpu.pcie_gen_max
        if current is None or maximum is None or current >= maximum:
            continue
        idle = any("gpu_idle" in r.lower() for r in gpu.clock_event_reasons)
        if idle or not gpu.utilization_gpu_pct:
            continue
        yield rule.finding(
            snap,
            f"{gpu_label(gpu)} PCIe link runs at Gen{current} of Gen{maximum} while "
            f"{gpu.utilization_gpu_pct:g}% busy.",
            Evidence(
                fact=f"gpus[{gpu.index}].pcie_gen_current",
                actual={"generation": current, "utilization_gpu_pct": gpu.utilization_gpu_pct},
                expected={"generation": maximum, "caveat": _IDLE_CAVEAT},
                excerpt=_link_excerpt(snap, gpu),
            ),
            gpu=gpu.index,
        )


@rule(
    "GA503",
    "PCIe replay counter high",
    category="topology",
    needs=(GPU_LIST,),
    per_gpu=True,
    owner=Owner.INFRA,
    severity=Severity.MEDIUM,
    likelihood=3,
    impact=3,
    remediation=(
        "Reseat the GPU and its riser or cable, check the kernel log for PCIe AER errors and "
        "the slot's BIOS link settings; if the count keeps climbing after a reseat, replace "
        "the riser, then the GPU."
    ),
    references=(*_PCIE_REFS, refs.DCGM_LIMITS),
)
def pcie_replays(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[Finding]:
    """The GPU's PCIe link has resent many packets since the driver loaded.

    Checks: ``pcie_replay_count`` (nvidia-smi ``pci/replay_counter``) at or above
    ``pcie_replay_limit`` (1000). The counter has no time base; DCGM's limit is a rate of
    8 replays a minute, so the default is about two hours at that rate.
    Why: every replay is a packet the link corrupted and resent: a marginal riser, cable or
    slot. It costs bandwidth now and often ends in the link
    retraining narrower (GA501) or the GPU falling off the bus (XID 79).
    Evidence: the count, the limit and the raw PCI block.
    Remediation: reseat, check AER and BIOS; replace the riser or GPU if it keeps growing.
    """
    limit = int(ctx.settings_for(snap)["pcie_replay_limit"])
    for gpu in snap.gpus:
        count = gpu.pcie_replay_count
        if count is None or count < limit:
            continue
        yield rule.finding(
            snap,
            f"{gpu_label(gpu)} PCIe link has replayed {count:,} packets since the driver "
            f"loaded (limit {limit:,}; DCGM: 8 a minute).",
            Evidence(
                fact=f"gpus[{gpu.index}].pcie_replay_count",
                actual=count,
                expected=f"< {limit}",
                excerpt=gpu_xml_excerpt(snap, gpu, "replay_counter"),
            ),
            gpu=gpu.index,
        )
