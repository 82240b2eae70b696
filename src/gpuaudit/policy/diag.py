"""The policy's ``dcgm_diag`` setting: which ``dcgmi diag -r`` level a host's audit runs, and
for how long the collector lets it run.

    defaults:
      dcgm_diag: {level: 1}                     # quick: deployment checks, about a minute
    groups:
      burn_in: {dcgm_diag: {level: 3, allow_long: true}}   # long: PCIe, memory, stress

Levels 2 and 3 keep every GPU of the host busy for minutes (2) to most of an hour (3), so a
site must opt in beside the level (``allow_long: true``); the policy file refuses a level 2 or
3 without it (schema.py), and a level that reaches a host without it some other way (its
inventory data) is not run: :func:`diag_request` says why, and rule GA936 reports it.
Level 4 (DCGM's "extended", an hour or more) is left to maintenance windows: not offered.
Details and sources: docs/field-guide/dcgm-diag.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

LEVELS = (0, 1, 2, 3)
LONG_LEVELS = (2, 3)
# How long the collector lets dcgmi diag run, per level (collector.sh ga_diag_bound keeps the
# same numbers for bundles collected by hand). DCGM documents about a minute for level 1,
# about two minutes for 2 and about fifteen for 3 on one GPU; the memory, PCIe and stress tests
# take longer with 8 GPUs and a loaded node, so each bound is a few times DCGM's figure.
TIMEOUT_S = {1: 120, 2: 600, 3: 2700}


@dataclass(frozen=True)
class DiagRequest:
    """What the policy asks of one host: the level to run (0: none) and, when it asked for
    a level it may not run, the level it asked for and why it is not run."""

    level: int = 0
    asked: int = 0
    refused: str = ""

    @property
    def timeout_s(self) -> int:
        return TIMEOUT_S.get(self.level, 0)


def level_problem(level: Any, allow_long: Any) -> str | None:
    """Why ``level`` (with ``allow_long``) is not a level the audit runs, or None."""
    if isinstance(level, bool) or not isinstance(level, int) or level not in LEVELS:
        return f"level must be 0 (off), 1, 2 or 3, not {level!r}"
    if level in LONG_LEVELS and allow_long is not True:
        minutes = TIMEOUT_S[level] // 60
        return (
            f"level {level} keeps every GPU busy for up to {minutes} minutes: set "
            "allow_long: true beside it to opt in"
        )
    return None


def diag_request(settings: Mapping[str, Any]) -> DiagRequest:
    """The ``dcgm_diag`` request in a host's resolved settings (policy.settings)."""
    value = settings.get("dcgm_diag")
    if not isinstance(value, Mapping):
        return DiagRequest()
    level, allow_long = value.get("level", 0), value.get("allow_long", False)
    if level in (0, None, False):
        return DiagRequest()
    problem = level_problem(level, allow_long)
    if problem is not None:
        asked = level if isinstance(level, int) and not isinstance(level, bool) else 0
        return DiagRequest(level=0, asked=asked, refused=problem)
    return DiagRequest(level=int(level), asked=int(level))
