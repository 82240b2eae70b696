"""References as the report shows them: web addresses, and pages of gpuaudit's own docs.

A rule or checklist cites either a web address or a docs page by its path in the repository,
with the section's anchor (``docs/field-guide/xid.md#common-xid-codes``; see
gpuaudit.rules.refs). The HTML page links both kinds. A docs path is linked relative to the
page, which works because the run directory gets a copy of the cited pages at the same paths
(RunDir.write_report, with :func:`docs_pages`); a docs path whose page was not copied stays
plain text, so the page never carries a dead link.

Only a strict docs path counts as one (``docs/`` + path segments that start with a letter or
digit + ``.md`` + an optional ``#anchor``): no scheme, no ``..``, nothing a crafted register could
turn into a link elsewhere.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Set
from pathlib import Path
from typing import Any

# The project's docs/ in a source checkout (src/gpuaudit/report/ → the repository root).
DOCS_DIR = Path(__file__).resolve().parents[3] / "docs"
DOCS_PREFIX = "docs/"

_DOCS_REF = re.compile(r"docs/(?:[A-Za-z0-9][\w.-]*/)*[A-Za-z0-9][\w.-]*\.md(?:#[\w-]+)?")
# Relative Markdown links between docs pages: ](page.md) or ](../page.md#anchor).
_MD_LINK = re.compile(r"\]\(([^()\s#:]+\.md)(?:#[^()\s]*)?\)")


def is_web_link(ref: Any) -> bool:
    """Only plain http(s) references become links; anything else (javascript:, data:) is text."""
    return isinstance(ref, str) and ref.lower().startswith(("https://", "http://"))


def docs_page(ref: Any) -> str | None:
    """The docs page a reference cites (``docs/field-guide/xid.md``), or None for any other."""
    if not isinstance(ref, str) or not _DOCS_REF.fullmatch(ref):
        return None
    return ref.partition("#")[0]


def docs_pages(references: Iterable[Any], docs_dir: Path = DOCS_DIR) -> list[str]:
    """The docs pages ``references`` cite, and the pages those link to, that exist under
    ``docs_dir``; as paths relative to the repository root (``docs/…``), sorted."""
    root = docs_dir.resolve()
    todo = [page for page in map(docs_page, references) if page is not None]
    found: set[str] = set()
    while todo:
        page = todo.pop()
        path = docs_file(page, root)
        if page in found or not path.resolve().is_relative_to(root) or not path.is_file():
            continue
        found.add(page)
        for link in _MD_LINK.findall(path.read_text(encoding="utf-8")):
            target = posixpath.normpath(posixpath.join(posixpath.dirname(page), link))
            if docs_page(target) == target:
                todo.append(target)
    return sorted(found)


def docs_file(page: str, docs_dir: Path = DOCS_DIR) -> Path:
    """Where a docs page (``docs/…``) is in ``docs_dir``."""
    return docs_dir / page.removeprefix(DOCS_PREFIX)


def reference_view(ref: Any, linked_pages: Set[str] = frozenset()) -> list[Any]:
    """A reference as the page data carries it: ``[text, is a link]``. The link's target is
    the text itself: a web address, or a docs path relative to the page."""
    page = docs_page(ref)
    return [str(ref), is_web_link(ref) or (page is not None and page in linked_pages)]
