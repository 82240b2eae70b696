"""Turning the text GPU tools print into values, and telling apart the ways a value is missing.

Every NVIDIA output format (``-q -x`` XML, ``-q`` text, ``--query-gpu`` CSV, the default table)
prints numbers with their unit (``80 MiB``, ``70.50 W``, ``16x``) and, where there is no value,
one of a handful of spellings. Those spellings mean different things to an audit:

- ``N/A`` / ``[N/A]``: the value does not apply to this GPU or mode (``not_applicable``), e.g.
  utilisation of a GPU in MIG mode, remapped rows on a Volta;
- ``[Not Supported]`` / ``Not Supported`` / ``Requested functionality has been deprecated``:
  the driver or the product cannot report it (``not_supported``);
- ``Unknown Error``, ``GPU is lost``, ``Insufficient Permissions``, ``ERR!``, or any text that is
  not a value of the expected kind: the tool tried and failed (``unreadable``).

:class:`FieldReader` converts printed text into values and records, per field, which of the
three it was when there was text but no value (``Gpu.unavailable``).

Every number read is finite and within ±2**64 (64-bit counters are the largest values GPU tools
print): ``1e999``, a 400-digit count or ``NaN`` is no reading, and is treated as unreadable text
rather than kept as infinity (which JSON cannot hold) or as a count no arithmetic can use. JSON
printed by host tools is read with :func:`load_host_json`, which leaves such numbers as their
text, for the same readers to judge.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from gpuaudit.model.decode import NUMBER_LIMIT

NOT_APPLICABLE = "not_applicable"
NOT_SUPPORTED = "not_supported"
UNREADABLE = "unreadable"

_REASON_BY_SPELLING = {
    "n/a": NOT_APPLICABLE,
    "none": NOT_APPLICABLE,
    "not supported": NOT_SUPPORTED,
    "requested functionality has been deprecated": NOT_SUPPORTED,
    "unknown error": UNREADABLE,
    "gpu is lost": UNREADABLE,
    "insufficient permissions": UNREADABLE,
    "err!": UNREADABLE,
    # "CUDA Version : Not Found" on a host whose driver has no CUDA user-mode part (vGPU hosts).
    "not found": NOT_APPLICABLE,
}
# Values that mean the GPU itself failed to answer, not that a feature is missing: on a core
# field (name, UUID, bus id, memory, temperature) they mark a failing reading.
GPU_ERRORS = ("unknown error", "gpu is lost", "err!")
# With an exponent: "1e999" is one (overflowing) number, not the reading 1.
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
# The largest magnitude a reading may have.
# More digits than any number within NUMBER_LIMIT has (with sign and leading zeros to spare).
_MAX_DIGITS = 40


def _spelling(value: str) -> str:
    text = value.strip().lower()
    return text[1:-1] if text.startswith("[") and text.endswith("]") else text


def is_gpu_error(value: str | None) -> bool:
    """True for the spellings that say the GPU failed to answer (``Unknown Error``, ``[Unknown
    Error]``, ``GPU is lost``, ``ERR!``), as opposed to a value that does not apply."""
    return value is not None and _spelling(value) in GPU_ERRORS


def strip_note(value: str | None) -> str | None:
    """``value`` without a bracketed note after it: ``"13.3 [Deprecated; …]"`` → ``"13.3"``.

    A value that is all brackets (``[N/A]``) is left as it is."""
    if value is None:
        return None
    text = value.strip()
    head, bracket, note = text.rpartition("[")
    head = head.strip()
    if not bracket or not head or not note.endswith("]") or "]" in note[:-1]:
        return value
    return value if "[" in head or "]" in head else head


def clean(value: str | None) -> str | None:
    """A stripped value, or ``None`` for every spelling of "no value"."""
    if value is None:
        return None
    value = value.strip()
    return None if not value or _spelling(value) in _REASON_BY_SPELLING else value


def missing_reason(value: str | None) -> str | None:
    """Why printed ``value`` is not a value; ``None`` when nothing was printed or it is a value.

    Text that is neither a value nor a known "no value" spelling is *not* judged here: only the
    caller knows whether ``"ERR!"`` or ``"fast"`` is acceptable for its field.
    """
    if value is None or not value.strip():
        return None
    return _REASON_BY_SPELLING.get(_spelling(value))


def _number(value: str | None) -> str | None:
    value = clean(value)
    if value is None:
        return None
    match = _NUMBER.search(value.replace(",", ""))
    return match.group(0) if match else None


def finite(number: float | int | None) -> float | None:
    """``number`` as a float when it is a reading (finite, within ±NUMBER_LIMIT), else None."""
    if number is None or isinstance(number, bool):
        return None
    try:
        result = float(number)
    except (OverflowError, ValueError):
        return None
    return result if math.isfinite(result) and abs(result) <= NUMBER_LIMIT else None


def bounded_int(number: int | None) -> int | None:
    """``number`` when it is within ±NUMBER_LIMIT, else None."""
    return number if number is not None and abs(number) <= NUMBER_LIMIT else None


def parse_int(value: str | None) -> int | None:
    """``"80 MiB"`` → 80, ``"16x"`` → 16, ``"N/A"`` → None (and None for no reading: ``1e999``,
    a 400-digit count)."""
    number = _number(value)
    if number is None or len(number) > _MAX_DIGITS:
        return None
    if number.lstrip("+-").isdigit():
        return bounded_int(int(number))
    as_float = finite(float(number))
    return int(as_float) if as_float is not None else None


def parse_float(value: str | None) -> float | None:
    """``"70.50 W"`` → 70.5, ``"45 C"`` → 45.0, ``"[Not Supported]"`` → None (and None for no
    reading: ``1e999``, a 400-digit number)."""
    number = _number(value)
    return finite(float(number)) if number is not None else None


def _json_number(text: str) -> float | int | str:
    """A JSON number literal as a reading, or as its text where it is none (see module doc)."""
    value = parse_int(text) if text.lstrip("-").isdigit() else parse_float(text)
    return text if value is None else value


def load_host_json(text: str, start: int = 0) -> tuple[Any, int]:
    """The JSON document at ``start`` of ``text`` and where it ends (``JSONDecoder.raw_decode``),
    with every number a reading: ``NaN``, ``Infinity`` and literals out of range are kept as
    their text. Raises ``json.JSONDecodeError`` (a ValueError) or RecursionError."""
    return _HOST_JSON.raw_decode(text, start)


_HOST_JSON = json.JSONDecoder(parse_float=_json_number, parse_int=_json_number, parse_constant=str)


def parse_flag(value: str | None) -> bool | None:
    """``Yes`` / ``Enabled`` / ``Active`` / ``On`` → True, their opposites → False."""
    value = clean(value)
    if value is None:
        return None
    lowered = value.lower()
    if lowered in ("yes", "true", "enabled", "active", "on"):
        return True
    if lowered in ("no", "false", "disabled", "not active", "off"):
        return False
    return None


def total(*values: int | None) -> int | None:
    """The sum of the values that are present; ``None`` when none is."""
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def first_present(*values: str | None) -> str | None:
    """The first real value; failing that, the first "no value" spelling (it says why)."""
    printed = [v for v in values if v is not None and v.strip()]
    return next((v for v in printed if clean(v) is not None), printed[0] if printed else None)


class FieldReader:
    """Reads printed text into field values and remembers why a printed value is not one.

    ``unavailable`` maps a field name (``"power_draw_w"``, ``"remapped_rows.pending"``) to
    ``not_applicable``, ``not_supported`` or ``unreadable``. A field whose text was not printed
    at all gets no entry: whether the tool was asked for it is the caller's business.
    """

    def __init__(self) -> None:
        self.unavailable: dict[str, str] = {}

    def note(self, field: str, raw: str | None, value: object) -> None:
        """Record why ``raw`` gave no value for ``field`` (nothing when it gave one)."""
        if value is not None or raw is None or not raw.strip():
            return
        self.unavailable.setdefault(field, missing_reason(raw) or UNREADABLE)

    def as_text(self, field: str, raw: str | None) -> str | None:
        value = clean(raw)
        self.note(field, raw, value)
        return value

    def as_int(self, field: str, raw: str | None) -> int | None:
        value = parse_int(raw)
        self.note(field, raw, value)
        return value

    def as_float(self, field: str, raw: str | None) -> float | None:
        value = parse_float(raw)
        self.note(field, raw, value)
        return value

    def as_flag(self, field: str, raw: str | None) -> bool | None:
        value = parse_flag(raw)
        self.note(field, raw, value)
        return value

    def total(self, field: str, parts: dict[str, int | None]) -> int | None:
        """Sum of ``parts`` (field → value); unavailable for the reason its parts share."""
        value = total(*parts.values())
        if value is None:
            reasons = {self.unavailable[name] for name in parts if name in self.unavailable}
            if reasons:
                self.unavailable[field] = reasons.pop() if len(reasons) == 1 else UNREADABLE
        return value


def split_gpu_header(line: str) -> tuple[int, str, str | None] | None:
    """``GPU 3: NVIDIA A100-SXM4-80GB (UUID: GPU-…)`` → (3, name, uuid); None for other lines.

    Shared by ``nvidia-smi -L``, ``nvlink -s`` / ``-e`` and ``topo -p2p`` style listings.
    String operations rather than a regex with a lazy group: host lines can be arbitrarily
    long, and this stays linear in their length.
    """
    text = line.strip()
    if not text.startswith("GPU "):
        return None
    number, colon, rest = text[4:].partition(":")
    if not colon or not number.isdigit():
        return None
    rest = rest.strip()
    head, marker, tail = rest.rpartition("(UUID:")
    if marker and tail.endswith(")") and ")" not in tail[:-1]:
        return int(number), head.strip(), tail[:-1].strip()
    return int(number), rest, None
