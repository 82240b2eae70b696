"""GA303–GA320: GPU memory health (ECC, row remapping and memory repair, page retirement) and
clock slowdowns."""

from __future__ import annotations

from collections.abc import Iterable

from gpuaudit.model.snapshot import Gpu, HostSnapshot
from gpuaudit.rules import refs
from gpuaudit.rules.audit import GPU_LIST
from gpuaudit.rules.base import (
    CheckResult,
    Evidence,
    Finding,
    NotEvaluated,
    Owner,
    Rule,
    RuleContext,
    Severity,
    rule,
)
from gpuaudit.rules.evidence import gpu_label, gpu_xml_excerpt

_MEMORY_REFS = (refs.MEMORY_ERRORS, refs.DCGM_HEALTH)
_REMAP_REFS = (*_MEMORY_REFS, refs.GUIDE_ROW_REMAPPING, refs.GUIDE_ERROR_RATES)


@rule(
    "GA303",
    "Uncorrectable ECC errors",
    category="health",
    needs=(GPU_LIST,),
    per_gpu=True,
    owner=Owner.INFRA,
    severity=Severity.HIGH,
    likelihood=4,
    impact=4,
    remediation=(
        "Drain the GPU and reset it; if the count grows after the reset, run field diagnostics "
        "(dcgmi diag -r 3) and open an RMA with the vendor."
    ),
    references=(
        *_MEMORY_REFS,
        refs.GUIDE_ECC,
        refs.GUIDE_MEMORY_THRESHOLDS,
        refs.GUIDE_XID_TABLE,
        refs.GUIDE_ERROR_RATES,
    ),
)
def uncorrectable_ecc(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[Finding]:
    """Uncorrectable ECC errors counted by the GPU.

    Checks: ``ecc_errors`` of each GPU: volatile (since the last driver load) and aggregate
    (lifetime) uncorrected counts.
    Why: an uncorrectable error kills the process that touched the memory and, uncontained,
    every process on the GPU; Meta gcm treats any as critical. Volatile > 0 means it happened
    since the driver loaded (high); aggregate only means it happened before (medium: watch for
    growth). SRAM uncorrectable errors are called out: Azure fails a GPU on any.
    Evidence: the counters and the raw ``<ecc_errors>`` block.
    Remediation: drain and reset; diagnostics and RMA if the count grows.
    """
    for gpu in snap.gpus:
        volatile = gpu.ecc_volatile.uncorrected or 0
        aggregate = gpu.ecc_aggregate.uncorrected or 0
        if volatile <= 0 and aggregate <= 0:
            continue
        # The lifetime count includes the errors since the driver loaded: the larger of the two
        # (the aggregate lags on some drivers), not their sum.
        sram = max(gpu.ecc_volatile.sram_uncorrected or 0, gpu.ecc_aggregate.sram_uncorrected or 0)
        when = (
            f"{volatile} since the driver loaded ({aggregate} lifetime)"
            if volatile > 0
            else f"{aggregate} lifetime, none since the driver loaded"
        )
        message = f"{gpu_label(gpu)} has uncorrectable ECC errors: {when}."
        if sram:
            message += " Some are in SRAM, which Azure's health checks fail a GPU on."
        yield rule.finding(
            snap,
            message,
            Evidence(
                fact=f"gpus[{gpu.index}].ecc_volatile.uncorrected"
                if volatile > 0
                else f"gpus[{gpu.index}].ecc_aggregate.uncorrected",
                actual={"volatile": volatile, "aggregate": aggregate, "sram": sram},
                expected=0,
                excerpt=gpu_xml_excerpt(snap, gpu, "ecc_errors"),
            ),
            gpu=gpu.index,
            severity=Severity.HIGH if volatile > 0 else Severity.MEDIUM,
            likelihood=4 if volatile > 0 else 3,
        )


@rule(
    "GA304",
    "Row remapping pending: GPU reset needed",
    category="health",
    needs=(GPU_LIST,),
    per_gpu=True,
    owner=Owner.INFRA,
    severity=Severity.HIGH,
    likelihood=4,
    impact=4,
    remediation=(
        "Drain the GPU and reset it (nvidia-smi -r -i <gpu>) or reboot the node so the pending "
        "row remap takes effect."
    ),
    references=_REMAP_REFS,
)
def remap_pending(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[CheckResult]:
    """A row remap waits for a GPU reset (Ampere and later).

    Checks: ``remapped_rows.pending`` (nvidia-smi ``remapping_pending = Yes``). Not evaluated
    on a GPU in MIG mode whose remapped rows read N/A, as nvidia-smi prints them there.
    Why: the failing memory row stays in use until the GPU is reset; Azure and Meta gcm fail a
    GPU in this state.
    Evidence: the pending flag and the raw ``<remapped_rows>`` block.
    Remediation: drain and reset the GPU (or reboot).
    """
    for gpu in snap.gpus:
        if (hidden := _hidden_by_mig(gpu, gpu.remapped_rows.pending)) is not None:
            yield hidden
        elif gpu.remapped_rows.pending:
            yield rule.finding(
                snap,
                f"{gpu_label(gpu)} has a row remap pending: it takes effect only after a reset.",
                _remap_evidence(snap, gpu, "pending", True, False),
                gpu=gpu.index,
            )


# What a GPU says of the memory it repairs itself, most severe first: (field, what it means,
# severity, what to do).
_REPAIRS = (
    ("unrepairable_memory", "memory it can no longer repair", Severity.CRITICAL,
     "take it out of service, run field diagnostics and open an RMA"),
    ("sram_threshold_exceeded", "its SRAM uncorrectable errors past the driver's threshold",
     Severity.HIGH, "drain it, run field diagnostics (dcgmi diag -r 3) and open an RMA"),
    ("channel_repair_pending", "a memory channel repair pending", Severity.HIGH,
     "drain and reset it (nvidia-smi -r -i <gpu>) so the repair takes effect"),
    ("tpc_repair_pending", "a TPC repair pending", Severity.HIGH,
     "drain and reset it (nvidia-smi -r -i <gpu>) so the repair takes effect"),
)  # fmt: skip


@rule(
    "GA314",
    "GPU memory repair pending or impossible",
    category="health",
    needs=(GPU_LIST,),
    per_gpu=True,
    owner=Owner.INFRA,
    severity=Severity.HIGH,
    likelihood=4,
    impact=5,
    remediation=(
        "A repair pending: drain the GPU and reset it (or reboot the node) so it takes effect. "
        "Unrepairable memory or the SRAM threshold exceeded: take the GPU out of service, run "
        "field diagnostics (dcgmi diag -r 3) and open an RMA."
    ),
    references=(
        refs.NVML_UNREPAIRABLE_MEMORY,
        refs.NVML_DEVICE_QUERIES,
        refs.NVIDIA_SMI,
        refs.GUIDE_MEMORY_REPAIR,
    ),
)
def memory_repair(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[Finding]:
    """What a GPU reports of the memory it repairs itself, and of its SRAM error threshold.

    Checks: nvidia-smi's ``ecc_errors`` ``channel_repair_pending``, ``tpc_repair_pending``
    (NVML ``nvmlDeviceGetRepairStatus``), ``unrepairable_memory`` (NVML
    ``nvmlDeviceGetUnrepairableMemoryFlag_v1``) and ``aggregate/sram_threshold_exceeded``. One
    finding per GPU at its most severe state: unrepairable memory is critical, the others high.
    ``N/A`` (a GPU or driver without them) is no finding.
    Why: a pending repair leaves the faulty memory channel or TPC in use until the GPU is
    reset, as a pending row remap does; memory the GPU can no longer repair, and SRAM errors
    past the threshold, are the GPU's own signal that it needs replacing.
    Evidence: every one of the four states read, and the raw ``<ecc_errors>`` block.
    Remediation: reset for a pending repair; diagnostics and RMA otherwise.
    """
    for gpu in snap.gpus:
        states = {name: getattr(gpu, name) for name, *_ in _REPAIRS}
        found = [entry for entry in _REPAIRS if states[entry[0]]]
        if not found:
            continue
        _, _, severity, step = found[0]
        said = "; ".join(what for _, what, _, _ in found)
        yield rule.finding(
            snap,
            f"{gpu_label(gpu)} reports {said}: {step}.",
            Evidence(
                fact=f"gpus[{gpu.index}].{found[0][0]}",
                actual={name: value for name, value in states.items() if value is not None},
                expected={name: False for name in states},
                excerpt=gpu_xml_excerpt(snap, gpu, "ecc_errors"),
            ),
            gpu=gpu.index,
            severity=severity,
            likelihood=5 if severity is Severity.CRITICAL else 4,
        )


@rule(
    "GA305",
    "Row remapping failed: GPU needs RMA",
    category="health",
    needs=(GPU_LIST,),
    per_gpu=True,
    owner=Owner.INFRA,
    severity=Severity.CRITICAL,
    likelihood=5,
    impact=5,
    remediation=(
        "Take the GPU out of service, run field diagnostics and open an RMA: the GPU can no "
        "longer remap failing memory rows."
    ),
    references=_REMAP_REFS,
)
def remap_failure(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[CheckResult]:
    """Row remapping failed (NVIDIA's RMA condition).

    Checks: ``remapped_rows.failure``. NVIDIA sets it for an uncorrectable remap on a bank that
    already has 8, an uncorrectable error on an already remapped row, or 512 uncorrectable
    remaps in total. Not evaluated on a GPU in MIG mode whose remapped rows read N/A.
    Why: the GPU cannot retire more bad memory; DCGM fails it and NVIDIA's answer is an RMA.
    Evidence: the failure flag and the raw ``<remapped_rows>`` block.
    Remediation: remove the GPU from service and RMA it.
    """
    for gpu in snap.gpus:
        if (hidden := _hidden_by_mig(gpu, gpu.remapped_rows.failure)) is not None:
            yield hidden
        elif gpu.remapped_rows.failure:
            count = gpu.remapped_rows.uncorrectable
            yield rule.finding(
                snap,
                f"{gpu_label(gpu)} reports a row remapping failure"
                + (f" ({count} uncorrectable remaps)." if count is not None else "."),
                _remap_evidence(snap, gpu, "failure", True, False),
                gpu=gpu.index,
            )


@rule(
    "GA306",
    "Uncorrectable row remaps at the RMA limit",
    category="health",
    needs=(GPU_LIST,),
    per_gpu=True,
    owner=Owner.INFRA,
    severity=Severity.CRITICAL,
    likelihood=5,
    impact=5,
    remediation="Take the GPU out of service, run field diagnostics and open an RMA.",
    references=(*_REMAP_REFS, refs.GUIDE_MEMORY_THRESHOLDS, refs.DCGM_LIMITS),
)
def remap_limit(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[CheckResult]:
    """Uncorrectable row remaps reached the limit (default 512).

    Checks: ``remapped_rows.uncorrectable`` ≥ policy ``remapped_rows_uncorrectable_limit``.
    Silent when the failure flag is set: GA305 already reports the same RMA condition. Not
    evaluated on a GPU in MIG mode whose remapped rows read N/A.
    Why: NVIDIA and DCGM treat 512 uncorrectable remaps as an RMA condition; Azure fails a GPU
    above it.
    Evidence: the count, the limit and the raw ``<remapped_rows>`` block.
    Remediation: remove the GPU from service and RMA it.
    """
    limit = int(ctx.settings_for(snap)["remapped_rows_uncorrectable_limit"])
    for gpu in snap.gpus:
        count = gpu.remapped_rows.uncorrectable
        if (hidden := _hidden_by_mig(gpu, count)) is not None:
            yield hidden
        elif count is not None and count >= limit and not gpu.remapped_rows.failure:
            yield rule.finding(
                snap,
                f"{gpu_label(gpu)} has {count} uncorrectable row remaps (limit {limit}).",
                _remap_evidence(snap, gpu, "uncorrectable", count, f"< {limit}"),
                gpu=gpu.index,
            )


def _hidden_by_mig(gpu: Gpu, reading: object) -> NotEvaluated | None:
    """Why a row-remapping reading of ``gpu`` cannot be judged: nvidia-smi prints N/A for the
    remapped rows of a GPU in MIG mode (A100, H100, H200 alike), which hides a pending or
    failed remap rather than ruling it out. None where the reading is there or MIG is off."""
    if reading is not None or (gpu.mig_mode_current or "").strip().lower() != "enabled":
        return None
    return NotEvaluated(
        "its remapped rows read N/A while MIG mode is enabled; the kernel log's XID 63/64 "
        "(GA301) or a reading with MIG mode off tells whether a remap is pending or failed",
        gpu=gpu.index,
    )


def _remap_evidence(
    snap: HostSnapshot, gpu: Gpu, field: str, actual: object, expected: object
) -> Evidence:
    return Evidence(
        fact=f"gpus[{gpu.index}].remapped_rows.{field}",
        actual=actual,
        expected=expected,
        excerpt=gpu_xml_excerpt(snap, gpu, "remapped_rows"),
    )


@rule(
    "GA307",
    "Retired memory pages at the limit or pending",
    category="health",
    needs=(GPU_LIST,),
    per_gpu=True,
    owner=Owner.INFRA,
    severity=Severity.HIGH,
    likelihood=4,
    impact=4,
    remediation=(
        "Pending page: drain the GPU and reset it (or reboot) so the retirement takes effect. "
        "At the limit: run field diagnostics and open an RMA."
    ),
    references=(
        refs.PAGE_RETIREMENT,
        refs.DCGM_LIMITS,
        refs.AZURE_HEALTH,
        refs.GUIDE_PAGE_RETIREMENT,
    ),
)
def retired_pages(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[Finding]:
    """Dynamic page retirement (Volta and earlier): too many retired pages, or one pending.

    Checks: single- plus double-bit retired pages against policy ``retired_pages_limit`` (63,
    DCGM's RMA rule); a pending retirement, which is high from ``retired_pages_pending_limit``
    (62, Azure: the table is full) and medium below it.
    Why: a pending page stays in use until a reset; a full table means further bad memory can
    no longer be retired.
    Evidence: the counts, the pending flag, the limit and the raw ``<retired_pages>`` block.
    Remediation: reset for a pending page; RMA at the limit.
    """
    policy = ctx.settings_for(snap)
    limit = int(policy["retired_pages_limit"])
    pending_limit = int(policy["retired_pages_pending_limit"])
    for gpu in snap.gpus:
        pages = gpu.retired_pages
        total = (pages.single_bit or 0) + (pages.double_bit or 0)
        if total >= limit:
            severity, why = Severity.HIGH, f"{total} retired pages (RMA limit {limit})"
        elif pages.pending and total >= pending_limit:
            severity, why = Severity.HIGH, f"{total} retired pages with one pending (table full)"
        elif pages.pending:
            severity, why = Severity.MEDIUM, "a page retirement pending a reset"
        else:
            continue
        yield rule.finding(
            snap,
            f"{gpu_label(gpu)} has {why}"
            f" (single-bit {pages.single_bit}, double-bit {pages.double_bit}).",
            Evidence(
                fact=f"gpus[{gpu.index}].retired_pages",
                actual={"total": total, "pending": pages.pending},
                expected={"total": f"< {limit}", "pending": False},
                excerpt=gpu_xml_excerpt(snap, gpu, "retired_pages"),
            ),
            gpu=gpu.index,
            severity=severity,
            likelihood=4 if severity is Severity.HIGH else 3,
        )


@rule(
    "GA320",
    "GPU clocks held down by a hardware or thermal slowdown",
    category="health",
    needs=(GPU_LIST,),
    per_gpu=True,
    owner=Owner.INFRA,
    severity=Severity.MEDIUM,
    likelihood=3,
    impact=3,
    remediation=(
        "Check cooling (fans, airflow, inlet temperature) and power delivery (PSU, power brake "
        "signal from the chassis); compare with other GPUs in the chassis."
    ),
    references=(
        refs.NVIDIA_SMI,
        refs.GUIDE_THROTTLING,
        refs.GUIDE_ISOLATION,
    ),
)
def clock_slowdown(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[Finding]:
    """An active clock-event reason that means the hardware is protecting itself.

    Checks: ``clocks_event_reasons`` (``clocks_throttle_reasons`` on older drivers) for the
    policy's ``slowdown_reasons``: hw_slowdown, hw_thermal_slowdown, hw_power_brake_slowdown,
    sw_thermal_slowdown. sw_power_cap and gpu_idle are normal and never flagged.
    Why: the GPU runs at reduced clocks (lower throughput, longer step times) because it is too
    hot or its power delivery asked it to slow down — a datacenter issue, not a workload one.
    The reasons are what was active at collection time, not a history.
    Evidence: the active reasons, temperature and power, and the raw reasons block.
    Remediation: check cooling and power delivery.
    """
    wanted = {str(r) for r in ctx.settings_for(snap)["slowdown_reasons"]}
    for gpu in snap.gpus:
        active = sorted({_reason(r) for r in gpu.clock_event_reasons} & wanted)
        if not active:
            continue
        excerpt = gpu_xml_excerpt(snap, gpu, "clocks_event_reasons") or gpu_xml_excerpt(
            snap, gpu, "clocks_throttle_reasons"
        )
        readings = _thermal_readings(gpu)
        yield rule.finding(
            snap,
            f"{gpu_label(gpu)} is slowed down by {', '.join(active)}"
            + (f" ({readings})." if readings else "."),
            Evidence(
                fact=f"gpus[{gpu.index}].clock_event_reasons",
                actual=active,
                expected="none of " + ", ".join(sorted(wanted)),
                excerpt=excerpt,
            ),
            gpu=gpu.index,
        )


def _thermal_readings(gpu: Gpu) -> str:
    """Temperature and power as far as the GPU reported them: "temperature 81 °C, slowdown at
    87 °C; power 70 W of 130 W", leaving out what it did not report."""
    heat = []
    if gpu.temperature_c is not None:
        heat.append(f"temperature {gpu.temperature_c:g} °C")
    if gpu.temperature_slowdown_c is not None:
        heat.append(f"slowdown at {gpu.temperature_slowdown_c:g} °C")
    power = ""
    if gpu.power_draw_w is not None:
        power = f"power {gpu.power_draw_w:g} W"
        if gpu.power_limit_w is not None:
            power += f" of {gpu.power_limit_w:g} W"
    elif gpu.power_limit_w is not None:
        power = f"power limit {gpu.power_limit_w:g} W"
    return "; ".join(part for part in (", ".join(heat), power) if part)


def _reason(name: str) -> str:
    """Normalise a reason to nvidia-smi's short name, whatever element prefix the parser kept."""
    text = name.strip().lower()
    for prefix in ("clocks_event_reason_", "clocks_throttle_reason_", "clocks_event_reasons_"):
        text = text.removeprefix(prefix)
    return text
