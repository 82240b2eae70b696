"""How a run ended, as the terminal is told: the summary's lines, the host counts and the open
risks at each severity, which give the exit status with or without ``--fail-on``.

It is made from the register that was just built (:meth:`AuditVerdict.of`). `gpuaudit audit`
runs pyinfra in a second process and the register is written there. That process hands the
verdict back in a small file named by ``GPUAUDIT_VERDICT_FILE``, so `gpuaudit audit` does not
read register.json back: at 10,000 hosts that is about 125 MiB of JSON, parsed only to print
a few lines. The file is sealed with the size and modification time of the register.json it
describes. Where it is missing or does not match that register.json (a register written some
other way, say), the register is read back as before.

This module imports nothing of the register or the snapshot model, so that `gpuaudit audit`
can use it and stay small.
"""

from __future__ import annotations

import json
import os
import sys
import unicodedata
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuaudit.report.layout import file_stamp

if TYPE_CHECKING:
    from gpuaudit.report.register_types import Register

VERDICT_ENV = "GPUAUDIT_VERDICT_FILE"
_SCHEMA = 1
# The severities --fail-on takes, most severe first; info findings never fail a gate.
GATE_SEVERITIES = ("critical", "high", "medium", "low")
_TOP_RISKS = 5


def count_of(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def printable(text: Any) -> str:
    """Text for the terminal: control characters (escape sequences from host names or host
    output) are shown as '?', never sent."""
    return "".join("?" if unicodedata.category(c).startswith("C") else c for c in str(text))


@dataclass(frozen=True)
class AuditVerdict:
    """What the terminal is told about a written register (see the module's text)."""

    summary: tuple[str, ...]  # the summary's lines, printable already
    hosts: int
    not_audited: int
    none_collected: bool  # there are hosts and not one of them was collected
    open_risks_at: Mapping[str, int] = field(default_factory=dict)  # --fail-on SEVERITY: n
    register: tuple[int, int] | None = None  # register.json's file_stamp, when handed over

    @classmethod
    def of(cls, register: Register) -> AuditVerdict:
        from gpuaudit.model.snapshot import HostStatus
        from gpuaudit.model.status import NOT_COLLECTED

        hosts = register.hosts
        return cls(
            summary=tuple(summary_lines(register)),
            hosts=len(hosts),
            not_audited=sum(1 for h in hosts if h.status == HostStatus.NOT_AUDITED.value),
            none_collected=bool(hosts)
            and all(HostStatus(h.status) in NOT_COLLECTED for h in hosts),
            open_risks_at={s: len(register.open_risks_at_or_above(s)) for s in GATE_SEVERITIES},
        )

    def print_summary(self, html: Path, register: Path) -> None:
        for line in self.summary:
            print(line)
        print(f"gpuaudit report: {html.resolve()}")
        print(f"gpuaudit register: {register.resolve()}")

    def status(self, fail_on: str | None) -> int:
        """The exit status of the register (`gpuaudit audit`, and `gpuaudit report
        --fail-on`): 1 where no host of it could be audited (a run or a collection job that
        reached none of its hosts, whatever the threshold), else :meth:`gate`."""
        if self.none_collected:
            print(f"gpuaudit: no host could be audited ({count_of(self.hosts, 'host')})",
                  file=sys.stderr)  # fmt: skip
            return 1
        return self.gate(fail_on)

    def gate(self, fail_on: str | None) -> int:
        """1 while open risks at ``fail_on`` or above remain (``--fail-on``), else 0. Open
        risks only: a waived risk is a decision already taken, not a reason to fail CI."""
        count = self.open_risks_at.get(fail_on, 0) if fail_on else 0
        if count:
            print(f"gpuaudit: {count} risks at {fail_on} or above", file=sys.stderr)
            return 1
        return 0

    def to_json(self) -> str:
        return json.dumps(
            {
                "schema": _SCHEMA,
                "summary": list(self.summary),
                "hosts": self.hosts,
                "not_audited": self.not_audited,
                "none_collected": self.none_collected,
                "open_risks_at": dict(self.open_risks_at),
                "register": list(self.register) if self.register else None,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> AuditVerdict:
        """ValueError when the text is not a verdict of this schema."""
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("schema") != _SCHEMA:
            raise ValueError("not a gpuaudit verdict")
        try:
            stamp = data["register"]
            return cls(
                summary=tuple(printable(line) for line in data["summary"]),
                hosts=int(data["hosts"]),
                not_audited=int(data["not_audited"]),
                none_collected=bool(data["none_collected"]),
                open_risks_at={str(k): int(v) for k, v in data["open_risks_at"].items()},
                register=(int(stamp[0]), int(stamp[1])) if stamp else None,
            )
        except (KeyError, TypeError, IndexError, AttributeError) as error:
            raise ValueError(f"not a gpuaudit verdict: {error!r}") from None


def summary_lines(register: Register) -> list[str]:
    """The terminal's few lines: hosts by status, open risks by severity, the top risks."""
    summary = register.summary
    statuses = [f"{n} {s}" for s, n in summary.hosts_by_status.items() if n]
    hosts = count_of(summary.host_count, "host")
    lines = [printable(f"gpuaudit: {hosts}: {', '.join(statuses) or 'none'}")]
    risks = summary.risks_by_status
    line = f"gpuaudit: {count_of(int(risks.get('open') or 0), 'open risk')}"
    severities = [f"{n} {s}" for s, n in summary.open_risks_by_severity.items() if n]
    if severities:
        line += ": " + ", ".join(severities)
    if risks.get("waived"):
        line += f" ({risks['waived']} waived)"
    lines.append(line)
    top = [r for r in register.risks if r.is_open][:_TOP_RISKS]  # info risks inform: not here
    for risk in top:
        where = count_of(len(risk.affected_hosts), "host")
        line = f"  {risk.severity.value:<8}  {risk.id}  {risk.title}"
        lines.append(printable(f"{line} ({where})"))
    return lines


def hand_over(register: Register, register_file: Path) -> None:
    """Write the verdict of ``register``, just written as ``register_file``, where
    ``GPUAUDIT_VERDICT_FILE`` says (nothing when it is unset). A verdict that cannot be
    written is left out: `gpuaudit audit` then reads the register back."""
    target = os.environ.get(VERDICT_ENV)
    stamp = file_stamp(register_file)
    if not target or stamp is None:
        return
    text = replace(AuditVerdict.of(register), register=stamp).to_json()
    temporary = f"{target}.tmp"
    with suppress(OSError):  # nothing to say: the reader falls back
        Path(temporary).write_text(text, encoding="utf-8")
        os.replace(temporary, target)


def taken_over(path: Path, register_file: Path) -> AuditVerdict | None:
    """The verdict handed over in ``path`` when it describes ``register_file`` as it is now;
    None otherwise (no verdict, another register, a file that is not a verdict)."""
    try:
        verdict = AuditVerdict.from_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if verdict.register is None or verdict.register != file_stamp(register_file):
        return None
    return verdict
