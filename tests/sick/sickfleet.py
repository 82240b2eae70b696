"""Audit a small simulated fleet with the production deploy file and read what it wrote.

Each test module audits one fleet once (a pyinfra run costs seconds): several sick hosts, each
with one fault, and a healthy host that must come out untouched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuaudit.sim.profiles import get_profile

REPO = Path(__file__).resolve().parents[2]
# The rules this suite is about: a healthy host must get none of them.
SICK_HOST_RULES = frozenset(
    {"GA001", "GA002", "GA101", "GA102", "GA103", "GA104", "GA105", "GA108"}
)


def profile(base: str, **changes: Any) -> dict[str, Any]:
    """A named simulator profile with some keys replaced (faults, gpus, lspci …)."""
    result = get_profile(base)
    result.update(changes)
    return result


@dataclass(frozen=True)
class FleetRun:
    run_dir: Path
    register: dict[str, Any]
    output: str  # pyinfra's stdout and stderr, for failure messages
    hosts: dict[str, dict[str, Any]] = field(default_factory=dict)

    def snapshot_path(self, host: str) -> Path:
        for path in (self.run_dir / "hosts").glob("*.json"):
            if json.loads(path.read_text())["host"] == host:
                return path
        raise KeyError(host)

    def snapshot(self, host: str) -> dict[str, Any]:
        return dict(json.loads(self.snapshot_path(host).read_text()))

    def findings(self, host: str) -> list[dict[str, Any]]:
        return [f for f in self.register["findings"] if f["host"] == host]

    def codes(self, host: str) -> set[tuple[str, int | None]]:
        return {(f["rule"], f["gpu"]) for f in self.findings(host)}

    def finding(self, host: str, rule: str) -> dict[str, Any]:
        (found,) = [f for f in self.findings(host) if f["rule"] == rule]
        return found


def audit_fleet(
    tmp: Path, hosts: Mapping[str, dict[str, Any]], env: Mapping[str, str] | None = None
) -> FleetRun:
    """Run ``pyinfra -y <inventory> deploys/audit.py`` on simulated hosts.

    ``hosts`` maps a host name to its host data; ``sim_profile`` there may be a profile dict.
    """
    inventory = tmp / "inventory.py"
    entries = [(f"@sim/{name}", {"sim_reset": True, **data}) for name, data in hosts.items()]
    inventory.write_text(f"fleet = {entries!r}\n", encoding="utf-8")
    run_env = dict(
        os.environ,
        GPUAUDIT_SIM_DIR=str(tmp / "sim"),
        GPUAUDIT_REPORTS_DIR=str(tmp / "reports"),
        GPUAUDIT_RUN_ID="sick-run",
        **(env or {}),
    )
    run_env.pop("GPUAUDIT_RUN_DIR", None)
    result = subprocess.run(
        [sys.executable, "-m", "pyinfra", "-y", str(inventory), "deploys/audit.py"],
        cwd=REPO,
        env=run_env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = result.stdout[-6000:] + result.stderr[-6000:]
    run_dir = tmp / "reports" / "sick-run"
    register_path = run_dir / "register.json"
    # pyinfra exits 1 when a host could not connect; the register must exist whatever it says.
    assert register_path.exists(), output
    register = json.loads(register_path.read_text())
    by_name = {h["name"]: h for h in register["hosts"]}
    return FleetRun(run_dir=run_dir, register=register, output=output, hosts=by_name)
