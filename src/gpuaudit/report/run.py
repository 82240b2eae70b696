"""The run directory: where one audit's snapshots and reports live. It only stores: what is
written there is evaluated and rendered by :mod:`gpuaudit.pipeline`.

Layout::

    reports/<run-id>/
        hosts/<safe-host-name>.json   one HostSnapshot per host, written the moment it arrives
        register.json                 the risk register (see register.py)
        provenance.json               what the run covered and who ran it (provenance.py)
        index.html                    the HTML page (self-contained, or for a large fleet
        page/hosts-NNNN.js            with its hosts' details beside it: html.py)
        register.csv, summary.md,     views of the register for other tools (outputs.py)
        junit.xml, gpuaudit.prom
        docs/                         the gpuaudit docs pages the register cites, which the
                                      page links (references.py)

Snapshots are the source of truth: ``register.json`` and ``index.html`` can always be rebuilt from
``hosts/`` alone (``gpuaudit report <run-dir>`` → :func:`gpuaudit.pipeline.rebuild`); a snapshot
file edited by hand since, or damaged, costs its host its unusable values, never the report
(:func:`load_snapshot_file`). Every file is written to a temporary name and renamed into place,
so a crash mid-audit leaves whole files or none, and a reader never sees half a snapshot; the
report's files are all rendered before any is written, and renamed together, register.json last.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from gpuaudit.report.cycles import cycle_collection_paused
from gpuaudit.report.layout import HTML_FILE, PAGE_DIR, REGISTER_FILE, utc_now_iso
from gpuaudit.report.provenance import PROVENANCE_FILE

if TYPE_CHECKING:
    from gpuaudit.model.snapshot import HostSnapshot
    from gpuaudit.report.register_types import Register

HOSTS_DIR = "hosts"
SNAPSHOT_SUFFIX = ".json"

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_MAX_STEM = 100
# Enough of a corrupt snapshot file to show what went wrong, without bloating the register.
_CORRUPT_EXCERPT_BYTES = 16 * 1024
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_MAX_RUN_ID = 128


def safe_host_filename(host: str) -> str:
    """A file name for a host's snapshot that is safe on any filesystem and never collides.

    Host names come from inventories and from hosts themselves, so they may hold ``/``, ``..``,
    spaces or control characters. Names that are already safe are kept as they are (easy to find
    by eye); any other name is cleaned and gets a short hash of the real name, so that ``a/b`` and
    ``a_b`` cannot overwrite each other. The real name stays inside the snapshot.
    """
    cleaned = _UNSAFE.sub("_", host).lstrip(".")[:_MAX_STEM]
    if cleaned == host and cleaned:
        return cleaned + SNAPSHOT_SUFFIX
    digest = hashlib.sha256(host.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{cleaned or 'host'}-{digest}{SNAPSHOT_SUFFIX}"


def os_error_text(error: OSError) -> str:
    """An OSError as a person reads it: ``<file>: <what went wrong>``."""
    what = error.strerror or str(error) or type(error).__name__
    return f"{error.filename}: {what}" if error.filename else what


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file in the same directory and a rename."""
    atomic_write_files({path: text})


def atomic_write_files(files: Mapping[Path, str]) -> None:
    """Write every file of ``files`` (path → text): first each to a temporary file beside it,
    then, once all are on disk, rename each into place, in the order given.

    A failure while writing (a full disk, a directory that cannot be made) leaves every file
    as it was and no temporary behind; renames need no space, and a caller that gives the file
    marking the set complete last never leaves it newer than the others.
    """
    atomic_write_streams(files.items())


def atomic_write_streams(
    files: Iterable[tuple[Path, Iterable[str]]], last: Path | None = None
) -> list[Path]:
    """:func:`atomic_write_files` for files made one after the other, each in pieces: each
    file's pieces are written to its temporary file as they come (the next file is asked for
    only then, so no more than one is held), and once all are on disk they are renamed into
    place in the order given, ``last`` (when given and written) after every other. Returns the
    paths written, in that order."""
    staged: dict[Path, str] = {}
    try:
        for path, pieces in files:
            if path in staged:  # a file given twice: the later text wins, as in a mapping
                os.unlink(staged.pop(path))
            staged[path] = _write_temporary(path, pieces)
        written = sorted(staged, key=lambda path: path == last)  # stable: the rest in order
        for path in written:
            os.replace(staged[path], path)
            del staged[path]
    except BaseException:
        for tmp_name in staged.values():
            with contextlib.suppress(OSError):
                os.unlink(tmp_name)
        raise
    return written


def _write_temporary(path: Path, text: str | Iterable[str]) -> str:
    """``text`` (or its pieces) in a new temporary file beside ``path``, flushed to disk; its
    name."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            if isinstance(text, str):
                handle.write(text)
            else:
                for piece in text:
                    handle.write(piece)
            handle.flush()
            os.fsync(handle.fileno())
        # mkstemp creates 0600; a report is as readable as any file the user creates.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp_name, 0o666 & ~umask)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise
    return tmp_name


class RunDir:
    """One audit run on disk.

    ``remember_written``: the process writes the run's snapshots and then reads them all for
    the register (an audit that is not sharded). Each snapshot it writes is kept, with the
    identity of the file written (inode, size, time), and :meth:`load_snapshots` takes it
    instead of decoding the file again while the file is still that one.
    """

    def __init__(self, path: str | os.PathLike[str], *, remember_written: bool = False) -> None:
        self.path = Path(path)
        self._written: dict[Path, tuple[tuple[int, int, int], HostSnapshot]] | None = (
            {} if remember_written else None
        )

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    @property
    def run_id(self) -> str:
        return self.path.resolve().name

    @property
    def hosts_dir(self) -> Path:
        return self.path / HOSTS_DIR

    @property
    def register_path(self) -> Path:
        return self.path / REGISTER_FILE

    @property
    def html_path(self) -> Path:
        return self.path / HTML_FILE

    def load_register(self, *, outcomes: bool = True) -> Register:
        """The run's register, read back from register.json (``outcomes=False``: without each
        host's rule outcomes, see Register.from_dict); OSError when it cannot be read,
        ValueError when it is not a register."""
        from gpuaudit.report.register_types import Register  # the rules: only when read

        # A fleet's register is a large tree of new objects: the cyclic collector's passes
        # over it would only walk them (cycles.py).
        with cycle_collection_paused():
            document = json.loads(self.register_path.read_text(encoding="utf-8"))
            return Register.from_dict(document, outcomes=outcomes)

    def snapshot_path(self, host: str) -> Path:
        return self.hosts_dir / safe_host_filename(host)

    def write_snapshot(self, snapshot: HostSnapshot) -> Path:
        """Persist one host's snapshot now, so a later crash cannot lose it."""
        path = self.snapshot_path(snapshot.host)
        atomic_write_text(path, snapshot.to_json() + "\n")
        if self._written is not None and _json_gives_back(snapshot.host_data):
            self._written[path] = (_file_identity(path), snapshot)
        return path

    def snapshot_files(self) -> list[Path]:
        """The snapshot files in ``hosts/``, by name. Listed with their directory entries'
        types (a stat only where the file system gives none), sorted as names: a Path per
        file and one comparison of Paths per step cost 4 × as much at 10,000 hosts."""
        hosts_dir = self.hosts_dir
        try:
            with os.scandir(hosts_dir) as entries:
                # Leftover temporaries (".name.json.xxxx.tmp") start with a dot: never a
                # snapshot. is_file() follows a link, as Path.is_file() does.
                names = sorted(
                    e.name
                    for e in entries
                    if e.name.endswith(SNAPSHOT_SUFFIX)
                    and not e.name.startswith(".")
                    and e.is_file()
                )
        except (FileNotFoundError, NotADirectoryError):
            return []
        return [hosts_dir / name for name in names]

    def load_snapshots(self) -> list[HostSnapshot]:
        """Read every snapshot; an unreadable one becomes a COLLECTION_FAILED host, not an error.

        The cyclic garbage collector is paused meanwhile (cycles.py): snapshots are trees, and
        its passes over the growing fleet would only walk them."""
        with cycle_collection_paused():
            return [self._remembered(p) or load_snapshot_file(p) for p in self.snapshot_files()]

    def _remembered(self, path: Path) -> HostSnapshot | None:
        kept = self._written.get(path) if self._written is not None else None
        if kept is None:
            return None
        try:
            same = _file_identity(path) == kept[0]
        except OSError:
            same = False
        return kept[1] if same else None

    def store(self, files: Mapping[str, str]) -> None:
        """Write the report's files (path in the run directory → text) all together: each to a
        temporary name first, then renamed into place in the order given (register.json last,
        as the renderers give it)."""
        atomic_write_files({self.path / name: text for name, text in files.items()})

    def store_files(self, files: Iterable[tuple[str, Iterable[str]]]) -> None:
        """:meth:`store` for files made one at a time, each in pieces (renderers.render_files):
        each is written to its temporary name as it comes, all are renamed into place at the
        end in the order given, register.json last whenever it comes. Detail files of an
        earlier page (``page/``, html.render_page) that this report no longer has are removed
        then."""
        paths = ((self.path / name, text) for name, text in files)
        written = atomic_write_streams(paths, last=self.register_path)
        page_dir = self.path / PAGE_DIR
        if page_dir.is_dir():
            keep = set(written)
            for stale in page_dir.glob("hosts-*.js"):
                if stale not in keep:
                    with contextlib.suppress(OSError):
                        stale.unlink()

    def discard_if_empty(self) -> bool:
        """Remove the run directory when the run left nothing in it, and say whether it did.

        Nothing means no snapshot and no register: an empty ``hosts/`` and the copies a run
        starts with (policy.yaml, provenance.json) are not results. Anything else found there
        keeps the directory.
        """
        from gpuaudit.policy import POLICY_FILE  # the policy package reads rules

        if self.snapshot_files() or self.register_path.exists():
            return False
        for name in (POLICY_FILE, PROVENANCE_FILE):
            with contextlib.suppress(FileNotFoundError):
                (self.path / name).unlink()
        try:
            if self.hosts_dir.is_dir():
                self.hosts_dir.rmdir()
            self.path.rmdir()
        except OSError:  # something else is in there: not ours to remove
            return False
        return True


def _json_gives_back(value: object) -> bool:
    """Whether JSON reads ``value`` back as it is. Everything a snapshot holds is the model's,
    but its inventory data is the inventory's, as given: a tuple there is a list in the file,
    and rules reading it must see what a rebuild from the file sees."""
    try:
        return bool(json.loads(json.dumps(value, allow_nan=False)) == value)
    except (TypeError, ValueError):
        return False


def _file_identity(path: Path) -> tuple[int, int, int]:
    stat = path.stat()
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


def load_snapshot_file(path: Path) -> HostSnapshot:
    """Read one snapshot file; any failure is turned into a snapshot that says so.

    A value of the wrong type (a hand-edited number that is now a string, a ``null`` OS) is
    read as absent and the host is marked with it (``HostSnapshot.from_dict``), named by the
    file name and dated by the file's time where its own name or time is unusable. A file that
    is no snapshot at all becomes a COLLECTION_FAILED host holding the file's start as evidence.
    """
    from gpuaudit.model.snapshot import HostSnapshot  # not for a process that only stores

    try:
        raw = path.read_bytes()
    except OSError as exc:
        return _unreadable(path, f"cannot be read: {exc.strerror or exc}", b"")
    try:
        return HostSnapshot.from_dict(
            json.loads(raw.decode("utf-8")),
            source=f"snapshot file {HOSTS_DIR}/{path.name}",
            host=path.stem,
            collected_at=_mtime_iso(path),
        )
    except Exception as exc:  # any damage to one file must not sink the whole report
        return _unreadable(path, f"is not a readable snapshot: {type(exc).__name__}: {exc}", raw)


def _unreadable(path: Path, problem: str, raw: bytes) -> HostSnapshot:
    from gpuaudit.model.snapshot import HostSnapshot, HostStatus, Section

    host = _host_name_hint(raw) or path.stem
    mtime = _mtime_iso(path)
    excerpt = raw[:_CORRUPT_EXCERPT_BYTES].decode("utf-8", "replace")
    return HostSnapshot(
        host=host,
        status=HostStatus.COLLECTION_FAILED,
        collected_at=mtime,
        status_detail=f"snapshot file {HOSTS_DIR}/{path.name} {problem}",
        # Keep what the file held, as evidence of what went wrong.
        sections={
            "snapshot_file": Section(
                rc=None,
                stdout=excerpt,
                stderr=problem,
                truncated=len(raw) > _CORRUPT_EXCERPT_BYTES,
            )
        },
    )


def _host_name_hint(raw: bytes) -> str | None:
    """The real host name when the file is valid JSON with a ``host`` string (else None)."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except ValueError:
        return None
    host = data.get("host") if isinstance(data, dict) else None
    return host if isinstance(host, str) and host else None


def _mtime_iso(path: Path) -> str:
    try:
        stamp = datetime.fromtimestamp(path.stat().st_mtime, timezone.utc)
    except OSError:
        return utc_now_iso()
    return stamp.replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_run_id(now: datetime | None = None) -> str:
    return (now or datetime.now(timezone.utc)).astimezone(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def check_run_id(run_id: str) -> str:
    """``run_id`` when it can name a run directory, else ValueError: one plain path component
    (letters, digits, ``.``, ``_``, ``-``, not starting with a dot), at most 128 characters."""
    if not _RUN_ID.match(run_id) or len(run_id) > _MAX_RUN_ID:
        raise ValueError(
            f"run id {run_id!r} must be one plain path component: letters, digits, '.', '_' "
            f"and '-', not starting with '.', at most {_MAX_RUN_ID} characters"
        )
    return run_id


def new_run_dir(
    reports_dir: str | os.PathLike[str] = "reports", run_id: str | None = None
) -> RunDir:
    """Create a fresh run directory ``<reports_dir>/<run_id>`` (a suffix keeps it unique).

    Raises ValueError for a run id :func:`check_run_id` refuses, OSError where the directory
    cannot be made (a reports directory that is read-only, full, or a file).
    """
    base_id = check_run_id(run_id or new_run_id())
    reports = Path(reports_dir)
    reports.mkdir(parents=True, exist_ok=True)
    attempt = 1
    while True:
        candidate = base_id if attempt == 1 else f"{base_id}-{attempt}"
        path = reports / candidate
        try:
            # mkdir without exist_ok: two audits started in the same second cannot share a dir.
            path.mkdir()
        except FileExistsError:
            attempt += 1
            continue
        (path / HOSTS_DIR).mkdir()
        return RunDir(path)


@dataclass(frozen=True)
class RunEnd:
    """How an audit run ended before pyinfra wrote its register: stopped by a signal
    (``signal``, e.g. ``"SIGTERM"``), or pyinfra exited first with ``exit_status`` (no host
    connected, --fail-percent reached, pyinfra killed). The hosts of the run that have no
    snapshot then get one that says so (``not_audited_detail``)."""

    signal: str | None = None
    exit_status: int | None = None

    def __str__(self) -> str:
        if self.signal is not None:
            return f"the audit was interrupted ({self.signal})"
        return f"pyinfra ended (exit status {self.exit_status})"

    @property
    def not_audited_detail(self) -> str:
        return f"not audited: {self} before this host was collected"

    def to_arg(self) -> str:
        """One command-line word for :meth:`from_arg`."""
        if self.signal is not None:
            return f"signal={self.signal}"
        return f"exit={self.exit_status}"

    @classmethod
    def from_arg(cls, text: str) -> RunEnd:
        kind, _, value = text.partition("=")
        if kind == "signal" and value:
            return cls(signal=value)
        if kind == "exit" and value.lstrip("-").isdigit():
            return cls(exit_status=int(value))
        raise ValueError(f"not a run end: {text!r} (signal=NAME or exit=STATUS)")
