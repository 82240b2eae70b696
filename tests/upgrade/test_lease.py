"""The controller lease: refusal while held, takeover when expired or dead, one winner of a race."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from gpuaudit.upgrade.journal import utc_iso
from gpuaudit.upgrade.lease import (
    LEASE_FILE,
    LeaseError,
    LeaseHeld,
    LeaseLost,
    LeaseRecord,
    acquire,
    read_lease,
)

NOW = datetime(2025, 1, 31, 10, 0, tzinfo=timezone.utc)


def at(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def clock(seconds: float = 0) -> Callable[[], datetime]:
    return lambda: at(seconds)


def write_lease(directory: Path, **fields: object) -> LeaseRecord:
    record = {
        "owner": "bob@ctl-2",
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "acquired_at": utc_iso(at(-60)),
        "expires_at": utc_iso(at(240)),
        **fields,
    }
    directory.mkdir(parents=True, exist_ok=True)
    (directory / LEASE_FILE).write_text(json.dumps(record), encoding="utf-8")
    return LeaseRecord.from_json(record)


def dead_pid() -> int:
    # A child that has exited and been reaped: its pid names no process.
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)  # fmt: skip
    return int(child.stdout)


def test_acquire_writes_the_lease_file(tmp_path: Path) -> None:
    lease = acquire(tmp_path, "alice@ctl-1", 300, clock=clock())
    assert json.loads((tmp_path / LEASE_FILE).read_text(encoding="utf-8")) == {
        "owner": "alice@ctl-1",
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "acquired_at": "2025-01-31T10:00:00.000Z",
        "expires_at": "2025-01-31T10:05:00.000Z",
    }
    assert lease.taken_over is None and lease.takeover_reason == ""
    assert read_lease(tmp_path) == lease.record


def test_a_live_holder_is_named_when_a_second_controller_is_refused(tmp_path: Path) -> None:
    holder = write_lease(tmp_path)  # this test's own pid: certainly running
    with pytest.raises(LeaseHeld) as refused:
        acquire(tmp_path, "alice@ctl-1", 300, clock=clock())
    assert refused.value.holder == "bob@ctl-2"
    assert refused.value.expires_at == "2025-01-31T10:04:00.000Z"
    assert refused.value.record == holder
    assert "held by bob@ctl-2" in str(refused.value)
    assert "until 2025-01-31T10:04:00.000Z" in str(refused.value)
    assert read_lease(tmp_path) == holder


def test_a_holder_on_another_machine_is_not_judged_by_its_pid(tmp_path: Path) -> None:
    write_lease(tmp_path, host="elsewhere.invalid", pid=dead_pid())
    with pytest.raises(LeaseHeld):
        acquire(tmp_path, "alice@ctl-1", 300, clock=clock())


def test_an_expired_lease_is_taken_over(tmp_path: Path) -> None:
    old = write_lease(tmp_path, host="elsewhere.invalid", expires_at=utc_iso(at(-1)))
    lease = acquire(tmp_path, "alice@ctl-1", 300, clock=clock())
    assert lease.taken_over == old
    assert lease.takeover_reason == ("the lease of bob@ctl-2 expired at 2025-01-31T09:59:59.000Z")
    assert read_lease(tmp_path) == lease.record and lease.owner == "alice@ctl-1"


def test_a_lease_whose_pid_is_dead_on_this_machine_is_taken_over(tmp_path: Path) -> None:
    pid = dead_pid()
    old = write_lease(tmp_path, pid=pid)  # not expired
    lease = acquire(tmp_path, "alice@ctl-1", 300, clock=clock())
    assert lease.taken_over == old
    assert f"pid {pid} is no longer running" in lease.takeover_reason
    assert read_lease(tmp_path) == lease.record


def test_renew_and_release(tmp_path: Path) -> None:
    moments = iter([at(0), at(100)])
    lease = acquire(tmp_path, "alice@ctl-1", 300, clock=lambda: next(moments))
    lease.renew()
    assert lease.expires_at == "2025-01-31T10:06:40.000Z"
    assert read_lease(tmp_path) == lease.record
    assert lease.record.acquired_at == "2025-01-31T10:00:00.000Z"
    assert lease.release() is True
    assert not (tmp_path / LEASE_FILE).exists()
    assert lease.release() is False
    acquire(tmp_path, "carol@ctl-3", 300)  # free again


def test_a_lease_taken_over_cannot_be_renewed_or_released(tmp_path: Path) -> None:
    lease = acquire(tmp_path, "alice@ctl-1", 300, clock=clock())
    other = write_lease(tmp_path, host="elsewhere.invalid")
    with pytest.raises(LeaseLost, match="held by bob@ctl-2"):
        lease.renew()
    assert lease.release() is False
    assert read_lease(tmp_path) == other


def test_the_same_process_acquiring_again_renews(tmp_path: Path) -> None:
    first = acquire(tmp_path, "alice@ctl-1", 300, clock=clock())
    again = acquire(tmp_path, "alice@ctl-1", 300, clock=clock(60))
    assert again.taken_over is None
    assert again.record.acquired_at == first.record.acquired_at
    assert again.expires_at == "2025-01-31T10:06:00.000Z"


def test_context_manager_releases(tmp_path: Path) -> None:
    with acquire(tmp_path, "alice@ctl-1", 300):
        assert (tmp_path / LEASE_FILE).exists()
    assert not (tmp_path / LEASE_FILE).exists()


def test_bad_arguments_and_an_unreadable_lease(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="ttl_seconds"):
        acquire(tmp_path, "alice", 0)
    with pytest.raises(ValueError, match="owner"):
        acquire(tmp_path, "", 10)
    (tmp_path / LEASE_FILE).write_text("{not json", encoding="utf-8")
    with pytest.raises(LeaseError, match="cannot be read"):
        acquire(tmp_path, "alice", 10)


# Each racer slows down between reading the lease and writing its own, so that without the
# lock both would read "nobody holds it" and both would win. A racer that won stays alive until
# both have reported, so the loser cannot take the lease over as "pid no longer running".
RACER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import gpuaudit.upgrade.lease as lease

    rollout, me, go = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    read = lease.read_lease

    def slow_read(directory):
        found = read(directory)
        time.sleep(0.3)
        return found

    lease.read_lease = slow_read
    while not go.exists():
        time.sleep(0.001)
    try:
        lease.acquire(rollout, me, 300)
        result = "won"
    except lease.LeaseHeld as refused:
        result = "refused by " + refused.holder
    (go.parent / me).write_text(result)
    deadline = time.monotonic() + 20
    while len(list(go.parent.glob("racer-*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    """
)


def test_two_processes_racing_exactly_one_wins(tmp_path: Path) -> None:
    rollout, go = tmp_path / "rollout", tmp_path / "go"
    racers = [
        subprocess.Popen([sys.executable, "-c", RACER, str(rollout), name, str(go)])
        for name in ("racer-a", "racer-b")
    ]
    time.sleep(0.5)  # both interpreters started and waiting
    go.touch()
    for racer in racers:
        assert racer.wait(timeout=60) == 0
    results = {name: (tmp_path / name).read_text() for name in ("racer-a", "racer-b")}
    winners = [name for name, result in results.items() if result == "won"]
    assert len(winners) == 1, results
    loser = next(name for name in results if name not in winners)
    assert results[loser] == f"refused by {winners[0]}"
    held = read_lease(rollout)
    assert held is not None and held.owner == winners[0]
