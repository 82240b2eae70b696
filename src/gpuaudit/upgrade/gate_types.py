"""The values a gate hands on: one :class:`GateCheck` per check, and the :class:`GateResult`
that :func:`combine` makes of them (see :mod:`gpuaudit.upgrade.gates` for what each outcome
means for the rollout)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from gpuaudit.model.jsonable import to_jsonable

__all__ = ["CheckOutcome", "GateCheck", "GateOutcome", "GateResult", "combine", "names"]

GateOutcome = Literal["pass", "fail", "inconclusive"]
CheckOutcome = Literal["pass", "fail", "inconclusive", "not_checked"]
# How many events or GPUs a detail names before it says "and N more".
SHOWN = 5


@dataclass(frozen=True)
class GateCheck:
    """One check of a gate: what was compared (``detail``, plain words) and the values."""

    name: str
    outcome: CheckOutcome
    detail: str
    evidence: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "outcome": self.outcome,
            "detail": self.detail,
            "evidence": to_jsonable(dict(self.evidence)),
        }


@dataclass(frozen=True)
class GateResult:
    outcome: GateOutcome
    checks: tuple[GateCheck, ...]

    def with_outcome(self, outcome: CheckOutcome) -> tuple[GateCheck, ...]:
        return tuple(c for c in self.checks if c.outcome == outcome)

    @property
    def failed(self) -> tuple[GateCheck, ...]:
        return self.with_outcome("fail")

    @property
    def inconclusive(self) -> tuple[GateCheck, ...]:
        return self.with_outcome("inconclusive")

    @property
    def not_checked(self) -> tuple[GateCheck, ...]:
        return self.with_outcome("not_checked")

    def summary(self) -> str:
        """The checks that decided the outcome, in one line."""
        deciding = self.failed or self.inconclusive
        if not deciding:
            return f"{self.outcome}: " + "; ".join(c.name for c in self.checks)
        return f"{self.outcome}: " + "; ".join(f"{c.name}: {c.detail}" for c in deciding)

    def to_dict(self) -> dict[str, Any]:
        return {"outcome": self.outcome, "checks": [c.to_dict() for c in self.checks]}


def combine(checks: Iterable[GateCheck]) -> GateResult:
    """Any fail → fail; else any inconclusive → inconclusive; else pass."""
    listed = tuple(checks)
    outcomes = {c.outcome for c in listed}
    outcome: GateOutcome = (
        "fail" if "fail" in outcomes else "inconclusive" if "inconclusive" in outcomes else "pass"
    )
    return GateResult(outcome, listed)


def names(items: Sequence[str], limit: int = SHOWN) -> str:
    """'a, b, c' — the first ``limit`` items, then how many more."""
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more
