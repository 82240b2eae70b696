"""Simulated Debian package tools: dpkg-query, dpkg (-l, -s, --print-architecture), apt-mark.

A held package's dpkg status reads ``hold ok installed`` (the selection is the first word),
as on a real host after ``apt-mark hold``.
"""

from __future__ import annotations

import fnmatch
import re
import sys
from pathlib import Path

from gpuaudit.sim.state import edit_state, load_state, record_event

# Typing names for the checker only: importing typing costs each tool call milliseconds.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from gpuaudit.sim.state import State

_FIELD = re.compile(r"\$\{([^}]+)\}")


def _status(pkg: dict[str, Any], holds: list[str]) -> str:
    return ("hold" if pkg["name"] in holds else "install") + " ok installed"


def _matching(state: State, patterns: list[str]) -> tuple[list[dict[str, Any]], list[str]]:
    packages = state.get("packages", [])
    if not patterns:
        return list(packages), []
    found, missing = [], []
    for pattern in patterns:
        hits = [p for p in packages if fnmatch.fnmatchcase(p["name"], pattern)]
        if not hits:
            missing.append(pattern)
        found += [p for p in hits if p not in found]
    return sorted(found, key=lambda p: p["name"]), missing


def _format(fmt: str, pkg: dict[str, Any], holds: list[str]) -> str:
    status = _status(pkg, holds)
    fields = {
        "Package": pkg["name"],
        "binary:Package": pkg["name"],
        "Version": pkg["version"],
        "Architecture": pkg["arch"],
        "Status": status,
        "db:Status-Abbrev": ("hi " if status.startswith("hold") else "ii "),
    }
    text = _FIELD.sub(lambda m: fields.get(m.group(1), ""), fmt)
    return text.replace("\\t", "\t").replace("\\n", "\n")


def run_dpkg_query(argv: list[str], state_path: Path) -> int:
    args = list(argv)
    fmt, mode, patterns = "${binary:Package}\t${Version}\n", None, []
    while args:
        arg = args.pop(0)
        if arg in ("-W", "--show"):
            mode = "show"
        elif arg in ("-l", "--list"):
            mode = "list"
        elif arg in ("-s", "--status"):
            mode = "status"
        elif arg in ("-f", "--showformat") and args:
            fmt = args.pop(0)
        elif arg.startswith(("-f=", "--showformat=")):
            fmt = arg.split("=", 1)[1]
        elif arg.startswith("-"):
            print(f"dpkg-query: error: unknown option {arg}", file=sys.stderr)
            return 2
        else:
            patterns.append(arg)
    state = load_state(state_path)
    if mode == "list":
        return _list(state, patterns)
    if mode == "status":
        return _show_status(state, patterns)
    if mode != "show":
        print("dpkg-query: error: need an action option", file=sys.stderr)
        return 2
    found, missing = _matching(state, patterns)
    holds = state.get("holds", [])
    sys.stdout.write("".join(_format(fmt, pkg, holds) for pkg in found))
    for pattern in missing:
        print(f"dpkg-query: no packages found matching {pattern}", file=sys.stderr)
    return 1 if missing else 0


def _list(state: State, patterns: list[str]) -> int:
    found, missing = _matching(state, patterns)
    holds = state.get("holds", [])
    print("Desired=Unknown/Install/Remove/Purge/Hold")
    print("| Status=Not/Inst/Conf-files/Unpacked/halF-conf/Half-inst/trig-aWait/Trig-pend")
    print("|/ Err?=(none)/Reinst-required (Status,Err: uppercase=bad)")
    print(f"||/ {'Name':<30} {'Version':<30} {'Architecture':<12} Description")
    print(f"+++-{'=' * 30}-{'=' * 30}-{'=' * 12}-{'=' * 40}")
    for pkg in found:
        flag = "hi" if pkg["name"] in holds else "ii"
        print(f"{flag}  {pkg['name']:<30} {pkg['version']:<30} {pkg['arch']:<12} {pkg['name']}")
    for pattern in missing:
        print(f"dpkg-query: no packages found matching {pattern}", file=sys.stderr)
    return 1 if missing else 0


def _show_status(state: State, names: list[str]) -> int:
    by_name = {p["name"]: p for p in state.get("packages", [])}
    rc = 0
    for name in names:
        pkg = by_name.get(name)
        if pkg is None:
            print(
                f"dpkg-query: package '{name}' is not installed and no information is available",
                file=sys.stderr,
            )
            rc = 1
            continue
        print(f"Package: {name}\nStatus: {_status(pkg, state.get('holds', []))}")
        print(f"Architecture: {pkg['arch']}\nVersion: {pkg['version']}\n")
    return rc


def run_dpkg(argv: list[str], state_path: Path) -> int:
    if argv == ["--print-architecture"]:
        print("amd64")
        return 0
    if argv and argv[0] in ("-l", "--list", "-s", "--status"):
        return run_dpkg_query(argv, state_path)
    print(
        "dpkg (gpuaudit simulator): only -l, -s and --print-architecture are simulated",
        file=sys.stderr,
    )
    return 2


def run_apt_mark(argv: list[str], state_path: Path) -> int:
    args = [arg for arg in argv if arg not in ("-q", "--quiet", "-qq")]
    if not args:
        print("E: No command given", file=sys.stderr)
        return 100
    verb, names = args[0], args[1:]
    if verb == "showhold":
        for name in load_state(state_path).get("holds", []):
            if not names or any(fnmatch.fnmatchcase(name, pattern) for pattern in names):
                print(name)
        return 0
    if verb not in ("hold", "unhold"):
        print(f"apt-mark (gpuaudit simulator): '{verb}' is not simulated", file=sys.stderr)
        return 100
    with edit_state(state_path) as state:
        installed = {p["name"] for p in state.get("packages", [])}
        holds: list[str] = state.setdefault("holds", [])
        for name in names:
            if name not in installed:
                print(f"E: Unable to locate package {name}", file=sys.stderr)
                return 100
        for name in names:
            if verb == "hold":
                print(f"{name} {'was already set' if name in holds else 'set'} on hold.")
                if name not in holds:
                    holds.append(name)
            elif name in holds:
                holds.remove(name)
                print(f"Canceled hold on {name}.")
            else:
                print(f"{name} was already not on hold.")
        holds.sort()
        record_event(state, f"apt-mark {verb} {' '.join(names)}")
    return 0
