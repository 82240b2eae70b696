"""GA30x: GPU and NVSwitch error events from the kernel log (XID, SXid), GA313 those of the
boot before this one."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from gpuaudit.model.snapshot import HostSnapshot, XidEvent
from gpuaudit.parsers.bundle import KLOG_RING_START
from gpuaudit.rules import refs
from gpuaudit.rules.audit import KERNEL_LOG, PREVIOUS_BOOT_LOG
from gpuaudit.rules.base import Evidence, Finding, Owner, Rule, RuleContext, Severity, rule
from gpuaudit.rules.xid_catalog import (
    ACTION_SCORE,
    ACTION_SEVERITY,
    ACTION_STEP,
    XidAction,
    XidEntry,
    lookup,
    other_readings,
    recovery_action,
)

# Where an event happened: ("gpu", index) when the bus id maps to a GPU, else ("bus", id).
Where = tuple[str, Any]


@dataclass(frozen=True)
class _Verdict:
    action: XidAction
    severity: Severity
    step: str
    note: str = ""


@rule(
    "GA301",
    "XID errors in the kernel log",
    category="health",
    needs=(KERNEL_LOG,),
    owner=Owner.INFRA,
    severity=Severity.HIGH,
    likelihood=4,
    impact=4,
    remediation="Follow NVIDIA's immediate action for the code (given in each finding).",
    references=(
        refs.XID_CATALOG,
        refs.NVSENTINEL_XID_MAP,
        refs.GUIDE_XID_ACTIONS,
        refs.GUIDE_XID_TABLE,
        refs.GUIDE_XID_READINGS,
        refs.GUIDE_INCIDENT,
        refs.GUIDE_ERROR_RATES,
    ),
)
def xid_errors(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[Finding]:
    """XID events the NVIDIA driver logged, classified by NVIDIA's XID catalogue.

    Checks: every ``NVRM: Xid`` line in the kernel log (dmesg / journalctl -k), grouped into one
    finding per (GPU, code) with the count and the first and last timestamp. A legacy
    "GPU at … has fallen off the bus" line without an XID counts as XID 79.
    Why: an XID is the driver saying a GPU, its memory or the application on it failed; some
    codes (79, 95, 119…) mean the GPU is unusable until a reset or reboot.
    Severity follows the catalogue's immediate action: RESTART_BM critical, RESET_GPU high,
    RESTART_APP medium (owned by ML engineering: the application faulted), IGNORE info (low for
    43, 63 and 92, which other health checks flag), unknown codes medium (contact support).
    Workflow codes depend on context: 48 with 63/64 on the same GPU means drain and reset; 45
    alone means restart fabric manager, after another XID (on this GPU, or named by its line's
    "caused by previous Xid N") it is only that error's clean-up;
    154 follows the recovery action it names; NVLink codes (74, 144–150) are high unless every
    line says Nonfatal (medium). Where the field guide's table of common codes or other tools
    (Azure, AWS EKS, Meta gcm, DCGM) read a code differently the message says so; a site can
    override a code with ``xid_overrides`` in its policy, and the reason is printed.
    Evidence: the raw kernel-log lines (first and last), count, timestamps, PCI bus id.
    Remediation: the catalogue's step for the code, given in each finding.
    """
    overrides = _overrides(ctx.settings_for(snap).get("xid_overrides") or {})
    # Only XIDs: an NVSwitch SXid has GA302, and a GPU whose adapter failed to start
    # ("init_failed") logged no XID code to classify.
    groups = _group(snap, (e for e in snap.xid_events if e.kind in ("xid", "fallen_off_bus")))
    codes_at: dict[Where, set[int]] = {}
    for where, code in groups:
        codes_at.setdefault(where, set()).add(code)
    truncated = _truncation_note(snap)

    for (where, code), events in groups.items():
        entry = lookup(code)
        verdict = _verdict(entry, events, codes_at[where] - {code})
        verdict = _apply_override(verdict, overrides.get(entry.code))
        gpu = where[1] if where[0] == "gpu" else None
        place = f"GPU {gpu}" if gpu is not None else _unlisted_place(snap, where[1])
        legacy = sum(1 for e in events if e.kind == "fallen_off_bus")
        parts = [
            f"{entry.label if code >= 0 else 'XID with an unreadable code'} ×{len(events)} "
            f"on {place}{_when(events)}.",
            f"NVIDIA: {verdict.action.value} — {verdict.step}.",
        ]
        if legacy:
            parts.append(f"{legacy} of them legacy 'fallen off the bus' lines, counted as XID 79.")
        if verdict.note:
            parts.append(verdict.note)
        readings = other_readings(entry)
        if readings:
            parts.append("Other readings differ: " + "; ".join(readings) + ".")
        if truncated:
            parts.append(truncated)
        likelihood, impact = ACTION_SCORE[verdict.action]
        yield rule.finding(
            snap,
            " ".join(parts),
            _events_evidence(code, events, "no XID events", nvidia_action=entry.action.value),
            gpu=gpu,
            severity=verdict.severity,
            remediation=verdict.step[:1].upper() + verdict.step[1:] + ".",
            likelihood=likelihood,
            impact=impact,
            owner=Owner.ML_ENGINEERING if verdict.action is XidAction.RESTART_APP else None,
        )


def _truncation_note(snap: HostSnapshot) -> str:
    """What a kernel log cut short means for the counts ("" where it is whole)."""
    if not snap.kernel_log_truncated:
        return ""
    section = snap.sections.get("kernel_log")
    if section is not None and KLOG_RING_START.search(section.stderr):
        return (
            "The kernel ring buffer had wrapped: its oldest lines, often the XID that began a "
            "storm, are lost (journalctl -k -b may still hold them); counts are lower bounds."
        )
    return "The kernel log was cut to its newest lines: counts are lower bounds."


@rule(
    "GA302",
    "NVSwitch SXid errors in the kernel log",
    category="health",
    needs=(KERNEL_LOG,),
    owner=Owner.INFRA,
    severity=Severity.HIGH,
    likelihood=3,
    impact=5,
    remediation=(
        "Fatal SXid: stop the jobs using the NVLink fabric, reset the GPUs and NVSwitches (or "
        "reboot the node) and check the fabric manager log; non-fatal SXid: watch the link "
        "and plan a reset if it repeats."
    ),
    references=(
        refs.FABRIC_MANAGER,
        refs.XID_CATALOG,
        refs.GUIDE_XID_LOG,
        refs.GUIDE_DRIVER_SERVICES,
    ),
)
def sxid_errors(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[Finding]:
    """NVSwitch errors (SXid) the nvswitch driver logged.

    Checks: ``nvidia-nvswitchN: SXid (PCI:…): code, …`` lines, one finding per (switch, code).
    Why: an NVSwitch error breaks the NVLink fabric between all GPUs of an HGX/DGX board; a
    fatal SXid leaves the fabric unusable until the GPUs and switches are reset.
    Severity: high when the line says "Fatal", medium for "Non-fatal" or unstated.
    Evidence: the raw lines (first and last), count, timestamps, the switch's PCI bus id.
    Remediation: reset GPUs and switches (or reboot) for fatal errors; check fabric manager.
    """
    groups = _group(snap, (e for e in snap.xid_events if e.kind == "sxid"), by_gpu=False)
    for (where, code), events in groups.items():
        fatal = any(_is_fatal(e) for e in events)
        yield rule.finding(
            snap,
            f"SXid {code if code >= 0 else '?'} ×{len(events)} on NVSwitch {where[1]}"
            f"{_when(events)}" + (" (fatal)." if fatal else " (non-fatal)."),
            _events_evidence(code, events, "no SXid events", pci_bus_id=where[1], fatal=fatal),
            severity=Severity.HIGH if fatal else Severity.MEDIUM,
        )


@rule(
    "GA312",
    "A GPU did not come up (adapter initialisation failed)",
    category="health",
    needs=(KERNEL_LOG,),
    owner=Owner.INFRA,
    severity=Severity.HIGH,
    likelihood=4,
    impact=4,
    remediation=(
        "Drain the host; read the lines before the failure for the cause (GSP firmware, power, "
        "PCIe link); reset the GPU or power-cycle the host, and send the GPU to the vendor when "
        "its starts keep failing."
    ),
    references=(refs.GUIDE_XID_INIT_FAILED, refs.GUIDE_XID_LOG, refs.GUIDE_INCIDENT),
)
def init_failures(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[Finding]:
    """GPUs the NVIDIA driver failed to start.

    Checks: ``RmInitAdapter failed`` / ``rm_init_adapter failed`` lines in the kernel log, one
    event per failed start, grouped into one finding per GPU (by bus id; "unknown" where the
    driver named only a minor number).
    Why: a GPU that did not come up is missing from nvidia-smi, or listed and unusable; it
    logs no XID, so an XID check alone reads the host as clean.
    Evidence: the count, first and last timestamp, the bus id and the raw lines.
    Remediation: drain, find the cause in the preceding lines, reset or power-cycle, RMA when
    it repeats.
    """
    failed = (e for e in snap.xid_events if e.kind == "init_failed")
    for (where, _code), events in _group(snap, failed).items():
        if where[0] == "gpu":
            place = f"GPU {where[1]}"
        elif events[0].pci_bus_id:
            place = _unlisted_place(snap, events[0].pci_bus_id)
        else:
            place = "A GPU (the driver named no bus id)"
        evidence = Evidence(
            fact="xid_events",
            actual={
                "kind": "init_failed",
                "count": len(events),
                "first_seen": events[0].timestamp,
                "last_seen": events[-1].timestamp,
                "pci_bus_id": events[0].pci_bus_id,
            },
            expected="no failed GPU start",
            excerpt=_excerpt(events),
        )
        yield rule.finding(
            snap,
            f"{place} did not come up: the driver failed to start it ×{len(events)}"
            f"{_when(events)}.",
            evidence,
            gpu=where[1] if where[0] == "gpu" else None,
        )


# The catalogue's actions that say the application, not the GPU, faulted, or that need nothing:
# spent once the host rebooted, so GA313 leaves them out.
_SPENT_BY_A_REBOOT = (XidAction.RESTART_APP, XidAction.IGNORE)
# One step down the severities: the reboot was the recovery most codes ask for.
_ONE_STEP_DOWN = {
    Severity.CRITICAL: Severity.HIGH,
    Severity.HIGH: Severity.MEDIUM,
    Severity.MEDIUM: Severity.LOW,
    Severity.LOW: Severity.LOW,
    Severity.INFO: Severity.INFO,
}


@rule(
    "GA313",
    "XID errors before the last reboot",
    category="health",
    needs=(PREVIOUS_BOOT_LOG,),
    owner=Owner.INFRA,
    severity=Severity.MEDIUM,
    likelihood=3,
    impact=4,
    remediation=(
        "Check that the GPU the XID names is listed and healthy in this boot (GA101, GA303 – "
        "GA307); keep the host under watch, and drain it and open a case with the vendor when "
        "the code comes back after the reboot."
    ),
    references=(
        refs.XID_CATALOG,
        refs.GUIDE_XID_PREVIOUS_BOOT,
        refs.GUIDE_XID_ACTIONS,
        refs.GUIDE_INCIDENT,
        refs.JOURNALCTL,
        refs.JOURNALD_STORAGE,
    ),
)
def previous_boot_xids(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[Finding]:
    """XID events of the boots before this one, which the running kernel's log no longer holds.

    Checks: the kernel log of the boots before this one as the journal kept them
    (``journalctl -k -b -1``, ``-b -2``, …, up to the collector's ``GPUAUDIT_EARLIER_BOOTS``,
    default 5), grouped into one finding per (GPU, code) over those boots and classified by
    NVIDIA's catalogue, the site's ``xid_overrides`` included, as GA301 does. Codes the
    catalogue reads as the application's fault or as informational (RESTART_APP, IGNORE) are
    left out: the reboot ended them.
    Why: a reboot empties the kernel's log. A GPU that fell off the bus (XID 79) or reported
    an uncorrectable memory error (XID 48, 95) and was rebooted to bring it back reads as
    clean in this boot's log, and the fault that took the node down is lost to an audit that
    reads only that log; rebooted twice, it is lost to one that reads only the boot before.
    Severity: one step below GA301's for the same code (critical becomes high, high medium):
    the reboot was the recovery most of these codes ask for. Where the same code came back
    after a reboot on the same GPU (in this boot's log, or in more than one earlier boot), the
    reboot did not cure it and the finding keeps GA301's severity.
    A host whose journal keeps no earlier boot (``Storage=volatile``, or no /var/log/journal
    with ``Storage=auto``) is not judged, and its outcome says why.
    Evidence: the raw kernel-log lines (first and last), count, timestamps, PCI bus id, and the
    boots (-1 the boot before this one, -2 the one before that).
    Remediation: check that the GPU is back and healthy now, keep the host under watch, drain
    it and ask the vendor when the code recurs.
    """
    overrides = _overrides(ctx.settings_for(snap).get("xid_overrides") or {})
    kinds = ("xid", "fallen_off_bus")
    groups = _group(snap, (e for e in snap.previous_boot_xid_events if e.kind in kinds))
    now = _group(snap, (e for e in snap.xid_events if e.kind in kinds))
    codes_at: dict[Where, set[int]] = {}
    for where, code in groups:
        codes_at.setdefault(where, set()).add(code)
    cut = (
        " The journal's log of the earlier boots was cut to its newest lines: counts are lower "
        "bounds."
        if snap.previous_boot_log_truncated
        else ""
    )
    for (where, code), events in groups.items():
        entry = lookup(code)
        verdict = _apply_override(
            _verdict(entry, events, codes_at[where] - {code}), overrides.get(entry.code)
        )
        if verdict.action in _SPENT_BY_A_REBOOT:
            continue
        gpu = where[1] if where[0] == "gpu" else None
        place = f"GPU {gpu}" if gpu is not None else _unlisted_place(snap, where[1])
        again = now.get((where, code), [])
        boots = sorted({-1 if e.boot is None else e.boot for e in events}, reverse=True)
        label = entry.label if code >= 0 else "XID with an unreadable code"
        parts = [f"{label} ×{len(events)} on {place} {_in_boots(boots)}{_when(events)}."]
        if again:
            parts.append(
                f"It came back after the reboot: ×{len(again)} in this boot's log too (GA301)."
            )
            severity = verdict.severity
        elif len(boots) > 1:
            parts.append(
                f"It came back after a reboot: it is in {len(boots)} boots' logs. This boot's "
                "log does not show it."
            )
            severity = verdict.severity
        else:
            parts.append("This boot's log does not show it: the host was rebooted since.")
            severity = _ONE_STEP_DOWN[verdict.severity]
        parts.append(f"NVIDIA: {verdict.action.value} — {verdict.step}.")
        if verdict.note:
            parts.append(verdict.note)
        likelihood, impact = ACTION_SCORE[verdict.action]
        yield rule.finding(
            snap,
            " ".join(parts) + cut,
            _events_evidence(
                code,
                events,
                "no XID events in the earlier boots",
                nvidia_action=entry.action.value,
                boot="previous",
                boots=boots,
                in_this_boot=len(again),
            ),
            gpu=gpu,
            severity=severity,
            likelihood=likelihood,
            impact=impact,
        )


def _in_boots(boots: list[int]) -> str:
    """Which earlier boots, in words: ``boots`` are offsets (-1 the boot before this one), the
    newest first."""
    if boots == [-1]:
        return "in the boot before this one"
    ago = [str(-boot) for boot in boots]
    if len(ago) == 1:
        return f"in an earlier boot, {ago[0]} reboots ago"
    listed = ", ".join(ago[:-1]) + " and " + ago[-1]
    return f"in {len(ago)} earlier boots, {listed} reboots ago"


# --- grouping and classification --------------------------------------------------------------


def _group(
    snap: HostSnapshot, events: Iterable[XidEvent], by_gpu: bool = True
) -> dict[tuple[Where, int], list[XidEvent]]:
    """Events by (where, code), in log order; an unreadable code is -1."""
    groups: dict[tuple[Where, int], list[XidEvent]] = {}
    for event in events:
        code = 79 if event.kind == "fallen_off_bus" else event.code
        where: Where = ("bus", event.pci_bus_id or "unknown")
        if by_gpu:
            index = event.gpu_index
            if index is None:
                gpu = snap.gpu_by_bus(event.pci_bus_id)
                index = gpu.index if gpu else None
            if index is not None:
                where = ("gpu", index)
        groups.setdefault((where, code if code is not None else -1), []).append(event)
    return groups


def _is_fatal(event: XidEvent) -> bool:
    text = f"{event.message} {event.raw}".lower().replace("non-fatal", "").replace("nonfatal", "")
    return "fatal" in text


def _verdict(entry: XidEntry, events: list[XidEvent], other_codes: set[int]) -> _Verdict:
    workflow = _WORKFLOWS.get(entry.code)
    if workflow is not None:
        return workflow(entry, events, other_codes)
    return _Verdict(entry.action, entry.default_severity, entry.what_to_do)


def _dbe(entry: XidEntry, _events: list[XidEvent], other_codes: set[int]) -> _Verdict:
    # NVIDIA: a DBE with a remap/retirement event means the memory itself is failing.
    if other_codes & {63, 64}:
        return _Verdict(
            XidAction.WORKFLOW,
            Severity.HIGH,
            "drain the GPU and reset it, then check the SRAM error threshold and run field "
            "diagnostics",
            "Seen together with XID 63/64 on this GPU.",
        )
    return _Verdict(XidAction.WORKFLOW, Severity.HIGH, "reset the GPU (nvidia-smi -r)")


def _cleanup(entry: XidEntry, events: list[XidEvent], other_codes: set[int]) -> _Verdict:
    if other_codes:
        others = ", ".join(str(c) for c in sorted(other_codes) if c >= 0) or "(unreadable code)"
        return _Verdict(
            XidAction.WORKFLOW,
            Severity.LOW,
            "none of its own: it is the clean-up after the other XIDs on this GPU",
            f"Follows XID {others} on this GPU (each has its own finding).",
        )
    # Newer drivers name the cause ("Ch 00000001 caused by previous Xid 149"): the clean-up is
    # not alone even where that XID's own line is not in the log read (cut, or rotated out).
    named = sorted({int(code) for e in events for code in _CAUSED_BY.findall(e.message)})
    if named:
        causes = ", ".join(str(c) for c in named)
        return _Verdict(
            XidAction.WORKFLOW,
            Severity.MEDIUM,
            f"none of its own: it is the clean-up after XID {causes}; follow NVIDIA's action "
            "for that XID",
            f"Its lines say it was caused by a previous XID {causes}, whose own line is not in "
            "the kernel log read.",
        )
    return _Verdict(
        XidAction.WORKFLOW, Severity.MEDIUM, "restart nvidia-fabricmanager (no other XID seen)"
    )


_CAUSED_BY = re.compile(r"\bcaused by previous Xid (\d+)", re.IGNORECASE)


def _recovery(entry: XidEntry, events: list[XidEvent], _other: set[int]) -> _Verdict:
    text = f"{events[-1].message} {events[-1].raw}"
    # "changed from 0x0 (None) to 0x1 (GPU Reset Required)": only the new action counts.
    action = recovery_action(text.rpartition(" to ")[2] or text)
    if action is not None:
        return _Verdict(XidAction.WORKFLOW, action.severity, action.step)
    return _Verdict(XidAction.WORKFLOW, entry.default_severity, entry.what_to_do)


def _nvlink(entry: XidEntry, events: list[XidEvent], _other: set[int]) -> _Verdict:
    # NVLink XIDs say in the line whether the link survived ("Nonfatal") or not ("Fatal").
    if not any(_is_fatal(e) for e in events) and all(
        "nonfatal" in e.message.lower().replace("-", "") for e in events
    ):
        return _Verdict(
            entry.action,
            Severity.MEDIUM,
            entry.what_to_do,
            "Every line says Nonfatal: the link recovered; watch for repeats.",
        )
    return _Verdict(entry.action, entry.default_severity, entry.what_to_do)


_WORKFLOWS: dict[int, Callable[[XidEntry, list[XidEvent], set[int]], _Verdict]] = {
    48: _dbe,
    45: _cleanup,
    154: _recovery,
    **{code: _nvlink for code in (74, 144, 145, 146, 147, 148, 149, 150)},
}


def _overrides(raw: Mapping[Any, Any]) -> dict[int, Mapping[str, Any]]:
    """Site overrides keyed by int code (YAML and JSON policies give string keys)."""
    out: dict[int, Mapping[str, Any]] = {}
    for key, value in raw.items():
        if str(key).strip().lstrip("-").isdigit() and isinstance(value, Mapping):
            out[int(key)] = value
    return out


def _apply_override(verdict: _Verdict, override: Mapping[str, Any] | None) -> _Verdict:
    if not override:
        return verdict
    action = verdict.action
    if override.get("action"):
        action = XidAction(str(override["action"]).upper())
    severity = Severity(str(override["severity"]).lower()) if override.get("severity") else None
    if severity is None and action is not verdict.action:
        severity = ACTION_SEVERITY[action]
    step = str(override.get("step") or "") or (
        ACTION_STEP[action] if action is not verdict.action else verdict.step
    )
    reason = override.get("reason") or "no reason given"
    note = " ".join(filter(None, [verdict.note, f"Site policy overrides this code: {reason}."]))
    return replace(
        verdict, action=action, severity=severity or verdict.severity, step=step, note=note
    )


def _when(events: list[XidEvent]) -> str:
    """When the events happened, as the host printed it; empty when the log had no timestamps."""
    first, last = events[0].timestamp, events[-1].timestamp
    if not first and not last:
        return ""
    if len(events) == 1 or first == last:
        return f", at {first or last}"
    return f", {first or 'no timestamp'} … {last or 'no timestamp'}"


def _excerpt(events: list[XidEvent]) -> str:
    lines = [events[0].raw]
    if len(events) > 2:
        lines.append(f"… ({len(events) - 2} more)")
    if len(events) > 1:
        lines.append(events[-1].raw)
    return "\n".join(lines)


def _unlisted_place(snap: HostSnapshot, bus_id: str | None) -> str:
    """Where an XID happened when no GPU nvidia-smi lists has its bus id: typically the GPU
    that fell off the bus, which lspci may still show (its config space reading all ones)."""
    device = next((d for d in snap.pci_devices if d.bus_id == bus_id), None)
    if device is None:
        return f"PCI {bus_id} (no GPU with that bus id)"
    gone = " reads all ones (revision ff)" if device.revision == "ff" else " is still listed"
    return f"PCI {bus_id} (not listed by nvidia-smi; on the PCI bus it{gone})"


def _events_evidence(code: int, events: list[XidEvent], expected: str, **details: Any) -> Evidence:
    """How often one code was logged at one place, when first and last, and the lines."""
    return Evidence(
        fact="xid_events",
        actual={
            "code": code if code >= 0 else None,
            "count": len(events),
            "first_seen": events[0].timestamp,
            "last_seen": events[-1].timestamp,
            "pci_bus_id": events[0].pci_bus_id,
            **details,
        },
        expected=expected,
        excerpt=_excerpt(events),
    )
