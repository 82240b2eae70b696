"""GA50x: the GPUs' PCIe links — width, generation, replays (NVLink: nvlink.py)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpuaudit.model.snapshot import Gpu, HostSnapshot, bus_key
from gpuaudit.policy.defaults import PCIE_WIDTHS
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
    """The GPU's PCIe link trained at fewer lanes than its maximum, or than its slot is wired
    for where the site says so.

    Checks: ``pcie_width_current`` < ``pcie_width_max``, regardless of load (unlike the
    generation, the width does not drop to save power). Where the policy's
    ``pcie_expected_width`` names a narrower width for the GPU (one width for the host, or one
    per PCI bus id: a chassis whose slots are wired x8 by design), the link is compared with
    that width instead.
    Why: an x8 link halves host↔GPU bandwidth (data loading, checkpoints, NCCL over PCIe); it
    usually means a badly seated card, a damaged riser, or a slot wired narrower than it looks.
    Evidence: current and maximum width (and the site's expected width), and the raw link block.
    Remediation: reseat the card or riser; check slot wiring and BIOS.
    """
    expected: Any = _UNREAD
    for gpu in snap.gpus:
        current, maximum = gpu.pcie_width_current, gpu.pcie_width_max
        if current is None or maximum is None or current >= maximum:
            continue
        if expected is _UNREAD:
            expected = ctx.settings_for(snap).get("pcie_expected_width")
        wired = _wired_width(expected, gpu)
        if wired is not None and current >= wired:
            continue  # as narrow as the slot is wired for: by design
        text = f"{gpu_label(gpu)} PCIe link runs at x{current} of x{maximum}"
        if wired is not None:
            text += f"; its slot is wired for x{wired} (pcie_expected_width)"
        yield rule.finding(
            snap,
            text + ".",
            Evidence(
                fact=f"gpus[{gpu.index}].pcie_width_current",
                actual=current,
                expected=maximum if wired is None else {"width": wired, "gpu_maximum": maximum},
                excerpt=_link_excerpt(snap, gpu),
            ),
            gpu=gpu.index,
        )


_UNREAD = object()


def _wired_width(setting: Any, gpu: Gpu) -> int | None:
    """The width ``pcie_expected_width`` gives ``gpu``'s slot when narrower than the GPU's
    maximum; None where it gives none. A value that is no PCIe width (host data is not checked
    as a policy file is) is an error that names it."""
    if setting is None:
        return None
    if isinstance(setting, Mapping):
        by_bus = {bus_key(str(key)): value for key, value in setting.items()}
        setting = by_bus.get(gpu.pci_bus_id)
        if setting is None:
            return None
    if isinstance(setting, bool) or setting not in PCIE_WIDTHS:
        raise ValueError(f"pcie_expected_width: {setting!r} is not a PCIe link width")
    maximum = gpu.pcie_width_max
    return int(setting) if maximum is None or setting < maximum else None


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
