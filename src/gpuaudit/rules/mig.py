"""GA2xx: Multi-Instance GPU (MIG) — mode changes, instances, the site's layout, isolation."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from gpuaudit.model.mig_spec import MigEntry, MigSpecError, read_mig_configs
from gpuaudit.model.snapshot import Gpu, HostSnapshot, MigInstance
from gpuaudit.rules import refs
from gpuaudit.rules.audit import GPU_LIST, section_problem
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
from gpuaudit.rules.evidence import gpu_label, gpu_xml_excerpt, section_excerpt

# Why a GPU whose nvidia-smi index is not known is not judged by what names GPUs by that index.
_UNNUMBERED = (
    "nvidia-smi's index of this GPU is not known (the XML report does not list every attached "
    "GPU, and no NVML probe or NVLink listing names it), so `nvidia-smi mig -lgi` rows and "
    "mig-parted device indexes cannot be matched to it"
)


@rule(
    "GA201",
    "MIG mode change pending",
    category="mig",
    needs=(GPU_LIST,),
    per_gpu=True,
    owner=Owner.INFRA,
    severity=Severity.MEDIUM,
    likelihood=4,
    impact=3,
    remediation=(
        "Apply the host's MIG layout with gpuaudit.operations.mig.apply (deploys/remediate.py "
        "runs it where the policy names mig_config_name): it checks that no process uses the "
        "GPU and resets only the GPUs whose mode change needs a reset. By hand: drain the GPU "
        "and reset it (nvidia-smi -r -i <gpu>) or reboot, then create the GPU instances."
    ),
    operation="gpuaudit.operations.mig.apply",
    references=(refs.MIG_GUIDE, refs.GUIDE_MIG_MODE),
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
    needs=(GPU_LIST,),
    per_gpu=True,
    owner=Owner.INFRA,
    severity=Severity.MEDIUM,
    likelihood=4,
    impact=3,
    remediation=(
        "Create the GPU and compute instances of the site's MIG layout "
        "(nvidia-smi mig -i <gpu> -cgi <profiles> -C, or mig-parted apply), or disable MIG "
        "mode on the GPU if it should serve whole-GPU jobs."
    ),
    references=(refs.MIG_GUIDE, refs.GUIDE_MIG_INSTANCES),
)
def mig_without_instances(
    rule: Rule, snap: HostSnapshot, ctx: RuleContext
) -> Iterable[CheckResult]:
    """A GPU in MIG mode with no GPU instance: it can run nothing.

    Checks: GPUs whose current MIG mode is Enabled and for which neither nvidia-smi's
    ``mig_devices`` nor ``nvidia-smi mig -lgi`` lists an instance. Not evaluated on such a GPU
    when -lgi gave no usable answer (cannot tell).
    Why: in MIG mode a GPU is only reachable through its instances; with none, CUDA sees no
    device and the capacity is silently lost (a reboot also drops instances not recreated by
    a boot-time service).
    Evidence: MIG mode and the instance counts.
    Remediation: create the layout's instances, or disable MIG.
    """
    lgi = snap.sections.get("mig_gi")
    lgi_known = _lgi_answered(snap)
    for gpu in snap.gpus:
        if (gpu.mig_mode_current or "").lower() != "enabled" or gpu.mig_devices:
            continue
        instances = listed_gpu_instances(snap, gpu)
        if instances:
            continue
        if instances is None:
            yield NotEvaluated(_UNNUMBERED, gpu.index)
            continue
        if not lgi_known:
            problem = section_problem(snap, "mig_gi") or "it listed no instance and no answer"
            yield NotEvaluated(
                f"`nvidia-smi mig -lgi` gave no usable answer ({problem})", gpu.index
            )
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


def _lgi_answered(snap: HostSnapshot) -> bool:
    """Whether `nvidia-smi mig -lgi` gave an answer to count instances from."""
    lgi = snap.sections.get("mig_gi")
    # `mig -lgi` exits non-zero when it finds no instance at all; that answer is still an answer.
    return lgi is not None and (
        lgi.rc == 0 or "no gpu instances found" in f"{lgi.stdout} {lgi.stderr}".lower()
    )


def _mode(value: str | None) -> str:
    return (value or "").strip().lower()


def gpu_instance_counts(snap: HostSnapshot, gpu: Gpu) -> dict[str, int] | None:
    """GPU instances per profile on one GPU; None when the audit could not tell.

    From `nvidia-smi mig -lgi` when it listed any; else from the MIG devices nvidia-smi -q
    reports (one per compute instance, so counted by GPU instance id); else none, if -lgi
    answered that there are none.
    """
    listed = listed_gpu_instances(snap, gpu)
    if listed:
        return dict(Counter(_profile(i.profile_name) for i in listed))
    by_gi = {d.gpu_instance_id: d.profile for d in gpu.mig_devices if d.profile}
    if by_gi:
        return dict(Counter(_profile(p) for p in by_gi.values()))
    return {} if listed is not None and _lgi_answered(snap) and not gpu.mig_devices else None


def listed_gpu_instances(snap: HostSnapshot, gpu: Gpu) -> tuple[MigInstance, ...] | None:
    """The rows of `nvidia-smi mig -lgi` about one GPU, which name it by nvidia-smi's index
    only; None when that index is not known (``HostSnapshot.unnumbered_gpus``)."""
    index = snap.nvidia_smi_index(gpu)
    if index is None:
        return None
    return tuple(i for i in snap.mig_gpu_instances if i.gpu == index)


def _profile(name: str) -> str:
    return name.strip().lower().removeprefix("mig ").strip()


def _pci_id(snap: HostSnapshot, gpu: Gpu) -> str | None:
    """The GPU's PCI id as mig-parted's device-filter spells it: 0x<device><vendor>."""
    device = next((d for d in snap.pci_devices if d.bus_id == gpu.pci_bus_id), None)
    return f"0x{device.device_id}{device.vendor_id}".upper() if device else None


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{n}× {p}" for p, n in sorted(counts.items())) or "none"


@rule(
    "GA203",
    "MIG layout differs from the site's MIG config",
    category="mig",
    needs=(GPU_LIST,),
    per_gpu=True,
    owner=Owner.INFRA,
    severity=Severity.MEDIUM,
    likelihood=4,
    impact=3,
    remediation=(
        "Apply the site's MIG config with gpuaudit.operations.mig.apply (deploys/remediate.py "
        "runs it): it changes only the GPUs that differ, refuses while processes run on them, "
        "and reads the layout back. nvidia-mig-parted apply -f <config> -c <name> does the same "
        "after draining the GPUs, but resets every GPU when one needs a mode change."
    ),
    operation="gpuaudit.operations.mig.apply",
    references=(
        refs.MIG_PARTED,
        refs.MIG_GUIDE,
        refs.GUIDE_MIG_LAYOUT,
        refs.GUIDE_MIG_SCHEDULING,
    ),
)
def mig_layout_drift(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[CheckResult]:
    """A GPU whose MIG mode or instances are not what the site's mig-parted config asks for.

    Checks: the config named by ``mig_config_name`` (per host or group) in ``mig_configs``
    (NVIDIA mig-parted's ``version: v1`` / ``mig-configs:`` format, as is). For each GPU the
    last entry matching it (``devices``: all or indexes; ``device-filter``: PCI ids) gives
    the desired ``mig-enabled`` and ``mig-devices``; the GPU's current MIG mode and its GPU
    instances per profile (from ``mig -lgi``, else nvidia-smi's MIG devices) must match.
    Compute-instance profiles (``1c.3g.40gb``) count as the GPU instance they live in. Silent
    when no config is named; a name the configs lack, or a config mig-parted would reject,
    makes the rule fail loudly (GA000) rather than pass.
    Why: the scheduler advertises what the GPUs are cut into (nvidia.com/mig-1g.10gb); a GPU
    cut differently, or not cut, serves jobs the wrong sizes or none, and the difference is
    invisible until a job lands on it.
    Evidence: current mode and instance counts against the desired entry.
    Remediation: apply the config (nvidia-mig-parted apply), resetting where needed.
    """
    policy = ctx.settings_for(snap)
    name = policy.get("mig_config_name")
    if not name:
        return
    configs = read_mig_configs(policy.get("mig_configs"))
    if str(name) not in configs:
        known = ", ".join(sorted(configs)) or "none"
        raise MigSpecError(f"mig_config_name {name!r} is not in mig_configs (known: {known})")
    entries = configs[str(name)]
    for gpu in snap.gpus:
        if gpu.vendor != "nvidia":
            continue
        index, pci_id = snap.nvidia_smi_index(gpu), _pci_id(snap, gpu)
        if index is None and any(
            e.devices and e.matches(e.devices[0], pci_id) for e in entries
        ):  # an entry for some GPU indexes may or may not be this GPU's
            yield NotEvaluated(_UNNUMBERED, gpu.index)
            continue
        entry = next((e for e in reversed(entries) if e.matches(gpu.index, pci_id)), None)
        if entry is None:
            continue
        problems = _layout_problems(snap, gpu, entry)
        if not problems:
            continue
        desired = entry.gpu_instances()
        yield rule.finding(
            snap,
            f"{gpu_label(gpu)} does not follow MIG config {name!r}: {'; '.join(problems)}.",
            Evidence(
                fact=f"gpus[{gpu.index}].mig_devices",
                actual={
                    "mig_mode": gpu.mig_mode_current,
                    "mig_mode_pending": gpu.mig_mode_pending,
                    "gpu_instances": gpu_instance_counts(snap, gpu),
                },
                expected={"mig_enabled": entry.mig_enabled, "gpu_instances": desired},
                excerpt=gpu_xml_excerpt(snap, gpu, "mig_mode"),
            ),
            gpu=gpu.index,
        )


def _layout_problems(snap: HostSnapshot, gpu: Gpu, entry: MigEntry) -> list[str]:
    current, pending = _mode(gpu.mig_mode_current), _mode(gpu.mig_mode_pending)
    if not entry.mig_enabled:
        return ["MIG is enabled, the config wants it disabled"] if current == "enabled" else []
    if current not in ("enabled", "disabled"):
        return ["the config wants MIG, but this GPU does not support it"]
    if current != "enabled":
        note = " (enabled, pending a GPU reset: GA201)" if pending == "enabled" else ""
        return [f"MIG is disabled{note}, the config wants it enabled"]
    actual = gpu_instance_counts(snap, gpu)
    desired = entry.gpu_instances()
    if actual is None or actual == desired:
        return []
    return [f"GPU instances {_counts(actual)}, the config wants {_counts(desired)}"]


@rule(
    "GA204",
    "MIG in use without a declared layout",
    category="mig",
    needs=(GPU_LIST,),
    owner=Owner.INFRA,
    severity=Severity.LOW,
    likelihood=3,
    impact=2,
    remediation=(
        "Write the layout down as a mig-parted config (mig_configs in the site policy) and "
        "name it for the host's group (mig_config_name), so it is checked (GA203) and applied "
        "the same way everywhere: gpuaudit.operations.mig.apply, or nvidia-mig-parted apply "
        "at boot."
    ),
    references=(refs.MIG_PARTED, refs.GUIDE_MIG_LAYOUT, refs.GUIDE_MIG_FRAGMENTATION),
)
def mig_undeclared(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[Finding]:
    """GPUs are partitioned with MIG, but the site declares no MIG layout for the host.

    Checks: any GPU with MIG mode enabled while ``mig_config_name`` is unset for the host.
    Why: hand-made partitions differ from host to host, are lost at reboot unless something
    recreates them, and leave the scheduler with a different mix of slice sizes per host
    (scheduler fragmentation: capacity no job size fits). Without a declared layout GA203
    cannot check the partitions.
    Evidence: the GPUs in MIG mode and their instances.
    Remediation: declare the layout in mig-parted format and apply it.
    """
    if ctx.settings_for(snap).get("mig_config_name"):
        return
    in_mig = [g for g in snap.gpus if _mode(g.mig_mode_current) == "enabled"]
    if not in_mig:
        return
    layout = {f"GPU {g.index}": gpu_instance_counts(snap, g) for g in in_mig}
    yield rule.finding(
        snap,
        f"{len(in_mig)} GPU(s) are in MIG mode ("
        + "; ".join(f"{k}: {_counts(v) if v is not None else 'unknown'}" for k, v in layout.items())
        + ") but no MIG config is declared for the host (mig_config_name).",
        Evidence(
            fact="policy.mig_config_name",
            actual=layout,
            expected="a mig-parted config named for the host",
            excerpt=section_excerpt(snap, "mig_gi", 12),
        ),
    )


@rule(
    "GA205",
    "Shared GPUs without MIG isolation",
    category="mig",
    needs=(GPU_LIST,),
    owner=Owner.INFRA,
    severity=Severity.MEDIUM,
    likelihood=3,
    impact=3,
    remediation=(
        "Partition MIG-capable GPUs of shared hosts with a declared MIG layout "
        "(nvidia-mig-parted apply); dedicate GPUs that cannot do MIG to one tenant, or "
        "move those tenants to dedicated nodes."
    ),
    references=(
        refs.GUIDE_NOISY_NEIGHBOURS,
        refs.GUIDE_ISOLATION,
        refs.GUIDE_MIG_ISOLATION,
        refs.GUIDE_FIRST_CHECKS,
        refs.MIG_GUIDE,
    ),
)
def shared_without_isolation(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[Finding]:
    """A host the site declares multi-tenant whose GPUs are shared whole, without MIG.

    Checks: when ``multi_tenant`` is true for the host, every NVIDIA GPU not in MIG mode,
    split into MIG-capable ones (MIG mode Disabled) and ones without MIG.
    Why: tenants sharing a whole GPU share its memory, caches and bandwidth: one tenant's load
    shows up as another's latency spikes and OOMs (a noisy neighbour: latency that differs
    between pods of one service). MIG gives each instance its own memory and compute slice.
    Evidence: the GPUs not isolated, and which of them could be.
    Remediation: MIG on capable GPUs; dedicated GPUs or nodes for the rest.
    """
    if not ctx.settings_for(snap).get("multi_tenant"):
        return
    shared = [
        g for g in snap.gpus if g.vendor == "nvidia" and _mode(g.mig_mode_current) != "enabled"
    ]
    if not shared:
        return
    capable = [g.index for g in shared if _mode(g.mig_mode_current) == "disabled"]
    incapable = [g.index for g in shared if g.index not in capable]
    parts = []
    if capable:
        parts.append(f"GPU {', '.join(map(str, capable))} could run MIG but do not")
    if incapable:
        parts.append(f"GPU {', '.join(map(str, incapable))} do not support MIG")
    yield rule.finding(
        snap,
        "The host is declared multi-tenant, but its GPUs are shared whole: "
        + "; ".join(parts)
        + ".",
        Evidence(
            fact="gpus[].mig_mode_current",
            actual={f"GPU {g.index}": g.mig_mode_current for g in shared},
            expected="Enabled (MIG isolation) or one tenant per GPU",
            excerpt="",
        ),
    )
