"""GA308–GA310: ECC itself — corrected-error volume, ECC switched off, an ECC mode change pending.

Uncorrectable errors, row remapping and page retirement are in health.py (GA303–GA307).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpuaudit.model.snapshot import Gpu, HostSnapshot
from gpuaudit.rules import refs
from gpuaudit.rules.audit import GPU_LIST
from gpuaudit.rules.base import Evidence, Finding, Owner, Rule, RuleContext, Severity, rule
from gpuaudit.rules.evidence import gpu_label, gpu_xml_excerpt
from gpuaudit.rules.hardware import is_datacenter_gpu


@dataclass(frozen=True)
class _Counter:
    label: str
    field: str  # EccCounts attribute
    limit_key: str  # policy key
    source: str  # whose threshold it is


_CORRECTED = (
    _Counter("corrected", "corrected", "ecc_corrected_limit", "Meta gcm warns above"),
    _Counter("SRAM correctable", "sram_corrected", "ecc_sram_corrected_limit", "Azure fails above"),
    _Counter("DRAM correctable", "dram_corrected", "ecc_dram_corrected_limit", "Azure fails above"),
)


def _count(gpu: Gpu, field: str) -> int | None:
    """The larger of the volatile and aggregate counts (aggregate lags on some drivers)."""
    values = [getattr(c, field) for c in (gpu.ecc_volatile, gpu.ecc_aggregate)]
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _mode(value: str | None) -> str | None:
    text = (value or "").strip().lower()
    return text if text in ("enabled", "disabled") else None


@rule(
    "GA308",
    "Corrected ECC errors above the health-check thresholds",
    category="health",
    needs=(GPU_LIST,),
    per_gpu=True,
    owner=Owner.INFRA,
    severity=Severity.MEDIUM,
    likelihood=3,
    impact=3,
    remediation=(
        "Watch the counts for growth and the GPU for XID 63/64/92 and uncorrectable errors; "
        "run field diagnostics (dcgmi diag -r 3) at the next maintenance window and open an "
        "RMA if the count keeps growing."
    ),
    references=(
        refs.MEMORY_ERRORS,
        refs.AZURE_HEALTH,
        refs.META_GCM,
        refs.GUIDE_MEMORY_THRESHOLDS,
        refs.GUIDE_ERROR_RATES,
    ),
)
def corrected_ecc_volume(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[Finding]:
    """A GPU has corrected so many memory errors that public health checks flag it.

    Checks: per GPU, the larger of the volatile and aggregate counts of corrected errors against
    ``ecc_corrected_limit`` (50,000,000, Meta gcm's warning), SRAM correctable against
    ``ecc_sram_corrected_limit`` (10,000, Azure) and DRAM correctable against
    ``ecc_dram_corrected_limit`` (20,000,000, Azure). One finding per GPU naming every limit
    crossed.
    Why: corrected errors cost nothing by themselves (NVIDIA sets no limit on them), but a
    memory that corrects this much is wearing out: the volume precedes uncorrectable errors,
    row remaps and XID 48/94/95, and Azure takes such a GPU out of service.
    Evidence: the counts, the limits, and the raw ``<ecc_errors>`` block.
    Remediation: watch for growth; diagnostics and RMA if it keeps growing.
    """
    policy = ctx.settings_for(snap)
    for gpu in snap.gpus:
        over = {
            c.label: (value, int(policy[c.limit_key]), c.source)
            for c in _CORRECTED
            if (value := _count(gpu, c.field)) is not None and value > int(policy[c.limit_key])
        }
        if not over:
            continue
        parts = [f"{label} {v:,} ({src} {limit:,})" for label, (v, limit, src) in over.items()]
        yield rule.finding(
            snap,
            f"{gpu_label(gpu)} has corrected many memory errors: {'; '.join(parts)}.",
            Evidence(
                fact=f"gpus[{gpu.index}].ecc_aggregate",
                actual={label: v for label, (v, _, _) in over.items()},
                expected={label: f"<= {limit}" for label, (_, limit, _) in over.items()},
                excerpt=gpu_xml_excerpt(snap, gpu, "ecc_errors"),
            ),
            gpu=gpu.index,
        )


@rule(
    "GA309",
    "ECC disabled on a datacenter GPU",
    category="health",
    needs=(GPU_LIST,),
    per_gpu=True,
    owner=Owner.INFRA,
    severity=Severity.MEDIUM,
    likelihood=3,
    impact=4,
    remediation=(
        "Enable ECC (nvidia-smi -i <gpu> -e 1) and reboot the node so it takes effect; if ECC "
        "is off on purpose (capacity, bandwidth), record that in the policy (disabled_rules)."
    ),
    references=(refs.MEMORY_ERRORS, refs.NVIDIA_SMI, refs.GUIDE_ECC_MODE, refs.GUIDE_ECC),
)
def ecc_disabled(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[Finding]:
    """A datacenter GPU runs with ECC off.

    Checks: GPUs whose name marks a datacenter part (``datacenter_gpu_name_patterns``) with
    current ECC mode Disabled. Silent when Enabled is pending (GA310 reports that), and for
    workstation and consumer cards, which may run without ECC by design.
    Why: without ECC a flipped memory bit silently corrupts weights, gradients or results, and
    the GPU's own memory health machinery (row remapping, page retirement, XID 48/63/94/95)
    is off, so the register cannot see memory failing. Datacenter GPUs ship with ECC on: off
    means someone turned it off.
    Evidence: current and pending ECC mode, and the raw ``<ecc_mode>`` block.
    Remediation: enable ECC and reboot.
    """
    policy = ctx.settings_for(snap)
    for gpu in snap.gpus:
        if _mode(gpu.ecc_mode_current) != "disabled" or _mode(gpu.ecc_mode_pending) == "enabled":
            continue
        if not is_datacenter_gpu(gpu, policy):
            continue
        yield rule.finding(
            snap,
            f"{gpu_label(gpu)} is a datacenter GPU running with ECC disabled: memory errors "
            "are neither corrected nor reported.",
            Evidence(
                fact=f"gpus[{gpu.index}].ecc_mode_current",
                actual={"current": gpu.ecc_mode_current, "pending": gpu.ecc_mode_pending},
                expected="Enabled",
                excerpt=gpu_xml_excerpt(snap, gpu, "ecc_mode"),
            ),
            gpu=gpu.index,
        )


@rule(
    "GA310",
    "ECC mode change pending a reboot",
    category="health",
    needs=(GPU_LIST,),
    per_gpu=True,
    owner=Owner.INFRA,
    severity=Severity.MEDIUM,
    likelihood=4,
    impact=2,
    remediation=(
        "Drain the node and reboot it so the pending ECC mode takes effect: a GPU reset is not "
        "always enough (NVML known issues), so check the mode again after the reset or reboot."
    ),
    references=(refs.MEMORY_ERRORS, refs.NVIDIA_SMI, refs.GUIDE_ECC_MODE),
)
def ecc_mode_pending(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[Finding]:
    """A GPU's ECC mode was changed but the change has not taken effect.

    Checks: ``ecc_mode_current`` against ``ecc_mode_pending`` (Enabled / Disabled).
    Why: until the change takes effect the GPU runs in its old mode, with its old usable memory
    size (ECC reserves part of the memory on GDDR parts); a host in this state changes
    behaviour at its next reboot, unannounced. NVML's known issues note that a pending ECC
    change may need a full reboot, not only a GPU reset.
    Evidence: current and pending mode, and the raw ``<ecc_mode>`` block.
    Remediation: drain and reboot, then confirm the mode.
    """
    for gpu in snap.gpus:
        current, pending = _mode(gpu.ecc_mode_current), _mode(gpu.ecc_mode_pending)
        if current is None or pending is None or current == pending:
            continue
        yield rule.finding(
            snap,
            f"{gpu_label(gpu)} has ECC {gpu.ecc_mode_current} with {gpu.ecc_mode_pending} "
            "pending: it takes effect at the next reboot (a GPU reset may not be enough).",
            Evidence(
                fact=f"gpus[{gpu.index}].ecc_mode_pending",
                actual={"current": gpu.ecc_mode_current, "pending": gpu.ecc_mode_pending},
                expected={"current": gpu.ecc_mode_pending, "pending": gpu.ecc_mode_pending},
                excerpt=gpu_xml_excerpt(snap, gpu, "ecc_mode"),
            ),
            gpu=gpu.index,
        )
