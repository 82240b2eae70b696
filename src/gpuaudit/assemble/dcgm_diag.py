"""The ``dcgm_diag`` section of a bundle → :class:`DcgmDiag`.

The collector runs the section only when the policy asked for a diagnostic (a level above 0),
so a bundle without it is a host the audit ran no diagnostic on: None, and no error. Unlike the
other sections, exit status 127 (dcgmi not installed) is data here: the site asked for a
diagnostic the host cannot run, which rule GA935 reports. Output the parser cannot read is
recorded in ``parse_errors["dcgm_diag"]`` and stands as a diagnostic that failed to run.
"""

from __future__ import annotations

from gpuaudit.model.snapshot import DcgmDiag, DiagRun, Section
from gpuaudit.model.status import one_line, said_by
from gpuaudit.parsers.dcgm_diag import parse_dcgm_diag_section
from gpuaudit.parsers.errors import ParseError

SECTION = "dcgm_diag"


def dcgm_diag_view(sections: dict[str, Section], errors: dict[str, str]) -> DcgmDiag | None:
    section = sections.get(SECTION)
    if section is None:
        return None
    try:
        return parse_dcgm_diag_section(section.stdout, section.stderr, section.rc)
    except ParseError as exc:
        problem = str(exc)
    except Exception as exc:  # a parser bug must cost this section, not the snapshot
        problem = f"parser failed: {type(exc).__name__}: {exc}"
    if section.rc not in (0, None):
        problem = f"exit status {section.rc}: {said_by(section) or problem}"
    errors[SECTION] = one_line(problem)
    return DcgmDiag(run=DiagRun.FAILED, level=0, reason=errors[SECTION], rc=section.rc)
