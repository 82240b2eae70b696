"""JSON (de)serialisation of the model's frozen dataclasses.

Dataclasses become objects, enums their values, tuples lists; reading back follows the type
hints, so a snapshot written by an older gpuaudit (fewer fields) still loads, and unknown
fields are ignored.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from enum import Enum
from typing import Any, Union


def to_jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    return value


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
