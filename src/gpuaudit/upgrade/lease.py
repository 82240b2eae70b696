"""The controller lease: one controller at a time drives a rollout.

``<rollout dir>/lease.json`` names the controller that holds the rollout::

    {"owner": "alice@ctl-1", "pid": 4242, "host": "ctl-1",
     "acquired_at": "2025-01-31T10:00:00.000Z", "expires_at": "2025-01-31T10:05:00.000Z"}

A controller takes the lease (:func:`acquire`) before it writes to the journal, and renews it
(:meth:`Lease.renew`) well within ``ttl_seconds`` while it works. A second controller is refused
with :class:`LeaseHeld` while the holder is live. The lease can be taken over when it has
expired, or when its holder ran on this same machine and its pid is no longer running (a
controller that was killed need not be waited out). :attr:`Lease.taken_over` and
:attr:`Lease.takeover_reason` say when that happened, for the caller to record in the journal.

Every read-modify-write of ``lease.json`` happens under an exclusive ``fcntl.flock`` on
``lease.lock`` (a file that is never removed, so two processes always lock the same inode), and
``lease.json`` itself is replaced atomically, so two controllers starting at the same moment
cannot both win and a reader never sees half a lease. Like kured's lock, this guards a directory
on one filesystem; it is not a distributed lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any

from gpuaudit.upgrade.journal import parse_utc, utc_iso, utc_now

LEASE_FILE = "lease.json"
LOCK_FILE = "lease.lock"
_LEASE_KEYS = ("owner", "pid", "host", "acquired_at", "expires_at")
_LOCK_POLL_SECONDS = 0.01


class LeaseError(RuntimeError):
    """The lease could not be read, locked or kept."""


class LeaseHeld(LeaseError):
    """Another live controller holds the rollout."""

    def __init__(self, holder: str, expires_at: str, record: LeaseRecord | None = None) -> None:
        where = f" (pid {record.pid} on {record.host})" if record else ""
        super().__init__(f"the rollout is held by {holder}{where} until {expires_at}")
        self.holder = holder
        self.expires_at = expires_at
        self.record = record


class LeaseLost(LeaseError):
    """The lease this controller held has been taken over or removed."""


@dataclass(frozen=True)
class LeaseRecord:
    owner: str
    pid: int
    host: str
    acquired_at: str
    expires_at: str

    def to_json(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in _LEASE_KEYS}

    @classmethod
    def from_json(cls, obj: Any) -> LeaseRecord:
        if not isinstance(obj, dict) or sorted(obj) != sorted(_LEASE_KEYS):
            raise ValueError(f"a lease has exactly the fields {list(_LEASE_KEYS)}")
        owner, pid, host, acquired_at, expires_at = (obj[key] for key in _LEASE_KEYS)
        if not isinstance(pid, int) or isinstance(pid, bool) or pid < 1:
            raise ValueError(f"pid must be a positive integer, not {pid!r}")
        if not all(isinstance(v, str) for v in (owner, host, acquired_at, expires_at)):
            raise ValueError("owner, host, acquired_at and expires_at must be strings")
        parse_utc(acquired_at)
        parse_utc(expires_at)
        return cls(owner, pid, host, acquired_at, expires_at)

    def same_holder(self, other: LeaseRecord) -> bool:
        return (self.owner, self.pid, self.host) == (other.owner, other.pid, other.host)


def _pid_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, under another user
        return True
    return True


def _not_live_because(record: LeaseRecord, now: datetime) -> str:
    """Why ``record`` may be taken over, or "" while its holder is live."""
    if parse_utc(record.expires_at) <= now:
        return f"the lease of {record.owner} expired at {record.expires_at}"
    if record.host == socket.gethostname() and not _pid_running(record.pid):
        return f"{record.owner}'s pid {record.pid} is no longer running on {record.host}"
    return ""


def read_lease(directory: str | os.PathLike[str]) -> LeaseRecord | None:
    """The lease as it is on disk (None when nobody holds it)."""
    path = Path(directory) / LEASE_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        return LeaseRecord.from_json(json.loads(text))
    except ValueError as error:
        # Written atomically, so this is not a torn write: refuse rather than guess.
        raise LeaseError(
            f"{path} cannot be read ({error}); remove it once no controller runs this rollout"
        ) from None


@contextlib.contextmanager
def _locked(directory: Path, timeout_seconds: float) -> Iterator[None]:
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout_seconds
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LeaseError(
                        f"{directory / LOCK_FILE} stayed locked for {timeout_seconds:g}s"
                    ) from None
                time.sleep(_LOCK_POLL_SECONDS)
        yield
    finally:
        os.close(fd)  # closing the descriptor drops the lock


def _write_record(directory: Path, record: LeaseRecord) -> None:
    from gpuaudit.report.run import atomic_write_text

    atomic_write_text(directory / LEASE_FILE, json.dumps(record.to_json(), indent=2) + "\n")


class Lease:
    """A held lease. Use it as a context manager to release it on the way out."""

    def __init__(
        self,
        directory: Path,
        record: LeaseRecord,
        ttl_seconds: int,
        clock: Callable[[], datetime],
        lock_timeout: float,
        taken_over: LeaseRecord | None = None,
        takeover_reason: str = "",
    ) -> None:
        self.directory = directory
        self.record = record
        self.ttl_seconds = ttl_seconds
        self.taken_over = taken_over
        self.takeover_reason = takeover_reason
        self._clock = clock
        self._lock_timeout = lock_timeout

    def __repr__(self) -> str:
        return f"Lease({str(self.directory)!r}, owner={self.owner!r}, until={self.expires_at!r})"

    @property
    def owner(self) -> str:
        return self.record.owner

    @property
    def expires_at(self) -> str:
        return self.record.expires_at

    def renew(self) -> None:
        """Push the expiry ``ttl_seconds`` past now; LeaseLost when the lease is no longer ours."""
        with _locked(self.directory, self._lock_timeout):
            current = read_lease(self.directory)
            if current is None or current != self.record:
                holder = f"held by {current.owner}" if current else "released"
                raise LeaseLost(f"the lease on {self.directory} was {holder}")
            expires = utc_iso(self._clock() + timedelta(seconds=self.ttl_seconds))
            renewed = replace(self.record, expires_at=expires)
            _write_record(self.directory, renewed)
            self.record = renewed

    def release(self) -> bool:
        """Give the lease up; False (and nothing touched) when it is no longer ours."""
        with _locked(self.directory, self._lock_timeout):
            if read_lease(self.directory) != self.record:
                return False
            (self.directory / LEASE_FILE).unlink()
            return True

    def __enter__(self) -> Lease:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()


def acquire(
    directory: str | os.PathLike[str],
    owner: str,
    ttl_seconds: int,
    *,
    clock: Callable[[], datetime] | None = None,
    lock_timeout: float = 10.0,
) -> Lease:
    """Take the lease on the rollout in ``directory`` for this process.

    Raises LeaseHeld while another live controller holds it. A lease this same process already
    holds is renewed."""
    if not owner:
        raise ValueError("a lease needs an owner")
    if not isinstance(ttl_seconds, int) or isinstance(ttl_seconds, bool) or ttl_seconds < 1:
        raise ValueError(f"ttl_seconds must be a positive integer, not {ttl_seconds!r}")
    folder = Path(directory)
    now_of = clock or utc_now
    with _locked(folder, lock_timeout):
        current = read_lease(folder)
        now = now_of()
        mine = LeaseRecord(
            owner=owner,
            pid=os.getpid(),
            host=socket.gethostname(),
            acquired_at=utc_iso(now),
            expires_at=utc_iso(now + timedelta(seconds=ttl_seconds)),
        )
        taken_over, reason = None, ""
        if current is not None and current.same_holder(mine):
            mine = replace(mine, acquired_at=current.acquired_at)
        elif current is not None:
            reason = _not_live_because(current, now)
            if not reason:
                raise LeaseHeld(current.owner, current.expires_at, current)
            taken_over = current
        _write_record(folder, mine)
    return Lease(folder, mine, ttl_seconds, now_of, lock_timeout, taken_over, reason)
