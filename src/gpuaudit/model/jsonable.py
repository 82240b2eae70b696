"""JSON (de)serialisation of the model's frozen dataclasses.

Dataclasses become objects, enums their values, tuples lists; reading back follows the type
hints, so a snapshot written by an older gpuaudit (fewer fields) still loads, and unknown
fields are ignored.

JSON has no spelling for NaN or infinity (Python's ``Infinity`` is read by no other tool), so
:func:`to_jsonable` refuses them with a :class:`NonFiniteNumberError` naming the field: the
parsers turn such host text into ``None`` with a reason, and a non-finite number reaching the
writer is a bug to fix, not a value to write.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from enum import Enum
from typing import Any, Union


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


def to_jsonable(value: Any) -> Any:
    """``value`` as plain JSON values; raises :class:`NonFiniteNumberError` for NaN and inf."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _item(getattr(value, f.name), f.name) for f in dataclasses.fields(value)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): _item(v, str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_item(v, i) for i, v in enumerate(value)]
    if isinstance(value, float) and not math.isfinite(value):
        raise NonFiniteNumberError(value)
    return value


def _item(value: Any, key: str | int) -> Any:
    try:
        return to_jsonable(value)
    except NonFiniteNumberError as exc:
        raise exc.inside(key) from None


@functools.cache
def _fields(tp: type) -> tuple[dict[str, Any], frozenset[str]]:
    # Resolving string annotations is the expensive part of loading a snapshot, and a fleet's
    # snapshots hold thousands of objects of the same few classes: resolve once per class.
    return typing.get_type_hints(tp), frozenset(f.name for f in dataclasses.fields(tp))


def from_jsonable(tp: Any, data: Any) -> Any:
    if data is None:
        return None
    origin = typing.get_origin(tp)
    if origin is Union or origin is types.UnionType:
        options = [a for a in typing.get_args(tp) if a is not type(None)]
        return from_jsonable(options[0], data) if len(options) == 1 else data
    if origin is tuple:
        (item_type, *_rest) = typing.get_args(tp)
        return tuple(from_jsonable(item_type, v) for v in data)
    if origin is dict:
        _key_type, value_type = typing.get_args(tp)
        return {k: from_jsonable(value_type, v) for k, v in data.items()}
    if isinstance(tp, type) and issubclass(tp, Enum):
        return tp(data)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        hints, known = _fields(tp)
        return tp(**{k: from_jsonable(hints[k], v) for k, v in data.items() if k in known})
    return data
