"""How a staged driver upgrade may proceed: limits, stages, drain hooks, gates, reboots.

These are the values of the site policy's top-level ``upgrade:`` section (read strictly by
:mod:`gpuaudit.policy.schema`); a policy without one gets ``UpgradeSettings()``, which upgrades
one host at a time, halts on the first failure and runs ``dcgmi diag -r 1`` as a gate.

The first name in ``stages`` is the *canary* stage: its failures are counted against
``canary_failure_budget`` and ``soak_seconds`` is waited after it; the later stages are the
*waves*, whose failures together are counted against ``failure_budget``.

The checks live here as plain functions (``max_unavailable_problem``, ``stages_problem``,
``drain_problems``, ``gate_problems``) so the policy loader reports the same mistakes with the
file, line and column that constructing a settings object in code reports as a ValueError.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "DCGM_DIAG_LEVELS",
    "DEFAULT_STAGES",
    "DRAIN_KINDS",
    "REBOOT_MODES",
    "DrainKind",
    "DrainSettings",
    "GateSettings",
    "RebootMode",
    "UpgradeSettings",
    "drain_problems",
    "gate_problems",
    "max_unavailable_problem",
    "stages_problem",
]

DrainKind = Literal["none", "kubectl", "slurm", "command"]
RebootMode = Literal["auto", "always", "never"]
DRAIN_KINDS: tuple[DrainKind, ...] = ("none", "kubectl", "slurm", "command")
REBOOT_MODES: tuple[RebootMode, ...] = ("auto", "always", "never")
DEFAULT_STAGES = ("canary", "wave1", "wave2", "wave3")
# dcgmi diag -r 1 (quick, seconds) .. 4 (extended, hours); None runs no diagnostic.
DCGM_DIAG_LEVELS = (1, 2, 3, 4)

_PERCENT = re.compile(r"^(\d+)%$")
# Stage names are inventory group names: pyinfra groups are Python identifiers in an
# inventory file, and the same names are used in reports and journal file names.
_STAGE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


def max_unavailable_problem(value: object) -> str | None:
    """Why ``value`` cannot be a ``max_unavailable`` (None: it can)."""
    if isinstance(value, bool):
        return 'must be a host count (1 or more) or a percentage such as "25%"'
    if isinstance(value, int):
        return None if value >= 1 else f"must be at least 1 host, not {value}"
    if isinstance(value, str):
        match = _PERCENT.match(value)
        if match is None:
            return f'must be a host count or a percentage such as "25%", not {value!r}'
        percent = int(match.group(1))
        if not 1 <= percent <= 100:
            return f"must be a percentage from 1% to 100%, not {value!r}"
        return None
    return 'must be a host count (1 or more) or a percentage such as "25%"'


def stages_problem(stages: Sequence[object]) -> str | None:
    """Why ``stages`` cannot be the stage order (None: it can)."""
    if not stages:
        return "must name at least one stage"
    seen: set[str] = set()
    for name in stages:
        if not isinstance(name, str) or not _STAGE_NAME.match(name):
            return f"{name!r} is not a stage name (an inventory group name such as wave1)"
        if name in seen:
            return f"{name!r} is listed twice"
        seen.add(name)
    return None


def drain_problems(
    kind: str, command: str | None, undrain_command: str | None, kubectl_context: str | None
) -> list[tuple[str, str]]:
    """(field, why) for each drain setting that does not fit the drain kind."""
    problems: list[tuple[str, str]] = []
    if kind not in DRAIN_KINDS:
        problems.append(("kind", f"must be one of {', '.join(DRAIN_KINDS)}, not {kind!r}"))
        return problems
    if kind == "command":
        # A host drained by a site command and never given back would stay out of service.
        for name, value in (("command", command), ("undrain_command", undrain_command)):
            if not value or not value.strip():
                problems.append((name, "is needed when the drain kind is command"))
    else:
        for name, value in (("command", command), ("undrain_command", undrain_command)):
            if value is not None:
                problems.append((name, "is only read when the drain kind is command"))
    if kubectl_context is not None and kind != "kubectl":
        problems.append(("kubectl_context", "is only read when the drain kind is kubectl"))
    return problems


def gate_problems(dcgm_diag_level: int | None, command: str | None) -> list[tuple[str, str]]:
    """(field, why) for each gate setting that cannot be run."""
    problems: list[tuple[str, str]] = []
    if dcgm_diag_level is not None and dcgm_diag_level not in DCGM_DIAG_LEVELS:
        problems.append(
            ("dcgm_diag_level", f"must be 1, 2, 3 or 4 (dcgmi diag -r), not {dcgm_diag_level}")
        )
    if command is not None and not command.strip():
        problems.append(("command", "must not be empty (leave it out for no site command)"))
    return problems


def _raise(what: str, problems: Sequence[tuple[str, str]]) -> None:
    if problems:
        raise ValueError("; ".join(f"{what}.{name} {why}" for name, why in problems))


def _at_least(values: dict[str, int], minimum: int) -> list[tuple[str, str]]:
    return [
        (name, f"must be an integer of at least {minimum}, not {value!r}")
        for name, value in values.items()
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum
    ]


@dataclass(frozen=True)
class DrainSettings:
    """How a host is taken out of service before its driver changes, and given back after.

    ``kubectl``: cordon and drain the node (``kubectl_context`` picks the cluster), uncordon
    after; ``slurm``: ``scontrol update state=drain`` and wait for running jobs, then resume;
    ``command``: the site's own ``command`` and ``undrain_command``; ``none``: nothing (hosts
    that run no jobs while upgraded, or a scheduler drained by hand).
    """

    kind: DrainKind = "none"
    command: str | None = None
    undrain_command: str | None = None
    timeout_seconds: int = 600
    kubectl_context: str | None = None

    def __post_init__(self) -> None:
        problems = drain_problems(
            self.kind, self.command, self.undrain_command, self.kubectl_context
        )
        problems += _at_least({"timeout_seconds": self.timeout_seconds}, 1)
        _raise("drain", problems)


@dataclass(frozen=True)
class GateSettings:
    """The health gate after a host's upgrade (see :mod:`gpuaudit.upgrade.gates`).

    ``dcgm_diag_level``: ``dcgmi diag -r LEVEL`` on the host (None: no diagnostic);
    ``command``: a site check run on the host, passing on exit status 0; ``timeout_seconds``
    bounds each of them; ``wait_for_host_seconds`` is how long a rebooted host has to answer
    again before the gate is inconclusive.
    """

    dcgm_diag_level: int | None = 1
    command: str | None = None
    timeout_seconds: int = 900
    wait_for_host_seconds: int = 900

    def __post_init__(self) -> None:
        problems = gate_problems(self.dcgm_diag_level, self.command)
        problems += _at_least(
            {
                "timeout_seconds": self.timeout_seconds,
                "wait_for_host_seconds": self.wait_for_host_seconds,
            },
            1,
        )
        _raise("gate", problems)


@dataclass(frozen=True)
class UpgradeSettings:
    """Limits and steps of a staged driver upgrade (the policy's ``upgrade:`` section)."""

    # Hosts upgraded at the same time.
    max_parallel: int = 1
    # Hosts that may be out of service at once, counting hosts already unhealthy before the
    # rollout: a count, or a percentage of the inventory's hosts ("25%", rounded down, at
    # least 1), as the GPU Operator's maxUnavailable.
    max_unavailable: int | str = 1
    # Failed hosts the waves (every stage after the first) may have before the rollout halts.
    failure_budget: int = 0
    # Failed hosts the canary stage (the first) may have before the rollout halts.
    canary_failure_budget: int = 0
    # Seconds to wait after the canary stage before the first wave starts.
    soak_seconds: int = 0
    drain: DrainSettings = field(default_factory=DrainSettings)
    gate: GateSettings = field(default_factory=GateSettings)
    # auto: reload the kernel modules, reboot only if that fails; always: reboot; never: reload
    # only (a host whose modules will not reload then fails its step).
    reboot: RebootMode = "auto"
    stages: tuple[str, ...] = DEFAULT_STAGES

    def __post_init__(self) -> None:
        problems = _at_least({"max_parallel": self.max_parallel}, 1)
        problems += _at_least(
            {
                "failure_budget": self.failure_budget,
                "canary_failure_budget": self.canary_failure_budget,
                "soak_seconds": self.soak_seconds,
            },
            0,
        )
        unavailable = max_unavailable_problem(self.max_unavailable)
        if unavailable:
            problems.append(("max_unavailable", unavailable))
        if self.reboot not in REBOOT_MODES:
            problems.append(
                ("reboot", f"must be one of {', '.join(REBOOT_MODES)}, not {self.reboot!r}")
            )
        stages = stages_problem(self.stages)
        if stages:
            problems.append(("stages", stages))
        _raise("upgrade", problems)

    @property
    def canary_stage(self) -> str:
        """The first stage: the one counted against ``canary_failure_budget``."""
        return self.stages[0]

    @property
    def last_stage(self) -> str:
        """Where hosts that no stage names go (reported as unstaged)."""
        return self.stages[-1]

    def unavailable_budget(self, total_hosts: int) -> int:
        """How many of ``total_hosts`` may be out of service at once (at least 1)."""
        if isinstance(self.max_unavailable, int):
            return self.max_unavailable
        match = _PERCENT.match(self.max_unavailable)
        assert match is not None  # checked in __post_init__
        return max(1, total_hosts * int(match.group(1)) // 100)

    def failure_budget_for(self, stage: str) -> int:
        """Failed hosts ``stage``'s part of the rollout may have before it halts."""
        return self.canary_failure_budget if stage == self.canary_stage else self.failure_budget

    def to_dict(self) -> dict[str, Any]:
        """Plain values (for a rollout journal or report)."""
        return {
            "max_parallel": self.max_parallel,
            "max_unavailable": self.max_unavailable,
            "failure_budget": self.failure_budget,
            "canary_failure_budget": self.canary_failure_budget,
            "soak_seconds": self.soak_seconds,
            "drain": {
                "kind": self.drain.kind,
                "command": self.drain.command,
                "undrain_command": self.drain.undrain_command,
                "timeout_seconds": self.drain.timeout_seconds,
                "kubectl_context": self.drain.kubectl_context,
            },
            "gate": {
                "dcgm_diag_level": self.gate.dcgm_diag_level,
                "command": self.gate.command,
                "timeout_seconds": self.gate.timeout_seconds,
                "wait_for_host_seconds": self.gate.wait_for_host_seconds,
            },
            "reboot": self.reboot,
            "stages": list(self.stages),
        }
