"""GPU error events (XID, SXid, fallen off the bus, failed adapter start) from kernel log lines.

The collector hands over lines from ``dmesg`` or ``journalctl -k`` already filtered, but the line
prefix depends on the tool and its options: ``[ 49.261458]`` (dmesg), ``[Sun Feb 23 16:24:18
2025]`` (dmesg -T), ``kern  :warn  : 2025-01-21T02:21:33,498559+00:00`` (dmesg --decode
--time-format=iso; with another time format the bracketed stamp follows ``kern  :warn  :``),
``Nov 29 11:28:11 host kernel:`` (journalctl / syslog), a bare ``kernel:``, or nothing at all.
The event itself is recognised wherever it sits in the line, and the prefix only supplies the
timestamp, kept as printed (host clocks and formats vary too much to convert here without
guessing a year or a boot time).

Events (``XidEvent.kind``):

- ``xid``: ``NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus.`` (on a MIG
  GPU ``Xid (PCI:0000:01:00 GPU-I:05 GPU-CI:00): 94, …``: an XID of that GPU, the instance
  leading its message)
- ``sxid`` (NVSwitch): ``nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, ...``
- ``fallen_off_bus`` (no XID): ``NVRM: GPU at 0000:01:00.0 has fallen off the bus.`` or the
  probe-time ``NVRM: The NVIDIA GPU 0000:b3:00.0`` / ``(PCI ID: …) installed in this system has``
  / ``fallen off the bus and is not responding to commands.`` printed over three lines.
- ``init_failed``: the driver could not start the GPU (``NVRM: GPU 0000:0a:00.0: RmInitAdapter
  failed! (0x24:0x72:1568)`` and its ``rm_init_adapter failed, device minor number 5``; older
  drivers print neither the bus id nor the same words), so it does not come up.

One message can span several lines: dmesg and journalctl indent the continuation lines of a
multi-line record and print no timestamp on them; the driver indents the detail lines of a dump
(``NVRM:     Reported by libos …``); the NVSwitch driver repeats the SXid prefix on a header
line's ``Severity … Engine instance …`` and ``Data {…}`` lines. These join the event they belong
to (its ``raw`` keeps every line, newline-joined) and are never counted as events of their own.
The driver also prints a follow-up ``NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.`` after
an XID 79 on the same GPU, and a ``rm_init_adapter`` line after ``RmInitAdapter failed!``: each
pair is one event. The diagnostic lines the driver logs just before ``RmInitAdapter failed!``
(``RmInitAdapter: Cannot initialize GSP firmware RM``, ``osInitNvMapping: *** Cannot attach
gpu``) are its cause and join that event, lending it a bus id where its own line has none.

Every other NVIDIA line (``NVRM``, ``nvidia-nvswitch``, ``Xid``) is either one this parser knows
to carry no event (module loaded, the GPU's UUID or serial number, a crash dump notice, an RPC
history) or becomes a parse warning: nothing NVIDIA printed vanishes silently.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from gpuaudit.model.snapshot import Gpu, XidEvent, bus_key
from gpuaudit.parsers.warnings import warn

SOURCE = "kernel log"

_BUS = r"(?:PCI:)?([0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)"
# "Xid" must not be preceded by "S" (SXid) nor be the "caused by previous Xid 149" tail. On a
# MIG GPU the parenthesis also names the GPU instance, and maybe the compute instance:
# "Xid (PCI:0000:01:00 GPU-I:05 GPU-CI:00): 94, ...".
_XID = re.compile(
    r"(?<![A-Za-z])Xid \((?:PCI:)?([0-9A-Fa-f:.]+)((?:\s+GPU-C?I:\d+)*)\s*\):\s*(\d+)\s*,?\s*(.*)$"
)
_SXID = re.compile(r"\bSXid \((?:PCI:)?([0-9A-Fa-f:.]+)\):\s*(\d+)\s*,?\s*(.*)$")
_SXID_DETAIL = re.compile(r"^(?:Severity \d+ Engine instance|Data \{)")
_FALLEN = re.compile(rf"NVRM: GPU (?:at )?{_BUS}:?\s+(?:GPU )?has fallen off the bus")
_FALLEN_PROBE = re.compile(rf"NVRM: The NVIDIA GPU {_BUS}\b.*\bfallen off the bus")
_RM_INIT = re.compile(rf"NVRM: (?:GPU {_BUS}: )?(RmInitAdapter failed!.*)$")
_RM_INIT_ADAPTER = re.compile(
    rf"NVRM: (?:GPU {_BUS}: )?(rm_init_adapter(?:\((\d+)\))? failed"
    r"(?:, device minor number (\d+)| for device bearing minor number (\d+))?.*)$"
)
_FRONTEND_OPEN = re.compile(r"NVRM: nvidia_frontend_open: minor (\d+), module->open\(\) failed")
_GPU_BUS = re.compile(rf"NVRM: GPU {_BUS}:")
# Where the NVIDIA part of a line starts; the text before it is the tool's prefix.
_MARKER = re.compile(r"NVRM\b|nvidia-nvswitch\d*:|(?<![A-Za-z])S?Xid\b")
_DETAIL = re.compile(r"^NVRM:\s{2,}\S")  # the driver's indented detail lines of one message
_MULTILINE = re.compile(r"^NVRM: (?:The NVIDIA GPU\b|A GPU crash dump has been created)")
_MULTILINE_LINES = 4  # the longest of those notices
# Lines the driver prints that carry no event of their own.
_CONTEXT = re.compile(
    r"NVRM: (?:loading NVIDIA|GPU at (?:PCI:)?[0-9A-Fa-f:.]+: GPU-|GPU Board Serial Number"
    r"|GPU [0-9A-Fa-f:.]+: GPU serial number is|A GPU crash dump has been created"
    r"|GPU\d* RPC (?:event )?history|GPU\d* GSP RPC buffer contains|Rate limiting GSP RPC"
    r"|The NVIDIA probe routine failed for|None of the NVIDIA devices were initialized)"
)
_EVENTISH = re.compile(r"Xid|fallen off the bus|RmInitAdapter failed|rm_init_adapter")
# "dmesg --decode" puts the facility and level before the stamp: "kern  :warn  : [ 49.26]".
_BRACKET = re.compile(r"^\s*(?:[a-z]+\s*:\s*[a-z]+\s*:\s*)?(\[[^\]]+\])")
_ISO = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?")
_SYSLOG = re.compile(r"^\s*([A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d)")
_UPTIME = re.compile(r"^\[\s*(\d+(?:\.\d+)?)\]$")

# How many NVIDIA messages back a follow-up line may look for the event it belongs to.
_FOLLOW_UP_WINDOW = 8
_SXID_WINDOW = 16
# Diagnostic lines kept waiting for an "RmInitAdapter failed!" that may follow them.
_MAX_PENDING = 8
# Lines one message keeps; a longer dump is cut and says so in a warning.
_MAX_LINES = 64
# An XID 79 and a fallen-off-the-bus line further apart than this are two incidents.
_SAME_INCIDENT_S = 60.0


@dataclass
class _Message:
    """One logical NVIDIA message: its physical lines and their text joined."""

    index: int  # position among the NVIDIA messages of the log
    lines: list[str]
    text: str  # the NVIDIA part of the first line, continuation text appended
    timestamp: str | None
    cut: int = 0  # continuation lines left out beyond _MAX_LINES


@dataclass
class _Event:
    kind: str
    code: int | None
    bus: str | None
    message: str
    index: int
    timestamp: str | None
    lines: list[str] = field(default_factory=list)
    follow_up: bool = False  # the fallen-off / rm_init_adapter partner line joined already
    minor: int | None = None

    def build(self) -> XidEvent:
        return XidEvent(
            kind=self.kind,
            code=self.code,
            pci_bus_id=bus_key(self.bus),
            message=self.message,
            raw="\n".join(self.lines),
            timestamp=self.timestamp,
        )


def parse_kernel_log(text: str) -> tuple[XidEvent, ...]:
    """Every XID, SXid, fallen-off-the-bus and failed GPU start in ``text``, in log order.

    Lines that carry no NVIDIA message are skipped: the kernel log is mostly other noise, so
    this parser never raises. NVIDIA lines it cannot place become parse warnings.
    """
    reader = _Reader()
    for message in _messages(text or ""):
        reader.read(message)
    return reader.finish()


# The line the collector puts before each earlier boot's lines in kernel_log_previous (a
# journal line starts with its time, never with "--").
_BOOT_MARK = re.compile(r"^-- boot -([1-9][0-9]{0,5}) --$")


def parse_earlier_boots(text: str) -> tuple[XidEvent, ...]:
    """:func:`parse_kernel_log` of the boots before this one, each event's ``boot`` set.

    The collector prints the boots oldest first, each after a line ``-- boot -N --``. Where the
    log was cut to its newest lines the first boot's line may be gone: lines before the first
    such line are the boot's before it (``-- boot -2 --`` first: they are boot -3's), and a log
    without any (an older collector's, which read boot -1 alone) is boot -1's. Each boot is
    read on its own: no message continues across a reboot.
    """
    parts: list[tuple[int | None, list[str]]] = [(None, [])]
    for line in (text or "").splitlines():
        mark = _BOOT_MARK.match(line.rstrip("\r"))
        if mark:
            parts.append((-int(mark.group(1)), []))
        else:
            parts[-1][1].append(line)
    first_marked = parts[1][0] if len(parts) > 1 else None
    events: list[XidEvent] = []
    for boot, lines in parts:
        if boot is None:
            if not lines:
                continue
            boot = first_marked - 1 if first_marked is not None else -1
        events.extend(
            dataclasses.replace(event, boot=boot) for event in parse_kernel_log("\n".join(lines))
        )
    return tuple(events)


def _messages(text: str) -> Iterable[_Message]:
    """The NVIDIA messages of the log, continuation lines joined to the line they continue."""
    current: _Message | None = None
    count = 0
    for line in text.splitlines():
        line = line.rstrip("\r")
        if not _nvidia(line):
            if current is not None:
                yield current
                current = None
            continue
        marker = _MARKER.search(line)
        # A line that only says "fallen off the bus" has no marker: all of it is the message.
        start = marker.start() if marker else 0
        prefix, body = line[:start], line[start:]
        if current is not None and _continues(current, prefix, body):
            if len(current.lines) < _MAX_LINES:
                current.lines.append(line)
                current.text += " " + body.removeprefix("NVRM:").strip()
            else:
                current.cut += 1
            continue
        if current is not None:
            yield current
        current = _Message(count, [line], body.strip(), _timestamp(prefix if marker else line))
        count += 1
    if current is not None:
        yield current


def _nvidia(line: str) -> bool:
    return "NVRM" in line or "nvidia-nvswitch" in line or "Xid" in line or "off the bus" in line


def _continues(current: _Message, prefix: str, body: str) -> bool:
    if not body.startswith("NVRM:"):
        return False
    # The driver prints each XID as a message of its own: one that lands between the lines of
    # another message (another GPU's, printed at the same moment) is never part of it.
    if _XID.match(body, len("NVRM: ")):
        return False
    # dmesg / journalctl print a multi-line record's further lines indented, without a stamp.
    if prefix and not prefix.strip():
        return True
    if _DETAIL.match(body):
        return True
    # Older kernels give each line of the driver's multi-line notices its own stamp.
    return (
        bool(_MULTILINE.match(current.text))
        and not current.text.endswith(".")
        and len(current.lines) < _MULTILINE_LINES
    )


class _Reader:
    """Turns messages into events, joining each follow-up to the event it belongs to."""

    def __init__(self) -> None:
        self.events: list[_Event] = []
        self.pending: list[_Message] = []

    def read(self, message: _Message) -> None:
        if message.cut:
            warn(
                SOURCE,
                f"{message.cut} more continuation lines of one message not kept",
                message.lines[0],
            )
        first = message.lines[0]
        sxid = _SXID.search(first)
        if sxid:
            self._sxid(message, sxid)
            return
        xid = _XID.search(first)
        if xid:
            # The MIG instance the driver named leads the message, as it printed it.
            detail = ", ".join(filter(None, (xid.group(2).strip(), xid.group(4).strip())))
            self._add(message, "xid", int(xid.group(3)), xid.group(1), detail)
            return
        fallen = _FALLEN.search(first) or _FALLEN_PROBE.search(message.text)
        if fallen:
            text = message.text.removeprefix("NVRM:").strip()
            detail = text if _FALLEN_PROBE.search(message.text) else "GPU has fallen off the bus"
            self._add(message, "fallen_off_bus", None, fallen.group(1), detail)
            return
        if self._init(message):
            return
        if _CONTEXT.search(message.text):
            return
        if _EVENTISH.search(message.text):
            warn(SOURCE, "NVIDIA error line of a form this parser does not read", message.text)
            return
        self.pending.append(message)
        if len(self.pending) > _MAX_PENDING:
            self._unread(self.pending.pop(0))

    def finish(self) -> tuple[XidEvent, ...]:
        for message in self.pending:
            self._unread(message)
        self.pending = []
        return tuple(event.build() for event in self.events)

    # --- the kinds of event ------------------------------------------------------------------

    def _sxid(self, message: _Message, match: re.Match[str]) -> None:
        code, rest = int(match.group(2)), match.group(3).strip()
        if not _SXID_DETAIL.match(rest):
            self._add(message, "sxid", code, match.group(1), rest)
            return
        bus = bus_key(match.group(1))
        for event in self._recent(message, _SXID_WINDOW):
            if event.kind == "sxid" and event.code == code and bus_key(event.bus) == bus:
                event.lines += message.lines
                return
        warn(SOURCE, "SXid detail line without its SXid line (cut off before it?)", message.text)

    def _init(self, message: _Message) -> bool:
        text = message.text
        if match := _RM_INIT.search(text):
            self._add(message, "init_failed", None, match.group(1), match.group(2).strip())
            return True
        if match := _RM_INIT_ADAPTER.search(text):
            bus, detail = match.group(1), match.group(2).strip()
            key = bus_key(bus)
            minor = next((int(g) for g in match.groups()[2:] if g is not None), None)
            for event in self._recent(message, _FOLLOW_UP_WINDOW):
                other_gpu = key is not None and event.bus is not None and bus_key(event.bus) != key
                if event.kind != "init_failed" or other_gpu:
                    continue  # another GPU's start may fail in between
                if event.follow_up:
                    break  # that failure has its line: this one's RmInitAdapter line is missing
                event.lines += message.lines
                event.follow_up, event.minor = True, minor
                event.bus = event.bus or bus
                if minor is not None:
                    event.message += f", device minor number {minor}"
                return True
            event = self._add(message, "init_failed", None, bus, detail)
            event.follow_up, event.minor = True, minor
            return True
        if match := _FRONTEND_OPEN.search(text):
            minor = int(match.group(1))
            for event in self._recent(message, _FOLLOW_UP_WINDOW):
                if event.kind == "init_failed" and event.minor in (None, minor):
                    event.lines += message.lines
                    return True
        return False

    def _add(
        self, message: _Message, kind: str, code: int | None, bus: str | None, detail: str
    ) -> _Event:
        if kind == "init_failed":
            event = _Event(
                kind, code, bus, f"GPU did not come up: {detail}", message.index, message.timestamp
            )
            # What the driver logged just before the failure is its cause.
            for cause in self.pending:
                event.lines += cause.lines
                if event.bus is None and (on := _GPU_BUS.search(cause.text)):
                    event.bus = on.group(1)
            self.pending = []
            event.lines += message.lines
            self.events.append(event)
            return event
        if kind != "sxid":  # the GPU driver's diagnostics did not lead to an adapter failure
            for cause in self.pending:
                self._unread(cause)
            self.pending = []
        if (kind, code) in (("xid", 79), ("fallen_off_bus", None)):
            partner = self._same_incident(message, kind, bus)
            if partner is not None:
                partner.lines += message.lines
                partner.follow_up = True
                if kind == "xid":  # the XID names the incident; the earlier line dates it
                    partner.kind, partner.code, partner.message = kind, code, detail
                return partner
        event = _Event(
            kind, code, bus, detail, message.index, message.timestamp, list(message.lines)
        )
        self.events.append(event)
        return event

    # --- looking back --------------------------------------------------------------------------

    def _recent(self, message: _Message, window: int) -> Iterable[_Event]:
        """The events of the last ``window`` messages, newest first."""
        for event in reversed(self.events):
            if message.index - event.index > window:
                return
            yield event

    def _same_incident(self, message: _Message, kind: str, bus: str | None) -> _Event | None:
        """The XID 79 a fallen-off-the-bus line follows up (or the reverse) on the same GPU."""
        key = bus_key(bus)
        for event in self._recent(message, _FOLLOW_UP_WINDOW):
            if bus_key(event.bus) != key:
                continue
            wanted = ("fallen_off_bus", None) if kind == "xid" else ("xid", 79)
            if (event.kind, event.code) == wanted and not event.follow_up:
                return event if _close(event.timestamp, message.timestamp) else None
            return None  # another event on this GPU came in between
        return None

    def _unread(self, message: _Message) -> None:
        warn(SOURCE, "NVIDIA kernel message not read as a GPU event", message.text)


def _close(first: str | None, second: str | None) -> bool:
    """Whether two stamps are near enough for one incident; stamps not in seconds since boot
    are not compared (the messages' closeness in the log decides)."""
    a, b = _UPTIME.match((first or "").strip()), _UPTIME.match((second or "").strip())
    if a and b:
        return abs(float(b.group(1)) - float(a.group(1))) <= _SAME_INCIDENT_S
    return True


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
