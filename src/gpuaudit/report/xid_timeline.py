"""A host's XID events as the page shows them: incidents, not a log dump.

A kernel log can hold hundreds of lines of one XID (a storm on one GPU), so the page lists
incidents: one per kind, code and GPU, with how often it happened and when it was first and last
seen. The raw lines stay one click away, a bounded number of them per incident: the first ones
(how it started) and the newest ones.

Times are read from the line prefixes the kernel-log parser kept as printed
(parsers/kernel_log.py). A stamp with a time zone (``dmesg --time-format=iso``) is shown in UTC;
one without (``dmesg -T``, journalctl, syslog) is the host's own clock and says so (journalctl
and syslog print no year: where the log runs past a new year its order decides); ``dmesg``'s
plain ``[seconds]`` counts from the host's boot: added to the boot time the host gave
(``OsInfo.boot_time``, /proc/stat's btime) they are shown in UTC, marked as derived, and as
time after boot where the snapshot has no boot time.

Like views.py, this module returns plain values; the template and the page script escape them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from gpuaudit.model.snapshot import XidEvent

DASH = "—"
# Raw lines kept per incident: the first few and the newest (a storm repeats itself).
MAX_RAW_LINES = 20
_FIRST_RAW_LINES = 5
# Distinct incidents listed per host; beyond that the count says how many more there are.
MAX_INCIDENTS = 100

# How a stamp's clock is labelled on the page, and what the note under the table says of it.
UTC, HOST_CLOCK, SINCE_BOOT, FROM_BOOT, NO_TIME = "utc", "host", "boot", "from_boot", "none"
CLOCK_NOTES = {
    FROM_BOOT: (
        "“UTC from boot”: the kernel log printed the seconds since the host booted, added to "
        "the boot time the host gives (/proc/stat); a host suspended since would show them "
        "early, as dmesg -T does."
    ),
    HOST_CLOCK: "“host clock”: the host's local time as its log printed it (time zone unknown).",
    SINCE_BOOT: (
        "“after boot”: the kernel log printed only the seconds since the host booted, and "
        "the snapshot does not record when that was."
    ),
    NO_TIME: "Some lines carry no time at all: those incidents are in log order.",
}

_ISO = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?\s*(Z|[+-]\d{2}:?\d{2})?"
)
_CTIME = re.compile(
    r"(?:[A-Z][a-z]{2}\s+)?([A-Z][a-z]{2})\s+(\d{1,2})\s+(\d{1,2}):(\d{2}):(\d{2})(?:\s+(\d{4}))?"
)
_UPTIME = re.compile(r"^\[?\s*(\d+(?:\.\d+)?)\s*\]?$")
_MONTHS = {
    month: number
    for number, month in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1
    )
}


@dataclass(frozen=True)
class LogTime:
    """A kernel-log timestamp, read for ordering and for showing.

    ``rank`` groups the stamps that can be compared with each other: wall-clock times with a
    year (0), host-clock times without one (1), seconds since boot (2), none (3); ``value`` orders
    stamps within a rank (seconds since the epoch, as if UTC where the zone is unknown).
    """

    rank: int
    value: float
    clock: str
    text: str

    @property
    def key(self) -> tuple[int, float]:
        return (self.rank, self.value)


_NONE = LogTime(3, 0.0, NO_TIME, DASH)


def _wall_clock(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def _since_boot(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.2f} s after boot"
    minutes, second = divmod(int(seconds), 60)
    hours, minute = divmod(minutes, 60)
    days, hour = divmod(hours, 24)
    parts = [f"{days} d"] if days else []
    if days or hour:
        parts.append(f"{hour} h")
    parts += [f"{minute} min", f"{second} s"]
    return " ".join(parts) + " after boot"


def _iso(match: re.Match[str]) -> LogTime | None:
    year, month, day, hour, minute, second, frac, zone = match.groups()
    try:
        moment = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second))
    except ValueError:
        return None
    offset = 0
    if zone and zone != "Z":
        digits = zone[1:].replace(":", "")
        offset = (int(digits[:2]) * 60 + int(digits[2:] or 0)) * 60
        offset = -offset if zone[0] == "-" else offset
    epoch = moment.replace(tzinfo=timezone.utc).timestamp() - offset
    value = epoch + float(f"0.{frac}" if frac else 0)
    if not zone:
        return LogTime(0, value, HOST_CLOCK, f"{_wall_clock(moment)} host clock")
    try:
        shown = moment - timedelta(seconds=offset)
    except OverflowError:  # a zone that pushes year 1 or 9999 over the edge
        return None
    return LogTime(0, value, UTC, f"{_wall_clock(shown)} UTC")


def _ctime(match: re.Match[str]) -> LogTime | None:
    month, day, hour, minute, second, year = match.groups()
    month_no, day_no = _MONTHS[month], int(day)
    if not year:
        clock = (int(hour) * 60 + int(minute)) * 60 + int(second)
        text = f"{month} {day_no:02d} {int(hour):02d}:{minute}:{second} host clock"
        return LogTime(1, float((month_no * 32 + day_no) * 86400 + clock), HOST_CLOCK, text)
    try:
        moment = datetime(int(year), month_no, day_no, int(hour), int(minute), int(second))
    except ValueError:
        return None
    value = moment.replace(tzinfo=timezone.utc).timestamp()
    return LogTime(0, value, HOST_CLOCK, f"{_wall_clock(moment)} host clock")


def log_time(stamp: str | None, booted: float | None = None) -> LogTime:
    """Read a kernel-log timestamp as printed: ISO, ctime, syslog, ``[seconds]`` since boot
    (a UTC time when ``booted``, the boot's epoch seconds, is known).

    A stamp that is none of these keeps its printed text and sorts with the stamp-less lines.
    """
    text = (stamp or "").strip()
    if not text:
        return _NONE
    read: LogTime | None = None
    if match := _ISO.search(text):
        read = _iso(match)
    elif (match := _UPTIME.match(text)) and math.isfinite(seconds := float(match.group(1))):
        read = _from_boot(seconds, booted)
    elif (match := _CTIME.search(text)) and match.group(1) in _MONTHS:
        read = _ctime(match)
    return read or dataclasses.replace(_NONE, text=text)


def _from_boot(seconds: float, booted: float | None) -> LogTime:
    if booted is not None:
        with contextlib.suppress(OverflowError, OSError, ValueError):
            moment = datetime.fromtimestamp(booted + seconds, timezone.utc)
            return LogTime(0, booted + seconds, FROM_BOOT, f"{_wall_clock(moment)} UTC from boot")
    return LogTime(2, seconds, SINCE_BOOT, _since_boot(seconds))


def _epoch(iso: str | None) -> float | None:
    """An ISO 8601 UTC time (``2026-12-01T09:00:00Z``) as epoch seconds; None if it is not one."""
    try:
        return (
            datetime.strptime(iso or "", "%Y-%m-%dT%H:%M:%SZ")
            .replace(tzinfo=timezone.utc)
            .timestamp()
        )
    except ValueError:
        return None


def timestamp_key(stamp: str | None) -> tuple[int, float]:
    """Sort key for a kernel-log timestamp as printed.

    Only times of the same kind can be compared, so the key groups by kind first (wall clock,
    then syslog, then uptime, then none) and the caller's stable sort keeps log order wherever
    times cannot be told apart.
    """
    return log_time(stamp).key


@dataclass(frozen=True)
class XidIncident:
    """Every event of one kind and code on one GPU: how often, when first and last, the lines."""

    what: str  # "XID 79", "SXid 12028", "GPU fell off the bus", "GPU did not come up"
    gpu: str  # "GPU 3"; the bus id where no GPU the host listed has it (lost GPU, NVSwitch)
    boot: str  # "" in the running boot; "the boot before this one", "2 reboots ago"
    count: int
    first_seen: str
    last_seen: str
    message: str  # the first event's message
    raw: str  # the raw lines, newline-joined, at most MAX_RAW_LINES of them plus a gap note


def _what(event: XidEvent) -> str:
    code = DASH if event.code is None else str(event.code)
    if event.kind == "sxid":
        return f"SXid {code}"
    if event.kind == "fallen_off_bus":
        return "GPU fell off the bus"
    if event.kind == "init_failed":
        return "GPU did not come up"
    return f"XID {code}"


def _event_gpu(event: XidEvent) -> str:
    if event.gpu_index is not None:
        return f"GPU {event.gpu_index}"
    return f"{event.pci_bus_id} (not a listed GPU)" if event.pci_bus_id else DASH


def _raw_lines(events: Sequence[XidEvent]) -> str:
    lines = [e.raw for e in events]
    if len(lines) > MAX_RAW_LINES:
        newest = MAX_RAW_LINES - _FIRST_RAW_LINES
        left_out = len(lines) - MAX_RAW_LINES
        gap = f"… {left_out} more lines (the host's snapshot keeps them all) …"
        lines = [*lines[:_FIRST_RAW_LINES], gap, *lines[-newest:]]
    return "\n".join(lines)


def boot_label(boot: int) -> str:
    """Which boot a log was of, counted back from the running one (0)."""
    if boot == 0:
        return ""
    return "the boot before this one" if boot == -1 else f"{-boot} reboots ago"


Timed = tuple[XidEvent, LogTime, int]  # an event, its time, its boot (0: the running one)


def _incidents(timed: Sequence[Timed]) -> list[XidIncident]:
    """The events grouped by boot, kind, code and GPU, in the order the incidents began: the
    oldest boot's first (the clocks of two boots' logs cannot always be compared)."""
    groups: dict[tuple[int, str, int | None, str], list[tuple[XidEvent, LogTime]]] = {}
    for event, time, boot in sorted(timed, key=lambda each: (each[2], each[1].key)):
        key = (boot, event.kind, event.code, _event_gpu(event))
        groups.setdefault(key, []).append((event, time))
    return [
        XidIncident(
            what=_what(group[0][0]),
            gpu=gpu,
            boot=boot_label(boot),
            count=len(group),
            first_seen=group[0][1].text,
            last_seen=group[-1][1].text,
            message=group[0][0].message,
            raw=_raw_lines([event for event, _ in group]),
        )
        for (boot, _kind, _code, gpu), group in groups.items()
    ]


# A year-less stamp that goes back by more than this from the one before it in the log is in
# the next year (journalctl / syslog print no year; the log itself is in time order).
_NEW_YEAR_BACKSTEP_S = 180 * 86400.0
_YEAR_S = 400 * 86400.0  # more than any (month, day) value apart: keeps later years later


def _across_years(timed: list[Timed]) -> list[Timed]:
    """Year-less stamps ordered as the logs have them where they run past a new year (the
    logs in time order: the earlier boots', oldest first, then the running boot's)."""
    years, previous, out = 0, None, []
    for event, time, boot in timed:
        if time.rank == 1:
            if previous is not None and time.value < previous - _NEW_YEAR_BACKSTEP_S:
                years += 1
            previous = time.value
            time = dataclasses.replace(time, value=time.value + years * _YEAR_S)
        out.append((event, time, boot))
    return out


EARLIER_CUT_NOTE = (
    "The journal's log of the earlier boots was cut (too long, or a boot could not be read in "
    "time): an earlier boot may have held more events than listed."
)


def xid_view(
    events: Sequence[XidEvent],
    boot_time: str | None = None,
    earlier: Sequence[XidEvent] = (),
    earlier_cut: bool = False,
) -> dict[str, Any]:
    """A host's XID section as page data: its incidents and notes on the clocks they read.
    ``boot_time`` (ISO 8601 UTC) dates the running boot's stamps that count seconds since
    boot; ``earlier`` are the events of the boots before it (``previous_boot_xid_events``,
    oldest boot first), each incident of them saying which boot it was in, and ``earlier_cut``
    whether the journal's log of them was cut."""
    booted = _epoch(boot_time)
    timed = [(e, log_time(e.timestamp), -1 if e.boot is None else e.boot) for e in earlier]
    timed += [(event, log_time(event.timestamp, booted), 0) for event in events]
    timed = _across_years(timed)
    incidents = _incidents(timed)
    clocks = {time.clock for _, time, _ in timed}
    notes = [note for clock, note in CLOCK_NOTES.items() if clock in clocks]
    if earlier_cut:
        notes.append(EARLIER_CUT_NOTE)
    return {
        "total": len(timed),
        "earlier": len(earlier),
        "incidents": [dataclasses.asdict(i) for i in incidents[:MAX_INCIDENTS]],
        "omitted": max(0, len(incidents) - MAX_INCIDENTS),
        "notes": notes,
    }
