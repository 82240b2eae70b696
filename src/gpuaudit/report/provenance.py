"""Provenance: what a run covered, how it was judged, and who ran it with which tools.

A run directory keeps it in ``provenance.json``, written by the audit when it writes the
register (``deploys/audit.py`` through gpuaudit.deploy, from pyinfra's command line) and by
``gpuaudit report --bundle``. ``register.json`` carries it under ``provenance`` and the page
shows it in its "About this run" block::

    scope             what the run set out to audit (None: a run that did not record it)
      source            "inventory" (a pyinfra run) or "bundle" (collector outputs handed in)
      inventory         the inventory file, absolute; or the inventory as given to pyinfra
                        (a host list, a module) when it is not a file
      limit, exclude    pyinfra's --limit / --exclude patterns ([]: the whole inventory)
      bundles           the bundle file names of a bundle run
    policy            {path, sha256} of the site policy the register was judged by, or None
    gpuaudit_version, pyinfra_version
    operator          user@host of the control node
    command           the command line, with passwords replaced by "<redacted>"

The scope is what trends (trends.py) compare: a run is compared with an earlier run of the
same inventory, a bundle run with an earlier run that holds its machines.

Rebuilding a run (``gpuaudit report RUN_DIR``) keeps the provenance the audit recorded; only
the policy is the one the rebuilt register was judged by (kept as recorded when its text is the
same, so the policy's original path survives the copy kept in the run directory).
"""

from __future__ import annotations

import getpass
import hashlib
import json
import os
import re
import shlex
import socket
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gpuaudit import __version__

PROVENANCE_FILE = "provenance.json"
INVENTORY = "inventory"
BUNDLE = "bundle"
SOURCES = (INVENTORY, BUNDLE)
REDACTED = "<redacted>"

# pyinfra options whose value is a secret, and --data keys that look like one.
_SECRET_OPTIONS = frozenset(
    {"--password", "--ssh-password", "--key-password", "--ssh-key-password"}
)
_SECRET_DATA_KEY = re.compile(r"pass|secret|token|credential", re.IGNORECASE)
# Bundle file names shown on the page before "and N more" (provenance.json keeps them all).
_BUNDLES_SHOWN = 10


@dataclass(frozen=True)
class Scope:
    """What a run set out to audit: an inventory's hosts (narrowed by ``--limit`` and
    ``--exclude``), or the machines whose collector bundles were handed in."""

    source: str
    inventory: str | None = None
    limit: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    bundles: tuple[str, ...] = ()
    bundle_dir: str | None = None  # the directory the bundles were read from (--bundle-dir)

    def comparable_with(self, other: Scope | None) -> bool:
        """Whether an earlier run of scope ``other`` may be this run's trends baseline.

        A run of an inventory compares with runs of the same inventory (its --limit may
        differ: trends compare only the hosts both runs hold). A bundle run compares with any
        run that holds its machines, which trends.find_previous checks. A run that recorded no
        scope (older gpuaudit) is not ruled out.
        """
        if other is None or self.source == BUNDLE:
            return True
        return other.source == self.source and other.inventory == self.inventory

    def describe(self) -> str:
        """One line for a reader: ``inventory /srv/prod.py, --limit rack7``."""
        if self.source == BUNDLE:
            shown = ", ".join(self.bundles[:_BUNDLES_SHOWN])
            more = len(self.bundles) - _BUNDLES_SHOWN
            where = f" in {self.bundle_dir}" if self.bundle_dir else ""
            return f"{len(self.bundles)} bundle file(s){where}: {shown}" + (
                f" and {more} more" if more > 0 else ""
            )
        parts = [f"inventory {self.inventory or '(not known)'}"]
        parts += [f"--limit {p}" for p in self.limit]
        parts += [f"--exclude {p}" for p in self.exclude]
        if not (self.limit or self.exclude):
            parts.append("every host")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "inventory": self.inventory,
            "limit": list(self.limit),
            "exclude": list(self.exclude),
            "bundles": list(self.bundles),
            **({"bundle_dir": self.bundle_dir} if self.bundle_dir else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Scope:
        source = data.get("source")
        if source not in SOURCES:
            raise ValueError(f"scope source {source!r} is not one of {', '.join(SOURCES)}")
        inventory = data.get("inventory")
        if inventory is not None and not isinstance(inventory, str):
            raise ValueError("scope inventory must be a string")
        bundle_dir = data.get("bundle_dir")
        if bundle_dir is not None and not isinstance(bundle_dir, str):
            raise ValueError("scope bundle_dir must be a string")
        return cls(
            source=str(source),
            inventory=inventory,
            limit=_strings(data.get("limit"), "limit"),
            exclude=_strings(data.get("exclude"), "exclude"),
            bundles=_strings(data.get("bundles"), "bundles"),
            bundle_dir=bundle_dir,
        )


@dataclass(frozen=True)
class PolicyFile:
    """The site policy file a register was judged by, and the sha256 of its text."""

    path: str
    sha256: str


@dataclass(frozen=True)
class Provenance:
    """Where a register came from (see the module docstring)."""

    scope: Scope | None
    gpuaudit_version: str
    pyinfra_version: str | None
    operator: str
    command: tuple[str, ...] = ()
    policy: PolicyFile | None = field(default=None)

    def with_policy(self, policy: PolicyFile | None) -> Provenance:
        """This provenance for a register judged by ``policy``: the recorded policy is kept
        when its text is the same (the run's copy of it), else replaced."""
        if policy is not None and self.policy is not None and policy.sha256 == self.policy.sha256:
            return self
        return replace(self, policy=policy)

    def to_dict(self) -> dict[str, Any]:
        return {
            "scope": self.scope.to_dict() if self.scope else None,
            "policy": (
                {"path": self.policy.path, "sha256": self.policy.sha256} if self.policy else None
            ),
            "gpuaudit_version": self.gpuaudit_version,
            "pyinfra_version": self.pyinfra_version,
            "operator": self.operator,
            "command": list(self.command),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Provenance:
        scope = data.get("scope")
        policy = data.get("policy")
        if policy is not None and not (
            isinstance(policy, Mapping)
            and isinstance(policy.get("path"), str)
            and isinstance(policy.get("sha256"), str)
        ):
            raise ValueError("policy must be {path, sha256}")
        pyinfra_version = data.get("pyinfra_version")
        return cls(
            scope=Scope.from_dict(scope) if isinstance(scope, Mapping) else None,
            gpuaudit_version=str(data.get("gpuaudit_version") or ""),
            pyinfra_version=str(pyinfra_version) if pyinfra_version is not None else None,
            operator=str(data.get("operator") or ""),
            command=_strings(data.get("command"), "command"),
            policy=PolicyFile(policy["path"], policy["sha256"]) if policy else None,
        )


def _strings(value: Any, name: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{name} must be a list of strings")
    return tuple(value)


# --- gathering ----------------------------------------------------------------------------------


def operator() -> str:
    """``user@host`` of the machine running gpuaudit (the control node)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no login name and no passwd entry (some containers)
        user = str(os.getuid()) if hasattr(os, "getuid") else "unknown"
    return f"{user}@{socket.gethostname()}"


def pyinfra_version() -> str | None:
    """The installed pyinfra's version, from its metadata (pyinfra is not imported); None when
    it is not installed."""
    from importlib import metadata  # 30 ms to import: only when a version is asked for

    try:
        return metadata.version("pyinfra")
    except metadata.PackageNotFoundError:
        return None


def _program(argv0: str) -> str:
    """The program name a person would type: ``pyinfra`` for ``…/pyinfra/__main__.py``."""
    path = Path(argv0)
    if path.name == "__main__.py":
        return path.parent.name
    if path.suffix == ".py" and path.parent.name == "gpuaudit":
        return "gpuaudit"
    return path.name or argv0


def redact_command(argv: Sequence[str]) -> tuple[str, ...]:
    """The command line without its secrets: the values of pyinfra's password options and of
    ``--data`` keys that name a password, secret or token."""
    out: list[str] = []
    value_of: str | None = None  # the option whose value this argument is
    for arg in argv:
        option, has_value, _ = arg.partition("=")
        if value_of is not None:
            out.append(_redact_data(arg) if value_of == "--data" else REDACTED)
            value_of = None
        elif option in _SECRET_OPTIONS and has_value:
            out.append(f"{option}={REDACTED}")
        elif option == "--data" and has_value:
            out.append("--data=" + _redact_data(arg.removeprefix("--data=")))
        else:
            out.append(arg)
            value_of = arg if arg in _SECRET_OPTIONS or arg == "--data" else None
    return tuple(out)


def _redact_data(item: str) -> str:
    key, sep, _ = item.partition("=")
    return f"{key}={REDACTED}" if sep and _SECRET_DATA_KEY.search(key) else item


def policy_file(policy: object | None) -> PolicyFile | None:
    """The policy file of a loaded Policy (its source and the sha256 of its text); None for
    no policy or plain settings that came from no file."""
    source, text = getattr(policy, "source", None), getattr(policy, "text", None)
    if not isinstance(source, str) or not isinstance(text, str):
        return None
    return PolicyFile(source, hashlib.sha256(text.encode("utf-8")).hexdigest())


def gather_provenance(
    scope: Scope | None, policy: object | None = None, *, argv: Sequence[str] | None = None
) -> Provenance:
    """Provenance of the running process (``argv`` defaults to sys.argv)."""
    args = [_file_text(arg) for arg in (sys.argv if argv is None else argv)]
    command = (_program(args[0]), *args[1:]) if args else ()
    return Provenance(
        scope=scope,
        gpuaudit_version=__version__,
        pyinfra_version=pyinfra_version(),
        operator=operator(),
        command=redact_command(command),
        policy=policy_file(policy),
    )


def pyinfra_scope(argv: Sequence[str] | None = None) -> Scope:
    """The scope of the pyinfra run this process is: its inventory, --limit and --exclude.

    Read from pyinfra's command line (``argv``, default sys.argv) by pyinfra's own parser,
    which is loaded already when pyinfra runs the deploy (this module never imports pyinfra).
    Without it (pyinfra driven from Python) the inventory is not known.
    """
    args = list(sys.argv if argv is None else argv)[1:]
    params = _pyinfra_params(args)
    inventory = params.get("inventory")
    return Scope(
        source=INVENTORY,
        inventory=inventory_id(inventory) if isinstance(inventory, str) else None,
        limit=tuple(str(p) for p in params.get("limit") or ()),
        exclude=tuple(str(p) for p in params.get("exclude") or ()),
    )


def _pyinfra_params(args: list[str]) -> dict[str, Any]:
    command = getattr(sys.modules.get("pyinfra_cli.cli"), "cli", None)
    make_context = getattr(command, "make_context", None)
    if make_context is None:
        return {}
    try:
        # resilient_parsing: parse only, no prompts and no option callbacks.
        return dict(make_context("pyinfra", args, resilient_parsing=True).params)
    except Exception:  # a command line pyinfra's parser does not take is not an audit's
        return {}


def inventory_id(inventory: str) -> str:
    """An inventory file as an absolute path (runs started from another directory compare
    equal); an inventory that is not a file (a host list, a module) as given."""
    path = Path(inventory)
    return str(path.resolve()) if path.is_file() else inventory


def bundle_scope(
    paths: Iterable[str | os.PathLike[str]], directory: str | os.PathLike[str] | None = None
) -> Scope:
    """The scope of a run built from bundle files (those of ``directory`` with --bundle-dir),
    each name as text provenance.json can hold (a name that is not UTF-8 with its bytes
    escaped, as the host it stands for is named)."""
    where = _file_text(Path(directory).resolve()) if directory is not None else None
    names = tuple(_file_text(Path(p).name) for p in paths)
    return Scope(source=BUNDLE, bundles=names, bundle_dir=where)


def _file_text(path: str | os.PathLike[str]) -> str:
    # Bytes of a file name or command-line word that are not UTF-8 are lone surrogates in
    # Python, which no UTF-8 file can hold: escaped (\xNN).
    return os.fspath(path).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


# --- the run directory's copy --------------------------------------------------------------------


def record_provenance(
    run_path: str | os.PathLike[str],
    scope: Scope,
    policy: object | None = None,
    *,
    argv: Sequence[str] | None = None,
) -> Provenance:
    """Gather this process's provenance and keep it in the run directory (provenance.json).

    Called once per run by what collects it: the audit deploy
    (``record_provenance(run.path, pyinfra_scope(), policy)``) and ``gpuaudit report --bundle``
    (``record_provenance(run.path, bundle_scope(files), policy)``).
    """
    from gpuaudit.report.run import atomic_write_text  # run.py imports this module

    provenance = gather_provenance(scope, policy, argv=argv)
    text = json.dumps(provenance.to_dict(), indent=1, ensure_ascii=False) + "\n"
    atomic_write_text(Path(run_path) / PROVENANCE_FILE, text)
    return provenance


def read_provenance(run_path: str | os.PathLike[str]) -> Provenance | None:
    """The provenance a run directory recorded; None when it recorded none or the file is
    damaged (the file is left as it is)."""
    try:
        data = json.loads((Path(run_path) / PROVENANCE_FILE).read_text(encoding="utf-8"))
        return Provenance.from_dict(data) if isinstance(data, dict) else None
    except (OSError, ValueError, TypeError):
        return None


def register_provenance(run_path: str | os.PathLike[str], policy: object | None) -> Provenance:
    """The provenance of a register written now in ``run_path`` and judged by ``policy``:
    what the run recorded, else this process's with no scope."""
    recorded = read_provenance(run_path)
    if recorded is None:
        return gather_provenance(None, policy)
    return recorded.with_policy(policy_file(policy))


# --- the page's "About this run" -----------------------------------------------------------------


def provenance_view(register: Mapping[str, Any]) -> dict[str, str] | None:
    """Lines of the page's "About this run" block; None for a register without provenance.

    Plain strings (escaped by the template): every value may come from a command line or a
    path someone else chose.
    """
    data = register.get("provenance")
    if not isinstance(data, Mapping):
        return None
    try:
        provenance = Provenance.from_dict(data)
    except (ValueError, TypeError):
        unreadable = "unreadable (see register.json)"
        return dict.fromkeys(("scope", "policy", "run_by", "versions", "command"), unreadable)
    policy = provenance.policy
    return {
        "scope": provenance.scope.describe() if provenance.scope else "not recorded",
        "policy": f"{policy.path} (sha256 {policy.sha256})" if policy else "none (defaults)",
        "run_by": provenance.operator,
        "versions": f"gpuaudit {provenance.gpuaudit_version or '?'}, "
        f"pyinfra {provenance.pyinfra_version or 'not installed'}",
        "command": shlex.join(provenance.command),
    }
