"""Each NVIDIA GPU's number as nvidia-smi gives it (NVML's index), and what is matched by it.

``nvidia-smi -q -x`` (and ``-q``) prints no index, only each GPU's PCI bus id and UUID, one
``<gpu>`` per device in NVML's order. The GPU lists of the parsers therefore number GPUs by
their place in the report. ``nvidia-smi mig -lgi`` / ``-lci`` / ``-lgipp``, ``topo -m`` and
``-i N`` number them by NVML's index instead, and the two part where the report leaves a GPU
out: one nvidia-smi could not open ("Unable to determine the device handle for GPU…", with
``attached_gpus`` still counting it) moves the ones after it up, and a report of one GPU
(``-i``) calls that GPU 0. NVML itself promises no order (``nvmlDeviceGetIndex``: "no
guarantees of consistency between reboots … devices be looked up by their PCI ids or GPU
UUID").

So a GPU's index is the one a source states next to an identity of the GPU: the NVML probe
(index with bus id and UUID, matched by bus id, else UUID) first, then ``nvidia-smi nvlink``
(``GPU N: … (UUID: …)``, matched by UUID). Where no source states one, the report's place
stands for it only when the report lists every attached GPU, each from an entry of its own.
Otherwise the GPU gets the lowest number no other GPU has, and is listed as unnumbered
(``HostSnapshot.unnumbered_gpus``): nothing keyed by nvidia-smi's index alone is matched to it.
Two GPUs that would get the same number are both unnumbered: a contradiction is not settled by
a guess.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter
from collections.abc import Iterable

from gpuaudit.model.snapshot import Gpu, GpuNvLink, MigInstance
from gpuaudit.parsers.warnings import warn

WHAT = "GPU numbering"


def number_gpus(
    gpus: tuple[Gpu, ...],
    attached: int | None,
    probe: Iterable[Gpu] = (),
    nvlink: Iterable[GpuNvLink] = (),
) -> tuple[tuple[Gpu, ...], tuple[int, ...]]:
    """``gpus`` (one report's NVIDIA GPUs, in its order) with nvidia-smi's index, and the
    indexes of those that stay unnumbered."""
    stated = _stated_indexes(gpus, tuple(probe), tuple(nvlink))
    # A GPU added from an error line has neither name nor UUID: the report has no entry for it,
    # and it stands where the parser put it, not where the driver counts it.
    in_order = attached == len(gpus) and all(g.name or g.uuid for g in gpus)
    wanted = [stated.get(place, place if in_order else None) for place in range(len(gpus))]
    taken = Counter(n for n in wanted if n is not None)
    wanted = [n if n is not None and taken[n] == 1 else None for n in wanted]
    free = (n for n in itertools.count() if n not in taken)
    numbered: list[Gpu] = []
    unnumbered: list[int] = []
    for gpu, index in zip(gpus, wanted, strict=True):
        if index is None:
            index = next(free)
            unnumbered.append(index)
            warn(
                WHAT,
                "no source gives this GPU's nvidia-smi index (the XML report does not list "
                f"every attached GPU); numbered {index} here, and MIG listings are not matched "
                "to it",
                text=gpu.pci_bus_id or gpu.uuid or "",
                gpu=index,
            )
        numbered.append(gpu if gpu.index == index else dataclasses.replace(gpu, index=index))
    return tuple(numbered), tuple(unnumbered)


def _stated_indexes(
    gpus: tuple[Gpu, ...], probe: tuple[Gpu, ...], nvlink: tuple[GpuNvLink, ...]
) -> dict[int, int]:
    """Place in ``gpus`` → the NVML index a source states for that GPU."""
    by_bus = {g.pci_bus_id: g.index for g in probe if g.pci_bus_id}
    by_uuid = {g.uuid: g.index for g in probe if g.uuid}
    for entry in nvlink:
        if entry.uuid:
            by_uuid.setdefault(entry.uuid, entry.gpu)
    stated: dict[int, int] = {}
    for place, gpu in enumerate(gpus):
        index = by_bus.get(gpu.pci_bus_id) if gpu.pci_bus_id else None
        if index is None and gpu.uuid:
            index = by_uuid.get(gpu.uuid)
        if index is not None:
            stated[place] = index
    return stated


def with_mig_profiles(
    gpus: tuple[Gpu, ...], instances: tuple[MigInstance, ...], unnumbered: tuple[int, ...]
) -> tuple[Gpu, ...]:
    """Name each MIG device's profile from the GPU instance it lives in (the XML omits it),
    matched by nvidia-smi's index: a GPU whose index is a stand-in gets no names."""
    profiles = {(i.gpu, i.instance_id): i.profile_name for i in instances}
    if not profiles:
        return gpus
    named = []
    for gpu in gpus:
        if gpu.index in unnumbered:
            named.append(gpu)
            continue
        devices = tuple(
            dataclasses.replace(
                d, profile=d.profile or profiles.get((gpu.index, d.gpu_instance_id))
            )
            for d in gpu.mig_devices
        )
        named.append(dataclasses.replace(gpu, mig_devices=devices))
    return tuple(named)
