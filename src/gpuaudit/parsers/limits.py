"""How much of a host's output gpuaudit keeps: a bound per section and one for the whole output.

Host output is untrusted: a wedged tool can print without end, and a host that prints 500 MB of
"XML" must not become a 500 MB snapshot and page, nor gigabytes of controller memory. The
collector enforces both bounds on the host (``head -c``, so the excess never crosses the
network), and the bundle reader enforces them again while it decodes (for bundles from
elsewhere); ``gpuaudit inspect`` reads at most :data:`INPUT_BYTES` of a file.

What was cut is evidence: the section is marked ``truncated`` and its stderr ends with a
:func:`truncation_note` saying at how many bytes, and the bundle lists it among its problems,
which the audit reports (GA002).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# Each of a section's stdout and stderr. A large host's nvidia-smi -q -x is well under 1 MiB;
# the kernel log is bounded by lines first (collector.sh) and keeps its newest lines here.
SECTION_BYTES = 4 * 1024 * 1024
# Every section's stdout and stderr together. Once it is spent, each later stream still sends
# up to FLOOR_BYTES, so that every section can say why it failed and how far it got.
OUTPUT_BYTES = 16 * 1024 * 1024
FLOOR_BYTES = 64 * 1024
# The largest file ``gpuaudit inspect`` reads: any bundle the collector prints fits (hex
# encoded, at two characters a byte, with the floors of its ~40 streams and its markers).
INPUT_BYTES = 2 * OUTPUT_BYTES + 8 * 1024 * 1024
NOTE_PREFIX = "[gpuaudit] "


@dataclass(frozen=True)
class OutputLimits:
    """The bounds, in bytes of raw (decoded) output."""

    section_bytes: int = SECTION_BYTES
    output_bytes: int = OUTPUT_BYTES
    floor_bytes: int = FLOOR_BYTES

    def allowance(self, left: int) -> int:
        """What the next stream may send while ``left`` bytes of the whole output's bound
        remain (collector.sh's ga_allowed is the same rule)."""
        return min(self.section_bytes, max(left, self.floor_bytes))


DEFAULT_LIMITS = OutputLimits()


@dataclass(frozen=True)
class Cut:
    """One stream cut short: ``kept`` bytes of the ``printed`` (at least) the command wrote."""

    stream: str  # "stdout" | "stderr"
    kept: int
    printed: int

    def note(self) -> str:
        return truncation_note(self.stream, self.kept, self.printed)


def truncation_note(stream: str, kept: int, printed: int) -> str:
    """The line a cut section's stderr ends with, e.g. ``[gpuaudit] stdout truncated at
    4194304 bytes of 524288000``."""
    return f"{NOTE_PREFIX}{stream} truncated at {kept} bytes of {printed}"


def utf8_prefix(raw: bytes) -> bytes:
    """``raw`` without the incomplete UTF-8 sequence a byte bound may have cut at its end, so
    that cutting never invents a character that is not UTF-8."""
    end = len(raw)
    start = end
    # A sequence is at most 4 bytes: its lead byte is among the last four.
    while start > 0 and end - start < 4 and raw[start - 1] & 0xC0 == 0x80:
        start -= 1
    if start == 0:
        return raw
    lead = raw[start - 1]
    if lead < 0xC0:  # ASCII, or continuation bytes with no lead byte: nothing to complete
        return raw
    length = 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
    have = end - start + 1
    return raw[: start - 1] if have < length else raw


def read_start(path: Path, max_bytes: int) -> tuple[bytes, int]:
    """The first ``max_bytes`` of the file, and where it was cut (0: it was read whole).

    A file smaller than ``max_bytes`` costs its own size to read, not a buffer of
    ``max_bytes``."""
    with path.open("rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        raw = handle.read(min(max_bytes, size + 1))  # one more: a file that grew is noticed
        if len(raw) <= size and len(raw) < max_bytes:
            return raw, 0
        if len(raw) < max_bytes:
            raw += handle.read(max_bytes - len(raw))
        if not handle.read(1):
            return raw, 0
    raw = utf8_prefix(raw)
    return raw, len(raw)
