"""Reading the model's frozen dataclasses back from JSON, checking every value against its type.

A snapshot file is JSON that a person may have edited by hand or another tool may have written,
so :func:`decode` trusts none of it. Each value is checked against the type hint of the field it
fills:

- a value of the wrong type is read as absent: ``None`` where the field may be ``None``,
  otherwise the field's default (``()``, ``{}``, ``""``, an empty object);
- a list element or an object's entry of the wrong type is left out of its list or object;
- an object whose required field (one without a default, such as a GPU's ``index``) is missing
  or of the wrong type cannot be built, and is left out of the list or object holding it;
- numbers must be finite and within ±2**64 (no reading or counter a tool prints is larger);
  ``true`` / ``false`` are not numbers and numbers are not ``true`` / ``false``; a whole-valued
  float such as ``8.0`` is read as the integer ``8`` where an integer is expected;
- a field typed ``Any`` (a host's inventory data) takes any JSON value as it is, unless it
  holds a NaN or an infinity somewhere (JSON cannot spell them, gpuaudit never writes them).

Every value read as absent or left out becomes a :class:`FieldProblem` naming where it was
(``gpus[3].temperature_c``), what the field holds and what the file had instead, so the reader
can say what it did. Fields the model does not know are ignored and missing fields with a
default take it: snapshots written by older and newer gpuaudit versions of the same schema
still load.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import types
import typing
from collections.abc import Iterable
from enum import Enum
from typing import Any, Union

# The largest magnitude a number may have: 64-bit counters are the largest values tools print.
NUMBER_LIMIT = 2**64
_PLAIN_KEY = re.compile(r"[\w.#:/@+-]{1,80}")
_SHOWN_CHARS = 60


@dataclasses.dataclass(frozen=True)
class FieldProblem:
    """One value of a JSON document that did not fit the field it was meant for."""

    path: str  # where: "gpus[3].temperature_c", "sysctls.vm.swappiness", "os"
    expected: str  # what the field holds: "a number", "an object", "one of ok, degraded"
    got: str  # what the document had: "'hot'", "null", "a list", "nothing"
    # The list element or object entry left out because of it (it may be ``path`` itself);
    # empty when only this field was read as absent.
    left_out: str = ""

    def __str__(self) -> str:
        text = f"field {self.path}: expected {self.expected}, got {self.got}"
        if self.left_out == self.path:
            return f"{text}; left out"
        return f"{text}; {self.left_out} left out" if self.left_out else text


def join_path(path: str, key: str | int) -> str:
    """The path of ``key`` inside ``path``: ``gpus[3]``, ``gpus[3].name``, ``legend['a b']``."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    if _PLAIN_KEY.fullmatch(key):
        return f"{path}.{key}" if path else key
    shown = key if len(key) <= _SHOWN_CHARS else key[:_SHOWN_CHARS] + "…"
    return f"{path}[{shown!r}]"


def describe_value(value: Any) -> str:
    """A short, one-line account of a JSON value, for a :class:`FieldProblem`."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        shown = value if len(value) <= _SHOWN_CHARS else value[:_SHOWN_CHARS] + "…"
        return repr(shown)
    if isinstance(value, int):
        digits = len(str(abs(value)))
        return repr(value) if digits <= 24 else f"an integer of {digits} digits"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


class DecodeError(ValueError):
    """The document as a whole cannot be read as the type asked for."""

    def __init__(self, problem: FieldProblem) -> None:
        super().__init__(str(problem))
        self.problem = problem


def decode(tp: Any, data: Any, path: str = "") -> tuple[Any, list[FieldProblem]]:
    """Read ``data`` (parsed JSON) as a value of type ``tp``; return it and what did not fit.

    Raises DecodeError only when ``data`` itself cannot be read as ``tp`` (it is of the wrong
    type, or an object lacking a required field); every problem below that is repaired as the
    module docstring says. ``path`` names ``data`` in the problems.
    """
    problems: list[FieldProblem] = []
    try:
        value = _Reader(problems, path).read(tp, data, ())
    except _Wrong as wrong:
        raise DecodeError(wrong.problem(path)) from None
    return value, problems


# Where a value sits, as the keys leading to it; joined into text only for a problem.
_Keys = tuple[str | int, ...]


class _Wrong(Exception):
    """The value at ``keys`` does not fit; the nearest container repairs it."""

    def __init__(self, keys: _Keys, expected: str, got: Any) -> None:
        super().__init__(expected)
        self.keys, self.expected, self.got = keys, expected, got

    def problem(self, root: str, left_out: _Keys | None = None) -> FieldProblem:
        return FieldProblem(
            _joined(root, self.keys),
            self.expected,
            describe_value(self.got) if self.got is not _NOTHING else "nothing",
            "" if left_out is None else _joined(root, left_out),
        )


_NOTHING = object()


def _joined(root: str, keys: _Keys) -> str:
    path = root
    for key in keys:
        path = join_path(path, key)
    return path


# How a type hint is read: its kind, the type or types it applies to, whether None is allowed.
_Shape = tuple[str, Any, bool]


@functools.cache
def _shape(tp: Any) -> _Shape:
    if tp is Any:
        return "any", None, True
    nullable = False
    if typing.get_origin(tp) in (Union, types.UnionType):
        args = typing.get_args(tp)
        options = tuple(a for a in args if a is not type(None))
        nullable = len(options) < len(args)
        if len(options) > 1:
            return "union", options, nullable
        tp = options[0]
    origin = typing.get_origin(tp)
    if origin is tuple:
        return "list", typing.get_args(tp)[0], nullable
    if origin is dict:
        return "dict", typing.get_args(tp)[1], nullable
    if isinstance(tp, type) and issubclass(tp, Enum):
        return "enum", tp, nullable
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return "object", tp, nullable
    if tp in (str, bool, int, float):
        return tp.__name__, tp, nullable
    return "any", None, nullable


@functools.cache
def _expected(tp: Any) -> str:
    kind, arg, _nullable = _shape(tp)
    if kind == "list":
        return "a list"
    if kind in ("dict", "object"):
        return "an object"
    if kind == "enum":
        return "one of " + ", ".join(str(member.value) for member in arg)
    if kind == "union":
        return " or ".join(_expected(a) for a in arg)
    return {"str": "a string", "bool": "true or false", "int": "an integer"}.get(kind, "a number")


@functools.cache
def _fields(tp: type) -> tuple[tuple[str, Any, bool, bool], ...]:
    """(name, type hint, has a default, may be None) of each field of a dataclass.

    Resolving string annotations is the expensive part of loading a snapshot, and a fleet's
    snapshots hold thousands of objects of the same few classes: resolve once per class.
    """
    hints = typing.get_type_hints(tp)
    return tuple(
        (
            f.name,
            hints[f.name],
            f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING,
            _shape(hints[f.name])[2],
        )
        for f in dataclasses.fields(tp)
    )


class _Reader:
    def __init__(self, problems: list[FieldProblem], root: str) -> None:
        self.problems, self.root = problems, root

    def note(self, wrong: _Wrong, left_out: _Keys | None = None) -> None:
        self.problems.append(wrong.problem(self.root, left_out))

    def read(self, tp: Any, data: Any, keys: _Keys) -> Any:
        kind, arg, nullable = _shape(tp)
        if data is None:
            if nullable:
                return None
            raise _Wrong(keys, _expected(tp), None)
        if kind == "str":
            if isinstance(data, str):
                return data
        elif kind == "object":
            return self._object(arg, data, keys)
        elif kind == "list":
            return self._list(arg, data, keys)
        elif kind == "dict":
            return self._dict(arg, data, keys)
        elif kind == "any":
            where = _non_finite(data)
            if where is None:
                return data
            raise _Wrong((*keys, *where), "a finite number", _get(data, where))
        elif kind == "enum":
            if isinstance(data, str) and data in arg._value2member_map_:
                return arg(data)
        elif kind == "union":
            return self._first_fit(arg, data, keys)
        else:
            return _number_or_bool(kind, data, keys)
        raise _Wrong(keys, _expected(tp), data)

    def _list(self, item_type: Any, data: Any, keys: _Keys) -> tuple[Any, ...]:
        if not isinstance(data, list):
            raise _Wrong(keys, "a list", data)
        items = []
        for index, item in enumerate(data):
            try:
                items.append(self.read(item_type, item, (*keys, index)))
            except _Wrong as wrong:
                self.note(wrong, left_out=(*keys, index))
        return tuple(items)

    def _dict(self, value_type: Any, data: Any, keys: _Keys) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise _Wrong(keys, "an object", data)
        entries = {}
        for key, value in data.items():
            try:
                entries[key] = self.read(value_type, value, (*keys, key))
            except _Wrong as wrong:
                self.note(wrong, left_out=(*keys, key))
        return entries

    def _object(self, tp: type, data: Any, keys: _Keys) -> Any:
        if not isinstance(data, dict):
            raise _Wrong(keys, "an object", data)
        values: dict[str, Any] = {}
        for name, hint, has_default, nullable in _fields(tp):
            if name not in data:
                if has_default:
                    continue
                if nullable:
                    values[name] = None
                    continue
                raise _Wrong((*keys, name), _expected(hint), _NOTHING)
            try:
                values[name] = self.read(hint, data[name], (*keys, name))
            except _Wrong as wrong:
                if not has_default and not nullable:  # without this field there is no object
                    raise
                self.note(wrong)
                if not has_default:
                    values[name] = None
        return tp(**values)

    def _first_fit(self, options: tuple[Any, ...], data: Any, keys: _Keys) -> Any:
        for option in options:
            try:
                return _Reader([], self.root).read(option, data, keys)
            except _Wrong:
                continue
        raise _Wrong(keys, " or ".join(_expected(o) for o in options), data)


def _non_finite(data: Any) -> _Keys | None:
    """The keys leading to the first NaN or infinity inside ``data``; None when it has none."""
    if isinstance(data, float):
        return None if math.isfinite(data) else ()
    items: Iterable[tuple[str | int, Any]]
    if isinstance(data, list):
        items = enumerate(data)
    elif isinstance(data, dict):
        items = data.items()
    else:
        return None
    for key, item in items:
        where = _non_finite(item)
        if where is not None:
            return (key, *where)
    return None


def _get(data: Any, keys: _Keys) -> Any:
    for key in keys:
        data = data[key]
    return data


def _number_or_bool(kind: str, data: Any, keys: _Keys) -> Any:
    if kind == "bool":
        if isinstance(data, bool):
            return data
        raise _Wrong(keys, "true or false", data)
    if isinstance(data, bool) or not isinstance(data, (int, float)):
        raise _Wrong(keys, "an integer" if kind == "int" else "a number", data)
    if kind == "int":
        if isinstance(data, float) and data.is_integer() and abs(data) <= NUMBER_LIMIT:
            return int(data)
        if isinstance(data, int) and abs(data) <= NUMBER_LIMIT:
            return data
        if isinstance(data, int):
            raise _Wrong(keys, "an integer within ±2^64", data)
        raise _Wrong(keys, "an integer", data)
    finite = isinstance(data, int) or math.isfinite(data)
    if finite and abs(data) <= NUMBER_LIMIT:
        return data
    raise _Wrong(keys, "a finite number within ±2^64", data)
