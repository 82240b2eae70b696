"""Offline audits: hosts that SSH cannot reach send the collector's output instead.

On the host (no gpuaudit, no Python needed)::

    sh collect.sh > "$(hostname).bundle"        # collect.sh from `gpuaudit collect-script`

Then, anywhere::

    gpuaudit report --bundle gpu-01.bundle gpu-02.bundle ...
    gpuaudit report --bundle-dir /shared/gpuaudit/2024-06   # a directory of them

A bundle is read with the same code the live audit uses (the fact's framing reader and the
snapshot builder), so the register it gives is the register an SSH audit of the same hosts gives.

Bundles are read one at a time (:func:`iter_snapshots`): each becomes its snapshot, which the
caller stores (the run directory writes it at once) before the next file is opened, so reading
ten thousand bundles costs the memory of one. A directory (:func:`bundle_dir_files`) is read in
the order of its file names; hidden files and ``*.tmp`` (bundles still being written) are left
alone. A ``<host>.failed`` marker, which the collection jobs (gpuaudit.jobs) leave for a node
whose collector did not finish, is a host whose collection failed, with the marker's reason.
"""

from __future__ import annotations

import dataclasses
import os
import re
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpuaudit.assemble.build import build_snapshot, failed_snapshot
from gpuaudit.model.snapshot import HostSnapshot, Section
from gpuaudit.parsers.bundle import parse_bundle_text
from gpuaudit.parsers.limits import INPUT_BYTES, read_start
from gpuaudit.parsers.system import parse_meta

BUNDLE_SUFFIXES = (".bundle", ".txt", ".out")
# Left by a collection job for a node whose collector did not finish: the reason, then the end
# of the collector's stderr (gpuaudit.jobs.slurm).
FAILED_SUFFIX = ".failed"
TEMPORARY_SUFFIX = ".tmp"
MARKER_BYTES = 64 * 1024
_ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
_REASON_CHARS = 1000


def file_text(path: str | os.PathLike[str]) -> str:
    """A file's name or path as text a report can hold: the bytes of a name that is not UTF-8
    (which Python keeps as lone surrogates, and no UTF-8 file can hold) escaped as ``\\xNN``."""
    return os.fspath(path).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def host_name_for(path: Path) -> str:
    """The host a bundle (or failure marker) file stands for: its name without the suffix
    (:func:`file_text`: a name that is not UTF-8 with its bytes escaped)."""
    name = file_text(path.name)
    for suffix in (*BUNDLE_SUFFIXES, FAILED_SUFFIX):
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def snapshot_from_bundle(
    path: Path, *, host: str | None = None, host_data: dict[str, Any] | None = None
) -> HostSnapshot:
    """Build the snapshot of one bundle file; an unreadable file is a failed host, not a crash."""
    name = host or host_name_for(path)
    try:
        raw, cut = read_start(path, INPUT_BYTES)
    except OSError as error:
        return failed_snapshot(name, f"bundle {file_text(path)} could not be read: {error}")
    bundle = parse_bundle_text(raw.decode("utf-8", "replace"))
    if cut:
        # A bundle larger than any collector writes: only its start is read, and it says so.
        note = f"bundle file larger than {cut} bytes: only its first {cut} bytes were read"
        bundle = dataclasses.replace(bundle, problems=(*bundle.problems, note))
    if not bundle.sections:
        problem = "; ".join(bundle.problems) or "no sections"
        return failed_snapshot(
            name, f"bundle {file_text(path.name)} is not collector output: {problem}"
        )
    meta_section = bundle.sections.get("meta")
    collected = parse_meta(meta_section.stdout).get("date") if meta_section else None
    return build_snapshot(
        name,
        bundle,
        host_data=host_data,
        collected_at=collected if collected and _ISO_UTC.match(collected) else None,
    )


def snapshot_from_marker(path: Path, *, host: str | None = None) -> HostSnapshot:
    """The failed host a collection job's ``<host>.failed`` marker stands for: its first line
    is the reason; the whole marker (bounded) is kept as the evidence section ``collect_job``."""
    name = host or host_name_for(path)
    try:
        raw, cut = read_start(path, MARKER_BYTES)
    except OSError as error:
        return failed_snapshot(
            name, f"failure marker {file_text(path.name)} could not be read: {error}"
        )
    text = raw.decode("utf-8", "replace")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    reason = lines[0][:_REASON_CHARS] if lines else f"empty failure marker {file_text(path.name)}"
    return failed_snapshot(
        name,
        reason,
        collected_at=_mtime_iso(path),
        sections={"collect_job": Section(rc=None, stdout=text, truncated=bool(cut))},
    )


def snapshot_from_file(path: Path) -> HostSnapshot:
    """The snapshot of one file of a bundle run: a bundle, or a job's failure marker. Anything
    that is not a regular file (a dangling link, a FIFO, a directory) is a failed host; it is
    never opened, so a FIFO cannot block the run."""
    try:
        mode = os.stat(path).st_mode
    except OSError as error:
        return failed_snapshot(
            host_name_for(path), f"bundle {file_text(path)} could not be read: {error}"
        )
    if not stat.S_ISREG(mode):
        return failed_snapshot(
            host_name_for(path), f"bundle {file_text(path)} is not a regular file"
        )
    if path.name.endswith(FAILED_SUFFIX):
        return snapshot_from_marker(path)
    return snapshot_from_bundle(path)


def is_bundle_name(name: str) -> bool:
    """Whether a directory entry is one of a bundle run's files: not hidden, not a temporary
    (a bundle still being written), and named like a bundle or a failure marker."""
    if name.startswith(".") or name.endswith(TEMPORARY_SUFFIX):
        return False
    return any(
        name.endswith(suffix) and len(name) > len(suffix)
        for suffix in (*BUNDLE_SUFFIXES, FAILED_SUFFIX)
    )


def bundle_dir_files(directory: str | os.PathLike[str]) -> list[Path]:
    """The bundle files and failure markers in ``directory`` (not below it), sorted by name.

    FileNotFoundError when it is no directory; ValueError when it holds none of them.
    """
    folder = Path(directory)
    if not folder.is_dir():
        raise FileNotFoundError(f"bundle directory {folder} does not exist or is not a directory")
    with os.scandir(folder) as entries:
        names = sorted(entry.name for entry in entries if is_bundle_name(entry.name))
    if not names:
        kinds = ", ".join(f"*{suffix}" for suffix in (*BUNDLE_SUFFIXES, FAILED_SUFFIX))
        raise ValueError(f"bundle directory {folder} holds no bundle ({kinds})")
    return [folder / name for name in names]


def check_unique_hosts(paths: Iterable[Path]) -> None:
    """ValueError when two files stand for the same host (``gpu-01.bundle`` and
    ``gpu-01.txt``, or a bundle beside its host's failure marker). Checked from the names
    alone, before any file is read."""
    seen: dict[str, int] = {}
    for path in paths:
        host = host_name_for(Path(path))
        seen[host] = seen.get(host, 0) + 1
    duplicates = sorted(host for host, count in seen.items() if count > 1)
    if duplicates:
        raise ValueError(f"several bundles name the same host: {', '.join(duplicates)}")


def iter_snapshots(paths: Iterable[Path]) -> Iterator[HostSnapshot]:
    """Each file's snapshot in turn; a file is read only when its snapshot is asked for, and
    nothing of it is kept once the next is read."""
    for path in paths:
        yield snapshot_from_file(Path(path))


def store_snapshots(paths: Sequence[Path], write: Callable[[HostSnapshot], object]) -> list[str]:
    """Build and hand each file's snapshot to ``write`` (``RunDir.write_snapshot``), one at a
    time, after refusing duplicate hosts; the hosts, in the files' order."""
    check_unique_hosts(paths)
    hosts = []
    for snapshot in iter_snapshots(paths):
        write(snapshot)
        hosts.append(snapshot.host)
    return hosts


def snapshots_from_bundles(paths: Iterable[Path]) -> list[HostSnapshot]:
    """Every file's snapshot, in a list (all in memory: :func:`store_snapshots` streams)."""
    files = [Path(p) for p in paths]
    check_unique_hosts(files)
    return list(iter_snapshots(files))


def _mtime_iso(path: Path) -> str | None:
    try:
        stamp = datetime.fromtimestamp(path.stat().st_mtime, timezone.utc)
    except OSError:
        return None
    return stamp.replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")
