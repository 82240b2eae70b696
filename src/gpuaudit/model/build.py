"""Collected sections → :class:`HostSnapshot`: the one place where that happens.

Rules this module keeps:

- every section's raw text goes into ``snapshot.sections`` unchanged, parsed or not;
- a section that cannot be parsed is recorded in ``parse_errors[section]`` and the rest of the
  snapshot is still built — this function does not raise on host output;
- a section whose tool is missing (exit status 127) is not an error: ``tools`` says why it is
  empty (the kernel log is the exception: 127 there means no log could be read, which the rules
  need to know because XID history then went unchecked);
- the host status says how far the audit got, and ``status_detail`` says why in one line.

Status, from worst to best:

``COLLECTION_FAILED``  the bundle is empty, or cut short before the nvidia-smi XML arrived.
``NO_GPU_TOOLING``     neither nvidia-smi nor rocm-smi is installed.
``DRIVER_NOT_RESPONDING``  nvidia-smi is installed but its XML query failed and produced no XML
                       (typically "couldn't communicate with the NVIDIA driver", rc 9).
``DEGRADED``           collected, but a GPU reported an error, the GPU inventory (nvidia-smi XML,
                       rocm-smi) or the topology could not be read, the MIG listings could not
                       be read while a GPU has MIG enabled, or the bundle was cut short after
                       the XML.
``OK``                 everything above is fine. Other problems (a system section that did not
                       parse, a kernel log the audit user may not read) are recorded in
                       ``parse_errors`` but do not degrade the host: they are gaps in the audit,
                       not GPUs failing to answer, and the rules report them as such.

A host with AMD GPUs and a stray nvidia-smi (no NVIDIA driver) is judged by rocm-smi, as long as
lspci shows no NVIDIA GPU that nvidia-smi should have reported.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, TypeVar

from gpuaudit.model.snapshot import Gpu, HostSnapshot, HostStatus, MigInstance, Section
from gpuaudit.parsers.bundle import Bundle
from gpuaudit.parsers.errors import ParseError
from gpuaudit.parsers.kernel_log import parse_kernel_log, resolve_gpus
from gpuaudit.parsers.mig import parse_mig_instances
from gpuaudit.parsers.nvidia_xml import NvidiaSmiLog, parse_nvidia_smi_xml
from gpuaudit.parsers.rocm_smi import parse_rocm_smi_json
from gpuaudit.parsers.system import (
    os_info,
    parse_device_nodes,
    parse_driver_proc,
    parse_lspci,
    parse_meta,
    parse_os_release,
    parse_package_holds,
    parse_packages,
    parse_services,
    parse_sysctl,
    parse_tools,
)
from gpuaudit.parsers.topo import parse_topo_matrix

T = TypeVar("T")

# Besides the inventory sections, these failing degrade the host (MIG ones only when in use).
_DEGRADING_SECTIONS = ("nvidia_topo",)
_MIG_SECTIONS = ("mig_gi", "mig_ci")
DRIVER_DOWN = "couldn't communicate with the nvidia driver"
_MISSING = 127


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
    return HostSnapshot(
        host=host,
        status=HostStatus.UNREACHABLE,
        collected_at=collected_at or now_utc(),
        status_detail=_one_line(detail),
        host_data=dict(host_data or {}),
    )


def failed_snapshot(
    host: str,
    detail: str,
    *,
    host_data: dict[str, Any] | None = None,
    collected_at: str | None = None,
    sections: dict[str, Section] | None = None,
) -> HostSnapshot:
    """A host that was reached but whose collector output could not be read."""
    return HostSnapshot(
        host=host,
        status=HostStatus.COLLECTION_FAILED,
        collected_at=collected_at or now_utc(),
        status_detail=_one_line(detail),
        host_data=dict(host_data or {}),
        sections=dict(sections or {}),
    )


def build_snapshot(
    host: str,
    bundle: Bundle,
    *,
    host_data: dict[str, Any] | None = None,
    collected_at: str | None = None,
) -> HostSnapshot:
    """Parse every section of ``bundle`` into a snapshot of ``host``; never raises on host text."""
    sections = dict(bundle.sections)
    errors: dict[str, str] = {}
    if bundle.problems:
        errors["bundle"] = "; ".join(bundle.problems)
    if not sections:
        detail = "collector output held no sections"
        if bundle.problems:
            detail += f" ({'; '.join(bundle.problems)})"
        return dataclasses.replace(
            failed_snapshot(host, detail, host_data=host_data, collected_at=collected_at),
            parse_errors=errors,
        )

    def run(name: str, parser: Callable[[str], T]) -> T | None:
        return _run(sections, errors, name, parser)

    meta = run("meta", parse_meta) or {}
    tools = run("tools", parse_tools) or {}
    os_release = run("os_release", parse_os_release) or {}
    driver_proc = run("driver_proc", parse_driver_proc)
    holds = run("package_holds", parse_package_holds) or frozenset()
    packages = run("packages", lambda text: parse_packages(text, holds)) or ()
    pci_devices = run("lspci", parse_lspci) or ()

    has_nvidia = tools.get("nvidia-smi", _present(sections.get("nvidia_smi_xml")))
    has_amd = tools.get("rocm-smi", _present(sections.get("rocm_smi")))
    log = run("nvidia_smi_xml", parse_nvidia_smi_xml) if has_nvidia else None
    amd_gpus = (run("rocm_smi", parse_rocm_smi_json) or ()) if has_amd else ()
    gpu_instances = run("mig_gi", parse_mig_instances) or ()
    compute_instances = run("mig_ci", parse_mig_instances) or ()
    topology = run("nvidia_topo", parse_topo_matrix)
    sysctls = run("sysctl", parse_sysctl) or {}
    services = run("services", parse_services) or ()
    device_nodes = run("device_nodes", parse_device_nodes) or ()
    nvidia_gpus = _with_mig_profiles(log.gpus if log else (), gpu_instances)
    gpus = nvidia_gpus + tuple(amd_gpus)

    events = run("kernel_log", parse_kernel_log) or ()
    klog = sections.get("kernel_log")
    if klog is not None and klog.rc == _MISSING:
        errors["kernel_log"] = _first_line(klog.stderr) or "no readable kernel log"

    # A stray nvidia-smi on an AMD host is not a driver failure.
    nvidia_on_bus = any(d.vendor_id == "10de" and d.is_gpu for d in pci_devices)
    expect_nvidia = has_nvidia and not (amd_gpus and not nvidia_gpus and not nvidia_on_bus)

    # Every parser has run (and recorded its errors) before the status is judged.
    status, detail = _status(bundle, sections, errors, gpus, log, expect_nvidia, has_amd)
    return HostSnapshot(
        host=host,
        status=status,
        collected_at=collected_at or now_utc(),
        status_detail=detail,
        host_data=dict(host_data or {}),
        os=os_info(os_release, meta),
        driver_version=(log.driver_version if log else None) or driver_proc,
        cuda_version=log.cuda_version if log else None,
        driver_version_proc=driver_proc,
        gpus=gpus,
        xid_events=resolve_gpus(events, gpus),
        kernel_log_truncated=bool(klog and klog.truncated),
        topology=topology,
        mig_gpu_instances=tuple(gpu_instances),
        mig_compute_instances=tuple(compute_instances),
        packages=tuple(packages),
        sysctls=sysctls,
        services=tuple(services),
        device_nodes=tuple(device_nodes),
        tools=dict(tools),
        parse_errors=errors,
        sections=sections,
        attached_gpus=log.attached_gpus if log else None,
        pci_devices=tuple(pci_devices),
    )


def _run(
    sections: dict[str, Section],
    errors: dict[str, str],
    name: str,
    parser: Callable[[str], T],
) -> T | None:
    section = sections.get(name)
    if section is None or section.rc == _MISSING:
        return None
    try:
        return parser(section.stdout)
    except ParseError as exc:
        errors[name] = _problem(section, str(exc))
    except Exception as exc:  # a parser bug must cost one section, not the host's snapshot
        errors[name] = _problem(section, f"parser failed: {type(exc).__name__}: {exc}")
    return None


def _status(
    bundle: Bundle,
    sections: dict[str, Section],
    errors: dict[str, str],
    gpus: tuple[Gpu, ...],
    log: NvidiaSmiLog | None,
    expect_nvidia: bool,
    has_amd: bool,
) -> tuple[HostStatus, str]:
    xml = sections.get("nvidia_smi_xml")
    if not bundle.complete and xml is None:
        problems = "; ".join(bundle.problems) or "no closing marker"
        return HostStatus.COLLECTION_FAILED, f"collector output was cut short ({problems})"
    if not expect_nvidia and not has_amd:
        return HostStatus.NO_GPU_TOOLING, _no_tooling_detail(sections)

    reasons: list[str] = []
    if expect_nvidia:
        if xml is None:
            reasons.append("the nvidia-smi XML section is missing")
        else:
            message = _first_line(xml.stderr, xml.stdout)
            said_down = DRIVER_DOWN in f"{xml.stdout}\n{xml.stderr}".lower()
            no_xml = log is None or not log.gpus
            if said_down or (xml.rc not in (0, None) and no_xml):
                return (
                    HostStatus.DRIVER_NOT_RESPONDING,
                    f"nvidia-smi is installed but the driver does not answer "
                    f"(exit status {xml.rc}): {message or 'no output'}",
                )
            if log is None:
                reasons.append(f"nvidia-smi XML unreadable: {errors.get('nvidia_smi_xml', '')}")
            elif not log.gpus:
                reasons.append("nvidia-smi reports no GPUs")
            elif xml.rc not in (0, None):
                reasons.append(f"nvidia-smi exited with status {xml.rc}: {message}")
    if has_amd and "rocm_smi" in errors and not gpus:
        reasons.append(f"rocm-smi failed: {errors['rocm_smi']}")
    reasons += [f"GPU {g.index}: {g.status_detail or 'error'}" for g in gpus if g.status == "error"]
    mig_in_use = any(g.mig_mode_current == "Enabled" for g in gpus)
    degrading = _DEGRADING_SECTIONS + (_MIG_SECTIONS if mig_in_use else ())
    reasons += [f"{name}: {errors[name]}" for name in degrading if name in errors]
    if not bundle.complete:
        reasons.append(f"collector output was cut short ({'; '.join(bundle.problems)})")
    if reasons:
        return HostStatus.DEGRADED, _one_line("; ".join(reasons))
    return HostStatus.OK, _ok_detail(gpus, log)


def _no_tooling_detail(sections: dict[str, Section]) -> str:
    detail = "neither nvidia-smi nor rocm-smi is installed"
    lspci = sections.get("lspci")
    count = sum(1 for d in parse_lspci(lspci.stdout) if d.is_gpu) if lspci else 0
    if count:
        detail += f"; lspci lists {count} GPU function(s)"
    return detail


def _ok_detail(gpus: tuple[Gpu, ...], log: NvidiaSmiLog | None) -> str:
    vendors = sorted({g.vendor for g in gpus})
    detail = f"{len(gpus)} GPU(s) reported ({', '.join(vendors) or 'none'})"
    if log and log.driver_version:
        detail += f", NVIDIA driver {log.driver_version}"
    return detail


def _with_mig_profiles(
    gpus: tuple[Gpu, ...], instances: tuple[MigInstance, ...]
) -> tuple[Gpu, ...]:
    """Name each MIG device's profile from the GPU instance it lives in (the XML omits it)."""
    profiles = {(i.gpu, i.instance_id): i.profile_name for i in instances}
    if not profiles:
        return gpus
    named = []
    for gpu in gpus:
        devices = tuple(
            dataclasses.replace(
                d, profile=d.profile or profiles.get((gpu.index, d.gpu_instance_id))
            )
            for d in gpu.mig_devices
        )
        named.append(dataclasses.replace(gpu, mig_devices=devices))
    return tuple(named)


def _present(section: Section | None) -> bool:
    return section is not None and section.rc != _MISSING


def _problem(section: Section, message: str) -> str:
    if section.rc not in (0, None):
        said = _first_line(section.stderr, section.stdout)
        # Partial XML/JSON says nothing useful as a first line; the parser's reason does.
        useful = said and not said.startswith(("<", "{", "["))
        return _one_line(f"exit status {section.rc}: {said if useful else message}")
    return _one_line(message)


def _first_line(*texts: str) -> str:
    for text in texts:
        for line in (text or "").splitlines():
            if line.strip():
                return _one_line(line)
    return ""


def _one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
