"""Parse warnings: what a parser met in host output and could not place.

A parser that reads past something it does not understand (a field name it does not know, a
warning printed in the middle of a listing, a kernel-log line of an unknown form) calls
:func:`warn` and goes on. Whoever runs the parsers collects the warnings with
:func:`collecting`: the snapshot builder keeps them in ``HostSnapshot.parse_warnings``, and
``gpuaudit inspect`` prints them beside what it read. Outside :func:`collecting` a warning goes
nowhere, so parsers stay plain functions of their text.

At most :data:`MAX_WARNINGS` are kept per collection, the same warning once; the last one kept
then says how many more there were.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from gpuaudit.model.snapshot import ParseWarning, parse_warning

MAX_WARNINGS = 200


@dataclass
class _Sink:
    kept: list[ParseWarning] = field(default_factory=list)
    seen: set[ParseWarning] = field(default_factory=set)
    dropped: int = 0


_SINK: ContextVar[_Sink | None] = ContextVar("gpuaudit_parse_warnings", default=None)


def warn(source: str, message: str, text: str = "", gpu: int | None = None) -> None:
    """Record that ``source`` (a format, e.g. ``"nvidia-smi -q"``) met ``text`` and could not
    place it, as ``message`` says; ``gpu`` is the GPU index where the output names one."""
    sink = _SINK.get()
    if sink is None:
        return
    item = parse_warning(source, message, text, gpu)
    if item in sink.seen:
        return
    if len(sink.kept) >= MAX_WARNINGS:
        sink.dropped += 1
        return
    sink.seen.add(item)
    sink.kept.append(item)


@contextmanager
def collecting() -> Iterator[list[ParseWarning]]:
    """Collect the warnings of the parsers run inside the block into the list it yields; when
    more than :data:`MAX_WARNINGS` came, a last entry says how many were left out."""
    sink = _Sink()
    token = _SINK.set(sink)
    result: list[ParseWarning] = []
    try:
        yield result
    finally:
        _SINK.reset(token)
        result.extend(sink.kept)
        if sink.dropped:
            result.append(parse_warning("gpuaudit", f"{sink.dropped} more parse warnings left out"))
