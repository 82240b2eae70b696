"""The names of a run directory's files, and the time stamp they carry.

Kept apart from the renderers so that what only writes or finds a run's files (the collection,
``gpuaudit audit`` waiting on pyinfra) does not load the rules and the page templates.
"""

from __future__ import annotations

from datetime import datetime, timezone

REGISTER_FILE = "register.json"
HTML_FILE = "index.html"
# The split page's host details, beside index.html (report/html.py).
PAGE_DIR = "page"


def utc_now_iso() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")
