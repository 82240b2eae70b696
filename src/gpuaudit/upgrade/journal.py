"""The rollout journal: an append-only record of every step of a staged driver upgrade.

``<rollout dir>/journal.jsonl`` holds one JSON object a line::

    {"seq": 7, "at": "2025-01-31T10:00:00.000Z", "host": "gpu-01", "step": "install",
     "status": "done", "detail": "", "data": {"version_after": "550.127.05"}}

``host`` is null for rollout-level events (start, halt, pause, completion). Every event is
flushed and fsynced before :meth:`Journal.record` returns, so a controller killed at any moment
loses at most the event it was writing. Such a torn last line is recognised on load, ignored and
reported as a warning; :meth:`Journal.open` cuts it off before appending, so the next event
starts on a line of its own. Anything else that does not read back — a middle line that is not
JSON, an unknown step, a gap in ``seq`` — is a :class:`JournalError` naming the line, because a
controller must not resume from a history it cannot trust.

The state of a rollout is never stored on its own: :func:`build_state` derives it from the
events every time (rules below, at :class:`HostState`), so resuming and reporting read the same
history. ``rollout.json`` (:func:`write_rollout_json`) is a view of that state for other tools.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from typing import Any

JOURNAL_FILE = "journal.jsonl"

_EVENT_KEYS = frozenset({"seq", "at", "host", "step", "status", "detail", "data"})
_TIME_FORMATS = ("%Y-%m-%dT%H:%M:%S.%fZ", "%Y-%m-%dT%H:%M:%SZ")
# A torn write can leave the tail of a line as NUL bytes (blocks allocated, data not yet
# written); blank and NUL-only lines carry no event.
_BLANK = b" \t\r\x00"


class Step(str, Enum):
    """What a journal event is about; host steps in the order a host goes through them."""

    ROLLOUT = "rollout"
    PRECHECK = "precheck"
    DRAIN = "drain"
    STOP_SERVICES = "stop_services"
    UNPIN = "unpin"
    INSTALL = "install"
    PIN = "pin"
    RELOAD = "reload"
    REBOOT = "reboot"
    WAIT = "wait"
    GATE = "gate"
    START_SERVICES = "start_services"
    UNDRAIN = "undrain"
    ROLLBACK = "rollback"
    SOAK = "soak"
    HALT = "halt"
    PAUSE = "pause"


class EventStatus(str, Enum):
    STARTED = "started"
    DONE = "done"
    FAILED = "failed"
    SKIPPED = "skipped"
    INFO = "info"


class JournalError(ValueError):
    """The journal holds a line that cannot be trusted (other than a torn last line)."""

    def __init__(self, path: Path, line: int, message: str) -> None:
        super().__init__(f"{path}: line {line}: {message}")
        self.path = path
        self.line = line


def utc_iso(moment: datetime) -> str:
    """``2025-01-31T10:00:00.000Z``: UTC, milliseconds, a literal Z."""
    if moment.tzinfo is None:
        raise ValueError("timestamps must carry a time zone")
    utc = moment.astimezone(timezone.utc)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def parse_utc(text: str) -> datetime:
    """Read a timestamp written by :func:`utc_iso` (or one without fractional seconds)."""
    for fmt in _TIME_FORMATS:
        with contextlib.suppress(ValueError):
            return datetime.strptime(text, fmt).replace(tzinfo=timezone.utc)
    raise ValueError(f"not an ISO-8601 UTC timestamp ending in Z: {text!r}")


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed in the journal")


def dumps_strict(value: Any, **kwargs: Any) -> str:
    """JSON text with no NaN or Infinity, which other JSON readers reject."""
    return json.dumps(value, allow_nan=False, ensure_ascii=False, **kwargs)


@dataclass(frozen=True)
class Event:
    seq: int
    at: str
    host: str | None
    step: Step
    status: EventStatus
    detail: str = ""
    data: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "at": self.at,
            "host": self.host,
            "step": self.step.value,
            "status": self.status.value,
            "detail": self.detail,
            "data": dict(self.data),
        }

    @classmethod
    def from_json(cls, obj: Any) -> Event:
        """Validate one decoded line; ValueError says what is wrong with it."""
        if not isinstance(obj, dict):
            raise ValueError(f"an event is a JSON object, not {type(obj).__name__}")
        missing = sorted(_EVENT_KEYS - obj.keys())
        unknown = sorted(obj.keys() - _EVENT_KEYS)
        if missing or unknown:
            raise ValueError(f"missing fields {missing}, unknown fields {unknown}")
        seq, at, host, detail, data = (obj[k] for k in ("seq", "at", "host", "detail", "data"))
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
            raise ValueError(f"seq must be a positive integer, not {seq!r}")
        if not isinstance(at, str):
            raise ValueError(f"at must be a timestamp string, not {at!r}")
        parse_utc(at)
        if host is not None and (not isinstance(host, str) or not host):
            raise ValueError(f"host must be a non-empty string or null, not {host!r}")
        if not isinstance(detail, str):
            raise ValueError(f"detail must be a string, not {detail!r}")
        if not isinstance(data, dict):
            raise ValueError(f"data must be an object, not {data!r}")
        step = _enum(Step, obj["step"])
        _check_data(step, data)
        return cls(seq, at, host, step, _enum(EventStatus, obj["status"]), detail, data)


def _check_data(step: Step, data: dict[str, Any]) -> None:
    """The data keys that the rollout state reads must have the shape it expects."""
    for key in ("version_before", "pin_before", "version_after"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise ValueError(f"data.{key} must be a string or null, not {data[key]!r}")
    if step is not Step.GATE or "outcome" not in data:
        return
    checks = data.get("checks", [])
    if not isinstance(data["outcome"], str) or not isinstance(checks, list):
        raise ValueError("a gate result needs a string outcome and a list of checks")
    for number, check in enumerate(checks):
        if not (
            isinstance(check, dict)
            and isinstance(check.get("name"), str)
            and isinstance(check.get("outcome"), str)
            and isinstance(check.get("detail", ""), str)
        ):
            raise ValueError(f"data.checks[{number}] needs a string name, outcome and detail")


def _enum(kind: type[Step] | type[EventStatus], value: Any) -> Any:
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(member.value for member in kind)
        raise ValueError(f"{kind.__name__.lower()} {value!r} is not one of: {allowed}") from None


@dataclass(frozen=True)
class JournalContents:
    """What :func:`read_journal` found: the valid events, and how much of the file they fill."""

    events: tuple[Event, ...]
    warnings: tuple[str, ...]
    valid_bytes: int  # where the last valid line (with its newline) ends
    torn_bytes: int  # bytes after it that were ignored: a torn line or NUL padding
    needs_newline: bool  # the last event is whole but its newline was never written


def _lines(raw: bytes) -> Iterator[tuple[int, int, bytes]]:
    """(line number, byte offset, bytes without the newline) for each line of ``raw``."""
    offset = 0
    for number, line in enumerate(raw.split(b"\n"), 1):
        yield number, offset, line
        offset += len(line) + 1


def read_journal(directory: str | os.PathLike[str]) -> JournalContents:
    """Read and validate ``journal.jsonl`` (an absent journal reads as no events)."""
    path = Path(directory) / JOURNAL_FILE
    raw = path.read_bytes() if path.exists() else b""
    lines = [entry for entry in _lines(raw) if entry[2].strip(_BLANK)]
    events: list[Event] = []
    warnings: list[str] = []
    valid_bytes = 0
    for position, (number, offset, line) in enumerate(lines):
        try:
            obj = json.loads(line.decode("utf-8"), parse_constant=_reject_constant)
        except ValueError as error:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            if position < len(lines) - 1:
                raise JournalError(path, number, f"not a JSON event: {error}") from None
            # Only the last line can be cut short by a kill: every earlier one was fsynced
            # before the next was begun.
            warnings.append(
                f"{path}: line {number}: ignored a torn last line "
                f"({len(raw) - offset} bytes) left by an interrupted write"
            )
            break
        try:
            event = Event.from_json(obj)
        except ValueError as error:
            raise JournalError(path, number, str(error)) from None
        expected = events[-1].seq + 1 if events else 1
        if event.seq != expected:
            raise JournalError(path, number, f"seq {event.seq} where {expected} was expected")
        events.append(event)
        end = offset + len(line)
        valid_bytes = end + 1 if raw[end : end + 1] == b"\n" else end
    tail = len(raw) - valid_bytes
    if tail and not warnings:
        warnings.append(f"{path}: ignored {tail} blank or NUL bytes after the last event")
    needs_newline = bool(events) and not raw[:valid_bytes].endswith(b"\n")
    return JournalContents(tuple(events), tuple(warnings), valid_bytes, tail, needs_newline)


def _fsync_directory(directory: Path) -> None:
    # Makes a newly created journal file's name durable, not only its contents.
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class Journal:
    """The writer of one rollout's journal. Only the controller holding the lease writes."""

    def __init__(
        self,
        directory: Path,
        events: tuple[Event, ...],
        warnings: tuple[str, ...],
        clock: Callable[[], datetime],
    ) -> None:
        self.directory = directory
        self.path = directory / JOURNAL_FILE
        self.events: list[Event] = list(events)
        self.warnings = warnings
        self._clock = clock

    @classmethod
    def open(
        cls, directory: str | os.PathLike[str], *, clock: Callable[[], datetime] | None = None
    ) -> Journal:
        """Open (or start) the journal in ``directory``, repairing a torn last line.

        The torn bytes are cut off and a rollout-level ``info`` event says so, so the repair
        itself is on record."""
        folder = Path(directory)
        folder.mkdir(parents=True, exist_ok=True)
        contents = read_journal(folder)
        path = folder / JOURNAL_FILE
        created = not path.exists()
        with open(path, "ab") as handle:
            if contents.torn_bytes:
                handle.truncate(contents.valid_bytes)
            if contents.needs_newline:
                handle.write(b"\n")
            handle.flush()
            os.fsync(handle.fileno())
        if created:
            _fsync_directory(folder)
        journal = cls(folder, contents.events, contents.warnings, clock or utc_now)
        if contents.torn_bytes:
            journal.record(
                None,
                Step.ROLLOUT,
                EventStatus.INFO,
                f"discarded {contents.torn_bytes} bytes after the last event, "
                "left by an interrupted write",
                torn_bytes=contents.torn_bytes,
            )
        return journal

    @property
    def next_seq(self) -> int:
        return self.events[-1].seq + 1 if self.events else 1

    def record(
        self,
        host: str | None,
        step: Step | str,
        status: EventStatus | str,
        detail: str = "",
        **data: Any,
    ) -> Event:
        """Append one event and make it durable before returning it."""
        draft = Event(
            seq=self.next_seq,
            at=utc_iso(self._clock()),
            host=host,
            step=_enum(Step, step),
            status=_enum(EventStatus, status),
            detail=detail,
            data=data,
        )
        line = dumps_strict(draft.to_json(), separators=(",", ":")) + "\n"
        # Kept as a reader will see it (tuples become lists), after the checks a reader applies.
        event = Event.from_json(json.loads(line))
        with open(self.path, "ab") as handle:
            handle.write(line.encode("utf-8"))
            handle.flush()
            os.fsync(handle.fileno())
        self.events.append(event)
        return event


# --- The state of a rollout, derived from its events -------------------------------------


class HostOutcome(str, Enum):
    UPGRADED = "upgraded"
    ROLLED_BACK = "rolled_back"
    FAILED = "failed"
    UNTOUCHED = "untouched"
    SKIPPED = "skipped"
    RUNNING = "running"  # touched and not finished: a resumed controller carries on with it


class RolloutStatus(str, Enum):
    RUNNING = "running"
    COMPLETED = "completed"
    HALTED = "halted"
    PAUSED = "paused"


# A gate event's data is the gate's result as gates.GateResult.to_dict() writes it:
# {"outcome": "pass" | "fail" | "inconclusive", "checks": [{name, outcome, detail, evidence}]}.
@dataclass(frozen=True)
class RecordedCheck:
    name: str
    outcome: str
    detail: str = ""
    evidence: Any = None  # any JSON value the gate kept as proof


@dataclass(frozen=True)
class RecordedGate:
    outcome: str  # pass / fail / inconclusive, as the gate reported it
    checks: tuple[RecordedCheck, ...]
    at: str = ""
    detail: str = ""


@dataclass(frozen=True)
class HostState:
    """One host's progress, from its events.

    A step is *finished* when its latest event is ``done`` or ``skipped``: a resumed
    controller does not run it again. The step *in progress* is the latest one whose latest
    event is ``started``: it may have run partly, so it is the one to repeat (steps are written
    to be safe to repeat). A ``failed`` step followed by a new ``started`` is a retry.

    Outcome, first rule that applies: no events other than ``info`` → untouched; ``rollback``
    done → rolled_back; a step in progress → running; a failed step → failed; the host's own
    ``rollout`` event skipped → skipped; its ``rollout`` or ``undrain`` done → upgraded;
    otherwise running (between two steps).
    """

    name: str
    outcome: HostOutcome = HostOutcome.UNTOUCHED
    finished_steps: tuple[Step, ...] = ()
    in_progress: Step | None = None
    failed_step: Step | None = None
    version_before: str | None = None
    pin_before: str | None = None
    version_after: str | None = None
    gates: tuple[RecordedGate, ...] = ()
    events: tuple[Event, ...] = ()
    reason: str = ""

    def is_finished(self, step: Step | str) -> bool:
        return _enum(Step, step) in self.finished_steps

    def latest(self, step: Step | str) -> Event | None:
        """The step's latest event other than ``info``; None where it has none."""
        wanted = _enum(Step, step)
        return next(
            (
                e
                for e in reversed(self.events)
                if e.step is wanted and e.status is not EventStatus.INFO
            ),
            None,
        )

    @property
    def failed(self) -> bool:
        """The host failed in this rollout: rolled back, or failed and left as it stood."""
        return self.outcome in (HostOutcome.ROLLED_BACK, HostOutcome.FAILED)

    @property
    def out_of_service(self) -> bool:
        """Left out of service by this rollout: failed and not restored (left drained), or
        rolled back but not undrained. A host being upgraded is counted by the controller."""
        if self.outcome is HostOutcome.FAILED:
            return True
        return self.outcome is HostOutcome.ROLLED_BACK and not self.is_finished(Step.UNDRAIN)


@dataclass(frozen=True)
class RolloutState:
    """The whole rollout. ``status`` follows the latest rollout-level event that sets it:
    ``rollout`` started → running (also how a resume after a pause or halt is marked), done →
    completed, failed → halted; a ``halt`` or ``pause`` event of any status but skipped →
    halted or paused. ``reason`` is that event's detail (empty while running or completed)."""

    status: RolloutStatus
    reason: str
    hosts: Mapping[str, HostState]  # in the order hosts first appear in the journal
    events: tuple[Event, ...]
    warnings: tuple[str, ...] = ()

    @property
    def started_at(self) -> str | None:
        return self.events[0].at if self.events else None

    @property
    def updated_at(self) -> str | None:
        return self.events[-1].at if self.events else None

    @property
    def next_seq(self) -> int:
        return self.events[-1].seq + 1 if self.events else 1

    def host(self, name: str) -> HostState:
        """The state of ``name``; a host the journal never mentions is untouched."""
        return self.hosts.get(name) or HostState(name)


def _gate_result(event: Event) -> RecordedGate | None:
    if event.step is not Step.GATE or "outcome" not in event.data:
        return None
    checks = tuple(
        RecordedCheck(c["name"], c["outcome"], c.get("detail") or "", c.get("evidence"))
        for c in event.data.get("checks") or ()
    )
    return RecordedGate(event.data["outcome"], checks, event.at, event.detail)


def _failure_text(event: Event) -> str:
    return f"{event.step.value} failed" + (f": {event.detail}" if event.detail else "")


def _host_state(name: str, events: list[Event]) -> HostState:
    latest: dict[Step, Event] = {}
    versions: dict[str, str | None] = {}
    gates = []
    for event in events:
        if event.status is not EventStatus.INFO:
            latest[event.step] = event
        for key in ("version_before", "pin_before", "version_after"):
            if key in event.data:
                versions[key] = event.data[key]
        gate = _gate_result(event)
        if gate is not None:
            gates.append(gate)
    by_seq = sorted(latest.values(), key=lambda e: e.seq)
    finished = tuple(e.step for e in by_seq if e.status in (EventStatus.DONE, EventStatus.SKIPPED))
    # The host's own `rollout` event spans all its steps; it is never the step to repeat. A
    # reboot is part of the reload step that began it: a reload event after a reboot that only
    # started (the controller stopped during the reboot, and a resumed one repeated the reload)
    # leaves that reboot behind, never in progress.
    reload = latest.get(Step.RELOAD)
    started = [
        e
        for e in by_seq
        if e.status is EventStatus.STARTED
        and e.step is not Step.ROLLOUT
        and not (e.step is Step.REBOOT and reload is not None and reload.seq > e.seq)
    ]
    failed = [e for e in by_seq if e.status is EventStatus.FAILED]
    in_progress = started[-1] if started else None
    failure = failed[-1] if failed else None
    rollback, own, undrain = (latest.get(s) for s in (Step.ROLLBACK, Step.ROLLOUT, Step.UNDRAIN))
    reason = ""
    if not latest:
        outcome = HostOutcome.UNTOUCHED
    elif rollback is not None and rollback.status is EventStatus.DONE:
        outcome = HostOutcome.ROLLED_BACK
        cause = [e for e in failed if e.seq < rollback.seq and e.step is not Step.ROLLBACK]
        reason = _failure_text(cause[-1]) if cause else rollback.detail
    elif in_progress is not None:
        outcome = HostOutcome.RUNNING
        reason = f"{in_progress.step.value} in progress"
    elif failure is not None:
        outcome, reason = HostOutcome.FAILED, _failure_text(failure)
    elif own is not None and own.status is EventStatus.SKIPPED:
        outcome, reason = HostOutcome.SKIPPED, own.detail
    elif any(e is not None and e.status is EventStatus.DONE for e in (own, undrain)):
        outcome = HostOutcome.UPGRADED
    else:
        outcome = HostOutcome.RUNNING
    return HostState(
        name=name,
        outcome=outcome,
        finished_steps=finished,
        in_progress=in_progress.step if in_progress else None,
        failed_step=failure.step if failure else None,
        version_before=versions.get("version_before"),
        pin_before=versions.get("pin_before"),
        version_after=versions.get("version_after"),
        gates=tuple(gates),
        events=tuple(events),
        reason=reason,
    )


def build_state(
    events: tuple[Event, ...] | list[Event], warnings: tuple[str, ...] = ()
) -> RolloutState:
    """The rollout's state from its events (pure: the same events give the same state)."""
    per_host: dict[str, list[Event]] = {}
    status, reason = RolloutStatus.RUNNING, ""
    for event in events:
        if event.host is not None:
            per_host.setdefault(event.host, []).append(event)
            continue
        if event.status is EventStatus.SKIPPED:
            continue
        if event.step is Step.HALT:
            status, reason = RolloutStatus.HALTED, event.detail
        elif event.step is Step.PAUSE:
            status, reason = RolloutStatus.PAUSED, event.detail
        elif event.step is Step.ROLLOUT and event.status is not EventStatus.INFO:
            status, reason = {
                EventStatus.STARTED: (RolloutStatus.RUNNING, ""),
                EventStatus.DONE: (RolloutStatus.COMPLETED, ""),
                EventStatus.FAILED: (RolloutStatus.HALTED, event.detail),
            }[event.status]
    hosts = {name: _host_state(name, host_events) for name, host_events in per_host.items()}
    return RolloutState(status, reason, hosts, tuple(events), tuple(warnings))


def load_state(directory: str | os.PathLike[str]) -> RolloutState:
    """Read the journal in ``directory`` and derive the rollout's state from it."""
    contents = read_journal(directory)
    return build_state(contents.events, contents.warnings)


# --- rollout.json: the state as a versioned document for other tools --------------------

ROLLOUT_JSON_FILE = "rollout.json"
ROLLOUT_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class RolloutMeta:
    """What the journal does not hold: the rollout's name, target and stages.

    ``stages`` maps each stage (canary, wave-1, …) to its hosts in inventory order, so hosts
    the rollout never reached are still listed."""

    rollout_id: str
    target_version: str
    stages: Mapping[str, tuple[str, ...]]

    def __post_init__(self) -> None:
        stages = {str(stage): tuple(hosts) for stage, hosts in self.stages.items()}
        seen: dict[str, str] = {}
        for stage, hosts in stages.items():
            for host in hosts:
                if host in seen:
                    raise ValueError(f"host {host!r} is in stages {seen[host]!r} and {stage!r}")
                seen[host] = stage
        object.__setattr__(self, "stages", stages)

    @classmethod
    def coerce(cls, value: RolloutMeta | Mapping[str, Any]) -> RolloutMeta:
        if isinstance(value, RolloutMeta):
            return value
        return cls(str(value["rollout_id"]), str(value["target_version"]), value["stages"])

    def hosts_in_order(self, state: RolloutState) -> list[tuple[str, str | None]]:
        """(host, stage) for every inventory host, then any host only the journal names."""
        ordered = [(host, stage) for stage, hosts in self.stages.items() for host in hosts]
        known = {host for host, _ in ordered}
        return ordered + [(host, None) for host in state.hosts if host not in known]


def host_reason(state: RolloutState, host: HostState) -> str:
    if host.outcome is HostOutcome.UNTOUCHED and state.status in (
        RolloutStatus.HALTED,
        RolloutStatus.PAUSED,
    ):
        return f"not started: the rollout is {state.status.value}"
    return host.reason


def rollout_document(state: RolloutState, meta: RolloutMeta | Mapping[str, Any]) -> dict[str, Any]:
    """The content of ``rollout.json``."""
    meta = RolloutMeta.coerce(meta)
    hosts = []
    for name, stage in meta.hosts_in_order(state):
        host = state.host(name)
        hosts.append(
            {
                "name": name,
                "stage": stage,
                "outcome": host.outcome.value,
                "before": host.version_before,
                "after": host.version_after,
                "reason": host_reason(state, host),
                "gates": [
                    {
                        "outcome": gate.outcome,
                        "checks": [
                            {
                                "name": check.name,
                                "outcome": check.outcome,
                                "detail": check.detail,
                                "evidence": check.evidence,
                            }
                            for check in gate.checks
                        ],
                    }
                    for gate in host.gates
                ],
                "events": [
                    {
                        "at": event.at,
                        "step": event.step.value,
                        "status": event.status.value,
                        "detail": event.detail,
                    }
                    for event in host.events
                ],
            }
        )
    return {
        "schema_version": ROLLOUT_SCHEMA_VERSION,
        "rollout_id": meta.rollout_id,
        "target_version": meta.target_version,
        "status": state.status.value,
        "reason": state.reason,
        "started_at": state.started_at,
        "updated_at": state.updated_at,
        "hosts": hosts,
    }


def write_rollout_json(
    directory: str | os.PathLike[str],
    state: RolloutState,
    meta: RolloutMeta | Mapping[str, Any],
) -> Path:
    """Write ``<directory>/rollout.json`` atomically (temporary file, then rename)."""
    # Imported here: the run-directory module pulls in the audit report, which the journal's
    # writer (on every step of a rollout) does not need.
    from gpuaudit.report.run import atomic_write_text

    path = Path(directory) / ROLLOUT_JSON_FILE
    text = dumps_strict(rollout_document(state, meta), indent=2) + "\n"
    atomic_write_text(path, text)
    return path
