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
ten thousand bundles costs the memory of one. A directory (:func:`read_bundle_dir`) is read in
the order of its file names; hidden files and ``*.tmp`` (bundles still being written) are left
alone, and what is left out besides is named (:attr:`BundleDir.left_out`), so that no host is
missing from the register without a word. A ``<host>.failed`` marker, which the collection
jobs (gpuaudit.jobs) leave for a node whose collector did not finish, is a host whose
collection failed, with the marker's reason. Each name may also end in ``.gz`` (a bundle
compressed to be moved): it is read through gzip.

A node's bundle and its failure marker side by side are what a collection job leaves when it
ends between writing one and removing the other (it replaces the file of a node that ran
before, the new one first): the newer file is that node's last outcome and is read, and the
older one is named in the host's snapshot (a parse warning) and said on stderr. Two bundles for
one host (``gpu-01.bundle`` and ``gpu-01.txt``) have no such order and are refused.
"""

from __future__ import annotations

import dataclasses
import gzip
import os
import re
import stat
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpuaudit.assemble.build import build_snapshot, failed_snapshot
from gpuaudit.model.snapshot import HostSnapshot, Section, parse_warning
from gpuaudit.parsers.bundle import parse_bundle_text
from gpuaudit.parsers.limits import INPUT_BYTES, read_start, utf8_prefix
from gpuaudit.parsers.system import parse_meta

BUNDLE_SUFFIXES = (".bundle", ".txt", ".out")
# Left by a collection job for a node whose collector did not finish: the reason, then the end
# of the collector's stderr (gpuaudit.jobs.slurm).
FAILED_SUFFIX = ".failed"
TEMPORARY_SUFFIX = ".tmp"
# Any of the names above may end in this too: the file is gzip-compressed.
GZIP_SUFFIX = ".gz"
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
    plain = name.removesuffix(GZIP_SUFFIX)
    for suffix in (*BUNDLE_SUFFIXES, FAILED_SUFFIX):
        if plain.endswith(suffix) and len(plain) > len(suffix):
            return plain[: -len(suffix)]
    return name


def _read_start(path: Path, max_bytes: int) -> tuple[bytes, int]:
    """:func:`read_start` of the file, uncompressed first where its name ends in ``.gz``
    (OSError for a file that is not gzip, or cut short)."""
    if not path.name.endswith(GZIP_SUFFIX):
        return read_start(path, max_bytes)
    try:
        with gzip.open(path, "rb") as handle:
            raw = handle.read(max_bytes + 1)
    except (EOFError, zlib.error) as error:
        raise OSError(f"not a whole gzip file ({error})") from error
    if len(raw) <= max_bytes:
        return raw, 0
    raw = utf8_prefix(raw[:max_bytes])
    return raw, len(raw)


def snapshot_from_bundle(
    path: Path, *, host: str | None = None, host_data: dict[str, Any] | None = None
) -> HostSnapshot:
    """Build the snapshot of one bundle file; an unreadable file is a failed host, not a crash."""
    name = host or host_name_for(path)
    try:
        raw, cut = _read_start(path, INPUT_BYTES)
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
        raw, cut = _read_start(path, MARKER_BYTES)
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
    if path.name.removesuffix(GZIP_SUFFIX).endswith(FAILED_SUFFIX):
        return snapshot_from_marker(path)
    return snapshot_from_bundle(path)


def is_bundle_name(name: str) -> bool:
    """Whether a directory entry is one of a bundle run's files: not hidden, not a temporary
    (a bundle still being written), and named like a bundle or a failure marker."""
    if name.startswith(".") or name.endswith(TEMPORARY_SUFFIX):
        return False
    plain = name.removesuffix(GZIP_SUFFIX)
    return any(
        plain.endswith(suffix) and len(plain) > len(suffix)
        for suffix in (*BUNDLE_SUFFIXES, FAILED_SUFFIX)
    )


@dataclass(frozen=True)
class BundleDir:
    """What a bundle directory holds: the files to read, by name, and what is not read."""

    files: tuple[Path, ...]
    # Host → the older of its bundle and failure marker, left beside the newer one (read).
    set_aside: Mapping[str, Path] = field(default_factory=dict)
    # Names neither read nor expected: not hidden, not *.tmp, not named as bundles.
    left_out: tuple[str, ...] = ()
    # *.tmp files that are not hidden: bundles a job may still be writing.
    in_progress: tuple[str, ...] = ()

    def notes(self) -> list[str]:
        """What the reader should be told about the directory, one line each."""
        lines = [
            f"{file_text(older.name)} is older than the other file for host {host} and was not read"
            for host, older in self.set_aside.items()
        ]
        for names, what in (
            (self.left_out, "not named as bundles (*.bundle, *.txt, *.out, *.failed, or .gz)"),
            (self.in_progress, "still being written (*.tmp)"),
        ):
            if names:
                shown = ", ".join(file_text(n) for n in names[:5])
                more = f" and {len(names) - 5} more" if len(names) > 5 else ""
                lines.append(f"left out, {what}: {shown}{more}")
        return lines


def read_bundle_dir(directory: str | os.PathLike[str]) -> BundleDir:
    """The bundle files and failure markers in ``directory`` (not below it), sorted by name,
    a host's older file set aside where it has a bundle and a marker.

    FileNotFoundError when it is no directory; ValueError when it holds none of them, or two
    bundles for one host.
    """
    folder = Path(directory)
    if not folder.is_dir():
        raise FileNotFoundError(f"bundle directory {folder} does not exist or is not a directory")
    names, left_out, in_progress = [], [], []
    with os.scandir(folder) as entries:
        for entry in entries:
            if is_bundle_name(entry.name):
                names.append(entry.name)
            elif entry.name.startswith(".") or entry.is_dir(follow_symlinks=False):
                continue
            elif entry.name.endswith(TEMPORARY_SUFFIX):
                in_progress.append(entry.name)
            else:
                left_out.append(entry.name)
    if not names:
        kinds = ", ".join(f"*{suffix}" for suffix in (*BUNDLE_SUFFIXES, FAILED_SUFFIX))
        raise ValueError(f"bundle directory {folder} holds no bundle ({kinds})")
    files = [folder / name for name in sorted(names)]
    set_aside = _older_of_bundle_and_marker(files)
    files = [path for path in files if path not in set_aside.values()]
    check_unique_hosts(files)
    return BundleDir(tuple(files), set_aside, tuple(sorted(left_out)), tuple(sorted(in_progress)))


def bundle_dir_files(directory: str | os.PathLike[str]) -> list[Path]:
    """The files :func:`read_bundle_dir` reads, by name."""
    return list(read_bundle_dir(directory).files)


def _older_of_bundle_and_marker(files: Sequence[Path]) -> dict[str, Path]:
    """Host → the older file of a host with exactly one bundle and one failure marker (by
    modification time; the marker where both have the same)."""
    by_host: dict[str, list[Path]] = {}
    for path in files:
        by_host.setdefault(host_name_for(path), []).append(path)
    older: dict[str, Path] = {}
    for host, paths in by_host.items():
        markers = [p for p in paths if p.name.removesuffix(GZIP_SUFFIX).endswith(FAILED_SUFFIX)]
        if len(paths) != 2 or len(markers) != 1:
            continue  # one file, or two of a kind: check_unique_hosts says so
        (marker,) = markers
        (bundle,) = [p for p in paths if p is not marker]
        try:
            bundle_newer = bundle.stat().st_mtime_ns >= marker.stat().st_mtime_ns
        except OSError:
            continue  # the one that cannot be read is a failed host: both stay, refused
        older[host] = marker if bundle_newer else bundle
    return older


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


def store_snapshots(
    paths: Sequence[Path],
    write: Callable[[HostSnapshot], object],
    set_aside: Mapping[str, Path] | None = None,
) -> list[str]:
    """Build and hand each file's snapshot to ``write`` (``RunDir.write_snapshot``), one at a
    time, after refusing duplicate hosts; the hosts, in the files' order. A host in
    ``set_aside`` (:attr:`BundleDir.set_aside`) has the file not read named in its snapshot."""
    check_unique_hosts(paths)
    hosts = []
    for snapshot in iter_snapshots(paths):
        older = (set_aside or {}).get(snapshot.host)
        if older is not None:
            note = parse_warning(
                "bundle directory",
                f"{file_text(older.name)}, an older file for this host, was not read: a "
                "collection job ended between writing this host's new file and removing "
                "its old one",
                file_text(older.name),
            )
            snapshot = dataclasses.replace(
                snapshot, parse_warnings=(*snapshot.parse_warnings, note)
            )
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
