"""Collected sections → :class:`HostSnapshot`: the one place where that happens.

Rules this module keeps:

- every section's raw text goes into ``snapshot.sections`` unchanged, parsed or not;
- a section that cannot be parsed is recorded in ``parse_errors[section]`` and the rest of the
  snapshot is still built — this function does not raise on host output;
- a section whose tool is missing (exit status 127) is not an error: ``tools`` says why it is
  empty (the kernel log is the exception: 127 there means no log could be read, which the rules
  need to know because XID history then went unchecked);
- the host status says how far the audit got, and ``status_detail`` says why in one line.

Status, from worst to best. The first four come from the run and the connection, before any
bundle:

``NOT_AUDITED``        the run was interrupted, or pyinfra ended, before the host was collected
                       (``not_audited_snapshot``).
``UNREACHABLE``        no connection could be made (down, firewalled, unknown name).
``AUTH_FAILED``        the host answered but refused the audit's credentials, or its host key
                       did not match (``connection_failed_snapshot`` tells the two apart).
``TIMED_OUT``          connected, but the collector did not finish within the host's time limit
                       (``timed_out_snapshot``); nothing of its output is kept.
``COLLECTION_FAILED``  the bundle is empty, or cut short before the nvidia-smi XML arrived.
``NO_GPU_TOOLING``     neither nvidia-smi nor rocm-smi nor amd-smi is installed.
``DRIVER_NOT_RESPONDING``  nvidia-smi is installed but its XML query failed and produced no XML
                       (typically "couldn't communicate with the NVIDIA driver", rc 9, or
                       killed by the collector's per-command ``timeout``, rc 124).
``DEGRADED``           collected, but a GPU reported an error, the GPU inventory (nvidia-smi XML,
                       rocm-smi / amd-smi) or the topology could not be read, the MIG listings
                       could not be read while a GPU has MIG enabled, lspci and nvidia-smi
                       disagree on how many NVIDIA GPUs there are, or the bundle was cut short
                       after the XML. A snapshot read back from its file is also DEGRADED
                       when the file holds values of the wrong type, which are read as absent
                       (``status.with_field_problems``).
``OK``                 everything above is fine. Other problems (a system section that did not
                       parse, a kernel log the audit user may not read, bytes that are not
                       UTF-8) are recorded in ``parse_errors`` but do not degrade the host: they
                       are gaps in the audit, not GPUs failing to answer, and the rules report
                       them as such.

A host with AMD GPUs and a stray nvidia-smi (no NVIDIA driver) is judged by rocm-smi or amd-smi,
as long as lspci shows no NVIDIA GPU that nvidia-smi should have reported.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

from gpuaudit.assemble.dcgm_diag import dcgm_diag_view
from gpuaudit.assemble.numbering import number_gpus, with_mig_profiles
from gpuaudit.assemble.slurm import slurm_view
from gpuaudit.assemble.status import judge_status
from gpuaudit.model.snapshot import (
    Gpu,
    GpuNvLink,
    HostSnapshot,
    HostStatus,
    Section,
)

# The snapshots of hosts that gave no bundle are made in status.py; callers import them here.
from gpuaudit.model.status import failed_snapshot as failed_snapshot
from gpuaudit.model.status import first_line, now_utc, one_line, said_by
from gpuaudit.model.status import unreachable_snapshot as unreachable_snapshot
from gpuaudit.parsers.amd_smi import parse_amd_smi_json
from gpuaudit.parsers.bundle import Bundle
from gpuaudit.parsers.errors import ParseError
from gpuaudit.parsers.kernel_log import parse_earlier_boots, parse_kernel_log, resolve_gpus
from gpuaudit.parsers.lookalike import LookAlike, identify, identify_name
from gpuaudit.parsers.mig import parse_mig_instances, parse_mig_placements
from gpuaudit.parsers.monitoring import parse_monitoring
from gpuaudit.parsers.nvidia_text import parse_nvidia_smi_text
from gpuaudit.parsers.nvidia_xml import NvidiaSmiLog, parse_nvidia_smi_xml
from gpuaudit.parsers.nvlink import merge_nvlink, parse_nvlink
from gpuaudit.parsers.nvml import NvmlProbe, fill_gaps, parse_nvml_probe
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
from gpuaudit.parsers.warnings import collecting

T = TypeVar("T")

_MISSING = 127
# What the bundle reader puts in place of each byte sequence that is not UTF-8.
_REPLACED = "\ufffd"


def build_snapshot(
    host: str,
    bundle: Bundle,
    *,
    host_data: dict[str, Any] | None = None,
    collected_at: str | None = None,
) -> HostSnapshot:
    """Parse every section of ``bundle`` into a snapshot of ``host``; never raises on host text.
    What the parsers met and could not place is kept in ``parse_warnings``."""
    with collecting() as warnings:
        snapshot = _build(host, bundle, host_data=host_data, collected_at=collected_at)
    if not warnings:
        return snapshot
    return dataclasses.replace(snapshot, parse_warnings=tuple(warnings))


def _build(
    host: str,
    bundle: Bundle,
    *,
    host_data: dict[str, Any] | None = None,
    collected_at: str | None = None,
) -> HostSnapshot:
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

    # Another vendor's tool standing in for nvidia-smi or rocm-smi lists no NVIDIA or AMD GPU.
    lookalikes = _lookalikes(sections, errors)
    has_nvidia = "nvidia_smi_xml" not in lookalikes and tools.get(
        "nvidia-smi", _present(sections.get("nvidia_smi_xml"))
    )
    has_amd = "rocm_smi" not in lookalikes and tools.get(
        "rocm-smi", _present(sections.get("rocm_smi"))
    )
    has_amd_smi = "amd_smi" not in lookalikes and tools.get(
        "amd-smi", _present(sections.get("amd_smi"))
    )
    log = run("nvidia_smi_xml", parse_nvidia_smi_xml) if has_nvidia else None
    # The XML refused or without GPUs: the text report the collector then asked for.
    text_log = _text_report(sections, errors) if has_nvidia and not (log and log.gpus) else None
    log = text_log or log
    amd_gpus = _amd_cli_gpus(run, has_amd, has_amd_smi)
    has_amd = has_amd or has_amd_smi
    probe = run("nvml", parse_nvml_probe)
    log, amd_gpus = _with_device_probe(log, tuple(amd_gpus), probe)
    has_nvidia, has_amd = has_nvidia or bool(log and log.gpus), has_amd or bool(amd_gpus)
    gpu_instances = run("mig_gi", parse_mig_instances) or ()
    compute_instances = run("mig_ci", parse_mig_instances) or ()
    placements = run("mig_placements", parse_mig_placements) or ()
    topology = run("nvidia_topo", parse_topo_matrix)
    sysctls = run("sysctl", parse_sysctl) or {}
    services = run("services", parse_services) or ()
    device_nodes = run("device_nodes", parse_device_nodes) or ()
    monitoring = run("monitoring", parse_monitoring)
    nvlink = _nvlink(sections, errors)
    nvidia_gpus, unnumbered = number_gpus(
        log.gpus if log else (),
        log.attached_gpus if log else None,
        probe.gpus_of("nvidia") if probe else (),
        nvlink or (),
    )
    nvidia_gpus = with_mig_profiles(nvidia_gpus, gpu_instances, unnumbered)
    gpus = nvidia_gpus + tuple(amd_gpus)

    events = run("kernel_log", parse_kernel_log) or ()
    previous = run("kernel_log_previous", parse_earlier_boots) or ()
    previous_log = sections.get("kernel_log_previous")
    klog = sections.get("kernel_log")
    if klog is not None and klog.rc == _MISSING:
        errors["kernel_log"] = first_line(klog.stderr) or "no readable kernel log"

    # A stray nvidia-smi on an AMD host is not a driver failure.
    nvidia_on_bus = any(d.is_nvidia_gpu for d in pci_devices)
    expect_nvidia = has_nvidia and not (amd_gpus and not nvidia_gpus and not nvidia_on_bus)

    # Every parser has run (and recorded its errors) before the status is judged.
    status, detail = judge_status(
        bundle,
        sections,
        errors,
        gpus,
        log,
        expect_nvidia,
        has_amd,
        pci_devices,
        text_report=text_log is not None,
    )
    if lookalikes and status is HostStatus.NO_GPU_TOOLING:
        detail = "the GPU tools are another vendor's: " + "; ".join(
            errors[f"{name}_lookalike"] for name in lookalikes
        )
    _note_replaced_bytes(sections, errors)
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
        unnumbered_gpus=unnumbered,
        xid_events=resolve_gpus(events, gpus),
        kernel_log_truncated=bool(klog and klog.truncated),
        previous_boot_xid_events=resolve_gpus(previous, gpus),
        previous_boot_log_truncated=bool(previous_log and previous_log.truncated),
        topology=topology,
        mig_gpu_instances=tuple(gpu_instances),
        mig_compute_instances=tuple(compute_instances),
        mig_placements=tuple(placements),
        packages=tuple(packages),
        sysctls=sysctls,
        services=tuple(services),
        device_nodes=tuple(device_nodes),
        tools=dict(tools),
        parse_errors=errors,
        sections=sections,
        attached_gpus=log.attached_gpus if log else None,
        pci_devices=tuple(pci_devices),
        nvlink=nvlink,
        monitoring=monitoring,
        slurm=slurm_view(sections, errors),
        dcgm_diag=dcgm_diag_view(sections, errors),
    )


def _nvlink(sections: dict[str, Section], errors: dict[str, str]) -> tuple[GpuNvLink, ...] | None:
    """NVLink state (section ``nvlink_status``: nvidia-smi nvlink -s) and error counters
    (``nvlink_errors``: nvidia-smi nvlink -e), one entry per GPU; None when neither was read."""
    status = _run(sections, errors, "nvlink_status", parse_nvlink)
    counters = _run(sections, errors, "nvlink_errors", parse_nvlink)
    if status is None and counters is None:
        return None
    return merge_nvlink(status or (), counters or ())


def _text_report(sections: dict[str, Section], errors: dict[str, str]) -> NvidiaSmiLog | None:
    """nvidia-smi's text report (section ``nvidia_smi_q``: ``nvidia-smi -q``, collected when the
    XML report was refused) when it lists GPUs; None otherwise. A text report that failed too
    adds nothing: the XML section already says why nvidia-smi did not answer."""
    section = sections.get("nvidia_smi_q")
    if section is None or section.rc != 0:
        return None
    report = _run(sections, errors, "nvidia_smi_q", parse_nvidia_smi_text)
    return report if report is not None and report.gpus else None


# The GPU-tool sections, the tool that prints each, and whose GPUs it lists.
_GPU_TOOLS = (("nvidia_smi_xml", "nvidia-smi"), ("rocm_smi", "rocm-smi"), ("amd_smi", "amd-smi"))


def _lookalikes(sections: dict[str, Section], errors: dict[str, str]) -> dict[str, LookAlike]:
    """The GPU-tool sections another vendor's look-alike answered (parsers/lookalike.py), each
    recorded in ``errors[<section>_lookalike]``: its devices are not NVIDIA or AMD GPUs and
    are not audited. Kept apart from ``errors[<section>]``, which says the output was
    unreadable."""
    found: dict[str, LookAlike] = {}
    for name, tool in _GPU_TOOLS:
        section = sections.get(name)
        if section is None or section.rc == _MISSING:
            continue
        hit = identify(section.stdout) or identify(section.stderr)
        if hit is None:
            continue
        found[name] = hit
        devices = f"{hit.device_count} device(s)" if hit.device_count else "its devices"
        errors[f"{name}_lookalike"] = (
            f"{tool} is {hit.vendor_name} {hit.tool}: {devices} not audited "
            f"({first_line(hit.evidence)})"
        )
    return found


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


def _amd_cli_gpus(
    run: Callable[[str, Callable[[str], tuple[Gpu, ...]]], tuple[Gpu, ...] | None],
    has_rocm_smi: bool,
    has_amd_smi: bool,
) -> tuple[Gpu, ...]:
    """The AMD GPUs as rocm-smi lists them, with amd-smi filling what rocm-smi left out (per
    GPU, by bus id); amd-smi's alone where rocm-smi is missing or listed none. amd-smi is the
    successor and newer hosts may have only it, but where both answer rocm-smi stays primary
    so that the GPUs of hosts audited before amd-smi was read do not change."""
    rocm = (run("rocm_smi", parse_rocm_smi_json) or ()) if has_rocm_smi else ()
    amd_smi = (run("amd_smi", parse_amd_smi_json) or ()) if has_amd_smi else ()
    return fill_gaps(rocm, amd_smi) if rocm else amd_smi


def _with_device_probe(
    log: NvidiaSmiLog | None, amd_gpus: tuple[Gpu, ...], probe: NvmlProbe | None
) -> tuple[NvidiaSmiLog | None, tuple[Gpu, ...]]:
    """Combine the CLI's GPUs with the device probe's (section ``nvml``: pynvml or amdsmi).

    Where the CLI listed GPUs it stays primary, and the probe only fills the fields it left
    ``None`` (nested ones too), per GPU matched by bus id, else UUID. The CLI is what operators
    read and quote, it holds what the probe does not read (MIG devices, reset status, recovery
    action, N/A told apart from not supported), and both read the same driver, so a value they
    both have cannot be more right in the probe. The probe adds no GPU the CLI left out: the
    CLI's inventory and ``attached_gpus`` keep saying that one is missing.

    Where the CLI gave no GPUs while the probe did (nvidia-smi missing, failing or printing
    unreadable XML although the driver answered NVML; rocm-smi missing or failing while amdsmi
    answered) the probe's GPUs, driver and CUDA versions and device count stand in for it. The
    host's status still says what the CLI did (``judge_status``: nvidia-smi's exit status
    degrades the host). A probe whose library did not start changes nothing.
    """
    if probe is None:
        return log, amd_gpus
    # An NVML-compatible library of another vendor reports its devices as NVIDIA's.
    nvidia = tuple(g for g in probe.gpus_of("nvidia") if identify_name(g.name or "") is None)
    amd = tuple(g for g in probe.gpus_of("amd") if identify_name(g.name or "") is None)
    if nvidia and log is not None and log.gpus:
        log = dataclasses.replace(
            log,
            driver_version=log.driver_version or probe.driver_version,
            cuda_version=log.cuda_version or probe.cuda_version,
            attached_gpus=probe.device_count if log.attached_gpus is None else log.attached_gpus,
            gpus=fill_gaps(log.gpus, nvidia),
        )
    elif nvidia:
        log = NvidiaSmiLog(
            driver_version=probe.driver_version,
            cuda_version=probe.cuda_version,
            timestamp=None,
            attached_gpus=probe.device_count,
            gpus=nvidia,
        )
    if amd:
        amd_gpus = fill_gaps(amd_gpus, amd) if amd_gpus else amd
    return log, amd_gpus


def _present(section: Section | None) -> bool:
    return section is not None and section.rc != _MISSING


def _problem(section: Section, message: str) -> str:
    if section.rc not in (0, None):
        return one_line(f"exit status {section.rc}: {said_by(section) or message}")
    return one_line(message)


def _note_replaced_bytes(sections: dict[str, Section], errors: dict[str, str]) -> None:
    """Record sections whose output was not UTF-8 (a corrupt VBIOS string, a process name in an
    XID line): the text is kept, but the values holding U+FFFD are not what the host said."""
    for name, section in sections.items():
        count = section.stdout.count(_REPLACED)
        if count and name not in errors:
            errors[name] = (
                f"output held {count} byte sequence(s) that are not UTF-8, shown as U+FFFD; "
                "values containing them are not what the host printed"
            )
