"""dcgm-exporter on a simulated host: its systemd unit, its process as /proc shows it
(comm, cmdline, environ) and the counters file it reads.

A host that runs DCGM runs dcgm-exporter too, reading dcgm-exporter's own default counters
file (``data/monitoring/dcgm-exporter-default-counters.csv``) with the lines a site
uncomments to watch what the register checks — ECC, retired pages, NVLink errors and the
throttle counters — uncommented (the file is otherwise copied as it is). A profile's
``dcgm_exporter`` changes that: ``{"counters": FIXTURE, "uncomment": [FIELD, …], "argv":
[…]}`` names another real counters file, or ``False`` removes the exporter. The process runs
while the unit is active; stopping the unit, or the DCGM host engine its unit requires,
removes it from /proc.
"""

from __future__ import annotations

import re
from pathlib import Path

from gpuaudit.sim.fixtures import read_fixture

# Typing names for the checker only: importing typing costs each tool call milliseconds.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from gpuaudit.sim.state import State

UNIT = "dcgm-exporter"
HOST_ENGINE = "nvidia-dcgm"
PID = 2817
BINARY = "/usr/bin/dcgm-exporter"
COUNTERS_PATH = "/etc/dcgm-exporter/default-counters.csv"
DEFAULT_COUNTERS = "dcgm-exporter-default-counters.csv"
# The commented-out fields of the default file a site enables to watch the register's risks.
SITE_UNCOMMENTED = (
    "DCGM_FI_DEV_THERMAL_VIOLATION",
    "DCGM_FI_DEV_POWER_VIOLATION",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
    "DCGM_FI_DEV_RETIRED_SBE",
    "DCGM_FI_DEV_RETIRED_DBE",
    "DCGM_FI_DEV_RETIRED_PENDING",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
)
SPEC_KEYS = {"counters", "uncomment", "argv"}


def build_exporter(profile: dict[str, Any], state: State) -> dict[str, Any] | None:
    """The exporter's part of the state (None: the host runs none); adds its unit."""
    spec = profile.get("dcgm_exporter")
    services = state["services"]
    if spec is False or (spec is None and "nvidia-dcgm" not in services):
        return None
    spec = dict(spec or {})
    unknown = sorted(set(spec) - SPEC_KEYS)
    if unknown:
        raise ValueError(f"unknown dcgm_exporter key(s): {', '.join(unknown)}")
    exporter = {
        "counters": spec.get("counters", DEFAULT_COUNTERS),
        "uncomment": list(
            spec.get("uncomment", SITE_UNCOMMENTED if "counters" not in spec else ())
        ),
        "argv": list(spec.get("argv", [BINARY, "-f", COUNTERS_PATH])),
        "path": COUNTERS_PATH,
        "pid": PID,
    }
    # Without the kernel module the host engine fails, and the exporter with it.
    active = "failed" if "driver_not_loaded" in state["faults"] else "active"
    services.setdefault(UNIT, {"active": active, "enabled": "enabled"})
    return exporter


def counters_text(exporter: dict[str, Any]) -> str:
    """The counters file: the named capture with the ``uncomment`` fields' lines enabled."""
    text = read_fixture("monitoring", exporter["counters"])
    for name in exporter.get("uncomment", ()):
        text = re.sub(rf"(?m)^# ?({re.escape(name)}\s*,)", r"\1", text)
    return text


def sync_exporter(state: State, root: Path) -> None:
    """Write the counters file (once: what a command changes there stays) and the process's
    /proc entries while its unit is active."""
    exporter = state.get("dcgm_exporter")
    proc = root / "proc" / str(PID)
    running = bool(exporter) and (state["services"].get(UNIT) or {}).get("active") == "active"
    if exporter:
        counters = root / exporter["path"].lstrip("/")
        if not counters.exists():
            counters.parent.mkdir(parents=True, exist_ok=True)
            counters.write_text(counters_text(exporter), encoding="utf-8")
    if not running:
        for name in ("comm", "cmdline", "environ"):
            (proc / name).unlink(missing_ok=True)
        if proc.is_dir():
            proc.rmdir()
        return
    assert exporter is not None
    proc.mkdir(parents=True, exist_ok=True)
    (proc / "comm").write_text("dcgm-exporter\n", encoding="utf-8")
    (proc / "cmdline").write_bytes(b"".join(a.encode() + b"\0" for a in exporter["argv"]))
    (proc / "environ").write_bytes(b"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin\0")


def after_systemctl(verb: str, units: list[str], now: bool, state: State, state_path: Path) -> None:
    """After ``systemctl VERB UNITS``: the exporter's unit requires the DCGM host engine
    (``Requires=nvidia-dcgm.service``), so stopping the engine stops it too; then its process
    appears in /proc or goes with the unit."""
    from gpuaudit.sim.rootfs import NotASimulatedRoot, host_root

    stopping = verb == "stop" or (verb == "disable" and now)
    if stopping and any(u.removesuffix(".service") == HOST_ENGINE for u in units):
        unit = state["services"].get(UNIT)
        if unit is not None and unit.get("active") == "active":
            unit["active"] = "inactive"
    try:
        root = host_root(state_path)
    except NotASimulatedRoot:
        return
    sync_exporter(state, root)
