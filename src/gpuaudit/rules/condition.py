"""GA311, GA321, GA330: what a GPU reported about its state when it was audited.

These are readings at one moment, not histories: the findings say so, and the alerts of
docs/field-guide/monitoring.md (which ask for minutes of the condition) remain the monitoring
system's job.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpuaudit.model.snapshot import Gpu, HostSnapshot
from gpuaudit.rules import refs
from gpuaudit.rules.audit import GPU_LIST
from gpuaudit.rules.base import Evidence, Finding, Owner, Rule, RuleContext, Severity, rule
from gpuaudit.rules.evidence import gpu_label, gpu_xml_excerpt
from gpuaudit.rules.xid_catalog import RecoveryAction, recovery_action

_RESET = RecoveryAction("reset required", Severity.HIGH, "reset the GPU (nvidia-smi -r)")
_DRAIN_RESET = RecoveryAction(
    "drain and reset recommended", Severity.HIGH, "drain peer-to-peer traffic and reset the GPU"
)


def _requests(gpu: Gpu) -> list[RecoveryAction]:
    """What the driver asks for this GPU: its recovery action and its reset-status flags."""
    action = recovery_action(gpu.recovery_action)
    asked = [
        RecoveryAction(f"recovery action {gpu.recovery_action!r}", action.severity, action.step)
        if action
        else None,
        _RESET if gpu.reset_required else None,
        _DRAIN_RESET if gpu.drain_and_reset_recommended else None,
    ]
    return [a for a in asked if a is not None]


@rule(
    "GA311",
    "Driver asks for a GPU reset, drain or node reboot",
    category="health",
    needs=(GPU_LIST,),
    per_gpu=True,
    owner=Owner.INFRA,
    severity=Severity.HIGH,
    likelihood=4,
    impact=4,
    remediation=(
        "Do what the driver asks: drain the GPU's jobs, then reset it (nvidia-smi -r -i <gpu>) "
        "or reboot the node; look in the kernel log for the XID that caused it (often 154)."
    ),
    references=(refs.MEMORY_ERRORS, refs.XID_CATALOG, refs.NVIDIA_SMI, refs.GUIDE_ROW_REMAPPING),
)
def recovery_requested(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[Finding]:
    """The driver itself says a GPU needs a reset, a drain or a node reboot.

    Checks: nvidia-smi's ``gpu_recovery_action`` (NVML: GPU_RESET, NODE_REBOOT, DRAIN_P2P,
    DRAIN_AND_RESET; None is fine) and ``gpu_reset_status`` (reset_required,
    drain_and_reset_recommended). One finding per GPU at the most severe request: a node reboot
    is critical, the others high.
    Why: the driver has seen an error it cannot recover from while the GPU stays in service;
    jobs on it fail or run on a degraded GPU until the action is taken.
    Evidence: the recovery action and the reset flags, and the raw block.
    Remediation: drain and take the action; find the XID behind it.
    """
    for gpu in snap.gpus:
        asked = _requests(gpu)
        if not asked:
            continue
        worst = max(asked, key=lambda a: a.severity.rank)
        yield rule.finding(
            snap,
            f"The driver asks to {worst.step} for {gpu_label(gpu)} (nvidia-smi: "
            f"{'; '.join(a.words for a in asked)}).",
            Evidence(
                fact=f"gpus[{gpu.index}].recovery_action",
                actual={
                    "recovery_action": gpu.recovery_action,
                    "reset_required": gpu.reset_required,
                    "drain_and_reset_recommended": gpu.drain_and_reset_recommended,
                },
                expected={"recovery_action": "None", "reset_required": False},
                excerpt=gpu_xml_excerpt(snap, gpu, "gpu_reset_status")
                or gpu_xml_excerpt(snap, gpu, "gpu_recovery_action"),
            ),
            gpu=gpu.index,
            severity=worst.severity,
            remediation=worst.step[:1].upper() + worst.step[1:] + ".",
            likelihood=5 if worst.severity is Severity.CRITICAL else None,
        )


@rule(
    "GA321",
    "GPU temperature above the alert threshold",
    category="health",
    needs=(GPU_LIST,),
    per_gpu=True,
    owner=Owner.INFRA,
    severity=Severity.MEDIUM,
    likelihood=3,
    impact=3,
    remediation=(
        "Check the chassis cooling (fans, airflow, blanking panels, inlet temperature) and "
        "compare with the other GPUs of the host; move load away until it is fixed."
    ),
    references=(refs.GUIDE_TEMPERATURE, refs.GUIDE_THROTTLING, refs.GUIDE_ALERTS, refs.NVIDIA_SMI),
)
def temperature_high(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[Finding]:
    """A GPU was hotter than the alert threshold when it was audited.

    Checks: ``temperature_c`` above ``temperature_alert_c`` (80 °C, the threshold of the GPU
    temperature alert in the field guide's monitoring page); high when it has reached the GPU's
    own slowdown threshold (``temperature_slowdown_c``), where the hardware cuts clocks.
    Why: a hot GPU throttles (lower throughput, latency creeping up) and ages faster; it usually
    means a cooling problem in the rack. One reading is not the alert's five minutes above the
    threshold: the message says so.
    Evidence: the temperature, the alert and slowdown thresholds, and the raw block.
    Remediation: check cooling, compare with neighbours, move load.
    """
    alert = float(ctx.settings_for(snap)["temperature_alert_c"])
    for gpu in snap.gpus:
        temp, slowdown = gpu.temperature_c, gpu.temperature_slowdown_c
        if temp is None or temp <= alert:
            continue
        at_slowdown = slowdown is not None and temp >= slowdown
        limit = f"its slowdown threshold {slowdown:g} °C" if slowdown is not None else "no limit"
        yield rule.finding(
            snap,
            f"{gpu_label(gpu)} was at {temp:g} °C (alert above {alert:g} °C; {limit}"
            + (", reached: the hardware is cutting clocks" if at_slowdown else "")
            + "). One reading at audit time; the monitoring alert fires after 5 minutes above.",
            Evidence(
                fact=f"gpus[{gpu.index}].temperature_c",
                actual=temp,
                expected={"max_c": alert, "slowdown_c": slowdown},
                excerpt=gpu_xml_excerpt(snap, gpu, "temperature"),
            ),
            gpu=gpu.index,
            severity=Severity.HIGH if at_slowdown else None,
            likelihood=4 if at_slowdown else None,
        )


@rule(
    "GA330",
    "GPU memory headroom below 20 %",
    category="health",
    needs=(GPU_LIST,),
    per_gpu=True,
    owner=Owner.ML_ENGINEERING,
    severity=Severity.LOW,
    likelihood=3,
    impact=2,
    remediation=(
        "Leave headroom: lower the serving framework's memory fraction (vLLM "
        "--gpu-memory-utilization 0.85; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
        "against fragmentation), the batch size or the KV-cache budget, or quantize the model "
        "(INT8 / INT4)."
    ),
    references=(
        refs.GUIDE_MEMORY_HEADROOM,
        refs.GUIDE_ALERTS,
        refs.GUIDE_OOM,
        refs.GUIDE_REPEATED_OOMS,
        refs.GUIDE_FRAMEWORK_MEMORY,
    ),
)
def memory_headroom(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[Finding]:
    """A GPU had less free memory than the headroom gpuaudit asks to keep.

    Checks: ``memory_used_mib`` / ``memory_total_mib`` above 100 − ``memory_headroom_pct``
    (80 % used: keep 20 % free); medium from ``memory_pressure_pct`` (95 %, where the memory
    pressure alert of the field guide's monitoring page fires, critical after 5 minutes).
    Why: with no headroom the next longer prompt, bigger batch or fragmented allocation is a
    CUDA out-of-memory error, the most common way inference fails. Servers that preallocate a
    fraction (vLLM's gpu_memory_utilization) hold their memory by design; their fraction is
    then what to tune. One reading at audit time, not a trend.
    Evidence: used and total memory and the share used.
    Remediation: lower the memory fraction, batch or KV budget; quantize.
    """
    policy = ctx.settings_for(snap)
    headroom = float(policy["memory_headroom_pct"])
    pressure = float(policy["memory_pressure_pct"])
    for gpu in snap.gpus:
        used, total = gpu.memory_used_mib, gpu.memory_total_mib
        if used is None or not total:
            continue
        share = 100.0 * used / total
        if share <= 100.0 - headroom:
            continue
        severe = share > pressure
        yield rule.finding(
            snap,
            f"{gpu_label(gpu)} had {used} of {total} MiB in use ({share:.0f} %, "
            f"{100 - share:.0f} % free; keep {headroom:g} % free"
            + (f", alert above {pressure:g} % used" if severe else "")
            + "). One reading at audit time.",
            Evidence(
                fact=f"gpus[{gpu.index}].memory_used_mib",
                actual={"used_mib": used, "total_mib": total, "used_pct": round(share, 1)},
                expected=f"<= {100 - headroom:g} % used",
                excerpt=gpu_xml_excerpt(snap, gpu, "fb_memory_usage"),
            ),
            gpu=gpu.index,
            severity=Severity.MEDIUM if severe else None,
            likelihood=4 if severe else None,
            impact=3 if severe else None,
        )
