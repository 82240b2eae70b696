"""Every format the register is written in, behind one interface.

A :class:`Renderer` turns one :class:`RenderInput` — the typed register (register_types.py),
the snapshots it was built from, the docs pages the run directory holds — into the text of one
file of the run directory:
register.json, the HTML page, register.csv, summary.md, junit.xml and gpuaudit.prom, in the
manner of pip-audit's output formats. :func:`render_all` renders every one of them and the copies
of the docs pages the register cites, in memory, register.json last: nothing is written here
(the run directory stores them, :meth:`gpuaudit.report.run.RunDir.store`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from gpuaudit.model.snapshot import HostSnapshot
from gpuaudit.report.html import render_html
from gpuaudit.report.junit import render_junit
from gpuaudit.report.outputs import (
    CSV_FILE,
    JUNIT_FILE,
    MARKDOWN_FILE,
    PROMETHEUS_FILE,
    render_csv,
    render_markdown,
    render_prometheus,
)
from gpuaudit.report.references import DOCS_DIR, docs_file, docs_pages
from gpuaudit.report.register_types import Register

REGISTER_FILE = "register.json"
HTML_FILE = "index.html"


@dataclass(frozen=True)
class RenderInput:
    """What every renderer reads: the register (register.py's document), the snapshots it was
    built from, the docs pages the run directory holds copies of (the page links them), and
    junit.xml's failure threshold."""

    register: Register
    snapshots: Sequence[HostSnapshot] = ()
    docs_pages: frozenset[str] = frozenset()
    fail_on: str | None = None


class Renderer(Protocol):
    """One output format: the file it writes and how."""

    @property
    def filename(self) -> str: ...

    def render(self, given: RenderInput) -> str: ...


@dataclass(frozen=True)
class Format:
    """A renderer made of its file name and a function of the render input."""

    filename: str
    to_text: Callable[[RenderInput], str]

    def render(self, given: RenderInput) -> str:
        return self.to_text(given)


def register_json(register: Register) -> str:
    """register.json's text; a number that is not finite is refused, never written.

    One top-level key a line, and each entry of its lists (hosts, risks, findings) on a line of
    its own: as easy to read and to diff as an indented file, and written by the json module's
    C encoder, which an indented dump does not use (a tenth of the time on a large fleet)."""
    return _lines_json(register.document)


def _lines_json(document: Mapping[str, Any]) -> str:
    def dump(value: Any) -> str:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)

    parts = []
    for key, value in document.items():
        if isinstance(value, list) and value:
            items = ",\n  ".join(dump(item) for item in value)
            parts.append(f" {dump(key)}: [\n  {items}\n ]")
        else:
            parts.append(f" {dump(key)}: {dump(value)}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


RENDERERS: tuple[Renderer, ...] = (
    Format(HTML_FILE, lambda g: render_html(g.register, g.snapshots, docs_pages=g.docs_pages)),
    Format(CSV_FILE, lambda g: render_csv(g.register)),
    Format(MARKDOWN_FILE, lambda g: render_markdown(g.register)),
    Format(JUNIT_FILE, lambda g: render_junit(g.register, fail_on=g.fail_on)),
    Format(PROMETHEUS_FILE, lambda g: render_prometheus(g.register)),
    Format(REGISTER_FILE, lambda g: register_json(g.register)),  # last: the run's commit point
)


def render_all(
    register: Register,
    snapshots: Sequence[HostSnapshot],
    *,
    fail_on: str | None = None,
    renderers: Sequence[Renderer] | None = None,
) -> dict[str, str]:
    """Every file of the report by its path in the run directory, with its text: the docs
    pages the register cites, then each renderer's file (default :data:`RENDERERS`),
    register.json last."""
    files = docs_copies(cited_references(register))
    given = RenderInput(register, snapshots, frozenset(files), fail_on)
    for renderer in RENDERERS if renderers is None else renderers:
        files[renderer.filename] = renderer.render(given)
    if REGISTER_FILE in files:
        files[REGISTER_FILE] = files.pop(REGISTER_FILE)
    return files


def docs_copies(references: Sequence[Any], docs_dir: Path | None = None) -> dict[str, str]:
    """The docs pages ``references`` cite (and the pages they link to), by their repository
    paths (``docs/…``, where the run directory holds their copies), with their text. Without a
    docs directory (gpuaudit installed without its source tree) there are none, and the page
    shows those references as text. ``docs_dir`` defaults to the checkout's docs/."""
    docs_dir = DOCS_DIR if docs_dir is None else docs_dir
    pages = docs_pages(references, docs_dir) if docs_dir.is_dir() else []
    return {page: docs_file(page, docs_dir).read_text(encoding="utf-8") for page in pages}


def cited_references(register: Register) -> list[str]:
    """Every reference the register's risks and checklists cite, once each, in order."""
    cited: dict[str, None] = {}
    for risk in register.risks:
        cited.update(dict.fromkeys(risk.references))
    for checklist in register.checklists:
        if checklist.reference:
            cited[checklist.reference] = None
    return list(cited)
