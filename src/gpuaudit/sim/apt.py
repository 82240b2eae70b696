"""Simulated ``apt-get`` / ``apt`` (install, upgrade, remove, update) and ``apt-cache policy``.

The host's apt sources offer the versions in the state's ``repository`` (package → versions;
every installed version is offered too). What the real tools refuse, these refuse:

- a version the repository lacks: ``E: Version '…' for '…' was not found`` (exit 100);
- changing a held package without ``--allow-change-held-packages``: ``E: Held packages were
  changed and -y was used without --allow-change-held-packages.`` (exit 100);
- a downgrade under ``-y`` without ``--allow-downgrades``: ``E: Packages were downgraded and -y
  was used without --allow-downgrades.`` (exit 100);
- ``upgrade`` keeps held packages back and says so.

Installing an NVIDIA package of another driver branch (``nvidia-driver-550`` over
``nvidia-driver-535``, ``libnvidia-compute-550-server`` over ``…-535-server``) removes the
installed one of the same name in the other branch, as their Conflicts/Replaces make apt do.
The rehearsal fault ``install_fails`` (rehearsal.py) makes an install of a newer driver fail in
dpkg's configure step, exit 100, and change no package.

The candidate version follows the host's ``/etc/apt/preferences.d`` files (apt_preferences(5)):
a ``Pin: version …`` stanza with a priority of 1000 or more makes the pinned version the
candidate even when a newer one is offered. Installing an NVIDIA driver package at another
version changes the host's installed driver; the loaded one changes at the next reboot, as on
a real host (until then ``nvidia-smi`` reports the version mismatch).
"""

from __future__ import annotations

import fnmatch
import re
import sys
from pathlib import Path

from gpuaudit.sim.rehearsal import dpkg_failure, failing_install
from gpuaudit.sim.rootfs import host_root
from gpuaudit.sim.state import edit_state, load_state, record_event

# Typing names for the checker only: importing typing costs each tool call milliseconds.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from gpuaudit.sim.state import State

_ARCHIVE = "500 http://archive.ubuntu.com/ubuntu jammy-updates/restricted amd64 Packages"
# Options that take a value, and flags that change nothing here.
_VALUED = {"-o", "--option", "-c", "--config-file", "-t", "--target-release"}
_QUIET = {"-y", "--yes", "--assume-yes", "-q", "-qq", "--quiet", "--force-yes", "-f",
          "--fix-broken", "--no-install-recommends", "--install-recommends", "-m",
          "--allow-downgrades", "--allow-remove-essential", "--reinstall"}  # fmt: skip
# Installing one of these at a new version changes the host's installed driver.
_DRIVER_PACKAGE = re.compile(r"^nvidia-(driver|dkms|kernel-source|kernel-open)-\d+")
# An NVIDIA package of one driver branch: its name without the branch conflicts across branches.
_BRANCHED = re.compile(
    r"^(?P<base>(?:lib)?nvidia-[a-z0-9-]*?)-(?P<branch>\d{3})(?P<flavor>-[a-z]+)?$"
)
_YES = {"-y", "--yes", "--assume-yes"}


class AptError(Exception):
    pass


def run_apt_get(argv: list[str], state_path: Path) -> int:
    try:
        verb, names, flags = _parse(argv)
        if verb == "update":
            print("Reading package lists... Done")
            return 0
        if verb in ("install", "upgrade", "dist-upgrade", "full-upgrade", "remove", "purge"):
            return _change(state_path, verb, names, flags)
        raise AptError(f"E: Invalid operation {verb}" if verb else "E: No command given")
    except AptError as exc:
        print(str(exc), file=sys.stderr)
        return 100


def run_apt_cache(argv: list[str], state_path: Path) -> int:
    if not argv or argv[0] != "policy" or len(argv) < 2:
        print(
            "apt-cache (gpuaudit simulator): only 'policy PACKAGE…' is simulated", file=sys.stderr
        )
        return 100
    state = load_state(state_path)
    pins = read_pins(host_root(state_path))
    installed = {p["name"]: p["version"] for p in state.get("packages", [])}
    for name in argv[1:]:
        offered = offered_versions(state, name)
        if not offered:
            print(f"N: Unable to locate package {name}", file=sys.stderr)
            continue
        candidate = candidate_version(name, offered, pins)
        print(f"{name}:\n  Installed: {installed.get(name, '(none)')}\n  Candidate: {candidate}")
        print("  Version table:")
        for version in sorted(offered, key=_Version, reverse=True):
            mark = "***" if installed.get(name) == version else "   "
            print(f" {mark} {version} {pin_priority(name, version, pins)}\n        {_ARCHIVE}")
            if mark == "***":
                print("        100 /var/lib/dpkg/status")
    return 0


def _parse(argv: list[str]) -> tuple[str, list[str], set[str]]:
    verb, names, flags = "", [], set()
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg in _VALUED:
            args[:1] = []
        elif arg.startswith("-o") or arg in _QUIET or arg.startswith("-q"):
            flags.add(arg)
        elif arg in ("-s", "--simulate", "--dry-run", "--just-print", "--no-act"):
            flags.add("--dry-run")
        elif arg in ("--allow-change-held-packages",):
            flags.add(arg)
        elif arg.startswith("-"):
            raise AptError(f"E: Command line option '{arg}' is not understood")
        elif not verb:
            verb = arg
        else:
            names.append(arg)
    return verb, names, flags


def _change(state_path: Path, verb: str, names: list[str], flags: set[str]) -> int:
    if "--dry-run" in flags:
        _report(load_state(state_path), state_path, verb, names, flags)
        return 0
    with edit_state(state_path) as state:
        plan = _report(state, state_path, verb, names, flags)
        failing = failing_install(state, plan) if verb == "install" else None
        if failing is not None:
            version = plan[failing][1] if failing in plan else ""
            print(f"Setting up {failing} ({version}) ...")
            print(dpkg_failure(failing), file=sys.stderr)
            record_event(state, f"apt-get install failed: {failing} (install_fails)")
            return 100
        _apply(state, plan)
    return 0


def _report(
    state: State, state_path: Path, verb: str, names: list[str], flags: set[str]
) -> dict[str, tuple[str | None, str]]:
    """Print what the command does, as apt-get does, and return the plan it carries out."""
    pins = read_pins(host_root(state_path))
    plan = _plan(state, verb, names, pins)
    held = set(state.get("holds", []))
    # An install also changes the held packages it removes (another branch of the driver).
    changed_held = sorted(
        n for n, (_, new) in plan.items() if n in held and (new != "remove" or verb == "install")
    )
    if verb == "install" and changed_held and "--allow-change-held-packages" not in flags:
        print("The following held packages will be changed:\n  " + " ".join(changed_held))
        raise AptError(
            "E: Held packages were changed and -y was used without --allow-change-held-packages."
        )
    downgraded = sorted(
        n
        for n, (old, new) in plan.items()
        if old and new != "remove" and _Version(new) < _Version(old)
    )
    if downgraded and flags & _YES and "--allow-downgrades" not in flags:
        print("The following packages will be DOWNGRADED:\n  " + " ".join(downgraded))
        raise AptError("E: Packages were downgraded and -y was used without --allow-downgrades.")
    kept = sorted(n for n in plan if n in held and verb != "install")
    for name in kept:
        plan.pop(name)
    if kept:
        print("The following packages have been kept back:\n  " + " ".join(kept))
    _summary(plan, len(kept))
    return plan


def _plan(
    state: State, verb: str, names: list[str], pins: list[dict[str, Any]]
) -> dict[str, tuple[str | None, str]]:
    """package → (installed version or None, new version or "remove")."""
    installed = {p["name"]: p["version"] for p in state.get("packages", [])}
    plan: dict[str, tuple[str | None, str]] = {}
    if verb in ("remove", "purge"):
        for name in names:
            if name in installed:
                plan[name] = (installed[name], "remove")
            else:
                print(f"Package '{name}' is not installed, so not removed")
        return plan
    targets = names if verb == "install" else sorted(installed)
    for spec in targets:
        name, _, version = spec.partition("=")
        offered = offered_versions(state, name)
        if not offered:
            raise AptError(f"E: Unable to locate package {name}")
        if version and version not in offered:
            raise AptError(f"E: Version '{version}' for '{name}' was not found")
        new = version or candidate_version(name, offered, pins)
        if installed.get(name) == new:
            if verb == "install":
                print(f"{name} is already the newest version ({new}).")
            continue
        if verb != "install" and _Version(new) < _Version(installed[name]):
            continue  # upgrade never downgrades
        plan[name] = (installed.get(name), new)
        for other in _other_branches(name, installed):
            plan.setdefault(other, (installed[other], "remove"))
    return plan


def _other_branches(name: str, installed: dict[str, str]) -> list[str]:
    """Installed packages the same as ``name`` but of another driver branch."""
    match = _BRANCHED.match(name)
    if match is None:
        return []
    others = []
    for other in sorted(installed):
        found = _BRANCHED.match(other)
        if (
            found is not None
            and found.group("base", "flavor") == match.group("base", "flavor")
            and found.group("branch") != match.group("branch")
        ):
            others.append(other)
    return others


def _summary(plan: dict[str, tuple[str | None, str]], kept: int) -> None:
    upgraded = sum(1 for old, new in plan.values() if old and new != "remove")
    new = sum(1 for old, _ in plan.values() if old is None)
    removed = sum(1 for _, v in plan.values() if v == "remove")
    for name, (old, version) in sorted(plan.items()):
        verb = "Remv" if version == "remove" else "Inst"
        was = f" [{old}]" if old else ""
        print(f"{verb} {name}{was}" + ("" if version == "remove" else f" ({version})"))
    print(
        f"{upgraded} upgraded, {new} newly installed, {removed} to remove and {kept} not upgraded."
    )


def _apply(state: State, plan: dict[str, tuple[str | None, str]]) -> None:
    packages: list[dict[str, Any]] = state.setdefault("packages", [])
    by_name = {p["name"]: p for p in packages}
    for name, (_, version) in sorted(plan.items()):
        if version == "remove":
            packages.remove(by_name[name])
            state["holds"] = [h for h in state.get("holds", []) if h != name]
        elif name in by_name:
            by_name[name]["version"] = version
        else:
            packages.append({"name": name, "version": version, "arch": "amd64"})
        if version != "remove" and _DRIVER_PACKAGE.match(name) and "nvidia" in state:
            state["nvidia"]["driver"]["installed"] = upstream(version)
        record_event(state, f"apt-get install {name}={version}")
    packages.sort(key=lambda p: p["name"])


def offered_versions(state: State, name: str) -> list[str]:
    versions = set(state.get("repository", {}).get(name, []))
    versions.update(p["version"] for p in state.get("packages", []) if p["name"] == name)
    return sorted(versions, key=_Version)


def candidate_version(name: str, offered: list[str], pins: list[dict[str, Any]]) -> str:
    """The version apt installs: the highest priority, then the highest version."""
    return max(offered, key=lambda v: (pin_priority(name, v, pins), _Version(v)))


def pin_priority(name: str, version: str, pins: list[dict[str, Any]]) -> int:
    for pin in pins:
        if _name_matches(name, pin["packages"]) and fnmatch.fnmatchcase(version, pin["version"]):
            return int(pin["priority"])
    return 500


def _name_matches(name: str, patterns: list[str]) -> bool:
    for pattern in patterns:
        if len(pattern) > 1 and pattern.startswith("/") and pattern.endswith("/"):
            if re.search(pattern[1:-1], name):
                return True
        elif fnmatch.fnmatchcase(name, pattern):
            return True
    return False


def read_pins(root: Path) -> list[dict[str, Any]]:
    """``Pin: version`` stanzas of the host's preferences files, in the order apt reads them."""
    files = [root / "etc/apt/preferences"]
    folder = root / "etc/apt/preferences.d"
    if folder.is_dir():
        files += sorted(
            p for p in folder.iterdir() if p.name.endswith(".pref") or "." not in p.name
        )
    pins = []
    for path in files:
        if not path.is_file():
            continue
        for stanza in re.split(r"\n\s*\n", path.read_text(encoding="utf-8", errors="replace")):
            fields = {}
            for line in stanza.splitlines():
                key, sep, value = line.partition(":")
                if sep and not line.lstrip().startswith("#"):
                    fields[key.strip().lower()] = value.strip()
            pin = fields.get("pin", "")
            if "package" in fields and pin.startswith("version ") and "pin-priority" in fields:
                pins.append(
                    {
                        "packages": fields["package"].split(),
                        "version": pin.split(None, 1)[1],
                        "priority": fields["pin-priority"],
                    }
                )
    return pins


def upstream(version: str) -> str:
    """``1:550.127.05-0ubuntu1`` → ``550.127.05``."""
    version = version.split(":", 1)[-1]
    return version.rsplit("-", 1)[0] if "-" in version else version


class _Version:
    """A Debian version, ordered as dpkg orders them (deb-version(7))."""

    def __init__(self, text: str) -> None:
        epoch, _, rest = text.rpartition(":") if ":" in text else ("0", "", text)
        upstream_part, _, revision = rest.rpartition("-") if "-" in rest else (rest, "", "0")
        self.key = (int(epoch or 0), _order(upstream_part), _order(revision))

    def _padded(self, other: _Version) -> tuple[Any, Any]:
        # A missing part compares as an empty string or 0: both weigh (0,).
        mine, theirs = [list(part) for part in self.key[1:]], [list(p) for p in other.key[1:]]
        for a, b in zip(mine, theirs, strict=False):
            width = max(len(a), len(b))
            a += [(0,)] * (width - len(a))
            b += [(0,)] * (width - len(b))
        return (self.key[0], *mine), (other.key[0], *theirs)

    def __lt__(self, other: _Version) -> bool:
        mine, theirs = self._padded(other)
        return bool(mine < theirs)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Version):
            return NotImplemented
        mine, theirs = self._padded(other)
        return bool(mine == theirs)


def _order(part: str) -> list[tuple[int, ...]]:
    # Alternating non-digit and digit runs; letters sort before non-letters, ~ before all.
    key: list[tuple[int, ...]] = []
    for text, digits in re.findall(r"(\D*)(\d*)", part):
        if not text and not digits:
            continue
        key.append((*(_char_weight(c) for c in text), 0))
        key.append((int(digits or 0),))
    return key


def _char_weight(char: str) -> int:
    if char == "~":
        return -1
    return ord(char) if char.isalpha() else ord(char) + 256
