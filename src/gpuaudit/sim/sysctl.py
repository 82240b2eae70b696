"""Simulated ``sysctl`` (procps): read keys, ``-w key=value``, ``-p [FILE]`` and ``--system``.

Values live in the host's state (``sysctls``) and show under the host's /proc/sys. ``-p`` and
``--system`` read the files in the host's own root, in the order sysctl.d(5) gives:
``/etc/sysctl.d``, ``/run/sysctl.d``, ``/usr/local/lib/sysctl.d``, ``/usr/lib/sysctl.d`` and
``/lib/sysctl.d``, by file name (a name in an earlier directory hides the same name in a later
one), then ``/etc/sysctl.conf`` last. A key the kernel does not have fails as the real tool
fails (exit 255), unless its line starts with ``-``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from gpuaudit.sim.rootfs import host_root, sync_root
from gpuaudit.sim.state import edit_state, load_state, record_event

DROPIN_DIRS = (
    "etc/sysctl.d", "run/sysctl.d", "usr/local/lib/sysctl.d", "usr/lib/sysctl.d", "lib/sysctl.d",
)  # fmt: skip
_FLAGS = {"-n", "--values", "-q", "--quiet", "-e", "--ignore", "-N", "--names"}


def system_files(root: Path) -> list[Path]:
    """Files ``sysctl --system`` applies, in order (paths under ``root``)."""
    chosen: dict[str, Path] = {}
    for directory in DROPIN_DIRS:
        folder = root / directory
        if not folder.is_dir():
            continue
        for entry in sorted(folder.iterdir()):
            if entry.name.endswith(".conf") and entry.name not in chosen:
                chosen[entry.name] = entry
    files = [chosen[name] for name in sorted(chosen)]
    conf = root / "etc/sysctl.conf"
    if conf.exists() and all(os.path.realpath(f) != os.path.realpath(conf) for f in files):
        files.append(conf)
    return files


def parse_lines(text: str) -> list[tuple[str, str, bool]]:
    """``(key, value, ignore_errors)`` of each setting line of a sysctl.conf file."""
    settings = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        ignore = line.startswith("-")
        key, sep, value = line.lstrip("-").partition("=")
        if sep:
            settings.append((key.strip().replace("/", "."), value.strip(), ignore))
    return settings


def run_sysctl(argv: list[str], state_path: Path) -> int:
    flags = {arg for arg in argv if arg in _FLAGS}
    args = [arg for arg in argv if arg not in _FLAGS]
    if (args and args[0] in ("-p", "--load")) or any(a.startswith("--load=") for a in args):
        files = [a.split("=", 1)[1] for a in args if a.startswith("--load=")] + args[1:]
        root = host_root(state_path)
        paths = [_in_root(root, f) for f in files or ["/etc/sysctl.conf"]]
        return _load(state_path, [(p, None) for p in paths], flags)
    if args == ["--system"]:
        root = host_root(state_path)
        return _load(state_path, [(p, p) for p in system_files(root)], flags)
    if args in (["-a"], ["--all"], ["-A"]):
        sysctls = load_state(state_path).get("sysctls", {})
        for key in sorted(sysctls):
            print(_shown(key, sysctls[key], flags))
        return 0
    writing = "-w" in args or "--write" in args
    args = [arg for arg in args if arg not in ("-w", "--write")]
    if not args or any(arg.startswith("-") for arg in args):
        print(
            "sysctl (gpuaudit simulator): only reading, -a, -w, -p and --system are simulated",
            file=sys.stderr,
        )
        return 2
    if writing or any("=" in arg for arg in args):
        settings = []
        for arg in args:
            key, _, value = arg.partition("=")
            settings.append((key.strip().replace("/", "."), value.strip(), False))
        return _write(state_path, settings, flags)
    sysctls = load_state(state_path).get("sysctls", {})
    rc = 0
    for arg in args:
        key = arg.replace("/", ".")
        if key not in sysctls:
            _missing(key)
            rc = 255
            continue
        print(_shown(key, sysctls[key], flags))
    return rc


def _in_root(root: Path, path: str) -> Path:
    return root / os.path.normpath("/" + path).lstrip("/")


def _load(state_path: Path, files: list[tuple[Path, Path | None]], flags: set[str]) -> int:
    settings: list[tuple[str, str, bool]] = []
    root = host_root(state_path)
    for path, announce in files:
        shown = "/" + path.relative_to(root).as_posix()
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            print(f'sysctl: cannot open "{shown}": No such file or directory', file=sys.stderr)
            return 255
        if announce is not None and not flags & {"-q", "--quiet"}:
            print(f"* Applying {shown} ...")
        settings += parse_lines(text)
    return _write(state_path, settings, flags)


def _write(state_path: Path, settings: list[tuple[str, str, bool]], flags: set[str]) -> int:
    rc = 0
    with edit_state(state_path) as state:
        for key, value, ignore in settings:
            if key not in state["sysctls"] and not _known_new(key):
                if not ignore and not flags & {"-e", "--ignore"}:
                    _missing(key)
                    rc = 255
                continue
            state["sysctls"][key] = value.replace(" ", "\t")
            record_event(state, f"sysctl -w {key}={value}")
            if not flags & {"-q", "--quiet"}:
                print(_shown(key, state["sysctls"][key], flags))
        sync_root(state, host_root(state_path))
    return rc


def _known_new(key: str) -> bool:
    # The profile lists the keys the audit reads; other well-formed keys of the usual kernel
    # trees exist on a real host too.
    return key.split(".", 1)[0] in ("net", "vm", "kernel", "fs", "dev") and ".." not in key


def _shown(key: str, value: str, flags: set[str]) -> str:
    if flags & {"-n", "--values"}:
        return value
    if flags & {"-N", "--names"}:
        return key
    return f"{key} = {value.replace(chr(9), ' ')}"


def _missing(key: str) -> None:
    path = key.replace(".", "/")
    print(f"sysctl: cannot stat /proc/sys/{path}: No such file or directory", file=sys.stderr)
