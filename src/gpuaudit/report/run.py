"""The run directory: where one audit's snapshots and reports live.

Layout::

    reports/<run-id>/
        hosts/<safe-host-name>.json   one HostSnapshot per host, written the moment it arrives
        register.json                 the risk register (see register.py)
        index.html                    the self-contained HTML page
        register.csv, summary.md,     views of the register for other tools (outputs.py)
        junit.xml, gpuaudit.prom
        docs/                         the gpuaudit docs pages the register cites, which the
                                      page links (references.py)

Snapshots are the source of truth: ``register.json`` and ``index.html`` can always be rebuilt from
``hosts/`` alone (``gpuaudit report <run-dir>`` → :func:`rebuild`). Every file is written to a
temporary name and renamed into place, so a crash mid-audit leaves whole files or none, and a
reader never sees half a snapshot.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuaudit.model.snapshot import HostSnapshot, HostStatus, Section
from gpuaudit.report.html import render_html
from gpuaudit.report.outputs import render_outputs
from gpuaudit.report.references import DOCS_DIR, docs_file, docs_pages
from gpuaudit.report.register import build_register, utc_now_iso
from gpuaudit.report.rollouts import open_rollouts
from gpuaudit.report.trends import find_previous, load_previous
from gpuaudit.rules.base import Finding

if TYPE_CHECKING:
    from gpuaudit.policy import Policy

HOSTS_DIR = "hosts"
REGISTER_FILE = "register.json"
HTML_FILE = "index.html"
SNAPSHOT_SUFFIX = ".json"

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_MAX_STEM = 100
# Enough of a corrupt snapshot file to show what went wrong, without bloating the register.
_CORRUPT_EXCERPT_BYTES = 16 * 1024
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


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


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file in the same directory and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        # mkstemp creates 0600; a report is as readable as any file the user creates.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp_name, 0o666 & ~umask)
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise


class RunDir:
    """One audit run on disk."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

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

    def snapshot_path(self, host: str) -> Path:
        return self.hosts_dir / safe_host_filename(host)

    def write_snapshot(self, snapshot: HostSnapshot) -> Path:
        """Persist one host's snapshot now, so a later crash cannot lose it."""
        path = self.snapshot_path(snapshot.host)
        atomic_write_text(path, snapshot.to_json() + "\n")
        return path

    def snapshot_files(self) -> list[Path]:
        if not self.hosts_dir.is_dir():
            return []
        # Leftover temporaries (".name.json.xxxx.tmp") start with a dot: never a snapshot.
        return sorted(
            p
            for p in self.hosts_dir.iterdir()
            if p.suffix == SNAPSHOT_SUFFIX and not p.name.startswith(".") and p.is_file()
        )

    def load_snapshots(self) -> list[HostSnapshot]:
        """Read every snapshot; an unreadable one becomes a COLLECTION_FAILED host, not an error."""
        return [load_snapshot_file(p) for p in self.snapshot_files()]

    def write_report(
        self,
        snapshots: Sequence[HostSnapshot],
        findings: Sequence[Finding] | None = None,
        *,
        policy: Policy | Mapping[str, Any] | None = None,
        generated_at: str | None = None,
        previous: str | os.PathLike[str] | None = None,
        fail_on: str | None = None,
    ) -> Path:
        """Write register.json, index.html and the views of outputs.py; return index.html.

        Without ``findings`` the rules are evaluated here (with ``policy``, which also supplies
        waivers). Trends compare with ``previous`` (a run directory), by default with the newest
        earlier run next to this one (trends.find_previous). ``fail_on`` is junit.xml's
        failure threshold.
        """
        if findings is None:
            # Imported late: the report package is usable (and testable) without the rules.
            from gpuaudit.rules import evaluate  # type: ignore[attr-defined,unused-ignore]

            findings = list(evaluate(snapshots, policy=policy))
        previous_path = previous if previous is not None else find_previous(self.path)
        register = build_register(
            snapshots,
            findings,
            generated_at=generated_at or utc_now_iso(),
            run_id=self.run_id,
            policy=policy,
            previous=load_previous(previous_path) if previous_path is not None else None,
        )
        register["rollouts"] = open_rollouts(self.path.parent)
        atomic_write_text(
            self.register_path, json.dumps(register, indent=1, ensure_ascii=False) + "\n"
        )
        copied = self.copy_docs(cited_references(register))
        atomic_write_text(self.html_path, render_html(register, snapshots, docs_pages=copied))
        for name, text in render_outputs(register, fail_on=fail_on, policy=policy).items():
            atomic_write_text(self.path / name, text)
        return self.html_path

    def copy_docs(self, references: Sequence[Any], docs_dir: Path | None = None) -> frozenset[str]:
        """Copy the docs pages ``references`` cite (and the pages they link to) into the run
        directory, at their repository paths (``docs/…``), and return the pages copied. Without
        a docs directory (gpuaudit installed without its source tree) nothing is copied, and the
        page shows those references as text. ``docs_dir`` defaults to the checkout's docs/."""
        docs_dir = DOCS_DIR if docs_dir is None else docs_dir
        pages = docs_pages(references, docs_dir) if docs_dir.is_dir() else []
        for page in pages:
            text = docs_file(page, docs_dir).read_text(encoding="utf-8")
            atomic_write_text(self.path / page, text)
        return frozenset(pages)


def cited_references(register: Mapping[str, Any]) -> list[Any]:
    """Every reference the register's risks and checklists cite, once each, in order."""
    cited: dict[Any, None] = {}
    for risk in register.get("risks") or ():
        cited.update(dict.fromkeys(risk.get("references") or ()))
    for checklist in (register.get("checklists") or {}).values():
        if checklist.get("reference"):
            cited[checklist["reference"]] = None
    return list(cited)


def load_snapshot_file(path: Path) -> HostSnapshot:
    """Read one snapshot file; any failure is turned into a snapshot that says so."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        return _unreadable(path, f"cannot be read: {exc.strerror or exc}", b"")
    try:
        snapshot = HostSnapshot.from_json(raw.decode("utf-8"))
        _check_shape(snapshot)
    except Exception as exc:  # any damage to one file must not sink the whole report
        return _unreadable(path, f"is not a readable snapshot: {type(exc).__name__}: {exc}", raw)
    return snapshot


def _check_shape(snapshot: HostSnapshot) -> None:
    """Reject a file that parsed but lacks what the report relies on (names, GPU indexes).

    ``from_json`` trusts JSON types, so valid JSON of the wrong shape would otherwise only fail
    later, while rendering, and take the whole report down with it.
    """
    if not isinstance(snapshot.host, str) or not snapshot.host:
        raise ValueError("'host' must be a non-empty string")
    if not isinstance(snapshot.collected_at, str):
        raise ValueError("'collected_at' must be a string")
    for gpu in snapshot.gpus:
        if not isinstance(gpu.index, int) or isinstance(gpu.index, bool):
            raise ValueError(f"GPU index {gpu.index!r} is not an integer")


def _unreadable(path: Path, problem: str, raw: bytes) -> HostSnapshot:
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


def new_run_dir(
    reports_dir: str | os.PathLike[str] = "reports", run_id: str | None = None
) -> RunDir:
    """Create a fresh run directory ``<reports_dir>/<run_id>`` (a suffix keeps it unique)."""
    base_id = run_id or new_run_id()
    if not _RUN_ID.match(base_id):
        raise ValueError(f"run id {base_id!r} must be one plain path component")
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


def rebuild(
    run_dir: RunDir | str | os.PathLike[str],
    *,
    policy: Policy | Mapping[str, Any] | None = None,
    previous: str | os.PathLike[str] | None = None,
    fail_on: str | None = None,
) -> Path:
    """Rebuild register.json and index.html from the run's snapshots (``gpuaudit report``).

    Without ``policy`` the run's own copy (policy.yaml, written by the audit) is used, so a
    rebuilt register judges the hosts as the audit did; a copy that no longer loads raises
    PolicyError (a ValueError).
    """
    run = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    if not run.path.is_dir():
        raise FileNotFoundError(f"run directory {run.path} does not exist")
    if not run.hosts_dir.is_dir():
        raise FileNotFoundError(f"{run.path} holds no {HOSTS_DIR}/ directory: not a gpuaudit run")
    if policy is None:
        from gpuaudit.policy import POLICY_FILE, load_policy  # the policy package reads rules

        if (run.path / POLICY_FILE).is_file():
            policy = load_policy(run.path / POLICY_FILE)
    snapshots = run.load_snapshots()
    return run.write_report(snapshots, policy=policy, previous=previous, fail_on=fail_on)
