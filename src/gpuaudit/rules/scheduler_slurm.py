"""GA911-GA916: what Slurm believes about a host against what the audit found on it.

Slurm's view comes in three parts (docs/field-guide/slurm.md): slurmctld's node record
(``scontrol show node``: the ``Gres=`` slurm.conf configures, the node's state and the reason
it was drained, with who drained it and when), the host's gres.conf, and what slurmd itself
finds (``slurmd -C``) and reports (``slurmd -G``). The hardware side is the GPUs the audit saw
answering: a GPU that errors or fell off the bus is not one a job can use. A GPU in MIG mode
counts as its MIG devices, as Slurm counts them (each MIG slice is one ``gres/gpu``).

Hosts without Slurm's tools are no Slurm node: these rules are not evaluated there.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

from gpuaudit.model.snapshot import Gpu, GresLine, HostSnapshot, HostStatus, SlurmNode, SlurmView
from gpuaudit.rules import refs
from gpuaudit.rules.audit import GPU_LIST
from gpuaudit.rules.base import (
    CheckResult,
    Evidence,
    Need,
    NotEvaluated,
    Outcome,
    Owner,
    Rule,
    RuleContext,
    Severity,
    rule,
)
from gpuaudit.rules.evidence import section_excerpt

CATEGORY = "scheduler"
# A GRES type that names a MIG slice ("a100_3g.20gb", "nvidia_h100_80gb_hbm3_1g.10gb").
_MIG_TYPE = re.compile(r"(\d+g\.\d+gb)$", re.IGNORECASE)
# Node state words under which slurmctld schedules nothing new on the node.
_UNSCHEDULABLE = ("DRAIN", "DOWN", "FAIL", "INVALID_REG", "NOT_RESPONDING", "MAINT", "REBOOT")
# The reason slurmctld gives when slurmd reports fewer GPUs than slurm.conf configures.
_GRES_LOWER = "count reported lower than configured"


def _no_slurm(snap: HostSnapshot) -> str | None:
    if snap.slurm is not None:
        return None
    return "not a Slurm node: neither scontrol nor slurmd is installed on the host"


SLURM = Need("the Slurm view", _no_slurm, Outcome.NOT_APPLICABLE)


def _view(snap: HostSnapshot) -> SlurmView:
    assert snap.slurm is not None  # the SLURM need holds
    return snap.slurm


def _node_or_reason(view: SlurmView) -> SlurmNode | NotEvaluated:
    if view.node is not None:
        return view.node
    why = view.problems.get("node") or "scontrol gave no node record"
    return NotEvaluated(f"slurmctld's record of node {view.node_name or '?'} was not read: {why}")


def mig_profile(gres_type: str | None) -> str | None:
    """The MIG profile a GRES type names ("1g.10gb"), None for a whole-GPU type."""
    match = _MIG_TYPE.search(gres_type or "")
    return match.group(1).lower() if match else None


def _in_mig(gpu: Gpu) -> bool:
    return (gpu.mig_mode_current or "").lower() == "enabled"


def healthy_units(snap: HostSnapshot) -> tuple[int, Counter[str]]:
    """(whole GPUs that answer and are not in MIG mode, MIG devices per profile on those that
    are): what Slurm may hand to jobs on this host."""
    whole = 0
    slices: Counter[str] = Counter()
    for gpu in snap.gpus:
        if gpu.status != "ok":
            continue
        if _in_mig(gpu):
            for device in gpu.mig_devices:
                slices[(device.profile or "unknown").removeprefix("MIG ").lower()] += 1
        else:
            whole += 1
    return whole, slices


def configured_units(node: SlurmNode) -> tuple[int, Counter[str]]:
    """(whole-GPU gres/gpu, MIG gres/gpu per profile) of the node's ``Gres=``; where Gres= names
    no GPU, CfgTRES's gres/gpu total counts as whole GPUs."""
    whole = 0
    slices: Counter[str] = Counter()
    for spec in node.gres:
        if spec.name != "gpu":
            continue
        profile = mig_profile(spec.type)
        count = 1 if spec.count is None else spec.count
        if profile:
            slices[profile] += count
        else:
            whole += count
    if not whole and not slices and (total := node.cfg_tres.get("gres/gpu", "")).isdigit():
        whole = int(total)
    return whole, slices


def _gres_text(node: SlurmNode) -> str:
    return ",".join(s.raw for s in node.gres) or "(null)"


def _node_excerpt(snap: HostSnapshot) -> str:
    return section_excerpt(snap, "slurm_node", 6)


def _compare(snap: HostSnapshot) -> tuple[SlurmNode, int, int] | NotEvaluated:
    """(node, GPUs Slurm configures, GPUs the audit saw healthy), both in gres/gpu units."""
    node = _node_or_reason(_view(snap))
    if isinstance(node, NotEvaluated):
        return node
    if not snap.gpus:
        return NotEvaluated("the audit has no GPU list to compare Slurm's count with")
    whole, slices = configured_units(node)
    if not whole and not slices:
        return NotEvaluated(f"slurmctld configures no gres/gpu on node {node.name}")
    have_whole, have_slices = healthy_units(snap)
    return node, whole + sum(slices.values()), have_whole + sum(have_slices.values())


@rule(
    "GA911",
    "Slurm schedules more GPUs than the host has",
    category=CATEGORY,
    needs=(SLURM, GPU_LIST),
    owner=Owner.INFRA,
    severity=Severity.HIGH,
    likelihood=3,
    impact=4,
    remediation=(
        "Make Slurm's count match the GPUs that answer: drain the node "
        '(`scontrol update nodename=<node> state=drain reason="GPU missing"`) until the '
        "missing GPU is back, or lower `Gres=gpu:…` in slurm.conf and the gres.conf `File=` "
        "lines to the GPUs present, then `scontrol reconfigure`. With `AutoDetect=nvml` slurmd "
        "reports what NVML sees and slurmctld drains the node itself."
    ),
    references=(refs.GUIDE_SLURM_COUNTS, refs.SLURM_GRES, refs.SLURM_GRES_CONF),
)
def slurm_over_count(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[CheckResult]:
    """Slurm configures more gres/gpu on the node than the host has GPUs that answer.

    Checks: the gres/gpu count of the node's ``Gres=`` in slurmctld (``scontrol show node``;
    CfgTRES's gres/gpu where Gres= is untyped) against the GPUs the audit saw answering, a GPU
    in MIG mode counting as its MIG devices.
    Why: slurmd takes a static gres.conf (``File=/dev/nvidia[0-7]``) at its word: a GPU that
    fell off the bus or errors still looks present, and slurmctld goes on placing jobs on it,
    which fail when CUDA finds no device (or the wrong one). It is the silent half of the GRES
    mismatch: the under-count drains the node loudly, this one does not.
    Evidence: the node's Gres=, its state, and the GPUs the audit saw.
    Remediation: drain the node, or lower the configured count to the GPUs present.
    """
    if snap.slurm is None:  # not a Slurm node: the SLURM need says so
        return
    compared = _compare(snap)
    if isinstance(compared, NotEvaluated):
        yield compared
        return
    node, configured, healthy = compared
    # A node slurmctld schedules nothing on is GA913's finding, not a job failing here.
    if configured <= healthy or unschedulable(node):
        return
    lost = len([g for g in snap.gpus if g.status != "ok"])
    missing = (snap.attached_gpus or 0) - len(snap.gpus) if snap.attached_gpus else 0
    detail = ""
    if lost:
        detail += f" {lost} GPU(s) answer with an error."
    if missing > 0:
        detail += (
            f" The driver counts {snap.attached_gpus} attached GPUs but lists {len(snap.gpus)}."
        )
    yield rule.finding(
        snap,
        f"Slurm node {node.name} is configured with {configured} GPU(s) (Gres={_gres_text(node)}, "
        f"state {node.state or 'unknown'}) but only {healthy} answer on the host: jobs given the "
        f"others will fail.{detail}",
        Evidence(
            fact="slurm.node.gres",
            actual={"slurm_gres_gpu": configured, "healthy_gpus": healthy},
            expected=healthy,
            excerpt=_node_excerpt(snap),
        ),
    )


@rule(
    "GA912",
    "Slurm schedules fewer GPUs than the host has",
    category=CATEGORY,
    needs=(SLURM, GPU_LIST),
    owner=Owner.INFRA,
    severity=Severity.MEDIUM,
    likelihood=3,
    impact=3,
    remediation=(
        "Raise `Gres=gpu:…` on the node's NodeName line in slurm.conf (and gres.conf's `File=` "
        "lines, or use `AutoDetect=nvml`) to the GPUs the host has, then `scontrol "
        "reconfigure` and restart slurmd."
    ),
    references=(refs.GUIDE_SLURM_COUNTS, refs.SLURM_GRES),
)
def slurm_under_count(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[CheckResult]:
    """Slurm configures fewer gres/gpu on the node than the host has GPUs that answer.

    Checks: as GA911, the other way round.
    Why: slurmctld hands out only the GPUs slurm.conf names; the others sit idle, unseen by the
    scheduler and by every accounting report built on it (a GPU added, a MIG layout changed to
    more slices, a node line copied from a smaller model).
    Evidence: the node's Gres= and the GPUs the audit saw.
    Remediation: configure the node's real count.
    """
    if snap.slurm is None:  # not a Slurm node: the SLURM need says so
        return
    compared = _compare(snap)
    if isinstance(compared, NotEvaluated):
        yield compared
        return
    node, configured, healthy = compared
    if configured >= healthy:
        return
    yield rule.finding(
        snap,
        f"Slurm node {node.name} is configured with {configured} GPU(s) "
        f"(Gres={_gres_text(node)}) but the host has {healthy} that answer: "
        f"{healthy - configured} are never scheduled.",
        Evidence(
            fact="slurm.node.gres",
            actual={"slurm_gres_gpu": configured, "healthy_gpus": healthy},
            expected=healthy,
            excerpt=_node_excerpt(snap),
        ),
    )


def unschedulable(node: SlurmNode) -> list[str]:
    """The state words under which slurmctld places no new job on the node."""
    words = {w.rstrip("*~#!%$@^-") for w in node.state.upper().split("+")}
    if node.state.split("+")[0].endswith("*"):
        words.add("NOT_RESPONDING")
    return sorted(w for w in words if w in _UNSCHEDULABLE)


def _host_healthy(snap: HostSnapshot) -> bool:
    if snap.status is not HostStatus.OK or not snap.gpus:
        return False
    return all(g.status == "ok" for g in snap.gpus)


@rule(
    "GA913",
    "Slurm node drained or down",
    category=CATEGORY,
    needs=(SLURM,),
    owner=Owner.INFRA,
    severity=Severity.MEDIUM,
    likelihood=3,
    impact=3,
    remediation=(
        "Read the reason and who set it (`scontrol show node <node>`, `sinfo -R`). If the "
        "cause is fixed, resume the node (`scontrol update nodename=<node> state=resume`); "
        "for a GRES count mismatch fix slurm.conf / gres.conf first (GA911, GA912, GA914), or "
        "slurmctld drains the node again at slurmd's next registration."
    ),
    references=(refs.GUIDE_SLURM_DRAIN, refs.SLURM_SCONTROL),
)
def slurm_node_drained(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[CheckResult]:
    """slurmctld schedules nothing new on the node: DRAIN, DOWN, FAIL, INVALID_REG or
    not responding.

    Checks: the node's State= in ``scontrol show node``, with its Reason= and the
    ``[user@time]`` slurmctld records (``slurm`` when slurmctld drained it itself).
    Why: a drained node is capacity nobody uses. Drained by slurmctld for "gres/gpu count
    reported lower than configured", slurmd found fewer GPUs than slurm.conf names (a GPU lost,
    a driver not loaded, AutoDetect failing); drained by a person while the audit finds the
    host healthy, it may have been forgotten after a repair.
    Evidence: state, reason, who and when, and whether the audit found the GPUs healthy.
    Remediation: fix the cause and resume the node.
    """
    if snap.slurm is None:  # not a Slurm node: the SLURM need says so
        return
    node = _node_or_reason(_view(snap))
    if isinstance(node, NotEvaluated):
        yield node
        return
    if not unschedulable(node):
        return
    who = f" by {node.reason_user}" if node.reason_user else ""
    when = f" at {node.reason_time}" if node.reason_time else ""
    reason = node.reason or "no reason given"
    severity = None
    note = ""
    if _GRES_LOWER in reason:
        severity = Severity.HIGH
        note = " slurmd reported fewer GPUs than slurm.conf configures for the node."
    elif _host_healthy(snap):
        note = " The audit found the host and all its GPUs healthy: the drain may be stale."
    yield rule.finding(
        snap,
        f'Slurm node {node.name} is {node.state}: "{reason}" (set{who}{when}).{note}',
        Evidence(
            fact="slurm.node.state",
            actual={
                "state": node.state,
                "reason": node.reason,
                "set_by": node.reason_user,
                "set_at": node.reason_time,
                "host_healthy": _host_healthy(snap),
            },
            expected="a schedulable state (IDLE, MIXED, ALLOCATED)",
            excerpt=_node_excerpt(snap),
        ),
        severity=severity,
    )


@rule(
    "GA914",
    "slurmd reports other GPUs than slurmctld configures",
    category=CATEGORY,
    needs=(SLURM,),
    owner=Owner.INFRA,
    severity=Severity.MEDIUM,
    likelihood=3,
    impact=3,
    remediation=(
        "Run `slurmd -G` on the node as root and compare with the node's `Gres=` in slurm.conf: "
        "make both name the same GPUs (count and type). slurmd's GPUs come from gres.conf, or "
        "from NVML with `AutoDetect=nvml`."
    ),
    references=(refs.GUIDE_SLURM_SLURMD, refs.SLURM_GRES, refs.SLURM_GRES_CONF),
)
def slurmd_vs_slurmctld(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[CheckResult]:
    """What slurmd reports (``slurmd -G``: gres.conf merged with what AutoDetect found)
    against what slurmctld configures for the node (``Gres=``).

    Checks: the gres/gpu count and types of ``slurmd -G`` against the node's Gres=.
    Why: slurmctld drains a node whose slurmd reports fewer GPUs than configured ("gres/gpu
    count reported lower than configured") and ignores those it reports beyond it; a type
    slurm.conf names that slurmd does not report cannot be allocated. Where the two agree, the
    remaining question is whether both match the hardware (GA911, GA912).
    Evidence: both counts and type lists, and slurmd -G's lines.
    Remediation: make slurm.conf and gres.conf agree.
    """
    if snap.slurm is None:  # not a Slurm node: the SLURM need says so
        return
    view = _view(snap)
    node = _node_or_reason(view)
    if isinstance(node, NotEvaluated):
        yield node
        return
    if view.slurmd_gres is None:
        why = view.problems.get("slurmd_gres") or "not collected"
        yield NotEvaluated(f"slurmd -G was not read: {why}")
        return
    reported = [g for g in view.slurmd_gres if g.name == "gpu"]
    if not view.slurmd_gres:
        yield NotEvaluated("slurmd -G printed no GRES (it prints them only when run as root)")
        return
    have = sum(1 if g.count is None else g.count for g in reported)
    whole, slices = configured_units(node)
    want = whole + sum(slices.values())
    if have == want:
        return
    effect = (
        "slurmctld drains the node at registration"
        if have < want
        else "slurmctld ignores the GPUs beyond its count"
    )
    yield rule.finding(
        snap,
        f"slurmd on {node.name} reports {have} GPU(s) but slurmctld configures {want} "
        f"(Gres={_gres_text(node)}): {effect}.",
        Evidence(
            fact="slurm.slurmd_gres",
            actual={"slurmd_reports": have, "types": sorted({g.type or "" for g in reported})},
            expected=want,
            excerpt=section_excerpt(snap, "slurmd_gres", 10),
        ),
        severity=Severity.HIGH if have < want else None,
    )


@rule(
    "GA915",
    "Slurm's MIG GRES do not match the MIG devices",
    category=CATEGORY,
    needs=(SLURM, GPU_LIST),
    owner=Owner.INFRA,
    severity=Severity.MEDIUM,
    likelihood=3,
    impact=3,
    remediation=(
        "Configure the MIG slices in slurm.conf as GPUs of their profile's type "
        "(`Gres=gpu:a100_3g.20gb:2,…`), count per profile as `nvidia-smi mig -lgi` lists them, "
        "with `AutoDetect=nvml` in gres.conf (Slurm finds MIG devices only through NVML)."
    ),
    references=(refs.GUIDE_SLURM_MIG, refs.SLURM_MIG, refs.GUIDE_MIG_SCHEDULING),
)
def slurm_mig(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[CheckResult]:
    """The MIG slices Slurm configures on the node, per profile, against the MIG devices of the
    host's GPUs in MIG mode.

    Checks: Gres= entries whose type ends in a MIG profile (``a100_3g.20gb``) against the MIG
    devices per profile; MIG devices with no MIG GRES (Slurm counts whole GPUs that are not
    there), MIG GRES with no GPU in MIG mode, and MIG without ``AutoDetect=nvml``.
    Why: Slurm treats each MIG slice as a GPU but finds them only through NVML; a layout
    changed on the host (more or fewer slices, another profile) leaves slurm.conf describing
    devices that do not exist, and the node is drained or jobs land on the wrong slice size.
    Evidence: slices per profile on both sides and the AutoDetect setting.
    Remediation: describe the MIG layout in slurm.conf and let NVML detect it.
    """
    if snap.slurm is None:  # not a Slurm node: the SLURM need says so
        return
    node = _node_or_reason(_view(snap))
    if isinstance(node, NotEvaluated):
        yield node
        return
    _, slurm_slices = configured_units(node)
    _, host_slices = healthy_units(snap)
    if not slurm_slices and not host_slices:
        return
    problems = []
    if host_slices and not slurm_slices:
        problems.append("the host's GPUs are in MIG mode but Slurm configures no MIG GRES")
    elif slurm_slices and not host_slices:
        problems.append("Slurm configures MIG slices but no GPU of the host is in MIG mode")
    elif slurm_slices != host_slices:
        problems.append("the slices per profile differ")
    auto = effective_auto_detect(_view(snap), node.name)
    if host_slices and auto != "nvml":
        problems.append(f"gres.conf has AutoDetect={auto or 'unset'}, not nvml")
    if not problems:
        return
    yield rule.finding(
        snap,
        f"Slurm node {node.name}: {'; '.join(problems)} (Slurm {dict(slurm_slices) or 'none'}, "
        f"host {dict(host_slices) or 'none'}).",
        Evidence(
            fact="slurm.node.gres",
            actual={"slurm": dict(slurm_slices), "auto_detect": auto},
            expected=dict(host_slices),
            excerpt=_node_excerpt(snap),
        ),
    )


def _lines_for(view: SlurmView, node_name: str | None) -> list[GresLine]:
    """The gres.conf lines that apply to the node: those without NodeName= and those whose
    NodeName= names it (exactly, or through a bracket range or a list)."""
    if view.gres_conf is None:
        return []
    return [
        line
        for line in view.gres_conf.lines
        if line.node_name is None or _names(line.node_name, node_name or "")
    ]


def _names(pattern: str, node: str) -> bool:
    for part in re.split(r",(?![^\[]*\])", pattern):
        regex = re.sub(
            r"\\\[([^\]]*)\\\]",
            lambda m: "(" + "|".join(_expand(m.group(1).replace("\\", ""))) + ")",
            re.escape(part),
        )
        if re.fullmatch(regex, node):
            return True
    return False


def _expand(group: str) -> list[str]:
    names = []
    for item in group.split(","):
        low, sep, high = item.partition("-")
        if sep and low.isdigit() and high.isdigit():
            names += [str(i).zfill(len(low)) for i in range(int(low), int(high) + 1)]
        else:
            names.append(re.escape(item))
    return names or [""]


def effective_auto_detect(view: SlurmView, node_name: str | None) -> str | None:
    """The AutoDetect setting that applies to the node: the last applying line that sets one
    (a NodeName= line overrides the global one for its nodes)."""
    setting = None
    for line in _lines_for(view, node_name):
        if line.auto_detect is not None and line.node_name is None:
            setting = line.auto_detect
    for line in _lines_for(view, node_name):
        if line.auto_detect is not None and line.node_name is not None:
            setting = line.auto_detect
    return setting


@rule(
    "GA916",
    "gres.conf AutoDetect does not keep Slurm's GPUs true",
    category=CATEGORY,
    needs=(SLURM, GPU_LIST),
    owner=Owner.INFRA,
    severity=Severity.LOW,
    likelihood=2,
    impact=3,
    remediation=(
        "Prefer `AutoDetect=nvml` alone in gres.conf on NVIDIA nodes (slurmd then reports the "
        "GPUs NVML sees, MIG slices included), keeping `Name=gpu File=` lines only as a "
        "deliberate sanity check; where AutoDetect is off, keep the `File=` lines equal to the "
        "GPUs the host has."
    ),
    references=(refs.GUIDE_SLURM_AUTODETECT, refs.SLURM_GRES, refs.SLURM_GRES_CONF),
)
def slurm_autodetect(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[CheckResult]:
    """The gres.conf that applies to the node: AutoDetect=nvml mixed with static ``File=``
    GPU lines, or static lines (AutoDetect off or unset) naming another GPU count than the
    host has.

    Checks: the gres.conf lines for the node (global and its NodeName= lines): the effective
    AutoDetect, the ``Name=gpu`` lines with ``File=`` and how many device files they name.
    Why: with AutoDetect=nvml, static GPU lines turn into a sanity check: a GPU that differs
    from its line is dropped with an error, and the check is not supported for MIG; with
    AutoDetect off, the File= lines are all slurmd knows, so a lost GPU is still reported (and
    scheduled) and a new one never is.
    Evidence: the AutoDetect setting, the static lines and the GPUs the audit saw.
    Remediation: AutoDetect=nvml alone, or static lines kept equal to the hardware.
    """
    if snap.slurm is None:  # not a Slurm node: the SLURM need says so
        return
    view = _view(snap)
    if view.gres_conf is None:
        why = view.problems.get("gres_conf") or "not collected"
        yield NotEvaluated(f"gres.conf was not read: {why}")
        return
    node_name = view.node.name if view.node else view.node_name
    lines = _lines_for(view, node_name)
    auto = effective_auto_detect(view, node_name)
    static = [line for line in lines if (line.name or "").lower() == "gpu" and line.file]
    files = sum(line.file_count or 0 for line in static)
    whole, slices = healthy_units(snap)
    healthy = whole + sum(slices.values())
    excerpt = "\n".join(line.raw for line in lines[:12])
    if auto == "nvml" and static:
        yield rule.finding(
            snap,
            f"gres.conf sets AutoDetect=nvml and also {len(static)} static Name=gpu File= "
            f"line(s): NVML-detected GPUs that differ from a line are dropped"
            + (", and the check is not supported for MIG devices." if slices else "."),
            Evidence(
                fact="slurm.gres_conf",
                actual={"auto_detect": auto, "static_gpu_lines": len(static)},
                expected="AutoDetect=nvml without static GPU lines",
                excerpt=excerpt,
            ),
        )
    elif auto in (None, "off") and static and files != healthy:
        yield rule.finding(
            snap,
            f"gres.conf names {files} GPU device file(s) with AutoDetect "
            f"{'off' if auto else 'unset'}, but the host has {healthy} GPU(s) that answer: "
            "slurmd reports the file count, not the hardware.",
            Evidence(
                fact="slurm.gres_conf",
                actual={"auto_detect": auto, "gpu_files": files},
                expected=healthy,
                excerpt=excerpt,
            ),
            severity=Severity.MEDIUM,
        )
