"""GA102, GA108: are the GPUs the host holds all there — on the PCI bus and to the driver.

Two views of the same GPUs are compared: the inventory's ``expected_gpu_count``, the NVIDIA
functions ``lspci`` enumerates on the PCI bus, and the GPUs nvidia-smi lists. A GPU on the bus
that the driver does not list is lost capacity (GA102); a GPU the driver lists that the bus
listing lacks means the audit's view of the bus cannot be trusted (GA108).
"""

from __future__ import annotations

from collections.abc import Iterable

from gpuaudit.model.pci import nvidia_gpus_on_bus, unmatched_bus_ids
from gpuaudit.model.snapshot import Gpu, HostSnapshot, HostStatus
from gpuaudit.rules import refs
from gpuaudit.rules.audit import GPU_LIST, PCI_BUS
from gpuaudit.rules.base import Evidence, Finding, Owner, Rule, RuleContext, Severity, rule
from gpuaudit.rules.evidence import section_excerpt


@rule(
    "GA102",
    "Fewer GPUs visible than expected",
    category="software",
    needs=(GPU_LIST,),
    owner=Owner.INFRA,
    severity=Severity.HIGH,
    likelihood=4,
    impact=4,
    remediation=(
        "Compare `lspci -d 10de:` with nvidia-smi: a GPU on the bus but not in nvidia-smi needs "
        "a driver reload or reboot (see the kernel log for XID 79/143, or a GPU bound to "
        "another driver such as vfio-pci); a GPU missing from the bus needs reseating or "
        "replacement."
    ),
    references=(refs.GUIDE_PCIE_ERRORS, refs.GUIDE_XID_TABLE, refs.GUIDE_XID_ACTIONS),
)
def gpu_count(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[Finding]:
    """The driver shows fewer GPUs than the host was bought with, or than sit on its PCI bus.

    Checks: the number of GPUs nvidia-smi lists against ``expected_gpu_count`` (inventory
    host_data or policy); with no expectation set, the NVIDIA GPUs nvidia-smi lists against the
    ones lspci lists on the PCI bus, and against the GPUs nvidia-smi itself counts as attached
    (``attached_gpus``), which needs no lspci. Not evaluated, without a finding, when the
    driver does not answer, the GPU tool is missing or nvidia-smi's XML could not be read
    (GA101 / GA104 / GA002 report those; a count would repeat them).
    Why: a GPU that fell off the bus or failed to initialise is lost capacity and often a
    hardware fault; jobs sized for the full host fail to schedule.
    Evidence: expected and visible counts, and how many NVIDIA GPUs lspci sees (on the bus but
    not visible means driver/initialisation; missing from the bus means hardware; not said on
    a host whose GPUs are all AMD).
    Remediation: reload the driver or reboot; reseat or replace a GPU missing from the bus.
    """
    if snap.status in (HostStatus.DRIVER_NOT_RESPONDING, HostStatus.NO_GPU_TOOLING):
        return
    # Without nvidia-smi the GPUs may still be listed (rocm-smi, NVML): count those.
    if not snap.gpus and (snap.tools.get("nvidia-smi") is False or _xml_unread(snap)):
        return
    bus = nvidia_gpus_on_bus(snap.sections, snap.pci_devices)
    # The bus is counted for NVIDIA GPUs: on a host whose GPUs are all AMD it says nothing.
    amd_only = bool(snap.gpus) and all(g.vendor == "amd" for g in snap.gpus)
    on_bus = None if bus is None or amd_only else len(bus)
    expected = ctx.settings_for(snap).get("expected_gpu_count")
    if isinstance(expected, int) and expected > 0:
        visible = len(snap.gpus)
        if visible >= expected:
            return
        bus_note = ""
        if on_bus is not None:
            bus_note = f" lspci sees {on_bus} NVIDIA GPUs: " + (
                "the missing ones are on the bus but not initialised by the driver."
                if on_bus >= expected
                else "some are missing from the PCIe bus."
            )
        message = f"{visible} of {expected} expected GPUs are visible to the driver.{bus_note}"
    else:
        visible = len(_nvidia_gpus(snap))
        attached = snap.attached_gpus
        if bus is not None and visible < len(bus):
            expected = len(bus)
            not_listed, _ = unmatched_bus_ids(bus, _nvidia_gpus(snap))
            message = (
                f"lspci lists {expected} NVIDIA GPUs on the PCI bus but only {visible} are "
                "visible to the driver: the others are on the bus but not initialised by it"
                + (f" ({', '.join(not_listed)})." if not_listed else ".")
            )
        elif attached is not None and visible < attached:
            # No count expected and no bus listing to compare with: the driver's own count.
            expected = attached
            message = (
                f"nvidia-smi counts {attached} attached GPUs but lists only {visible}: the "
                "others are attached to the driver but could not be read."
            )
        else:
            return
    yield rule.finding(
        snap,
        message,
        Evidence(
            fact="gpus",
            actual={"visible": visible, "on_pci_bus": on_bus},
            expected=expected,
            excerpt=section_excerpt(snap, "lspci", 16),
        ),
    )


@rule(
    "GA108",
    "GPUs missing from the PCI bus listing",
    category="software",
    needs=(GPU_LIST, PCI_BUS),
    owner=Owner.INFRA,
    severity=Severity.MEDIUM,
    likelihood=3,
    impact=3,
    remediation=(
        "Run `lspci -D -nn -d 10de:` on the host as root and compare with nvidia-smi's bus ids. "
        "If the audit runs in a container or VM that hides part of the PCI tree, give it the "
        "host's view (/sys/bus/pci, /proc/bus/pci); if a GPU is really missing from the "
        "listing, check the kernel log for PCIe AER errors and reseat it at the next drain."
    ),
    references=(refs.GUIDE_PCIE_ERRORS, refs.NVIDIA_SMI),
)
def gpus_missing_from_bus(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[Finding]:
    """nvidia-smi lists more NVIDIA GPUs than lspci shows on the PCI bus.

    Checks: the NVIDIA GPUs in nvidia-smi's XML against the NVIDIA display/3D functions of
    ``lspci -D -n`` (when lspci ran cleanly), naming the bus ids lspci did not list.
    Why: the driver cannot see a GPU that is not on the bus, so the audit's view of the bus is
    incomplete (a container or VM hiding devices) or a link dropped between the two reads;
    either way the bus-level checks (GA102's cross-check, PCIe topology) are working blind.
    Evidence: both counts, the missing bus ids and the lspci listing.
    Remediation: audit with the host's PCI view; reseat a GPU that really dropped off.
    """
    bus = nvidia_gpus_on_bus(snap.sections, snap.pci_devices)
    listed = _nvidia_gpus(snap)
    if bus is None or len(listed) <= len(bus):
        return
    _, not_on_bus = unmatched_bus_ids(bus, listed)
    yield rule.finding(
        snap,
        f"nvidia-smi lists {len(listed)} GPUs but lspci shows only {len(bus)} NVIDIA GPUs on "
        "the PCI bus" + (f"; not in the listing: {', '.join(not_on_bus)}." if not_on_bus else "."),
        Evidence(
            fact="pci_devices",
            actual={"nvidia_smi": len(listed), "on_pci_bus": len(bus), "not_on_bus": not_on_bus},
            expected=len(listed),
            excerpt=section_excerpt(snap, "lspci", 16),
        ),
    )


def _nvidia_gpus(snap: HostSnapshot) -> list[Gpu]:
    return [g for g in snap.gpus if g.vendor == "nvidia"]


def _xml_unread(snap: HostSnapshot) -> bool:
    """nvidia-smi's XML did not parse: GPU counts would only restate that (GA002 reports it)."""
    return "nvidia_smi_xml" in snap.parse_errors and not _nvidia_gpus(snap)
