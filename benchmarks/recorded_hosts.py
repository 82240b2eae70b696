"""Simulated GPU hosts whose tools answer from recorded outputs, for the SSH benchmarks.

A simulated tool (gpuaudit.sim) is a Python process: a collection on an 8-GPU host starts
dozens of them, seconds of CPU, which on a small machine would hide the controller being
measured. So each profile is materialised once (gpuaudit.sim.host.materialize), the real
collector is run once against it with every simulated tool wrapped by a recorder, and the
host's tools are then replaced by small ``sh`` scripts that print what the simulator
answered to those very arguments (stdout, stderr, exit status). The collector still runs
for real, through sshd, in the host's environment; only the tools' answers are replayed.
Hosts of one profile share its directory: the collector only reads.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

from gpuaudit.collect import collector_script
from gpuaudit.sim.host import SimHost, materialize
from gpuaudit.sim.profiles import DEMO_FLEET, expected_gpu_count, get_profile

_SIM_SHIM = "gpuaudit.sim.tools"


@dataclass(frozen=True)
class RecordedHost:
    """A profile's simulated host whose tools replay recorded answers."""

    profile: str
    gpus: int
    sim: SimHost
    replay_bin: Path

    def env(self) -> dict[str, str]:
        """The login environment: replayed tools first, then the host's other commands."""
        return {**self.sim.env(), "PATH": f"{self.replay_bin}{os.pathsep}{self.sim.sysbin_dir}"}


def fleet_profiles() -> tuple[str, ...]:
    """The demo fleet's profiles that answer when reached (not the one that is unreachable)."""
    return tuple(
        name for name in DEMO_FLEET if "unreachable" not in (get_profile(name).get("faults") or {})
    )


def _simulated_tools(sim: SimHost) -> list[Path]:
    return sorted(
        p
        for p in sim.bin_dir.iterdir()
        if p.is_file() and _SIM_SHIM in p.read_text(errors="replace")
    )


def _recorder(tool: Path, records: Path) -> str:
    records_q = shlex.quote(str(records / tool.name))
    return (
        "#!/bin/sh\n"
        f"d=$(mktemp -d {records_q}.XXXXXX)\n"
        """for a in "$@"; do printf '%s\\0' "$a"; done >"$d/args"\n"""
        f'{shlex.quote(str(tool))} "$@" >"$d/out" 2>"$d/err" </dev/null\n'
        'rc=$?; echo "$rc" >"$d/rc"; cat "$d/out"; cat "$d/err" >&2; exit "$rc"\n'
    )


def _replayer(tool: str, records: Path) -> str:
    cases: dict[str, str] = {}
    for record in sorted(records.glob(f"{tool}.*")):
        args = (record / "args").read_bytes().decode().split("\0")[:-1]
        out, err = record / "out", record / "err"
        steps = [f"cat {shlex.quote(str(out))}"] if out.stat().st_size else []
        if err.stat().st_size:
            steps.append(f"cat {shlex.quote(str(err))} >&2")
        steps.append(f"exit {int((record / 'rc').read_text())}")
        cases.setdefault(" ".join(args), "; ".join(steps))
    body = "".join(f"  {shlex.quote(key)}) {steps} ;;\n" for key, steps in cases.items())
    return (
        f"#!/bin/sh\n# {tool}: answers recorded from the simulator\n"
        f'case "$*" in\n{body}esac\n'
        f'echo "{tool}: no recorded answer for: $*" >&2; exit 1\n'
    )


def record_host(profile: str, base: Path) -> RecordedHost:
    """Materialise ``profile`` under ``base``, record its tools' answers to the collector and
    write the replaying tools."""
    sim = materialize(profile, profile, base / "sim", reset=True)
    tools = _simulated_tools(sim)
    recorders = base / "record" / profile / "bin"
    records = base / "record" / profile / "calls"
    for directory in (recorders, records):
        directory.mkdir(parents=True, exist_ok=True)
    for tool in tools:
        (recorders / tool.name).write_text(_recorder(tool, records))
        (recorders / tool.name).chmod(0o755)
    env = {**os.environ, **sim.env(), "PATH": f"{recorders}{os.pathsep}{sim.sysbin_dir}"}
    subprocess.run(["sh", "-c", collector_script("rec0")], env=env, capture_output=True, check=True)
    replay_bin = base / "replay" / profile
    replay_bin.mkdir(parents=True, exist_ok=True)
    for tool in tools:
        (replay_bin / tool.name).write_text(_replayer(tool.name, records))
        (replay_bin / tool.name).chmod(0o755)
    gpus = expected_gpu_count(get_profile(profile))
    return RecordedHost(profile=profile, gpus=gpus, sim=sim, replay_bin=replay_bin)


def record_fleet(profiles: tuple[str, ...], base: Path) -> dict[str, RecordedHost]:
    return {profile: record_host(profile, base) for profile in profiles}
