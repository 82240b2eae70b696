"""Fixtures for the simulated-host tests: a private simulator directory per test."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gpuaudit.sim.host import SimHost, materialize


@pytest.fixture
def sim_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "sim"
    monkeypatch.setenv("GPUAUDIT_SIM_DIR", str(directory))
    return directory


@pytest.fixture
def make_host(sim_dir: Path) -> Callable[..., SimHost]:
    def make(name: str, profile: str | dict | None = None, reset: bool = False) -> SimHost:
        return materialize(name, profile if profile is not None else name, sim_dir, reset=reset)

    return make
