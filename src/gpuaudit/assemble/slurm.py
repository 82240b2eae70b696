"""The Slurm sections of a bundle → :class:`SlurmView`.

The collector runs its Slurm sections only where ``scontrol`` or ``slurmd`` is installed, so a
bundle without them is a host that is no Slurm node: no view (None), and no error. A part that
could not be read (slurmctld not answering, no gres.conf, slurmd -G refused) leaves its field
None and says why in ``SlurmView.problems``; a parser that fails costs only its part, recorded
in the snapshot's ``parse_errors`` like any other section.

Sections (collect/collector.sh): ``slurm_node`` (scontrol show node -o <node>),
``slurm_conf`` (slurm.conf's GRES lines), ``slurm_gres_conf`` (gres.conf), ``slurmd_conf``
(slurmd -C) and ``slurmd_gres`` (slurmd -G, its stderr merged into stdout).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from gpuaudit.model.snapshot import Section, SlurmView
from gpuaudit.model.status import first_line, one_line
from gpuaudit.parsers.errors import ParseError
from gpuaudit.parsers.slurm import (
    parse_gres_conf,
    parse_scontrol_node,
    parse_slurm_conf_lines,
    parse_slurmd_gres,
    parse_slurmd_hardware,
)

SECTIONS = ("slurm_node", "slurm_conf", "slurm_gres_conf", "slurmd_conf", "slurmd_gres")
_MISSING = 127
T = TypeVar("T")


def slurm_view(sections: dict[str, Section], errors: dict[str, str]) -> SlurmView | None:
    """What Slurm believes about the host, or None where the host has no Slurm tools."""
    present = {n: sections[n] for n in SECTIONS if n in sections}
    if not present or all(s.rc == _MISSING for s in present.values()):
        return None
    problems: dict[str, str] = {}

    def part(name: str, key: str, parser: Callable[[Section], T]) -> T | None:
        section = present.get(name)
        if section is None:
            problems[key] = f"the {name} section was not collected"
            return None
        if section.rc not in (0, None):
            said = _said(section.stderr) or first_line(section.stdout)
            problems[key] = one_line(f"exit status {section.rc}" + (f": {said}" if said else ""))
            return None
        try:
            return parser(section)
        except ParseError as exc:
            errors[name] = one_line(str(exc))
        except Exception as exc:  # a parser bug must cost one part, not the snapshot
            errors[name] = one_line(f"parser failed: {type(exc).__name__}: {exc}")
        problems[key] = errors[name]
        return None

    node_name = _asked_node(present.get("slurm_node"))
    node = part("slurm_node", "node", lambda s: parse_scontrol_node(s.stdout, node_name))
    if node is None and "node" not in problems:
        problems["node"] = "scontrol listed no node record"
    gres_conf = part(
        "slurm_gres_conf", "gres_conf", lambda s: parse_gres_conf(s.stdout, _read_from(s))
    )
    conf_lines = part("slurm_conf", "slurm_conf", lambda s: parse_slurm_conf_lines(s.stdout))
    hardware = part("slurmd_conf", "slurmd_hardware", lambda s: parse_slurmd_hardware(s.stdout))
    reported = part("slurmd_gres", "slurmd_gres", lambda s: parse_slurmd_gres(s.stdout))
    return SlurmView(
        node=node,
        node_name=node_name or (node.name if node else None),
        gres_conf=gres_conf,
        slurm_conf_lines=conf_lines,
        slurmd_hardware=hardware,
        slurmd_gres=reported,
        problems=problems,
    )


# What the collector itself writes to a Slurm section's stderr, before the tool's own words.
_NOTES = ("node=", "read from ")


def _said(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if not line.startswith(_NOTES)]
    return first_line("\n".join(lines))


def _asked_node(section: Section | None) -> str | None:
    """The node name the collector asked about: its stderr's ``node=<name>`` line."""
    for line in (section.stderr if section else "").splitlines():
        if line.startswith("node="):
            return line[5:].strip() or None
    return None


def _read_from(section: Section) -> str | None:
    for line in section.stderr.splitlines():
        if line.startswith("read from "):
            return line[len("read from ") :].strip() or None
    return None
