"""Benchmark deploy (ssh_round_trips.py): collect every host's sections in one remote command
(``GA_BENCH_MODE=host``, the audit's way) or in one remote command per section
(``GA_BENCH_MODE=section``).

The collector has no switch to run a single section, so each per-section command is built
from the collector itself: its helper functions (everything before its first section), the
header, that one ``ga_section`` line and the closing marker; sent packed as the audit sends
its one command. Sections the collector runs only on some hosts (the text report where the
XML failed, MIG placements, Slurm, the DCGM diagnostic) are left out: every host gets the
sections the collector always runs. Only the collection is done (sections read back from
each command's output); snapshots and the register are not built. Each host's wall time, from
its first command to its last answer, is written to ``GA_BENCH_TIMES/<host>``.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

from pyinfra import host
from pyinfra.api import FactBase
from pyinfra.operations import python

from gpuaudit.collect import collector_script, new_nonce, packed_command
from gpuaudit.deploy import calm_ssh_transport
from gpuaudit.facts.gpu import GpuAuditSections
from gpuaudit.parsers.bundle import parse_bundle

_HEADER = "printf '@@gpuaudit-collector 1 %s@@\\n' \"$N\""
_SECTION = re.compile(r"^ga_section (\w+) .*$", re.MULTILINE)


def section_commands(nonce: str) -> dict[str, str]:
    """One packed command per section the collector always runs."""
    script = collector_script(nonce)
    helpers, _, body = script.partition(_HEADER)
    return {
        m.group(1): packed_command(
            f"{helpers}{_HEADER}\n{m.group(0)}\nprintf '@@%s done@@\\n' \"$N\"\nexit 0\n"
        )
        for m in _SECTION.finditer(body)
    }


class OneCommand(FactBase[dict[str, Any]]):
    def command(self, text: str) -> str:
        return text

    def process(self, output: list[str]) -> dict[str, Any]:
        return parse_bundle(output).to_dict()


def collect(state: Any, host: Any) -> None:
    started = time.perf_counter()
    sections: dict[str, Any] = {}
    if os.environ.get("GA_BENCH_MODE") == "section":
        for command in section_commands(new_nonce()).values():
            sections.update(
                host.get_fact(OneCommand, text=command, _ignore_errors=True)["sections"]
            )
    else:
        raw = host.get_fact(GpuAuditSections, nonce=new_nonce(), packed=True, _ignore_errors=True)
        sections = raw["sections"]
    elapsed = time.perf_counter() - started
    Path(os.environ["GA_BENCH_TIMES"], host.name).write_text(f"{elapsed} {len(sections)}\n")


calm_ssh_transport(host)
python.call(name="collect the audit sections", function=collect)
