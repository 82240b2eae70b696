"""GPUAUDIT_PREVIOUS as plain pyinfra reads it (deploys/audit.py): a previous run that is the
run being written fails the register step with one line, never a traceback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuaudit import deploy
from gpuaudit.model.status import unreachable_snapshot
from gpuaudit.report.run import RunDir


class _Host:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def log_styled(self, text: str, **_: Any) -> None:
        self.lines.append(text)


def test_a_previous_run_that_is_this_run_fails_the_step_with_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    run = RunDir(tmp_path / "run")
    run.hosts_dir.mkdir(parents=True)
    run.write_snapshot(unreachable_snapshot("h1", "connection refused"))
    monkeypatch.setattr(deploy, "account_for_hosts", lambda state, run: None)
    scope = deploy.pyinfra_scope([])  # not this test process's command line
    monkeypatch.setattr(deploy, "pyinfra_scope", lambda: scope)
    monkeypatch.setenv("GPUAUDIT_PREVIOUS", str(run.path / "hosts" / ".."))
    host = _Host()
    assert deploy.write_register(object(), host, run) is False  # type: ignore[arg-type]
    (line,) = host.lines
    assert "is the run being reported" in line
    assert "\n" not in line
    assert not run.register_path.exists()
