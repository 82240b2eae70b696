"""The names of a run directory's files, the time stamp they carry, and what tells a file apart
from the one a record was made of.

Kept apart from the renderers so that what only writes or finds a run's files (the collection,
``gpuaudit audit`` waiting on pyinfra) does not load the rules and the page templates.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

REGISTER_FILE = "register.json"
HTML_FILE = "index.html"
# The split page's host details, beside index.html (report/html.py).
PAGE_DIR = "page"


def utc_now_iso() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def file_stamp(path: Path) -> tuple[int, int] | None:
    """A file's size and modification time (ns), what tells a file written since from the one
    a record was made of; None when it cannot be read."""
    try:
        status = path.stat()
    except OSError:
        return None
    return status.st_size, status.st_mtime_ns
