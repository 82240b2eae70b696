"""GA2xx: Multi-Instance GPU (MIG) mode and layout."""

from __future__ import annotations

from collections.abc import Iterable

from gpuaudit.model.snapshot import HostSnapshot
from gpuaudit.rules import refs
from gpuaudit.rules.base import Evidence, Finding, Owner, Rule, RuleContext, Severity, rule
from gpuaudit.rules.evidence import gpu_label, gpu_xml_excerpt


@rule(
    "GA201",
    "MIG mode change pending",
    category="mig",
    owner=Owner.INFRA,
    severity=Severity.MEDIUM,
    likelihood=4,
    impact=3,
    remediation=(
        "Drain the GPU and reset it (nvidia-smi -r -i <gpu>) or reboot the node so the MIG mode "
        "change takes effect, then create the GPU instances the layout asks for."
    ),
    references=(refs.MIG_GUIDE, refs.REF_MIG, refs.SEED_MIG),
)
def mig_mode_pending(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[Finding]:
    """A MIG mode change was requested but has not taken effect.

    Checks: ``mig_mode_current`` against ``mig_mode_pending`` for every GPU that supports MIG.
    Why: enabling or disabling MIG needs a GPU reset (refused while processes use the GPU); until
    then the GPU runs in its old mode, so the scheduler's view (nvidia.com/mig-* resources vs
    whole GPUs) does not match what jobs get.
    Evidence: current and pending mode, and the raw ``<mig_mode>`` block.
    Remediation: drain and reset the GPU (or reboot), then apply the MIG layout.
    """
    for gpu in snap.gpus:
        current, pending = gpu.mig_mode_current, gpu.mig_mode_pending
        if current is None or pending is None or current.lower() == pending.lower():
            continue
        yield rule.finding(
            snap,
            f"{gpu_label(gpu)} has MIG mode {current}, with {pending} pending a GPU reset.",
            Evidence(
                fact=f"gpus[{gpu.index}].mig_mode_pending",
                actual={"current": current, "pending": pending},
                expected={"current": pending, "pending": pending},
                excerpt=gpu_xml_excerpt(snap, gpu, "mig_mode"),
            ),
            gpu=gpu.index,
        )


@rule(
    "GA202",
    "MIG enabled but no GPU instances",
    category="mig",
    owner=Owner.INFRA,
    severity=Severity.MEDIUM,
    likelihood=4,
    impact=3,
    remediation=(
        "Create the GPU and compute instances of the site's MIG layout "
        "(nvidia-smi mig -i <gpu> -cgi <profiles> -C, or mig-parted apply), or disable MIG "
        "mode on the GPU if it should serve whole-GPU jobs."
    ),
    references=(refs.MIG_GUIDE, refs.REF_MIG, refs.SEED_MIG),
)
def mig_without_instances(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[Finding]:
    """A GPU in MIG mode with no GPU instance: it can run nothing.

    Checks: GPUs whose current MIG mode is Enabled and for which neither nvidia-smi's
    ``mig_devices`` nor ``nvidia-smi mig -lgi`` lists an instance. Silent when -lgi gave no
    usable answer (cannot tell).
    Why: in MIG mode a GPU is only reachable through its instances; with none, CUDA sees no
    device and the capacity is silently lost (a reboot also drops instances not recreated by
    a boot-time service).
    Evidence: MIG mode and the instance counts.
    Remediation: create the layout's instances, or disable MIG.
    """
    lgi = snap.sections.get("mig_gi")
    # `mig -lgi` exits non-zero when it finds no instance at all; that answer is still an answer.
    lgi_known = lgi is not None and (
        lgi.rc == 0 or "no gpu instances found" in f"{lgi.stdout} {lgi.stderr}".lower()
    )
    for gpu in snap.gpus:
        if (gpu.mig_mode_current or "").lower() != "enabled" or gpu.mig_devices:
            continue
        instances = [i for i in snap.mig_gpu_instances if i.gpu == gpu.index]
        if instances or not lgi_known:
            continue
        yield rule.finding(
            snap,
            f"{gpu_label(gpu)} is in MIG mode but has no GPU instances: no job can use it.",
            Evidence(
                fact=f"gpus[{gpu.index}].mig_devices",
                actual={"mig_mode": gpu.mig_mode_current, "gpu_instances": 0},
                expected="at least one GPU instance",
                excerpt=f"{lgi.stdout.strip()} {lgi.stderr.strip()}".strip() if lgi else "",
            ),
            gpu=gpu.index,
        )
