"""GPU error events (XID, SXid, "fallen off the bus") from kernel log lines.

The collector hands over lines from ``dmesg`` or ``journalctl -k`` already filtered, but the line
prefix depends on the tool and its options: ``[ 49.261458]`` (dmesg), ``[Sun Feb 23 16:24:18
2025]`` (dmesg -T), ``kern  :warn  : 2025-01-21T02:21:33,498559+00:00`` (dmesg --decode
--time-format=iso), ``Nov 29 11:28:11 host kernel:`` (journalctl / syslog), a bare ``kernel:``,
or nothing at all. The event itself is recognised wherever it sits in the line, and the prefix
only supplies the timestamp, kept as printed (host clocks and formats vary too much to convert
here without guessing a year or a boot time).

XID line (NVIDIA driver): ``NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus.``
SXid line (NVSwitch driver): ``nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, ...``
Legacy (no XID): ``NVRM: GPU at 0000:01:00.0 has fallen off the bus.``
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

from gpuaudit.model.snapshot import Gpu, XidEvent, bus_key

# "Xid" must not be preceded by "S" (SXid) nor be the "caused by previous Xid 149" tail.
_XID = re.compile(r"(?<![A-Za-z])Xid \((?:PCI:)?([0-9A-Fa-f:.]+)\):\s*(\d+)\s*,?\s*(.*)$")
_SXID = re.compile(r"\bSXid \((?:PCI:)?([0-9A-Fa-f:.]+)\):\s*(\d+)\s*,?\s*(.*)$")
_FALLEN = re.compile(
    r"NVRM: GPU (?:at )?(?:PCI:)?([0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.\d)?):?\s+"
    r"(?:GPU )?has fallen off the bus"
)
_BRACKET = re.compile(r"^\s*(\[[^\]]+\])")
_ISO = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?")
_SYSLOG = re.compile(r"^\s*([A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d)")


def parse_kernel_log(text: str) -> tuple[XidEvent, ...]:
    """Every XID, SXid and fallen-off-the-bus event in ``text``, in log order.

    Lines that carry no such event are skipped: the kernel log is mostly other noise, so this
    parser never raises.
    """
    events: list[XidEvent] = []
    for line in (text or "").splitlines():
        event = _parse_line(line.rstrip("\r"))
        if event is not None:
            events.append(event)
    return tuple(events)


def _parse_line(line: str) -> XidEvent | None:
    if "Xid" not in line and "fallen off the bus" not in line:
        return None
    for kind, pattern in (("sxid", _SXID), ("xid", _XID)):
        match = pattern.search(line)
        if match:
            try:
                code: int | None = int(match.group(2))
            except ValueError:
                code = None
            return XidEvent(
                kind=kind,
                code=code,
                pci_bus_id=bus_key(match.group(1)),
                message=match.group(3).strip(),
                raw=line,
                timestamp=_timestamp(line[: match.start()]),
            )
    fallen = _FALLEN.search(line)
    if fallen:
        return XidEvent(
            kind="fallen_off_bus",
            code=None,
            pci_bus_id=bus_key(fallen.group(1)),
            message="GPU has fallen off the bus",
            raw=line,
            timestamp=_timestamp(line[: fallen.start()]),
        )
    return None


def _timestamp(prefix: str) -> str | None:
    bracket = _BRACKET.match(prefix)
    if bracket:
        return bracket.group(1)
    iso = _ISO.search(prefix)
    if iso:
        return iso.group(0)
    syslog = _SYSLOG.match(prefix)
    if syslog:
        return syslog.group(1)
    return None


def resolve_gpus(events: Iterable[XidEvent], gpus: Iterable[Gpu]) -> tuple[XidEvent, ...]:
    """Fill each event's ``gpu_index`` from the GPU with the same PCI bus id.

    Kernel lines print the bus id without a function (``PCI:0000:3b:00``) and a 4-digit domain,
    nvidia-smi prints ``00000000:3B:00.0``; both are normalised by ``bus_key`` before matching.
    Events whose bus id matches no GPU (e.g. an NVSwitch, or a GPU that has disappeared from
    nvidia-smi) keep ``gpu_index=None``.
    """
    by_bus = {g.pci_bus_id: g.index for g in gpus if g.pci_bus_id}
    # Kernel lines omit the function number; fall back to domain:bus:device.
    by_slot = {key.rsplit(".", 1)[0]: index for key, index in by_bus.items()}
    resolved = []
    for event in events:
        index = None
        if event.pci_bus_id:
            index = by_bus.get(event.pci_bus_id)
            if index is None:
                index = by_slot.get(event.pci_bus_id.rsplit(".", 1)[0])
        resolved.append(dataclasses.replace(event, gpu_index=index))
    return tuple(resolved)
