"""Simulated system tools: dmesg, journalctl, systemctl, hostname, uname, stat, sysctl, reboot,
shutdown -r, systemd-run (of a reboot).

Each ``run_<tool>(argv, state_path) -> int`` answers what the collector and pyinfra's own facts
and operations ask; other uses exit non-zero with a message naming the simulator.

A reboot (``reboot``, ``shutdown -r``, ``systemctl reboot``, or ``systemd-run`` of one of these,
which a real host runs from a timer after the command returns) applies at once, and the host
then stays down for its reboot time (see rehearsal.py).
"""

from __future__ import annotations

import fnmatch
import os
import re
import sys
import time
from pathlib import Path

from gpuaudit.sim.state import (
    driver_answers,
    edit_state,
    has_fault,
    load_state,
    reboot,
    record_event,
    sync_persistence,
)

# Typing names for the checker only: importing typing costs each tool call milliseconds.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_DMESG_FLAGS = {"-T", "--ctime", "-t", "--notime", "-x", "--decode", "-k", "--kernel", "-P",
                "--nopager", "-L", "--color=never", "--color=auto", "-H", "--human"}  # fmt: skip
_DMESG_VALUE = {"-l", "--level", "--time-format", "-f", "--facility", "-s", "--buffer-size"}
# Time stamps the captures carry, removed when the same lines are shown by journalctl.
_KLOG_PREFIX = re.compile(
    r"^(?:\[[^\]]*\]\s*|kern\s*:\s*\w+\s*:\s*\S+\s+|\d{4}-\d\d-\d\dT\S+\s+"
    r"|\w{3} [ \d]\d \d\d:\d\d:\d\d \S+ kernel: |kernel: )"
)
_NOT_SIMULATED = "{tool} (gpuaudit simulator): {what} is not simulated"


def _refuse(tool: str, what: str, rc: int = 1) -> int:
    print(_NOT_SIMULATED.format(tool=tool, what=what), file=sys.stderr)
    return rc


def run_dmesg(argv: list[str], state_path: Path) -> int:
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg in _DMESG_VALUE:
            if not args:
                print(f"dmesg: option requires an argument -- '{arg.lstrip('-')}'", file=sys.stderr)
                return 1
            args.pop(0)
        elif arg not in _DMESG_FLAGS and arg.split("=")[0] not in _DMESG_VALUE:
            print(f"dmesg: unrecognized option '{arg}'", file=sys.stderr)
            return 1
    state = load_state(state_path)
    if has_fault(state, "dmesg_restricted"):
        print("dmesg: read kernel buffer failed: Operation not permitted", file=sys.stderr)
        return 1
    from gpuaudit.sim.klog import dmesg_chunks

    out = sys.stdout.buffer
    for chunk in dmesg_chunks(state):
        out.write(chunk)
    return 0


def run_journalctl(argv: list[str], state_path: Path) -> int:
    if not ({"-k", "--dmesg"} & set(argv)):
        return _refuse("journalctl", "a journal query other than -k")
    boot = _journal_boot(argv)
    if boot is None:
        return _refuse("journalctl", "a boot that is not an offset (0, -1, -2, ...)")
    state = load_state(state_path)
    if has_fault(state, "journal_unreadable"):
        # systemd 252 where the user may open no journal file: nothing, and exit 0.
        print("-- No entries --")
        print(
            "Hint: You are currently not seeing messages from other users and the system.\n"
            "      Users in groups 'adm', 'systemd-journal' can see all messages.",
            file=sys.stderr,
        )
        return 0
    # One fixed stamp: the captures' own times are in formats journalctl does not print.
    from gpuaudit.sim.rootfs import boot_time

    started = boot_time(state)
    lines = state.get("kernel_log", [])
    if boot < 0:
        earlier = state.get("earlier_boots", [])
        kept: dict[str, Any] | None = None
        if boot == -1 and state.get("previous_kernel_log") is not None:
            kept = {"kernel_log": state["previous_kernel_log"],
                    "boot_time": state.get("previous_boot_time")}  # fmt: skip
        elif boot < -1 and -boot - 2 < len(earlier):
            kept = earlier[-boot - 2]
        if kept is None or has_fault(state, "journal_volatile"):
            # systemd 252's words where the journal holds no such boot.
            print(
                f"Data from the specified boot ({boot}) is not available: No such boot ID in "
                "journal",
                file=sys.stderr,
            )
            return 1
        lines = kept["kernel_log"]
        started = int(kept.get("boot_time") or started + 86400 * boot)
    stamp = time.strftime("%b %d %H:%M:%S", time.gmtime(started))
    # Every boot's kernel log begins with the kernel's banner, as dmesg's does.
    release = state.get("kernel_release", "5.15.0-105-generic")
    print(f"{stamp} {state['hostname']} kernel: Linux version {release} (buildd@lcy02-amd64-001)")
    for line in lines:
        print(f"{stamp} {state['hostname']} kernel: {_KLOG_PREFIX.sub('', line, count=1)}")
    return 0


def _journal_boot(argv: list[str]) -> int | None:
    """The boot ``-b`` / ``--boot`` asks for, as an offset: 0 (the current one, also when not
    given), -1 the one before, ...; None for any other (a boot id, a positive offset)."""
    boot = "0"
    for i, arg in enumerate(argv):
        if arg in ("-b", "--boot"):
            following = argv[i + 1] if i + 1 < len(argv) else ""
            boot = following if following.lstrip("-").isdigit() else "0"
        elif arg.startswith("--boot="):
            boot = arg.partition("=")[2]
        elif arg.startswith("-b") and arg[2:].lstrip("-").isdigit():
            boot = arg[2:]
    if boot in ("", "-0"):
        return 0
    if not boot.lstrip("-").isdigit() or (boot != "0" and not boot.startswith("-")):
        return None
    return int(boot)


def _unit(name: str) -> str:
    return name if "." in name else f"{name}.service"


def _lookup(services: dict[str, Any], name: str) -> tuple[str, dict[str, Any] | None]:
    unit = _unit(name)
    return unit, services.get(unit.removesuffix(".service"))


def run_systemctl(argv: list[str], state_path: Path) -> int:
    args = [
        arg for arg in argv if arg not in ("--no-pager", "-q", "--quiet", "--now", "--no-block")
    ]
    if any(arg in ("--user",) or arg.startswith("--machine") for arg in args) or not args:
        return _refuse("systemctl", "this invocation")
    verb, units = args[0], args[1:]
    quiet = "-q" in argv or "--quiet" in argv
    if verb in ("is-active", "is-enabled", "is-failed"):
        return _is(verb, units, load_state(state_path), quiet)
    if verb == "show":
        return _show(units, load_state(state_path))
    if verb == "daemon-reload":
        return 0
    if verb == "reboot":
        return run_reboot(units, state_path)
    if verb in ("start", "stop", "restart", "reload", "enable", "disable"):
        with edit_state(state_path) as state:
            rc = _change_units(verb, units, state, "--now" in argv)
            if state.get("dcgm_exporter"):
                from gpuaudit.sim.exporter import after_systemctl

                after_systemctl(verb, units, "--now" in argv, state, state_path)
            return rc
    if verb == "status":
        state = load_state(state_path)
        rc = 0
        for name in units:
            unit, info = _lookup(state.get("services", {}), name)
            if info is None:
                print(f"Unit {unit} could not be found.", file=sys.stderr)
                rc = 4
                continue
            print(
                f"● {unit}\n     Loaded: loaded; {info['enabled']}\n     Active: {info['active']}"
            )
            rc = rc or (0 if info["active"] == "active" else 3)
        return rc
    return _refuse("systemctl", f"'{verb}'")


def _is(verb: str, units: list[str], state: dict[str, Any], quiet: bool) -> int:
    rc = 0
    for name in units:
        unit, info = _lookup(state.get("services", {}), name)
        if verb == "is-enabled":
            if info is None:
                print(
                    f"Failed to get unit file state for {unit}: No such file or directory",
                    file=sys.stderr,
                )
                rc = 1
                continue
            value, ok = info["enabled"], info["enabled"] == "enabled"
        else:
            value = info["active"] if info else "inactive"
            ok = value == ("failed" if verb == "is-failed" else "active")
        if not quiet:
            print(value)
        rc = rc or (0 if ok else (1 if verb != "is-active" else 3))
    return rc


def _show(args: list[str], state: dict[str, Any]) -> int:
    props, patterns = [], []
    it = iter(args)
    for arg in it:
        if arg in ("--property", "-p"):
            props += next(it, "").split(",")
        elif arg.startswith("--property="):
            props += arg.split("=", 1)[1].split(",")
        elif arg in ("--all", "-a") or arg.startswith("--type"):
            continue
        else:
            patterns.append(arg)
    services = state.get("services", {})
    names = sorted(f"{name}.service" for name in services)
    chosen = [
        n
        for n in names
        if any(fnmatch.fnmatch(n, _unit(p)) or fnmatch.fnmatch(n, p) for p in patterns)
    ]
    blocks = []
    for unit in chosen:
        info = services[unit.removesuffix(".service")]
        values = {
            "Id": unit,
            "ActiveState": info["active"],
            "SubState": {"active": "running", "failed": "failed"}.get(info["active"], "dead"),
            "UnitFileState": info["enabled"],
            "LoadState": "loaded",
        }
        wanted = props or list(values)
        blocks.append("\n".join(f"{key}={values.get(key, '')}" for key in wanted))
    if blocks:
        print("\n\n".join(blocks))
    return 0


def _change_units(verb: str, units: list[str], state: dict[str, Any], now: bool) -> int:
    services = state.setdefault("services", {})
    for name in units:
        unit, info = _lookup(services, name)
        if info is None:
            action = {"enable": "enable", "disable": "disable"}.get(verb, verb)
            print(f"Failed to {action} unit: Unit file {unit} does not exist.", file=sys.stderr)
            return 5 if verb not in ("enable", "disable") else 1
        if verb in ("enable", "disable"):
            info["enabled"] = "enabled" if verb == "enable" else "disabled"
        starting = verb in ("start", "restart", "reload") or (verb == "enable" and now)
        if starting:
            if unit.startswith("nvidia-") and "nvidia" in state and not driver_answers(state):
                info["active"] = "failed"
                print(
                    f"Job for {unit} failed because the control process exited with error code.\n"
                    f'See "systemctl status {unit}" and "journalctl -xeu {unit}" for details.',
                    file=sys.stderr,
                )
                record_event(state, f"systemctl {verb} {unit} (failed)")
                sync_persistence(state)
                return 1
            info["active"] = "active"
        if verb == "stop" or (verb == "disable" and now):
            info["active"] = "inactive"
        record_event(state, f"systemctl {verb} {unit}")
    sync_persistence(state)
    return 0


def run_hostname(argv: list[str], state_path: Path) -> int:
    state = load_state(state_path)
    if not argv or argv[0] in ("-f", "--fqdn", "--long", "-s", "--short", "-A", "--all-fqdns"):
        name = state["hostname"]
        print(name.split(".")[0] if argv and argv[0] in ("-s", "--short") else name)
        return 0
    if argv[0].startswith("-"):
        return _refuse("hostname", f"option {argv[0]}")
    print("hostname: you must be root to change the host name", file=sys.stderr)
    return 1


def run_uname(argv: list[str], state_path: Path) -> int:
    state = load_state(state_path)
    real = os.uname()
    values = {
        "s": real.sysname,
        "n": state["hostname"],
        "r": state["kernel_release"],
        "v": real.version,
        "m": real.machine,
        "p": real.machine,
        "i": real.machine,
        "o": "GNU/Linux",
    }
    long_names = {"--kernel-name": "s", "--nodename": "n", "--kernel-release": "r",
                  "--kernel-version": "v", "--machine": "m", "--processor": "p",
                  "--hardware-platform": "i", "--operating-system": "o"}  # fmt: skip
    wanted: set[str] = set()
    for arg in argv:
        if arg in ("-a", "--all"):
            wanted |= set("snrvmo")
        elif arg in long_names:
            wanted.add(long_names[arg])
        elif arg.startswith("-") and not arg.startswith("--") and set(arg[1:]) <= set(values):
            wanted |= set(arg[1:])
        else:
            print(f"uname: invalid option -- '{arg.lstrip('-')}'", file=sys.stderr)
            return 1
    order = [key for key in "snrvmpio" if key in (wanted or {"s"})]
    print(" ".join(values[key] for key in order))
    return 0


def run_reboot(argv: list[str], state_path: Path) -> int:
    from gpuaudit.sim.rehearsal import after_reboot
    from gpuaudit.sim.rootfs import host_root, sync_root

    with edit_state(state_path) as state:
        driver = (state.get("nvidia") or {}).get("driver") or {}
        previous = driver.get("loaded") or driver.get("last_loaded")
        reboot(state)
        after_reboot(state, previous)
        sync_root(state, host_root(state_path))
    return 0


def run_shutdown(argv: list[str], state_path: Path) -> int:
    if "-r" not in argv and "--reboot" not in argv:
        return _refuse("shutdown", "powering a simulated host off")
    return run_reboot(argv, state_path)


# systemd-run options that take a value (as a separate argument or after "=").
_SYSTEMD_RUN_VALUED = {
    "--on-active", "--on-boot", "--on-startup", "--on-unit-active", "--on-unit-inactive",
    "--on-calendar", "--timer-property", "-p", "--property", "-u", "--unit", "--description",
    "--slice", "-E", "--setenv", "--uid", "--gid", "--working-directory", "--nice",
}  # fmt: skip
_SYSTEMD_RUN_FLAGS = {"-q", "--quiet", "--no-block", "-G", "--collect", "-r",
                      "--remain-after-exit", "--no-ask-password"}  # fmt: skip


def run_systemd_run(argv: list[str], state_path: Path) -> int:
    """``systemd-run [--on-active=…] … systemctl reboot`` (or ``reboot``, ``shutdown -r``): the
    way to reboot a host from a timer that outlives the login session. Other commands are not
    simulated."""
    args = list(argv)
    timer = quiet = False
    while args and args[0].startswith("-"):
        arg = args.pop(0)
        name = arg.split("=", 1)[0]
        if name in _SYSTEMD_RUN_VALUED:
            if "=" not in arg:
                if not args:
                    print(f"systemd-run: option '{arg}' requires an argument", file=sys.stderr)
                    return 1
                args.pop(0)
            timer = timer or name.startswith("--on-")
        elif arg in _SYSTEMD_RUN_FLAGS:
            quiet = quiet or arg in ("-q", "--quiet")
        else:
            return _refuse("systemd-run", f"option {arg}")
    command = [os.path.basename(args[0]), *args[1:]] if args else []
    rebooting = command in (["systemctl", "reboot"], ["reboot"]) or (
        command[:1] == ["shutdown"] and ("-r" in command or "--reboot" in command)
    )
    if not rebooting:
        return _refuse("systemd-run", f"running {' '.join(args) or 'nothing'}")
    if not quiet:
        unit = f"run-r{os.getpid():x}"
        if timer:
            print(f"Running timer as unit: {unit}.timer", file=sys.stderr)
            print(f"Will run service as unit: {unit}.service", file=sys.stderr)
        else:
            print(f"Running as unit: {unit}.service", file=sys.stderr)
    return run_reboot([], state_path)
