"""`gpuaudit audit --shards N` takes a count, and says so when it is given none; the shards' exit
statuses and their interruption (run_shards)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from gpuaudit import audit_run
from gpuaudit.audit_run import _run_pyinfra, _Stopped, run_shards
from gpuaudit.cli import main


@pytest.mark.parametrize("value", ["0", "-2", "many", "257"])
def test_a_shard_count_that_is_no_count_is_refused_before_any_run(
    value: str, tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    reports = tmp_path / "reports"
    with pytest.raises(SystemExit) as stopped:
        main(["audit", "inventory/demo.py", "--shards", value, "--reports-dir", str(reports)])
    assert stopped.value.code == 2
    assert "--shards takes a number from 1 to 256" in capsys.readouterr().err
    assert not reports.exists()  # refused before a run directory was made


def test_a_shard_killed_by_a_signal_is_the_worst_exit_status() -> None:
    """A shard the kernel killed (the OOM killer's SIGKILL) ends the run as a shell reports
    it, 128 + the signal: never as 0, which would say its hosts' pyinfra ended well."""
    killed = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]
    ended = [sys.executable, "-c", "import sys; sys.exit(1)"]
    env = dict(os.environ)
    assert run_shards([(ended, env), (killed, env)]) == 128 + signal.SIGKILL
    assert run_shards([([sys.executable, "-c", "pass"], env)]) == 0
    # The same status a run that is not sharded gives, and its hosts' not_audited say.
    assert _run_pyinfra(killed, env) == 128 + signal.SIGKILL


def test_shards_started_before_an_interruption_are_stopped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Interrupted while the shards are being started, the ones started already are stopped
    too: each runs in a session of its own, out of reach of the terminal's Ctrl-C."""
    started: list[subprocess.Popen[bytes]] = []
    real_popen = subprocess.Popen

    def popen(*args: object, **kwargs: object) -> subprocess.Popen[bytes]:
        if started:
            raise _Stopped(signal.SIGINT)  # the signal arrives as the second one starts
        started.append(real_popen(*args, **kwargs))  # type: ignore[call-overload]
        return started[-1]

    monkeypatch.setattr(audit_run.subprocess, "Popen", popen)
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    env = dict(os.environ)
    with pytest.raises(_Stopped):
        run_shards([(sleeper, env), (sleeper, env)])
    assert started[0].poll() is not None  # stopped and reaped, not left running
