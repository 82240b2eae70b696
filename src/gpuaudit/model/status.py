"""A host's status and its one-line ``status_detail``: how far the audit of a host got, and why.

Hosts that gave no bundle get their status from the connection (``connection_failed_snapshot``,
``timed_out_snapshot``) or from a collector whose output could not be read
(``failed_snapshot``). Hosts that gave one are judged by
:func:`gpuaudit.assemble.status.judge_status` once every section has been parsed;
:mod:`gpuaudit.assemble.build` lists the statuses from worst to best. A snapshot
read back from a file that held unusable values says so (``with_field_problems``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from gpuaudit.model.decode import FieldProblem
from gpuaudit.model.snapshot import HostSnapshot, HostStatus, Section

# The parse_errors key under which a snapshot read back from a file lists its unusable values.
SNAPSHOT_PROBLEMS = "snapshot"
# How many of them the register lists one by one.
_LISTED_PROBLEMS = 20
# coreutils timeout(1) exits 124 when it had to stop the command it ran.
TIMEOUT_RC = 124
# How connectors word a host refusing the audit: pyinfra's SSH connector raises "Authentication
# error (…) (Authentication failed.)", "SSH error (No authentication methods available)" and
# "SSH host key error (…)"; a private key it cannot load is "Invalid key: …".
_AUTH_FAILURE_WORDS = ("authentication", "host key", "invalid key", "permission denied")


def now_utc() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def unreachable_snapshot(
    host: str,
    detail: str,
    *,
    host_data: dict[str, Any] | None = None,
    collected_at: str | None = None,
) -> HostSnapshot:
    """A host no connection could be made to: it still appears in the report."""
    return _not_collected(host, HostStatus.UNREACHABLE, detail, host_data, collected_at)


def connection_failed_snapshot(
    host: str,
    error: str,
    *,
    host_data: dict[str, Any] | None = None,
    collected_at: str | None = None,
) -> HostSnapshot:
    """A host the audit could not log in to, from the connector's error text: ``AUTH_FAILED``
    when the host answered but refused the credentials (or its host key changed), else
    ``UNREACHABLE``. The two need different people: whoever holds the keys, or the network."""
    if any(word in error.lower() for word in _AUTH_FAILURE_WORDS):
        detail = f"the host refused the audit's credentials: {error}"
        return _not_collected(host, HostStatus.AUTH_FAILED, detail, host_data, collected_at)
    return unreachable_snapshot(host, error, host_data=host_data, collected_at=collected_at)


def timed_out_snapshot(
    host: str,
    timeout_s: int,
    *,
    host_data: dict[str, Any] | None = None,
    collected_at: str | None = None,
) -> HostSnapshot:
    """A host whose collection was stopped at the time limit; nothing it printed is kept."""
    detail = (
        f"the collection did not finish within {timeout_s}s (GPUAUDIT_TIMEOUT) and was "
        "stopped; none of its output arrived"
    )
    return _not_collected(host, HostStatus.TIMED_OUT, detail, host_data, collected_at)


def not_audited_snapshot(
    host: str,
    detail: str,
    *,
    host_data: dict[str, Any] | None = None,
    collected_at: str | None = None,
) -> HostSnapshot:
    """A host of the run that the audit never got to: the run was interrupted, or pyinfra
    ended, before the host was collected (``detail`` says which)."""
    return _not_collected(host, HostStatus.NOT_AUDITED, detail, host_data, collected_at)


def failed_snapshot(
    host: str,
    detail: str,
    *,
    host_data: dict[str, Any] | None = None,
    collected_at: str | None = None,
    sections: dict[str, Section] | None = None,
) -> HostSnapshot:
    """A host that was reached but whose collector output could not be read."""
    return _not_collected(
        host, HostStatus.COLLECTION_FAILED, detail, host_data, collected_at, sections
    )


def _not_collected(
    host: str,
    status: HostStatus,
    detail: str,
    host_data: dict[str, Any] | None,
    collected_at: str | None,
    sections: dict[str, Section] | None = None,
) -> HostSnapshot:
    return HostSnapshot(
        host=host,
        status=status,
        collected_at=collected_at or now_utc(),
        status_detail=one_line(detail),
        host_data=dict(host_data or {}),
        sections=dict(sections or {}),
    )


def with_field_problems(
    snapshot: HostSnapshot, problems: Sequence[FieldProblem], source: str
) -> HostSnapshot:
    """``snapshot`` as read from a document (``source``, e.g. a snapshot file) in which
    ``problems`` were read as absent or left out: every problem is listed in
    ``parse_errors["snapshot"]`` and the status detail starts with them, and an OK host becomes
    DEGRADED, since what the report shows of it is not all that was recorded. A host whose
    status already says it is worse off keeps that status, and its detail still comes first."""
    if not problems:
        return snapshot
    listed = "; ".join(str(p) for p in problems[:_LISTED_PROBLEMS])
    if len(problems) > _LISTED_PROBLEMS:
        listed += f"; and {len(problems) - _LISTED_PROBLEMS} more"
    count = f"{len(problems)} unusable value{'s' if len(problems) > 1 else ''}"
    said = f"{source} holds {count}, read as absent: {listed}"
    errors = dict(snapshot.parse_errors)
    errors[SNAPSHOT_PROBLEMS] = "; ".join(filter(None, (errors.get(SNAPSHOT_PROBLEMS), said)))
    if snapshot.status in (HostStatus.OK, HostStatus.DEGRADED):
        status, parts = HostStatus.DEGRADED, (said, snapshot.status_detail)
    else:
        status, parts = snapshot.status, (snapshot.status_detail, said)
    return dataclasses.replace(
        snapshot,
        status=status,
        status_detail=one_line("; ".join(p for p in parts if p)),
        parse_errors=errors,
    )


def said_by(section: Section) -> str:
    """What a failing command said, in one line: its stderr, else its stdout unless that is
    the start of partial XML or JSON (which says nothing useful as a first line)."""
    said = first_line(section.stderr, section.stdout)
    return "" if said.startswith(("<", "{", "[")) else said


def first_line(*texts: str) -> str:
    for text in texts:
        for line in (text or "").splitlines():
            if line.strip():
                return one_line(line)
    return ""


def one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


# The statuses of a host the audit has no data of: GA001 reports them, no other rule runs.
NOT_COLLECTED = frozenset(
    {
        HostStatus.UNREACHABLE,
        HostStatus.AUTH_FAILED,
        HostStatus.TIMED_OUT,
        HostStatus.COLLECTION_FAILED,
        HostStatus.NOT_AUDITED,
    }
)
