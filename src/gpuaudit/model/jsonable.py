"""JSON (de)serialisation of the model's frozen dataclasses.

Dataclasses become objects, enums their values, tuples lists (reading them back, field by field
and with every problem named, is :mod:`gpuaudit.model.decode`'s).

JSON has no spelling for NaN or infinity (Python's ``Infinity`` is read by no other tool), so
:func:`to_jsonable` refuses them with a :class:`NonFiniteNumberError` naming the field: the
parsers turn such host text into ``None`` with a reason, and a non-finite number reaching the
writer is a bug to fix, not a value to write.

:func:`to_json_text` is ``json.dumps(to_jsonable(value), indent=1)`` byte for byte (the
snapshot files' form), written in one walk of the model: the json module's indented encoder
is pure Python, and a snapshot of an 8-GPU host is a few thousand values. Each dataclass's
field names (and their JSON spelling) are read once per class.
"""

from __future__ import annotations

import dataclasses
import json
import math
from enum import Enum
from json.encoder import encode_basestring_ascii
from typing import Any


class NonFiniteNumberError(ValueError):
    """A NaN or an infinity on its way into JSON; ``path`` says where (``gpus[0].power_draw_w``)."""

    def __init__(self, value: float, path: str = "") -> None:
        self.value, self.path = value, path
        where = f" at {path}" if path else ""
        super().__init__(f"{value!r}{where} is not a finite number, and JSON cannot hold it")

    def inside(self, key: str | int) -> NonFiniteNumberError:
        step = f"[{key}]" if isinstance(key, int) else str(key)
        joined = step + ("." if self.path and not self.path.startswith("[") else "") + self.path
        return NonFiniteNumberError(self.value, joined)


# Per class: the names of its dataclass fields, and each as a JSON object key (``"name": ``);
# None for a class whose instances are not dataclasses.
_FIELDS: dict[type, tuple[tuple[str, str], ...] | None] = {}
# Values that are their own JSON form (exactly these classes: a subclass may be an Enum).
_PLAIN = frozenset({str, int, bool, type(None)})


def _fields_of(cls: type) -> tuple[tuple[str, str], ...] | None:
    try:
        return _FIELDS[cls]
    except KeyError:
        pass
    names: tuple[tuple[str, str], ...] | None = None
    if dataclasses.is_dataclass(cls) and not issubclass(cls, type):
        names = tuple(
            (f.name, encode_basestring_ascii(f.name) + ": ") for f in dataclasses.fields(cls)
        )
    _FIELDS[cls] = names
    return names


def to_jsonable(value: Any) -> Any:
    """``value`` as plain JSON values; raises :class:`NonFiniteNumberError` for NaN and inf."""
    cls = type(value)
    if cls in _PLAIN:
        return value
    if cls is float:
        if math.isfinite(value):
            return value
        raise NonFiniteNumberError(value)
    if cls is list or cls is tuple:
        return _sequence(value)
    if cls is dict:
        return _mapping(value)
    fields = _fields_of(cls)
    if fields is not None:
        result: dict[str, Any] = {}
        name = ""
        try:
            for name, _key in fields:
                item = getattr(value, name)
                kind = type(item)
                if kind in _PLAIN or (kind is float and math.isfinite(item)):
                    result[name] = item
                else:
                    result[name] = to_jsonable(item)
        except NonFiniteNumberError as exc:
            raise exc.inside(name) from None
        return result
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return _mapping(value)
    if isinstance(value, (list, tuple)):
        return _sequence(value)
    if isinstance(value, float) and not math.isfinite(value):
        raise NonFiniteNumberError(value)
    return value


def _sequence(items: list[Any] | tuple[Any, ...]) -> list[Any]:
    result: list[Any] = []
    index = 0
    try:
        for index, item in enumerate(items):  # noqa: B007 (the index names a failure)
            kind = type(item)
            if kind in _PLAIN or (kind is float and math.isfinite(item)):
                result.append(item)
            else:
                result.append(to_jsonable(item))
    except NonFiniteNumberError as exc:
        raise exc.inside(index) from None
    return result


def _mapping(items: dict[Any, Any]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    key = ""
    try:
        for k, v in items.items():
            key = str(k)
            result[key] = to_jsonable(v)
    except NonFiniteNumberError as exc:
        raise exc.inside(key) from None
    return result


class _Unusual(Exception):
    """A value :func:`_write` leaves to the general path (json.dumps of to_jsonable)."""


def to_json_text(value: Any) -> str:
    """``json.dumps(to_jsonable(value), indent=1)``, the same text, in one walk; raises what
    that raises (:class:`NonFiniteNumberError` naming the field, TypeError for a value JSON
    has no form for)."""
    out: list[str] = []
    try:
        _write(value, "\n", out)
    except (_Unusual, NonFiniteNumberError, RecursionError):
        # Whatever the walk does not write itself, the general path writes, or refuses, as
        # it always has.
        return json.dumps(to_jsonable(value), indent=1)
    return "".join(out)


def _write(value: Any, newline: str, out: list[str]) -> None:
    """Append ``value``'s JSON to ``out``, as json.dumps(indent=1) writes it at the depth whose
    line break and indent is ``newline``.

    The array, mapping and dataclass branches frame their members alike and are written out
    each with its own loop on purpose: this walk writes every snapshot, and one loop over
    (lead, value) pairs for all three (zip and map objects per container, a pair per member)
    made it 1.3 x slower, measured on the example run's snapshots with the output unchanged."""
    cls = type(value)
    if cls is str:
        out.append(encode_basestring_ascii(value))
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif cls is int:
        out.append(int.__repr__(value))
    elif cls is float:
        if not math.isfinite(value):
            raise NonFiniteNumberError(value)
        out.append(float.__repr__(value))
    elif cls is list or cls is tuple:
        if not value:
            out.append("[]")
            return
        inner = newline + " "
        out.append("[")
        separator = inner
        for item in value:
            out.append(separator)
            separator = "," + inner
            _write(item, inner, out)
        out.append(newline + "]")
    elif cls is dict:
        if not value:
            out.append("{}")
            return
        inner = newline + " "
        out.append("{")
        separator = inner
        for key, item in value.items():
            if type(key) is not str:
                raise _Unusual
            out.append(separator)
            out.append(encode_basestring_ascii(key))
            out.append(": ")
            separator = "," + inner
            _write(item, inner, out)
        out.append(newline + "}")
    else:
        fields = _fields_of(cls)
        if fields is None:
            if isinstance(value, Enum) and type(value.value) in _PLAIN:
                _write(value.value, newline, out)
                return
            raise _Unusual
        if not fields:
            out.append("{}")
            return
        inner = newline + " "
        out.append("{")
        separator = inner
        for name, key in fields:
            out.append(separator)
            out.append(key)
            separator = "," + inner
            _write(getattr(value, name), inner, out)
        out.append(newline + "}")


def as_given_json(value: Any) -> Any:
    """A value from outside the model (an inventory's host data) in the form JSON gives back:
    tuples and sets as lists (a set's items sorted where they can be), mappings with string
    keys, and what JSON cannot hold (NaN, infinities, any other object) as its text. A
    snapshot holding it can be written, and reads back equal to what was written."""
    kind = type(value)
    if kind in _PLAIN:
        return value
    if kind is float:
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, (list, tuple)):
        return [as_given_json(item) for item in value]
    if isinstance(value, (set, frozenset)):
        items = [as_given_json(item) for item in value]
        try:
            return sorted(items)
        except TypeError:
            return sorted(items, key=repr)
    if isinstance(value, dict):
        return {str(k): as_given_json(v) for k, v in value.items()}
    return str(value)
