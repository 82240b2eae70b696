"""JSON (de)serialisation of the model's frozen dataclasses.

Dataclasses become objects, enums their values, tuples lists (reading them back, field by field
and with every problem named, is :mod:`gpuaudit.model.decode`'s).

JSON has no spelling for NaN or infinity (Python's ``Infinity`` is read by no other tool), so
:func:`to_jsonable` refuses them with a :class:`NonFiniteNumberError` naming the field: the
parsers turn such host text into ``None`` with a reason, and a non-finite number reaching the
writer is a bug to fix, not a value to write.
"""

from __future__ import annotations

import dataclasses
import math
from enum import Enum
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
