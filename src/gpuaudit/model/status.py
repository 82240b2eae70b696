"""A host's status and its one-line ``status_detail``: how far the audit of a host got, and why.

Hosts that gave no bundle get their status from the connection (``connection_failed_snapshot``,
``timed_out_snapshot``) or from a collector whose output could not be read
(``failed_snapshot``). Hosts that gave one are judged by ``judge_status`` once every section
has been parsed; :mod:`gpuaudit.model.build` lists the statuses from worst to best. A snapshot
read back from a file that held unusable values says so (``with_field_problems``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from gpuaudit.model.decode import FieldProblem
from gpuaudit.model.pci import nvidia_gpus_on_bus, unmatched_bus_ids
from gpuaudit.model.snapshot import Gpu, HostSnapshot, HostStatus, PciDevice, Section
from gpuaudit.parsers.bundle import Bundle
from gpuaudit.parsers.nvidia_xml import NvidiaSmiLog

# The parse_errors key under which a snapshot read back from a file lists its unusable values.
SNAPSHOT_PROBLEMS = "snapshot"
# How many of them the register lists one by one.
_LISTED_PROBLEMS = 20
# Besides the inventory sections, these failing degrade the host (MIG ones only when in use).
_DEGRADING_SECTIONS = ("nvidia_topo",)
_MIG_SECTIONS = ("mig_gi", "mig_ci")
DRIVER_DOWN = "couldn't communicate with the nvidia driver"
# coreutils timeout(1) exits 124 when it had to stop the command it ran.
TIMEOUT_RC = 124
# How connectors word a host refusing the audit: pyinfra's SSH connector raises "Authentication
# error (…) (Authentication failed.)", "SSH error (No authentication methods available)" and
# "SSH host key error (…)"; a private key it cannot load is "Invalid key: …".
_AUTH_FAILURE_WORDS = ("authentication", "host key", "invalid key", "permission denied")


def now_utc() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def unreachable_snapshot(
    host: str,
    detail: str,
    *,
    host_data: dict[str, Any] | None = None,
    collected_at: str | None = None,
) -> HostSnapshot:
    """A host no connection could be made to: it still appears in the report."""
    return _not_collected(host, HostStatus.UNREACHABLE, detail, host_data, collected_at)


def connection_failed_snapshot(
    host: str,
    error: str,
    *,
    host_data: dict[str, Any] | None = None,
    collected_at: str | None = None,
) -> HostSnapshot:
    """A host the audit could not log in to, from the connector's error text: ``AUTH_FAILED``
    when the host answered but refused the credentials (or its host key changed), else
    ``UNREACHABLE``. The two need different people: whoever holds the keys, or the network."""
    if any(word in error.lower() for word in _AUTH_FAILURE_WORDS):
        detail = f"the host refused the audit's credentials: {error}"
        return _not_collected(host, HostStatus.AUTH_FAILED, detail, host_data, collected_at)
    return unreachable_snapshot(host, error, host_data=host_data, collected_at=collected_at)


def timed_out_snapshot(
    host: str,
    timeout_s: int,
    *,
    host_data: dict[str, Any] | None = None,
    collected_at: str | None = None,
) -> HostSnapshot:
    """A host whose collection was stopped at the time limit; nothing it printed is kept."""
    detail = (
        f"the collection did not finish within {timeout_s}s (GPUAUDIT_TIMEOUT) and was "
        "stopped; none of its output arrived"
    )
    return _not_collected(host, HostStatus.TIMED_OUT, detail, host_data, collected_at)


def not_audited_snapshot(
    host: str,
    detail: str,
    *,
    host_data: dict[str, Any] | None = None,
    collected_at: str | None = None,
) -> HostSnapshot:
    """A host of the run that the audit never got to: the run was interrupted, or pyinfra
    ended, before the host was collected (``detail`` says which)."""
    return _not_collected(host, HostStatus.NOT_AUDITED, detail, host_data, collected_at)


def failed_snapshot(
    host: str,
    detail: str,
    *,
    host_data: dict[str, Any] | None = None,
    collected_at: str | None = None,
    sections: dict[str, Section] | None = None,
) -> HostSnapshot:
    """A host that was reached but whose collector output could not be read."""
    return _not_collected(
        host, HostStatus.COLLECTION_FAILED, detail, host_data, collected_at, sections
    )


def _not_collected(
    host: str,
    status: HostStatus,
    detail: str,
    host_data: dict[str, Any] | None,
    collected_at: str | None,
    sections: dict[str, Section] | None = None,
) -> HostSnapshot:
    return HostSnapshot(
        host=host,
        status=status,
        collected_at=collected_at or now_utc(),
        status_detail=one_line(detail),
        host_data=dict(host_data or {}),
        sections=dict(sections or {}),
    )


def with_field_problems(
    snapshot: HostSnapshot, problems: Sequence[FieldProblem], source: str
) -> HostSnapshot:
    """``snapshot`` as read from a document (``source``, e.g. a snapshot file) in which
    ``problems`` were read as absent or left out: every problem is listed in
    ``parse_errors["snapshot"]`` and the status detail starts with them, and an OK host becomes
    DEGRADED, since what the report shows of it is not all that was recorded. A host whose
    status already says it is worse off keeps that status, and its detail still comes first."""
    if not problems:
        return snapshot
    listed = "; ".join(str(p) for p in problems[:_LISTED_PROBLEMS])
    if len(problems) > _LISTED_PROBLEMS:
        listed += f"; and {len(problems) - _LISTED_PROBLEMS} more"
    count = f"{len(problems)} unusable value{'s' if len(problems) > 1 else ''}"
    said = f"{source} holds {count}, read as absent: {listed}"
    errors = dict(snapshot.parse_errors)
    errors[SNAPSHOT_PROBLEMS] = "; ".join(filter(None, (errors.get(SNAPSHOT_PROBLEMS), said)))
    if snapshot.status in (HostStatus.OK, HostStatus.DEGRADED):
        status, parts = HostStatus.DEGRADED, (said, snapshot.status_detail)
    else:
        status, parts = snapshot.status, (snapshot.status_detail, said)
    return dataclasses.replace(
        snapshot,
        status=status,
        status_detail=one_line("; ".join(p for p in parts if p)),
        parse_errors=errors,
    )


def judge_status(
    bundle: Bundle,
    sections: dict[str, Section],
    errors: dict[str, str],
    gpus: tuple[Gpu, ...],
    log: NvidiaSmiLog | None,
    expect_nvidia: bool,
    has_amd: bool,
    pci_devices: Sequence[PciDevice],
) -> tuple[HostStatus, str]:
    """The status of a host that gave a bundle, judged after every section was parsed."""
    xml = sections.get("nvidia_smi_xml")
    if not bundle.complete and xml is None:
        problems = "; ".join(bundle.problems) or "no closing marker"
        return HostStatus.COLLECTION_FAILED, f"collector output was cut short ({problems})"
    if not expect_nvidia and not has_amd:
        return HostStatus.NO_GPU_TOOLING, _no_tooling_detail(pci_devices)

    reasons: list[str] = []
    if expect_nvidia:
        if xml is None:
            reasons.append("the nvidia-smi XML section is missing")
        else:
            said_down = DRIVER_DOWN in f"{xml.stdout}\n{xml.stderr}".lower()
            no_xml = log is None or not log.gpus
            if said_down or (xml.rc not in (0, None) and no_xml):
                return HostStatus.DRIVER_NOT_RESPONDING, _driver_down_detail(xml)
            if log is None:
                reasons.append(f"nvidia-smi XML unreadable: {errors.get('nvidia_smi_xml', '')}")
            elif not log.gpus:
                reasons.append("nvidia-smi reports no GPUs")
            elif xml.rc not in (0, None):
                said = said_by(xml)
                reasons.append(f"nvidia-smi exited with status {xml.rc}: {said or 'no message'}")
    for name, tool in (("rocm_smi", "rocm-smi"), ("amd_smi", "amd-smi")):
        if has_amd and name in errors and not gpus:
            reasons.append(f"{tool} failed: {errors[name]}")
    reasons += [f"GPU {g.index}: {g.status_detail or 'error'}" for g in gpus if g.status == "error"]
    mig_in_use = any(g.mig_mode_current == "Enabled" for g in gpus)
    degrading = _DEGRADING_SECTIONS + (_MIG_SECTIONS if mig_in_use else ())
    reasons += [f"{name}: {errors[name]}" for name in degrading if name in errors]
    if expect_nvidia and log is not None and log.gpus:
        reasons += _bus_disagreement(sections, pci_devices, log.gpus)
    if not bundle.complete:
        reasons.append(f"collector output was cut short ({'; '.join(bundle.problems)})")
    if reasons:
        return HostStatus.DEGRADED, one_line("; ".join(reasons))
    return HostStatus.OK, _ok_detail(gpus, log)


def _driver_down_detail(xml: Section) -> str:
    said = said_by(xml)
    if xml.rc == TIMEOUT_RC:
        # A wedged driver blocks every NVML call; timeout(1) in the collector ended this one.
        detail = f"nvidia-smi timed out (exit status {xml.rc}): the driver does not answer"
        return one_line(detail + (f"; {said}" if said else ""))
    return one_line(
        f"nvidia-smi is installed but the driver does not answer (exit status {xml.rc}): "
        f"{said or 'no output'}"
    )


def _bus_disagreement(
    sections: dict[str, Section], pci_devices: Sequence[PciDevice], listed: Sequence[Gpu]
) -> list[str]:
    """Where lspci and nvidia-smi disagree on the number of NVIDIA GPUs, with the bus ids only
    one of them shows. More on the bus: GPUs the driver lost or never initialised; fewer: a PCI
    view the audit cannot trust (a container, a hidden bus) or a link that went down."""
    on_bus = nvidia_gpus_on_bus(sections, pci_devices)
    if on_bus is None or len(on_bus) == len(listed):
        return []
    bus_only, listed_only = unmatched_bus_ids(on_bus, listed)
    if len(on_bus) > len(listed):
        text = f"lspci shows {len(on_bus)} NVIDIA GPU(s), nvidia-smi lists {len(listed)}"
        return [text + (f" (not listed: {', '.join(bus_only)})" if bus_only else "")]
    text = f"nvidia-smi lists {len(listed)} GPU(s), lspci shows {len(on_bus)} NVIDIA GPU(s)"
    return [text + (f" (not on the bus listing: {', '.join(listed_only)})" if listed_only else "")]


def _no_tooling_detail(pci_devices: Sequence[PciDevice]) -> str:
    detail = "neither nvidia-smi nor rocm-smi nor amd-smi is installed"
    count = sum(1 for d in pci_devices if d.is_gpu)
    if count:
        detail += f"; lspci lists {count} GPU function(s)"
    return detail


def _ok_detail(gpus: tuple[Gpu, ...], log: NvidiaSmiLog | None) -> str:
    vendors = sorted({g.vendor for g in gpus})
    detail = f"{len(gpus)} GPU(s) reported ({', '.join(vendors) or 'none'})"
    if log and log.driver_version:
        detail += f", NVIDIA driver {log.driver_version}"
    return detail


def said_by(section: Section) -> str:
    """What a failing command said, in one line: its stderr, else its stdout unless that is
    the start of partial XML or JSON (which says nothing useful as a first line)."""
    said = first_line(section.stderr, section.stdout)
    return "" if said.startswith(("<", "{", "[")) else said


def first_line(*texts: str) -> str:
    for text in texts:
        for line in (text or "").splitlines():
            if line.strip():
                return one_line(line)
    return ""


def one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
