"""The status of a host that gave a bundle, judged once every section has been parsed: how far
its audit got and why (:mod:`gpuaudit.model.status` holds the statuses of hosts that gave none,
and the one-line helpers both use).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuaudit.model.pci import nvidia_gpus_on_bus, unmatched_bus_ids
from gpuaudit.model.snapshot import Gpu, HostStatus, PciDevice, Section
from gpuaudit.model.status import TIMEOUT_RC, one_line, said_by
from gpuaudit.parsers.bundle import Bundle
from gpuaudit.parsers.nvidia_xml import NvidiaSmiLog

# Besides the inventory sections, these failing degrade the host (MIG ones only when in use).
_DEGRADING_SECTIONS = ("nvidia_topo",)
_MIG_SECTIONS = ("mig_gi", "mig_ci")
DRIVER_DOWN = "couldn't communicate with the nvidia driver"


def judge_status(
    bundle: Bundle,
    sections: dict[str, Section],
    errors: dict[str, str],
    gpus: tuple[Gpu, ...],
    log: NvidiaSmiLog | None,
    expect_nvidia: bool,
    has_amd: bool,
    pci_devices: Sequence[PciDevice],
    *,
    text_report: bool = False,
) -> tuple[HostStatus, str]:
    """The status of a host that gave a bundle, judged after every section was parsed.
    ``text_report``: the NVIDIA GPUs in ``log`` were read from nvidia-smi's text report
    because the XML one was refused, which degrades the host (less is read from text)."""
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
            if text_report:
                refused = errors.get("nvidia_smi_xml") or f"exit status {xml.rc}: {said_by(xml)}"
                reasons.append(
                    f"nvidia-smi refused its XML report ({refused}); the GPUs were read from "
                    "its text report (nvidia-smi -q)"
                )
            elif log is None:
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
