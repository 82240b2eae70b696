"""The PCI bus as lspci lists it, against the GPUs the driver lists.

Both the host status (model.status) and the rules (GA102, GA108) compare the two; this is the
one place that decides when the bus listing counts and how the two are matched (by bus id).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gpuaudit.model.snapshot import Gpu, PciDevice, Section


def nvidia_gpus_on_bus(
    sections: Mapping[str, Section], devices: Iterable[PciDevice]
) -> tuple[PciDevice, ...] | None:
    """The NVIDIA GPU functions lspci listed; None when lspci did not run cleanly, so that the
    empty listing of a missing or failing lspci never reads as "no GPU on the bus"."""
    lspci = sections.get("lspci")
    if lspci is None or lspci.rc != 0:
        return None
    return tuple(d for d in devices if d.is_nvidia_gpu)


def unmatched_bus_ids(
    on_bus: Iterable[PciDevice], gpus: Iterable[Gpu]
) -> tuple[list[str], list[str]]:
    """Bus ids only lspci shows, and bus ids only the driver's GPU list shows (both sorted)."""
    bus = {d.bus_id for d in on_bus}
    listed = {g.pci_bus_id for g in gpus if g.pci_bus_id}
    return sorted(bus - listed), sorted(listed - bus)
