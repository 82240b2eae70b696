"""Reads the collector's framed output (a "bundle") back into sections.

The same reader serves the pyinfra fact (lines from a live host) and offline bundles
(``sh collect.sh > host.bundle``). A bundle cut short keeps every section that arrived whole and
says it is incomplete; it never raises on host output.

Output is bounded (:mod:`gpuaudit.parsers.limits`): the collector cuts each section's stdout
and stderr on the host and says so in the section's end marker (``stdout=KEPT/PRINTED``); this
reader keeps no more than the same bounds of whatever arrives, whoever wrote it, holding at
most that much of the encoded text while it reads. A cut section is marked ``truncated``, its
stderr ends with a note saying where it was cut, and the bundle lists the cut among its
problems.
"""

from __future__ import annotations

import base64
import binascii
import re
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from gpuaudit.model.snapshot import Section
from gpuaudit.parsers.limits import DEFAULT_LIMITS, Cut, OutputLimits, utf8_prefix

_HEADER = re.compile(r"^@@gpuaudit-collector (\d+) ([A-Za-z0-9$()+x]+)@@$")
_CUT = re.compile(r"^(stdout|stderr)=(\d+)/(\d+)$")
# The kernel logs the collector reads: the running kernel's, and the boots before it as the
# journal kept them (journalctl -k -b -1, -b -2, ...).
KERNEL_LOG_SECTIONS = ("kernel_log", "kernel_log_previous")
# The collector's own line in a kernel log section's stderr.
_KLOG_STATS = re.compile(r"lines=(\d+) max=(\d+)")
_KLOG_BYTES = re.compile(r"\bmax_bytes=\d+")
_KLOG_NUL = re.compile(r"\bnul=(\d+)")
# An earlier boot whose journal read timed out or failed: it and the boots before it are unread.
_KLOG_UNREAD = re.compile(r"\bunread=-\d+")
# The kernel ring buffer had wrapped: the seconds after boot of the oldest line dmesg still had.
# The log is then incomplete (kernel_log_truncated, said in GA301's findings and on the host's
# page), but that is no collection problem (GA002): a healthy host with a long uptime wraps its
# ring buffer in the ordinary course, and a gate must not turn red on it.
KLOG_RING_START = re.compile(r"\bring_start=(\d+)")


@dataclass(frozen=True)
class Bundle:
    sections: dict[str, Section]
    complete: bool  # the collector's closing marker arrived
    problems: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict:
        return {
            "complete": self.complete,
            "problems": list(self.problems),
            "sections": {
                name: {"rc": s.rc, "stdout": s.stdout, "stderr": s.stderr, "truncated": s.truncated}
                for name, s in self.sections.items()
            },
        }

    @classmethod
    def from_dict(cls, data: dict) -> Bundle:
        sections = {
            name: Section(
                rc=s.get("rc"),
                stdout=s.get("stdout", ""),
                stderr=s.get("stderr", ""),
                truncated=bool(s.get("truncated", False)),
            )
            for name, s in (data.get("sections") or {}).items()
        }
        return cls(sections, bool(data.get("complete")), tuple(data.get("problems") or ()))


# gzip's worst case on data that does not compress: a few bytes per 32 KiB block, and a header.
_GZIP_SLACK = 1024


class _Stream:
    """One encoded stream of a section: its lines up to ``cap`` characters; past the cap they
    are only counted, so a stream without end costs no memory.

    Encodings (the section's ``enc=``): ``b64`` base64, ``hex`` hex digits (hosts without
    base64), ``gzb64`` gzip then base64 (hosts with gzip: the bytes on the wire of an 8-GPU
    XML report drop about tenfold). A gzip stream is inflated to at most the section's bound
    and no further, so a small stream that would inflate without end costs no more memory than
    a plain one."""

    def __init__(self, name: str, encoding: str, limit: int) -> None:
        self.name = name  # "stdout" | "stderr"
        self.encoding = encoding
        # Enough encoded text for ``limit`` bytes (base64: 4 characters per 3 bytes).
        room = limit + _GZIP_SLACK + limit // 1000 if encoding == "gzb64" else limit
        self.cap = 2 * limit + 2 if encoding == "hex" else (room + 2) // 3 * 4 + 4
        self.lines: list[str] = []
        self.kept = 0
        self.dropped = 0

    def add(self, line: str) -> None:
        room = self.cap - self.kept
        if len(line) > room:
            self.dropped += len(line) - room
            line = line[:room]
        if line:
            self.lines.append(line)
            self.kept += len(line)

    def decode(self, limit: int, reported: tuple[int, int] | None) -> tuple[bytes, Cut | None]:
        """At most ``limit`` bytes of the stream, and how it was cut (by the host, which
        ``reported`` (kept, printed), or here)."""
        width = 2 if self.encoding == "hex" else 4
        joined = "".join(line.strip() for line in self.lines)
        if self.dropped:
            joined = joined[: len(joined) - len(joined) % width]
        try:
            raw = base64.b64decode(joined) if self.encoding != "hex" else bytes.fromhex(joined)
        except (binascii.Error, ValueError):
            raw = "\n".join(self.lines).encode("utf-8", "replace")
        else:
            if self.encoding == "gzb64":
                raw, more = _inflate(raw, limit)
                if more:  # more than the bound: cut here, as a plain stream would be
                    reported = (len(raw), max(len(raw) + 1, reported[1] if reported else 0))
        printed = len(raw) + self.dropped * 3 // 4 if width == 4 else len(raw) + self.dropped // 2
        if reported is not None:
            printed = max(printed, reported[1])
        if len(raw) > limit:
            raw = utf8_prefix(raw[:limit])
        elif reported is None and not self.dropped:
            return raw, None
        return raw, Cut(self.name, kept=len(raw), printed=printed)


def _inflate(data: bytes, limit: int) -> tuple[bytes, bool]:
    """The first ``limit`` bytes ``data`` (gzip) inflates to, and whether it holds more. A
    stream cut on the way gives what arrived whole; one that is no gzip, its bytes as sent."""
    inflater = zlib.decompressobj(wbits=31)
    try:
        raw = inflater.decompress(data, limit + 1)
    except zlib.error:
        return data, False
    if len(raw) > limit:
        return raw[:limit], True
    return raw, bool(inflater.unconsumed_tail)


class _Reader:
    """The framing state while a bundle is read line by line."""

    def __init__(self, limits: OutputLimits) -> None:
        self.limits = limits
        self.left = limits.output_bytes
        self.sections: dict[str, Section] = {}
        self.problems: list[str] = []

    def streams(self, encoding: str) -> tuple[_Stream, _Stream]:
        limit = self.limits.allowance(self.left)
        return _Stream("stdout", encoding, limit), _Stream("stderr", encoding, limit)

    def finish(self, name: str, end_fields: str, out: _Stream, err: _Stream) -> None:
        rc_text = end_fields.rpartition("rc=")[2]
        reported = {
            m.group(1): (int(m.group(2)), int(m.group(3)))
            for m in map(_CUT.match, end_fields.split())
            if m
        }
        cuts: list[Cut] = []
        texts: list[str] = []
        for stream in (out, err):
            raw, cut = stream.decode(self.limits.allowance(self.left), reported.get(stream.name))
            self.left = max(0, self.left - len(raw))
            # Host output is untrusted and not always UTF-8: keep every byte, mark what is not.
            texts.append(raw.decode("utf-8", "replace"))
            if cut is not None:
                cuts.append(cut)
        stdout, stderr = texts
        for cut in cuts:
            self.problems.append(
                f"section {name!r}: {cut.stream} truncated at {cut.kept} bytes of {cut.printed}"
            )
        if cuts:
            notes = "".join(cut.note() + "\n" for cut in cuts)
            stderr += ("\n" if stderr and not stderr.endswith("\n") else "") + notes
        if name in KERNEL_LOG_SECTIONS:
            nul = _KLOG_NUL.search(stderr)
            if nul and int(nul.group(1)):
                self.problems.append(
                    f"section {name!r}: {nul.group(1)} NUL byte(s) removed from the kernel "
                    "log before its NVRM / XID lines were read (a damaged log record)"
                )
        self.sections[name] = Section(
            rc=int(rc_text) if rc_text.lstrip("-").isdigit() else None,
            stdout=stdout,
            stderr=stderr,
            truncated=bool(cuts) or _kernel_log_truncated(name, stderr),
        )


def parse_bundle(lines: Iterable[str], limits: OutputLimits = DEFAULT_LIMITS) -> Bundle:
    """Parse collector output lines into a :class:`Bundle`, keeping at most ``limits``."""
    nonce: str | None = None
    reader = _Reader(limits)
    complete = False
    current: str | None = None
    out, err = reader.streams("b64")
    target = out
    begin = end = stderr_marker = done = ""

    for raw_line in lines:
        line = raw_line.rstrip("\r\n")
        if nonce is None:
            match = _HEADER.match(line.strip())
            if match:
                nonce = match.group(2)
                begin, stderr_marker = f"@@{nonce} begin ", f"@@{nonce} stderr@@"
                end, done = f"@@{nonce} end ", f"@@{nonce} done@@"
            continue
        if line.startswith(begin):
            if current is not None:
                reader.problems.append(f"section {current!r} has no end marker")
            name, _, enc = line[len(begin) : -2].partition(" enc=")
            current = name
            out, err = reader.streams(enc or "b64")
            target = out
        elif line == stderr_marker and current is not None:
            target = err
        elif line.startswith(end) and current is not None:
            fields = line[len(end) :]
            reader.finish(current, fields[:-2] if fields.endswith("@@") else fields, out, err)
            current = None
        elif line == done:
            complete = True
        elif current is not None:
            target.add(line)

    problems = reader.problems
    if nonce is None:
        problems.append("no gpuaudit collector header in the output")
    if current is not None:
        problems.append(f"output ends inside section {current!r}")
    elif nonce is not None and not complete:
        problems.append("output ends before the collector finished")
    return Bundle(reader.sections, complete, tuple(problems))


def parse_bundle_text(text: str, limits: OutputLimits = DEFAULT_LIMITS) -> Bundle:
    return parse_bundle(_lines(text), limits)


def _lines(text: str) -> Iterator[str]:
    """The lines of ``text``, one at a time (a bundle may be tens of MiB: no list of copies)."""
    start = 0
    while start < len(text):
        stop = text.find("\n", start)
        if stop < 0:
            yield text[start:]
            return
        yield text[start:stop]
        start = stop + 1


def _kernel_log_truncated(name: str, stderr: str) -> bool:
    if name not in KERNEL_LOG_SECTIONS:
        return False
    if _KLOG_BYTES.search(stderr) or KLOG_RING_START.search(stderr) or _KLOG_UNREAD.search(stderr):
        return True
    match = _KLOG_STATS.search(stderr)
    return match is not None and int(match.group(1)) > int(match.group(2))
