"""What a staged-upgrade rehearsal needs of a simulated host beyond its tools: the time a reboot
keeps the host down, and the upgrade faults an inventory injects.

Downtime: every reboot (``reboot``, ``shutdown -r``, ``systemctl reboot``, ``systemd-run …
reboot``) applies at once and then keeps the host down for ``reboot_seconds`` (default 3 s; host
data ``sim_reboot_seconds``): ``down_until`` is that wall-clock time, and until then the
connector refuses to connect and fails every command with "Connection refused", as an SSH host
does while it boots. Each boot gets a new ``/proc/sys/kernel/random/boot_id``, which is how a
caller tells that the host it reaches again has really rebooted.

Faults (``state.UPGRADE_FAULTS``) come from the inventory: host data ``sim_upgrade_faults:
{name: {params}}`` is copied into ``upgrade_faults`` when the host connects. The one-shot faults
(``gpu_missing_after_reboot``, ``never_comes_back``) fire at the next reboot and stay spent while
the inventory keeps saying the same thing; a changed ``sim_upgrade_faults`` arms them afresh, and
removing ``never_comes_back`` brings a host that stayed down back.

Imports stay light: the tools call into this module on every reboot, load and install.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from gpuaudit.sim.state import UPGRADE_FAULTS, edit_state, load_state, record_event

# Typing names for the checker only: importing typing costs each tool call milliseconds.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from gpuaudit.sim.state import State

DEFAULT_REBOOT_SECONDS = 3.0
_ONE_SHOT = ("gpu_missing_after_reboot", "never_comes_back")
# Real XID lines (sim/data/kernel-log, data/README.md): the "GPU at PCI" line and the XID line
# after it, moved onto the faulty GPU; XID 79 is the chia capture's XID 62 line in the kernel's
# fallen-off-the-bus form, as the demo's a100-hgx-05 has it.
_XID_LINES: dict[int, tuple[str, tuple[int, int], dict[str, object] | None]] = {
    119: ("gpud-xid119-gsp-rpc-timeout-dell-xe9680.log", (1, 3), None),
    79: (
        "issue-chia-gigahorse-301-xid31-ce2-priv-violation-xid62-xid45-dmesg.log",
        (1, 3),
        {"from": 62, "to": 79, "message": "GPU has fallen off the bus."},
    ),
}
XID_CODES = tuple(sorted(_XID_LINES))


class FaultError(ValueError):
    """Upgrade faults the simulator does not know, or with parameters it cannot use."""


def arm(state: State, faults: dict[str, Any] | None, reboot_seconds: float | None) -> bool:
    """Take the inventory's upgrade faults and reboot time into the state; True when the state
    changed (and must be saved). Refuses unknown faults with the names it knows."""
    wanted = _checked(state, dict(faults or {}))
    changed = False
    if wanted != state.get("upgrade_faults", {}):
        state["upgrade_faults"] = wanted
        state["upgrade_faults_fired"] = []
        if "never_comes_back" not in wanted and state.pop("stays_down", None):
            record_event(state, "powered on again (never_comes_back removed)")
        changed = True
    if reboot_seconds is None:
        changed = state.pop("reboot_seconds", None) is not None or changed
    elif state.get("reboot_seconds") != float(reboot_seconds):
        if float(reboot_seconds) < 0:
            raise FaultError(f"sim_reboot_seconds must not be negative, got {reboot_seconds}")
        state["reboot_seconds"] = float(reboot_seconds)
        changed = True
    return changed


def _checked(state: State, faults: dict[str, Any]) -> dict[str, Any]:
    checked: dict[str, Any] = {}
    for name, params in faults.items():
        if name not in UPGRADE_FAULTS:
            known = ", ".join(UPGRADE_FAULTS)
            raise FaultError(f"unknown simulated upgrade fault {name!r} (known: {known})")
        params = dict(params or {})
        if name == "xid_after_upgrade" and int(params.get("xid", 119)) not in _XID_LINES:
            codes = ", ".join(str(code) for code in XID_CODES)
            raise FaultError(f"xid_after_upgrade: xid {params['xid']} (the simulator has {codes})")
        if "gpu" in params and not _gpu(state, int(params["gpu"])):
            raise FaultError(f"{name}: the host has no GPU {params['gpu']}")
        checked[name] = params
    return checked


def down_reason(state: State, now: float | None = None) -> str | None:
    """Why the host does not answer now, as "the host …" ends (None when it answers)."""
    if state.get("stays_down"):
        return "did not come back after its last reboot"
    until = state.get("down_until")
    now = time.time() if now is None else now
    if until is not None and now < float(until):
        return f"is rebooting (back in {float(until) - now:.1f} s)"
    return None


def after_reboot(state: State, previous_driver: str | None) -> None:
    """What a reboot does beyond ``state.reboot``: the host is down for its reboot time with a
    new boot id, and the faults waiting for a reboot fire."""
    import uuid

    now = time.time()
    back = now + float(state.get("reboot_seconds", DEFAULT_REBOOT_SECONDS))
    state["down_until"] = back
    state["boot_time"] = int(back)
    state["boot_id"] = str(uuid.uuid4())
    if _fires(state, "never_comes_back"):
        state["stays_down"] = True
        record_event(state, "never came back from the reboot (fault never_comes_back)")
    if _fires(state, "gpu_missing_after_reboot"):
        index = int(_param(state, "gpu_missing_after_reboot", "gpu", 0))
        gpu = _gpu(state, index)
        if gpu is not None:
            gpu["lost"] = True
            record_event(state, f"GPU {index} missing after the reboot (gpu_missing_after_reboot)")
    after_driver_loaded(state, previous_driver)


def after_driver_loaded(state: State, previous: str | None) -> None:
    """The ``xid_after_upgrade`` fault, once a newer driver (or its ``version``) is loaded."""
    faults = state.get("upgrade_faults") or {}
    loaded = (state.get("nvidia") or {}).get("driver", {}).get("loaded")
    if "xid_after_upgrade" not in faults or not loaded or loaded == previous:
        return
    if not _moves_to(faults["xid_after_upgrade"], previous, loaded):
        return
    index = int(_param(state, "xid_after_upgrade", "gpu", 0))
    gpu = _gpu(state, index)
    if gpu is None:
        return
    code = int(_param(state, "xid_after_upgrade", "xid", 119))
    from gpuaudit.sim.fixtures import read_fixture, rewrite_kernel_lines

    fixture, (first, last), rewrite = _XID_LINES[code]
    captured = read_fixture("kernel-log", fixture).splitlines()
    picked = [captured[first - 1], captured[last - 1]]
    lines = rewrite_kernel_lines(picked, [(gpu["bus_id"], gpu["uuid"])], rewrite)
    state.setdefault("kernel_log", []).extend(lines)
    if code == 79:
        gpu["lost"] = True
    record_event(state, f"XID {code} on GPU {index} after driver {loaded} loaded")


def failing_install(state: State, plan: dict[str, tuple[str | None, str]]) -> str | None:
    """The package whose configuration fails under ``install_fails``, or None."""
    faults = state.get("upgrade_faults") or {}
    if "install_fails" not in faults or "nvidia" not in state:
        return None
    installed = state["nvidia"]["driver"].get("installed")
    moved = {
        name: upstream_of(version)
        for name, (_, version) in plan.items()
        if version != "remove" and re.match(r"^(lib)?nvidia-", name)
    }
    moved = {n: v for n, v in moved.items() if _moves_to(faults["install_fails"], installed, v)}
    if not moved:
        return None
    wanted = faults["install_fails"].get("package")
    if wanted:
        return str(wanted)
    branch = max(moved.values(), key=_numbers).split(".")[0]
    dkms = f"nvidia-dkms-{branch}"
    return dkms if dkms in moved else sorted(moved)[0]


def dpkg_failure(package: str) -> str:
    """What dpkg prints when a package's post-installation script fails (DKMS did not build)."""
    return (
        f"dpkg: error processing package {package} (--configure):\n"
        f" installed {package} package post-installation script subprocess returned error "
        "exit status 10\n"
        f"Errors were encountered while processing:\n {package}\n"
        "E: Sub-process /usr/bin/dpkg returned an error code (1)"
    )


def upstream_of(version: str) -> str:
    """``1:550.127.05-0ubuntu1`` → ``550.127.05``."""
    version = version.split(":", 1)[-1]
    return version.rsplit("-", 1)[0] if "-" in version else version


def _moves_to(params: dict[str, Any], before: str | None, after: str) -> bool:
    """Whether going from ``before`` to ``after`` sets a fault off: the fault's ``version`` when
    it names one, else any newer driver."""
    if params.get("version"):
        return upstream_of(after) == str(params["version"])
    return before is None or _numbers(after) > _numbers(before)


def _numbers(version: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", upstream_of(version)))


def _fires(state: State, name: str) -> bool:
    """Whether the one-shot fault ``name`` is armed; marks it spent."""
    fired: list[str] = state.setdefault("upgrade_faults_fired", [])
    if name not in (state.get("upgrade_faults") or {}) or name in fired:
        return False
    assert name in _ONE_SHOT
    fired.append(name)
    return True


def _param(state: State, fault: str, key: str, default: Any) -> Any:
    return (state.get("upgrade_faults", {}).get(fault) or {}).get(key, default)


def _gpu(state: State, index: int) -> dict[str, Any] | None:
    for gpu in (state.get("nvidia") or {}).get("gpus", []):
        if gpu["index"] == index:
            return gpu
    return None


def on_connect(state_file: Path, faults: dict[str, Any] | None, reboot_seconds: Any) -> str | None:
    """What the connector does when pyinfra connects: take the inventory's upgrade faults and
    reboot time into the host's state (written only when they change), and say why the host
    does not answer, if it does not (None when it does)."""
    seconds = None if reboot_seconds is None else float(reboot_seconds)
    state = load_state(state_file)
    if arm(state, faults, seconds):
        with edit_state(state_file) as state:
            arm(state, faults, seconds)
    return down_reason(state)
