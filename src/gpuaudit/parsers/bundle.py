"""Reads the collector's framed output (a "bundle") back into sections.

The same reader serves the pyinfra fact (lines from a live host) and offline bundles
(``sh collect.sh > host.bundle``). A bundle cut short keeps every section that arrived whole and
says it is incomplete; it never raises on host output.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from gpuaudit.model.snapshot import Section

_HEADER = re.compile(r"^@@gpuaudit-collector (\d+) ([A-Za-z0-9$()+x]+)@@$")
_KLOG_STATS = re.compile(r"lines=(\d+) max=(\d+)")


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


def _decode(encoding: str, chunks: list[str]) -> str:
    joined = "".join(c.strip() for c in chunks)
    try:
        raw = base64.b64decode(joined) if encoding == "b64" else bytes.fromhex(joined)
    except (binascii.Error, ValueError):
        raw = "\n".join(chunks).encode("utf-8", "replace")
    # Host output is untrusted and not always UTF-8: keep every byte, mark what is not text.
    return raw.decode("utf-8", "replace")


def parse_bundle(lines: Iterable[str]) -> Bundle:
    """Parse collector output lines into a :class:`Bundle`."""
    nonce: str | None = None
    sections: dict[str, Section] = {}
    problems: list[str] = []
    complete = False
    current: str | None = None
    encoding = "b64"
    out: list[str] = []
    err: list[str] = []
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
                problems.append(f"section {current!r} has no end marker")
            name, _, enc = line[len(begin) : -2].partition(" enc=")
            current, encoding, out, err = name, enc or "b64", [], []
            target = out
        elif line == stderr_marker and current is not None:
            target = err
        elif line.startswith(end) and current is not None:
            rc_text = line[len(end) :].rstrip("@").rpartition("rc=")[2]
            stderr = _decode(encoding, err)
            sections[current] = Section(
                rc=int(rc_text) if rc_text.lstrip("-").isdigit() else None,
                stdout=_decode(encoding, out),
                stderr=stderr,
                truncated=_kernel_log_truncated(current, stderr),
            )
            current = None
        elif line == done:
            complete = True
        elif current is not None:
            target.append(line)

    if nonce is None:
        problems.append("no gpuaudit collector header in the output")
    if current is not None:
        problems.append(f"output ends inside section {current!r}")
    elif nonce is not None and not complete:
        problems.append("output ends before the collector finished")
    return Bundle(sections, complete, tuple(problems))


def parse_bundle_text(text: str) -> Bundle:
    return parse_bundle(text.splitlines())


def _kernel_log_truncated(name: str, stderr: str) -> bool:
    if name != "kernel_log":
        return False
    match = _KLOG_STATS.search(stderr)
    return match is not None and int(match.group(1)) > int(match.group(2))
