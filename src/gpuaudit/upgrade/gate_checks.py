"""The health gate's comparisons: the host after its upgrade against itself before it.

Each function returns one :class:`GateCheck` whose detail says what was compared, in plain
words; :func:`gpuaudit.upgrade.gates.health_gate` runs them all. GPUs are matched across the
two snapshots by UUID, else PCI bus id, else index (a reboot may renumber nothing, but a GPU
that fell off the bus shifts the indexes of the ones after it).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from gpuaudit.model.snapshot import EccCounts, Gpu, HostSnapshot, HostStatus, Service, XidEvent
from gpuaudit.rules.services import FABRIC_MANAGER, PERSISTENCED
from gpuaudit.rules.software import host_driver_version
from gpuaudit.upgrade.gate_types import SHOWN, GateCheck, names
from gpuaudit.upgrade.health import driver_problem, nvidia_gpus

__all__ = [
    "driver_check",
    "ecc_check",
    "fabric_manager_check",
    "gpus_check",
    "persistence_check",
    "row_remap_check",
    "service_kept",
    "xid_check",
]


def driver_check(after: HostSnapshot, target: str) -> GateCheck:
    """The driver answers after the upgrade, and at the target version: nvidia-smi's version
    and the loaded kernel module's (/proc/driver/nvidia/version) as the audit reads them."""
    smi, module = host_driver_version(after), after.driver_version_proc
    evidence = {"target": target, "nvidia-smi": smi, "kernel module": module}
    unusable = (HostStatus.DRIVER_NOT_RESPONDING, HostStatus.NO_GPU_TOOLING)
    if after.status in unusable or after.tools.get("nvidia-smi") is False:
        loaded = (
            f"the loaded kernel module is {module}"
            if module
            else "no /proc/driver/nvidia/version: the kernel module is not loaded"
        )
        detail = f"{driver_problem(after) or 'the driver does not answer'}; {loaded}"
        return GateCheck("driver_version", "fail", detail, evidence)
    known = {source: v for source, v in (("nvidia-smi", smi), ("kernel module", module)) if v}
    if not known:
        detail = "neither nvidia-smi nor /proc/driver/nvidia/version gave a driver version"
        return GateCheck("driver_version", "inconclusive", detail, evidence)
    wrong = {source: v for source, v in known.items() if v != target}
    if wrong:
        said = ", ".join(f"{source} reports {v}" for source, v in wrong.items())
        return GateCheck("driver_version", "fail", f"{said}, not the target {target}", evidence)
    if "kernel module" not in known:
        detail = (
            f"nvidia-smi reports driver {target}, the target "
            "(/proc/driver/nvidia/version was not read)"
        )
        return GateCheck("driver_version", "pass", detail, evidence)
    detail = (
        "nvidia-smi and the loaded kernel module (/proc/driver/nvidia/version) both report "
        f"{target}, the target"
    )
    return GateCheck("driver_version", "pass", detail, evidence)


def gpus_check(before: HostSnapshot, after: HostSnapshot, expected: int | None) -> GateCheck:
    old, new = nvidia_gpus(before), nvidia_gpus(after)
    if expected is None:
        expected = len(old) or None
    old_ids = {g.uuid for g in old if g.uuid}
    new_ids = {g.uuid for g in new if g.uuid}
    gone = sorted(old_ids - new_ids)
    erroring = [g.index for g in new if g.status == "error"]
    evidence = {
        "expected": expected,
        "listed_before": len(old),
        "listed_after": len(new),
        "missing_uuids": gone,
        "erroring_gpus": erroring,
    }
    problems = []
    if expected is not None and len(new) < expected:
        problems.append(f"{len(new)} of {expected} expected GPUs are listed")
    if gone:
        problems.append(f"GPUs listed before are gone: {names(gone)}")
    if erroring:
        problems.append(f"GPU(s) {', '.join(map(str, erroring))} answer with an error")
    if problems:
        return GateCheck("gpus_present", "fail", "; ".join(problems), evidence)
    if expected is None:
        return GateCheck(
            "gpus_present",
            "inconclusive",
            "no GPU count to compare: none expected or listed before the upgrade",
            evidence,
        )
    if old_ids and len(new_ids) < len(new):
        detail = f"{len(new)} GPUs listed, but not all with a UUID to compare with before"
        return GateCheck("gpus_present", "inconclusive", detail, evidence)
    same = (
        f"; the same {len(old_ids)} UUIDs as before the upgrade"
        if old_ids
        else "; UUIDs not compared (the pre-check snapshot has none)"
    )
    detail = f"{len(new)} GPUs listed, {expected} expected{same}"
    return GateCheck("gpus_present", "pass", detail, evidence)


def _kernel_log_unread(snapshot: HostSnapshot) -> str | None:
    section = snapshot.sections.get("kernel_log")
    if section is not None and section.rc not in (0, None):
        return f"reading the kernel log failed (rc={section.rc})"
    if snapshot.tools.get("dmesg") is False and snapshot.tools.get("journalctl") is False:
        return "neither dmesg nor journalctl is installed"
    if "kernel_log" in snapshot.parse_errors:
        return f"the kernel log could not be parsed: {snapshot.parse_errors['kernel_log']}"
    return None


def _event_key(event: XidEvent) -> tuple[str, int | None, str | None, str | None, str]:
    return (event.kind, event.code, event.pci_bus_id, event.timestamp, event.raw.strip())


_KIND_WORDS = {
    "sxid": "SXid",
    "xid": "XID",
    "fallen_off_bus": "GPU fell off the bus",
    "init_failed": "GPU did not come up",
}


def _event_text(event: XidEvent) -> str:
    what = _KIND_WORDS.get(event.kind, event.kind)
    code = f" {event.code}" if event.code is not None else ""
    where = f" on GPU {event.gpu_index}" if event.gpu_index is not None else ""
    bus = f" ({event.pci_bus_id})" if event.pci_bus_id else ""
    when = f" at {event.timestamp}" if event.timestamp else ""
    return f"{what}{code}{where}{bus}{when}: {event.message}"


def _events(count: int, kind: str = "") -> str:
    return f"{count} {kind}GPU error event" + ("" if count == 1 else "s")


def xid_check(before: HostSnapshot, after: HostSnapshot) -> GateCheck:
    # A reboot clears the kernel log and timestamps restart, so an event is new when the
    # log after the upgrade holds it (same kind, code, GPU, timestamp and line) more often
    # than the log before did.
    unread_after = _kernel_log_unread(after)
    if unread_after:
        return GateCheck("xid", "inconclusive", f"after the upgrade {unread_after}")
    seen = Counter(_event_key(e) for e in before.xid_events)
    new: list[XidEvent] = []
    for event in after.xid_events:
        key = _event_key(event)
        if seen[key] > 0:
            seen[key] -= 1
        else:
            new.append(event)
    evidence = {
        "before": len(before.xid_events),
        "after": len(after.xid_events),
        "new": [e.raw for e in new[:SHOWN]],
    }
    unread_before = _kernel_log_unread(before)
    if new and unread_before:
        detail = (
            f"{_events(len(new))} in the kernel log after the upgrade, but before it "
            f"{unread_before}: new and old cannot be told apart"
        )
        return GateCheck("xid", "inconclusive", detail, evidence)
    if new:
        shown = "; ".join(_event_text(e) for e in new[:SHOWN])
        more = f" and {len(new) - SHOWN} more" if len(new) > SHOWN else ""
        detail = f"{_events(len(new), 'new ')} in the kernel log: {shown}{more}"
        return GateCheck("xid", "fail", detail, evidence)
    detail = (
        f"no XID, SXid or fallen-off-the-bus line in the kernel log after the upgrade that "
        f"was not there before ({len(after.xid_events)} after, {len(before.xid_events)} before)"
    )
    return GateCheck("xid", "pass", detail, evidence)


def _pair(before: HostSnapshot, after: HostSnapshot) -> list[tuple[Gpu, Gpu]]:
    """Each GPU after the upgrade with itself before it: by UUID, else PCI bus id, else index."""
    old = nvidia_gpus(before)
    pairs = []
    for gpu in nvidia_gpus(after):
        match = next((g for g in old if gpu.uuid and g.uuid == gpu.uuid), None)
        match = match or next(
            (g for g in old if gpu.pci_bus_id and g.pci_bus_id == gpu.pci_bus_id), None
        )
        match = match or next((g for g in old if not gpu.uuid and g.index == gpu.index), None)
        if match is not None:
            pairs.append((match, gpu))
    return pairs


def _uncorrected(counts: EccCounts) -> int | None:
    if counts.uncorrected is not None:
        return int(counts.uncorrected)
    parts = [v for v in (counts.sram_uncorrected, counts.dram_uncorrected) if v is not None]
    return sum(parts) if parts else None


def _grew(old: int | None, new: int | None) -> bool:
    return old is not None and new is not None and new > old


def ecc_check(before: HostSnapshot, after: HostSnapshot) -> GateCheck:
    # Aggregate counts persist across reboots (InfoROM); volatile ones restart with the driver,
    # so a volatile count above the one before can only be new errors.
    grew: list[str] = []
    unknown: list[str] = []
    compared = 0
    counts: dict[str, Any] = {}
    for old, new in _pair(before, after):
        agg = (_uncorrected(old.ecc_aggregate), _uncorrected(new.ecc_aggregate))
        vol = (_uncorrected(old.ecc_volatile), _uncorrected(new.ecc_volatile))
        has_counts = any(v is not None for v in (*agg, *vol))
        if new.ecc_mode_current != "Enabled" and not has_counts:
            continue
        counts[f"GPU {new.index}"] = {"aggregate": list(agg), "volatile": list(vol)}
        if _grew(*agg) or _grew(*vol):
            grew.append(
                f"GPU {new.index} (aggregate {agg[0]} → {agg[1]}, volatile {vol[0]} → {vol[1]})"
            )
        elif not (agg[0] is not None and agg[1] is not None) and not (
            vol[0] is not None and vol[1] is not None
        ):
            unknown.append(f"GPU {new.index}")
        else:
            compared += 1
    return _per_gpu_verdict(
        "ecc_uncorrectable",
        counts,
        failed="new uncorrectable ECC errors: " + names(grew) if grew else "",
        unknown=f"uncorrectable ECC counts missing before or after the upgrade: {names(unknown)}"
        if unknown
        else "",
        nothing="ECC is not enabled on any GPU: nothing to compare",
        compared=compared,
        passed=f"uncorrectable ECC counts (aggregate and volatile) of {compared} GPUs compared "
        "with before the upgrade: none grew",
    )


def row_remap_check(before: HostSnapshot, after: HostSnapshot) -> GateCheck:
    new_problems: list[str] = []
    unknown: list[str] = []
    compared = 0
    evidence: dict[str, Any] = {}
    for old, new in _pair(before, after):
        o, n = old.remapped_rows, new.remapped_rows
        po, pn = old.retired_pages, new.retired_pages
        had_data = any(v is not None for v in (o.pending, o.failure, o.uncorrectable, po.pending))
        has_data = any(v is not None for v in (n.pending, n.failure, n.uncorrectable, pn.pending))
        if not had_data and not has_data:
            continue
        label = f"GPU {new.index}"
        evidence[label] = {
            "remap_pending": [o.pending, n.pending],
            "remap_failure": [o.failure, n.failure],
            "remapped_uncorrectable": [o.uncorrectable, n.uncorrectable],
            "retirement_pending": [po.pending, pn.pending],
        }
        found = []
        if n.pending and not o.pending:
            found.append("row remap pending")
        if n.failure and not o.failure:
            found.append("row remapping failed")
        # A remap pending before the upgrade is carried out by the reset: expected growth.
        if _grew(o.uncorrectable, n.uncorrectable) and not o.pending:
            found.append(
                f"rows remapped for uncorrectable errors {o.uncorrectable} → {n.uncorrectable}"
            )
        if pn.pending and not po.pending:
            found.append("page retirement pending")
        if found:
            new_problems.append(f"{label}: {', '.join(found)}")
        elif had_data and not has_data:
            unknown.append(label)
        else:
            compared += 1
    return _per_gpu_verdict(
        "row_remap",
        evidence,
        failed="; ".join(new_problems),
        unknown=f"row remapping state not reported after the upgrade: {names(unknown)}"
        if unknown
        else "",
        nothing="no GPU reports row remapping or page retirement: nothing to compare",
        compared=compared,
        passed=f"row remapping and page retirement of {compared} GPUs compared with before the "
        "upgrade: nothing new pending or failed",
    )


def _per_gpu_verdict(
    name: str,
    evidence: dict[str, Any],
    *,
    failed: str,
    unknown: str,
    nothing: str,
    compared: int,
    passed: str,
) -> GateCheck:
    """A per-GPU comparison's outcome: something new fails it; missing data makes it
    inconclusive; no GPU with the data leaves it not checked; otherwise it passes."""
    if failed:
        return GateCheck(name, "fail", failed, evidence)
    if unknown:
        return GateCheck(name, "inconclusive", unknown, evidence)
    if not compared:
        return GateCheck(name, "not_checked", nothing)
    return GateCheck(name, "pass", passed, evidence)


def persistence_check(before: HostSnapshot, after: HostSnapshot) -> GateCheck:
    service = service_kept(before, after, "persistence", PERSISTENCED)
    was_on = [(old, new) for old, new in _pair(before, after) if old.persistence_mode]
    off = [f"GPU {new.index}" for _, new in was_on if new.persistence_mode is False]
    unknown = [f"GPU {new.index}" for _, new in was_on if new.persistence_mode is None]
    evidence = {
        "gpus_on_before": len(was_on),
        "gpus_off_after": off,
        "service": dict(service.evidence),
    }
    if off or service.outcome == "fail":
        parts = [f"persistence mode is off on {names(off)}"] if off else []
        parts += [service.detail] if service.outcome == "fail" else []
        return GateCheck("persistence", "fail", "; ".join(parts), evidence)
    if unknown or service.outcome == "inconclusive":
        parts = [f"persistence mode not reported on {names(unknown)}"] if unknown else []
        parts += [service.detail] if service.outcome == "inconclusive" else []
        return GateCheck("persistence", "inconclusive", "; ".join(parts), evidence)
    if not was_on and service.outcome == "not_checked":
        detail = "persistence mode was off before the upgrade and the daemon not running"
        return GateCheck("persistence", "not_checked", detail, evidence)
    parts = [f"persistence mode on for the {len(was_on)} GPUs that had it"] if was_on else []
    parts += [service.detail] if service.outcome == "pass" else []
    return GateCheck("persistence", "pass", "; ".join(parts), evidence)


def _service(snapshot: HostSnapshot, name: str) -> Service | None:
    return next((s for s in snapshot.services if s.name == name), None)


def _services_unread(snapshot: HostSnapshot) -> bool:
    section = snapshot.sections.get("services")
    return (section is not None and section.rc not in (0, None)) or not snapshot.services


def service_kept(before: HostSnapshot, after: HostSnapshot, check: str, name: str) -> GateCheck:
    """A service that ran before the upgrade must run after it."""
    old, new = _service(before, name), _service(after, name)
    evidence = {
        "before": f"{old.active}/{old.enabled}" if old else None,
        "after": f"{new.active}/{new.enabled}" if new else None,
    }
    if old is None or not old.running:
        return GateCheck(
            check, "not_checked", f"{name} was not running before: not required", evidence
        )
    if new is None and _services_unread(after):
        detail = f"{name} ran before the upgrade; the service states after it were not read"
        return GateCheck(check, "inconclusive", detail, evidence)
    if new is None or not new.running:
        state = f"{new.active} ({new.enabled})" if new else "not listed"
        return GateCheck(
            check, "fail", f"{name} ran before the upgrade and is {state} after it", evidence
        )
    return GateCheck(check, "pass", f"{name} active before and after the upgrade", evidence)


def fabric_manager_check(before: HostSnapshot, after: HostSnapshot) -> GateCheck:
    """Fabric manager running after the upgrade where it ran before it."""
    return service_kept(before, after, "fabric_manager", FABRIC_MANAGER)
