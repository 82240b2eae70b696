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
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from gpuaudit.model.snapshot import HostSnapshot
from gpuaudit.report.html import render_html, render_page
from gpuaudit.report.junit import junit_chunks, render_junit
from gpuaudit.report.layout import HTML_FILE, REGISTER_FILE
from gpuaudit.report.outputs import (
    CSV_FILE,
    JUNIT_FILE,
    MARKDOWN_FILE,
    PROMETHEUS_FILE,
    csv_chunks,
    render_csv,
    render_markdown,
    render_prometheus,
)
from gpuaudit.report.references import DOCS_DIR, docs_file, docs_pages
from gpuaudit.report.register_types import HostEntry, Register


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


# A file of the report: its path in the run directory, and its text in pieces (written as
# they come, never all held at once; render_all joins them).
FileText = tuple[str, Iterable[str]]


@dataclass(frozen=True)
class Format:
    """A renderer made of its file name and a function of the render input; ``to_files``,
    where given, writes its file in pieces, or several files (the page and its detail files),
    as :func:`render_files` asks for them."""

    filename: str
    to_text: Callable[[RenderInput], str]
    to_files: Callable[[RenderInput], Iterable[FileText]] | None = None

    def render(self, given: RenderInput) -> str:
        return self.to_text(given)

    def files(self, given: RenderInput) -> Iterable[FileText]:
        if self.to_files is None:
            return [(self.filename, (self.to_text(given),))]
        return self.to_files(given)


def register_json(register: Register) -> str:
    """register.json's text; a number that is not finite is refused, never written.

    One top-level key a line, and each entry of its lists (hosts, risks, findings) on a line of
    its own: as easy to read and to diff as an indented file, and written by the json module's
    C encoder, which an indented dump does not use (a tenth of the time on a large fleet)."""
    return "".join(register_json_chunks(register))


def register_json_chunks(register: Register) -> Iterator[str]:
    """register.json's text (:func:`register_json`) in pieces: its hosts, the largest part
    (every rule's outcome on each), are turned into JSON one at a time, never all held."""
    head = register.head
    hosts = map(_HostJson().text, register.hosts)
    return _lines_json(head, {"hosts": hosts} if register.hosts else {})


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


class _HostJson:
    """Hosts as register.json's text, each what ``_dump(host.to_dict())`` gives.

    Most of a host's text is its rules' outcomes, and outcomes repeat: every rule that passed
    without judging GPUs is ``{"outcome": "pass"}``, and the rules that judge GPUs share a
    host's list of them. Each distinct outcome is turned into JSON once."""

    __slots__ = ("_codes", "_outcomes")

    def __init__(self) -> None:
        self._codes: dict[str, str] = {}
        # (outcome, reason, findings, per GPU, id of the GPUs' outcomes) → (those, its text)
        self._outcomes: dict[tuple[str, str, int, bool, int], tuple[object, str]] = {}

    def text(self, host: HostEntry) -> str:
        head = _dump(host.to_dict(outcomes=False))
        codes, known = self._codes, self._outcomes
        parts = []
        for o in host.outcomes:
            code = codes.get(o.rule)
            if code is None:
                code = codes[o.rule] = _dump(o.rule) + ": "
            gpus = o.gpus if o.per_gpu else ()
            key = (o.outcome._value_, o.reason, o.findings, o.per_gpu, id(gpus))
            entry = known.get(key)
            if entry is None or entry[0] is not gpus:
                entry = known[key] = (gpus, _dump(o.to_dict()))
            parts.append(code + entry[1])
        return f'{head[:-1]}, "outcomes": {{{", ".join(parts)}}}}}'


def _lines_json(
    document: Mapping[str, Any], streamed: Mapping[str, Iterable[str]] | None = None
) -> Iterator[str]:
    """``document`` one key a line and each entry of a list on its own; the lists of
    ``streamed`` stand for the document's values of their keys, each entry already JSON text,
    written entry by entry."""
    streamed = streamed or {}
    yield "{\n"
    for number, (key, value) in enumerate(document.items()):
        lead = " " if number == 0 else ",\n "
        items = streamed.get(key)
        if items is None and isinstance(value, list) and value:
            items = map(_dump, value)
        if items is None:
            yield f"{lead}{_dump(key)}: {_dump(value)}"
            continue
        first = True
        for item in items:
            yield (f"{lead}{_dump(key)}: [\n  " if first else ",\n  ") + item
            first = False
        yield f"{lead}{_dump(key)}: []" if first else "\n ]"
    yield "\n}\n"


def _html_files(given: RenderInput) -> Iterator[FileText]:
    yield from render_page(given.register, given.snapshots, docs_pages=given.docs_pages)


RENDERERS: tuple[Renderer, ...] = (
    Format(
        HTML_FILE,
        lambda g: render_html(g.register, g.snapshots, docs_pages=g.docs_pages),
        _html_files,
    ),
    Format(
        CSV_FILE,
        lambda g: render_csv(g.register),
        lambda g: [(CSV_FILE, csv_chunks(g.register))],
    ),
    Format(MARKDOWN_FILE, lambda g: render_markdown(g.register)),
    Format(
        JUNIT_FILE,
        lambda g: render_junit(g.register, fail_on=g.fail_on),
        lambda g: [(JUNIT_FILE, junit_chunks(g.register, fail_on=g.fail_on))],
    ),
    Format(PROMETHEUS_FILE, lambda g: render_prometheus(g.register)),
    # Last: the run's commit point.
    Format(
        REGISTER_FILE,
        lambda g: register_json(g.register),
        lambda g: [(REGISTER_FILE, register_json_chunks(g.register))],
    ),
)


def render_files(
    register: Register,
    snapshots: Sequence[HostSnapshot],
    *,
    fail_on: str | None = None,
    renderers: Sequence[Renderer] | None = None,
) -> Iterator[FileText]:
    """Every file of the report, one after the other, in pieces: the docs pages the register
    cites, then each renderer's files (default :data:`RENDERERS`), register.json last. Each
    file is made when it is asked for, so a caller that writes it before asking for the next
    never holds more than one (the run directory's store does)."""
    docs = docs_copies(cited_references(register))
    given = RenderInput(register, snapshots, frozenset(docs), fail_on)
    for name, page in docs.items():
        yield name, (page,)
    last: list[FileText] = []
    for renderer in RENDERERS if renderers is None else renderers:
        files = renderer.files(given) if isinstance(renderer, Format) else None
        if files is None:
            files = [(renderer.filename, (renderer.render(given),))]
        for name, pieces in files:
            if name == REGISTER_FILE:
                last.append((name, pieces))
            else:
                yield name, pieces
    yield from last


def render_all(
    register: Register,
    snapshots: Sequence[HostSnapshot],
    *,
    fail_on: str | None = None,
    renderers: Sequence[Renderer] | None = None,
) -> dict[str, str]:
    """Every file of the report by its path in the run directory, with its text: the docs
    pages the register cites, then each renderer's files (default :data:`RENDERERS`; the page
    may come with its detail files, html.render_page), register.json last."""
    return {
        name: "".join(text)
        for name, text in render_files(register, snapshots, fail_on=fail_on, renderers=renderers)
    }


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
