"""Helpers for the simulated-host tests: run a command or the collector "on" a host."""

from __future__ import annotations

import os
import subprocess

from gpuaudit.collect import collector_script
from gpuaudit.parsers.bundle import Bundle, parse_bundle_text
from gpuaudit.sim.host import SimHost


def run_on(host: SimHost, *command: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run a command "on" the simulated host, as pyinfra's connector does."""
    return subprocess.run(
        list(command),
        env={**os.environ, **host.env()},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def collect(host: SimHost, **extra_env: str) -> Bundle:
    """The real collector script, run with sh under the host's environment."""
    env = {**os.environ, **host.env(), **extra_env}
    done = subprocess.run(
        ["sh", "-c", collector_script("t1sim")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return parse_bundle_text(done.stdout)
