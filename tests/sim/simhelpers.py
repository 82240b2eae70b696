"""Helpers for the simulated-host tests: run a command or the collector "on" a host."""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Iterable
from pathlib import Path

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


def collector_output(
    host: SimHost, front: Path | None = None, timeout: float = 120, **extra_env: str
) -> str:
    """The real collector script's output, run with sh under the host's environment; tools in
    ``front`` come before the host's own."""
    env = {**os.environ, **host.env(), **extra_env}
    if front is not None:
        env["PATH"] = f"{front}{os.pathsep}{host.env()['PATH']}"
    done = subprocess.run(
        ["sh", "-c", collector_script("t1sim")],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    )
    return done.stdout


def collect(host: SimHost, **extra_env: str) -> Bundle:
    """The real collector script, run with sh under the host's environment, as a bundle."""
    return parse_bundle_text(collector_output(host, **extra_env))


def machine_fingerprint(
    watched: Iterable[str], sysctls: Iterable[str] = (), dpkg: bool = False
) -> dict[str, str]:
    """What this machine's ``watched`` paths (each file below a directory too), ``sysctls``
    (``net/core/rmem_max``) and, with ``dpkg``, its package list look like now: compared
    before and after a run that must not touch this machine."""
    seen: dict[str, str] = {}
    for name in watched:
        path = Path(name)
        if path.is_dir():
            for entry in sorted(path.rglob("*")):
                seen[str(entry)] = digest(entry)
        seen[name] = digest(path)
    for key in sysctls:
        seen[key] = Path("/proc/sys", key).read_text()
    if dpkg:
        seen["dpkg"] = subprocess.run(
            ["dpkg-query", "-W"], capture_output=True, text=True, check=False
        ).stdout
    return seen


def digest(path: Path) -> str:
    """A path as a fingerprint sees it: its file's sha256, its link's target, dir or absent."""
    if path.is_symlink():
        return "link:" + os.readlink(path)
    if path.is_file():
        return hashlib.sha256(path.read_bytes()).hexdigest()
    return "dir" if path.is_dir() else "absent"
