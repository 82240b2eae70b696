"""The health gate's checks that run on the host: DCGM's diagnostic and the site's command.

The controller runs each through ``pyinfra exec`` on the host, which prints the host's output
a line at a time behind the host's name (``[gpu-01] …``) and echoes the command it runs in its
own lines. What the host says must therefore be told apart from the command's text: the
diagnostic's command prints one line of its own, ``gpuaudit-gate: …``, built from pieces so
that the command's text never holds it, and only a host-prefixed line counts.

``dcgmi diag`` is judged by what it reports, not by its exit status alone: the host's answer
carries dcgmi's exit status and its whole output (base64, on that one line), read by the
audit's own parser (:mod:`gpuaudit.parsers.dcgm_diag`). A test that failed fails the check
whatever the exit status; a dcgmi that is installed but cannot reach its host engine fails
it too (the driver it was built for is gone); only a host without dcgmi is ``not_checked``.
"""

from __future__ import annotations

import base64
import binascii

from gpuaudit.model.snapshot import DcgmDiagTest, DiagStatus
from gpuaudit.parsers.dcgm_diag import parse_dcgm_diag_output
from gpuaudit.parsers.errors import ParseError
from gpuaudit.upgrade.gate_types import SHOWN, GateCheck, names

__all__ = ["ANSWER_MARK", "dcgm_diag_check", "dcgm_diag_command", "host_answer"]

# How the diagnostic's command starts its one line of answer.
ANSWER_MARK = "gpuaudit-gate: "
_MISSING = "dcgmi-missing"


def dcgm_diag_command(level: int) -> str:
    """The shell command run on the host: ``dcgmi diag -r LEVEL -j`` (the table where dcgmi
    refuses ``-j``), answered on one line. The mark is printed from two words so that the
    command's text, which pyinfra echoes, never holds it."""
    if level not in (1, 2, 3, 4):
        raise ValueError(f"dcgmi diag level {level!r} is not 1-4")
    mark = ANSWER_MARK.rstrip()
    head, tail = mark[: len(mark) // 2], mark[len(mark) // 2 :]
    return (
        f'command -v dcgmi >/dev/null 2>&1 || {{ printf "%s%s %s\\n" "{head}" "{tail}" '
        f'"{_MISSING}"; exit 0; }}; '
        f"out=$(dcgmi diag -r {level} -j 2>&1); rc=$?; "
        f'case "$out" in *"{{"*) ;; *) if [ "$rc" != 0 ]; then '
        f"out=$(dcgmi diag -r {level} 2>&1); rc=$?; fi ;; esac; "
        f'printf "%s%s rc=%s %s\\n" "{head}" "{tail}" "$rc" '
        f'"$(printf "%s" "$out" | base64 | tr -d "\\n")"'
    )


def host_answer(output: str, host: str) -> str | None:
    """The text after the mark on the host's own line of ``output`` (pyinfra's), or None
    when the host printed none. pyinfra pads host names to the longest in the inventory, so
    one space or more follow ``[host]``."""
    prefix = f"[{host}]"
    for line in output.splitlines():
        line = line.strip()
        if not line.startswith(prefix):
            continue
        # pyinfra pads the name to the inventory's longest: one space or more follow it.
        said = line[len(prefix) :].lstrip()
        if said.startswith(ANSWER_MARK):
            return said[len(ANSWER_MARK) :].strip()
    return None


def dcgm_diag_check(level: int, answer: str | None, said: str = "") -> GateCheck:
    """The check from the host's answer (:func:`host_answer`); ``said`` is what pyinfra
    printed, kept as evidence where the host gave no answer."""
    name, command = "dcgm_diag", f"dcgmi diag -r {level}"
    if answer is None:
        return GateCheck(
            name, "fail", f"{command} could not be run on the host", {"output": said[-400:]}
        )
    if answer == _MISSING:
        return GateCheck(name, "not_checked", "dcgmi is not installed", {"command": command})
    rc_word, _, encoded = answer.partition(" ")
    rc_text = rc_word.removeprefix("rc=")
    try:
        text = base64.b64decode(encoded, validate=True).decode("utf-8", "replace")
    except (binascii.Error, ValueError):
        text = ""
    rc = int(rc_text) if rc_text.isdigit() else None
    evidence: dict[str, object] = {"command": command, "exit_status": rc, "output": text[-400:]}
    try:
        read = parse_dcgm_diag_output(text) if text.strip() else None
    except ParseError:
        read = None
    if read is None or not read.tests:
        first = next((line.strip() for line in text.splitlines() if line.strip()), "nothing")
        return GateCheck(
            name, "fail", f"{command} gave no results (exit status {rc}): {first}", evidence
        )
    failed = [test for test in read.tests if _failed(test)]
    unknown = [test for test in read.tests if _unknown(test)]
    evidence["failed"] = [test.name for test in failed]
    if failed or read.runtime_error:
        what = (
            f"{len(failed)} test(s) failed: {names([t.name for t in failed], SHOWN)}"
            if failed
            else f"DCGM reported an error: {read.runtime_error}"
        )
        return GateCheck(name, "fail", f"{command}: {what}", evidence)
    if rc != 0:
        return GateCheck(
            name, "fail", f"{command} exited {rc} though no test reported a failure", evidence
        )
    if unknown:
        return GateCheck(
            name,
            "inconclusive",
            f"{command}: results DCGM words in a way never seen before: "
            f"{names([t.name for t in unknown], SHOWN)}",
            evidence,
        )
    return GateCheck(name, "pass", f"{command}: {len(read.tests)} test(s), none failed", evidence)


def _failed(test: DcgmDiagTest) -> bool:
    return test.summary is DiagStatus.FAIL or any(r.status is DiagStatus.FAIL for r in test.results)


def _unknown(test: DcgmDiagTest) -> bool:
    return any(r.status is DiagStatus.UNKNOWN for r in test.results)
