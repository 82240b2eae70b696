"""The self-contained HTML risk register.

Host output is untrusted (GPU names, host names, kernel log lines, evidence excerpts all come
from the hosts), so:

- the jinja2 environment escapes every value, whatever the template's name;
- data handed to JavaScript goes through :func:`json_for_script` into a
  ``<script type="application/json">`` block, never into executable script, and the page script
  puts it on the page only through ``textContent`` and attribute values, never ``innerHTML``;
- the page carries a Content-Security-Policy that forbids every network load and allows only
  the one inline script this module wrote (by its hash), so even a missed escape cannot run code
  or phone home.

The page loads nothing from anywhere: CSS and JS are inlined from ``templates/``. Its only
links are references (web addresses, and docs pages copied beside it: references.py), which a
reader follows by choice.

What grows with the fleet is not rendered here: the template writes the summaries, the panels,
one row per risk and one collapsed line per host; a risk's findings and a host's GPU inventory,
NVLinks, topology, packages, services, sysctls, device nodes and XID incidents travel in the
page data (:func:`build_context` ``page_data``) and the page script draws them when they are
opened or printed. A 2,000-host page then opens with a few tens of thousands of elements instead
of close to a million.

Above :data:`SPLIT_ABOVE` hosts the page is summary first (:func:`render_page`): each host's
details live in ``page/hosts-NNNN.js`` files beside it, each a call of the page script's
loader with a JSON literal escaped as the embedded data is, loaded by a script element when a
host of theirs is opened (a file:// page cannot fetch); the CSP then also allows the page's own
origin's scripts. Smaller fleets keep one self-contained file, which can be mailed alone.

Text from rules may mark commands as ``code`` with backtick pairs: :func:`code_spans` escapes the
text first and only then wraps each pair's (already escaped) content in ``<code>``.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import re
import secrets
from collections.abc import Iterable, Iterator, Mapping, Sequence, Set
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup

from gpuaudit import __version__
from gpuaudit.model.snapshot import HostSnapshot
from gpuaudit.report.layout import HTML_FILE, PAGE_DIR
from gpuaudit.report.provenance import provenance_view
from gpuaudit.report.register import REGISTER_SCHEMA_VERSION, Register, sort_snapshots
from gpuaudit.report.register_views import (
    checklist_views,
    filter_options,
    host_checklists,
    risk_views,
    status_counts,
    trends_view,
)
from gpuaudit.report.template_cache import cache_templates
from gpuaudit.report.views import (
    GPU_COLUMNS,
    SEVERITY_CLASSES,
    STATUS_CLASSES,
    HostViews,
    css_class,
    show,
)

TEMPLATES = Path(__file__).parent / "templates"
PAGE_TEMPLATE = "index.html.j2"
# The page script, in the order its parts are joined (helpers first).
SCRIPT_PARTS = ("report_dom.js", "report_hosts.js", "report.js")
# Per finding, the page data keeps what differs between the findings of one risk; the rule's
# title, remediation and references are on the risk, once.
_FINDING_KEYS = (
    "rule",
    "severity",
    "score",
    "host",
    "gpu",
    "gpu_name",
    "gpu_uuid",
    "message",
    "evidence",
    "status",
    "waiver",
    "waiver_expired",
    "override_reason",
)

# Host parts that a fleet mostly shares: the page data keeps each distinct value once.
SHARED_HOST_PARTS = ("topology", "nvlink", "packages", "services", "sysctls", "device_nodes")

# Above this many hosts the page keeps each host's details (GPU inventory, topology, XIDs,
# packages, evidence of failed sections) beside it, in PAGE_DIR/hosts-NNNN.js files of
# CHUNK_HOSTS hosts each, loaded when a host section is opened; up to it the page is one
# self-contained file that can be mailed or copied alone. A 2,000-host page is ~10 MiB and
# opens in about a second; at 10,000 hosts one file would be ~50 MiB.
SPLIT_ABOVE = 2000
CHUNK_HOSTS = 100
# What a host's line, the filters and the search read: always in the page itself.
HOST_SUMMARY_KEYS = (
    "name",
    "anchor",
    "position",
    "status",
    "status_class",
    "status_detail",
    "collected_at",
    "driver",
    "gpu_models",
    "gpu_count",
    "findings",
    "severity_counts",
    "checklists",
)
# A backtick pair on one line; the page script's codeText() reads text the same way.
_CODE_SPAN = re.compile(r"`([^`\n]+)`")

# Characters that could end a <script> element or open an HTML comment/CDATA inside it; JSON
# allows \\u escapes for all (the line separators JavaScript once treated as newlines are
# escaped with every other character outside ASCII: json_for_script).
_SCRIPT_UNSAFE = {
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
}


# json.dumps(value, **these) is JSONEncoder(**these).encode(value): one encoder, made once, for
# the thousands of pieces a large fleet's page data is written in (script_json_pieces).
_SCRIPT_ENCODER = json.JSONEncoder(
    sort_keys=True, ensure_ascii=True, default=str, separators=(",", ":")
)


def json_for_script(value: Any) -> Markup:
    """JSON text that is safe inside ``<script type="application/json">``."""
    if isinstance(value, _StreamedData):
        return Markup(value.mark)  # its text is written in pieces in its place (_streamed)
    return Markup(_script_json(value))


def _script_json(value: Any) -> str:
    # Compact separators: on a large fleet the page data is most of the page. ASCII only
    # (``\u2264`` for "≤", U+2028 and U+2029 included): one character of host text or of a
    # finding above U+00FF would make Python hold the whole text, and each copy made on the way,
    # at two or four bytes a character; escaped, it is six bytes on the page.
    text = _SCRIPT_ENCODER.encode(value)
    for char, escape in _SCRIPT_UNSAFE.items():
        text = text.replace(char, escape)
    return text


def script_json_pieces(value: Mapping[str, Any]) -> Iterator[str]:
    """:func:`json_for_script`'s text of ``value`` (a mapping with text keys) in pieces: each
    entry of a list it holds is turned into JSON alone. Joined, the pieces are that text byte
    for byte; the whole text is never held. A large fleet's page data is tens of MiB, and made
    in one piece it was held two or three times over while it was escaped and written, on top
    of everything the report holds."""
    yield "{"
    for number, key in enumerate(sorted(value)):
        yield ("," if number else "") + _script_json(key) + ":"
        item = value[key]
        if type(item) is not list or not item:
            yield _script_json(item)
            continue
        yield "["
        separator = ""
        for entry in item:
            yield separator + _script_json(entry)
            separator = ","
        yield "]"
    yield "}"


class _StreamedData:
    """The page data of a page written in pieces: the template writes :attr:`mark` where the
    data goes (json_for_script), and :func:`_streamed` writes the data's pieces in its place.
    The mark opens with ``<``, which no escaped value and no JSON on the page holds."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self.data = data
        self.mark = f"<!--gpuaudit-page-data-{secrets.token_hex(8)}-->"


def _streamed(pieces: Iterable[str], data: _StreamedData) -> Iterator[str]:
    """The template's pieces, with the page data written in pieces where its mark is."""
    for piece in pieces:
        if data.mark not in piece:
            yield piece
            continue
        before, _, after = piece.partition(data.mark)
        yield before
        yield from script_json_pieces(data.data)
        yield after


def code_spans(text: Any) -> Markup:
    """``text`` escaped, then each backtick pair turned into a ``<code>`` element.

    Escaping comes first, so what sits between the backticks is already inert text; a lone
    backtick stays as it is.
    """
    escaped = str(Markup.escape("" if text is None else text))
    return Markup(_CODE_SPAN.sub(r"<code>\1</code>", escaped))


@functools.lru_cache(maxsize=1)
def environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        # On for every template, not only *.html: the page template is *.html.j2.
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        # The templates ship with the package: never stat them again for each host's include.
        auto_reload=False,
    )
    env.filters["show"] = show
    env.filters["code"] = code_spans
    env.filters["json_script"] = json_for_script
    env.filters["severity_class"] = lambda v: css_class(v, SEVERITY_CLASSES)
    env.filters["status_class"] = lambda v: css_class(v, STATUS_CLASSES)
    return cache_templates(env, TEMPLATES)


@functools.lru_cache(maxsize=4)
def _asset(name: str) -> str:
    return (TEMPLATES / name).read_text(encoding="utf-8")


def _csp(script: str, *, local_scripts: bool = False) -> str:
    """The page's Content-Security-Policy: its one inline script by hash and, for a page whose
    host details are files beside it, scripts of its own origin ('self': the run directory's
    files on file://); never anything from the network."""
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    local = " 'self'" if local_scripts else ""
    return (
        "default-src 'none'; "
        f"script-src 'sha256-{digest}'{local}; "
        "style-src 'unsafe-inline'; "
        "img-src data:; "
        "base-uri 'none'; form-action 'none'"
    )


def _bars(counts: dict[str, int]) -> list[dict[str, Any]]:
    top = max(counts.values(), default=0) or 1
    return [
        {"label": label, "count": count, "percent": round(100 * count / top)}
        for label, count in counts.items()
    ]


def _page_finding(finding: dict[str, Any]) -> dict[str, Any]:
    """A finding as the page script needs it: what its risk row does not already say."""
    entry = {key: finding[key] for key in _FINDING_KEYS if key in finding}
    evidence = finding.get("evidence") or {}
    # Formatted here, once, so the page script never has to know how values are shown.
    entry["evidence"] = {
        "fact": evidence.get("fact") or "",
        "actual": show(evidence.get("actual")),
        "expected": show(evidence.get("expected")),
        "excerpt": evidence.get("excerpt") or "",
    }
    return entry


def _share_host_parts(hosts: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Replace each host's shared parts with an index into the returned lists of distinct ones.

    The hosts of a fleet mostly share a handful of board layouts, package sets and settings,
    and the topology matrix and NVLink table are the largest parts of a host's page data: a
    2,000-host HGX fleet then embeds one of each, not 2,000.
    """
    shared: dict[str, list[Any]] = {part: [] for part in SHARED_HOST_PARTS}
    sharing = _HostPartSharing(shared)
    for host in hosts:
        sharing.share(host)
    return shared


class _HostPartSharing:
    """Replaces host parts by their index in the lists of distinct ones, host after host (the
    same object, as views.HostViews gives for equal topologies, is looked up by identity
    before its JSON text is compared)."""

    def __init__(self, shared: dict[str, list[Any]]) -> None:
        self.shared = shared
        self._by_text: dict[str, dict[str, int]] = {part: {} for part in shared}
        self._by_id: dict[int, tuple[Any, int]] = {}

    def share(self, host: dict[str, Any]) -> None:
        for part, values in self.shared.items():
            value = host[part]
            if value is None:
                continue
            known = self._by_id.get(id(value))
            if known is not None and known[0] is value:
                host[part] = known[1]
                continue
            distinct = self._by_text[part]
            key = json.dumps(value, sort_keys=True)
            if key not in distinct:
                distinct[key] = len(values)
                values.append(value)
            self._by_id[id(value)] = (value, distinct[key])
            host[part] = distinct[key]


def _host_views(
    register: Register, document: Mapping[str, Any], snapshots: Sequence[HostSnapshot]
) -> list[dict[str, Any]]:
    return list(_iter_host_views(register, document, snapshots))


def _iter_host_views(
    register: Register, document: Mapping[str, Any], snapshots: Sequence[HostSnapshot]
) -> Iterator[dict[str, Any]]:
    ordered = sort_snapshots(snapshots)
    findings_by_host: dict[str, list[int]] = {}
    for number, finding in enumerate(register.findings):
        findings_by_host.setdefault(finding.host, []).append(number)
    checklists = host_checklists(document)
    seen: set[str] = set()
    views = HostViews()
    for number, snap in enumerate(ordered, 1):
        # Anchors are numbered, not derived from host names, so ids are always valid and
        # unique. Two snapshots of one host (a re-collect) share its findings: list them once.
        own = findings_by_host.get(snap.host, []) if snap.host not in seen else []
        seen.add(snap.host)
        severities = [register.findings[i].severity.value for i in own]
        view = views.host(snap, f"host-{number}", own, severities, checklists.get(snap.host, ()))
        view["position"] = number - 1
        yield view


def build_context(
    register: Register,
    snapshots: Sequence[HostSnapshot],
    docs_pages: Set[str] = frozenset(),
) -> dict[str, Any]:
    """Everything the page template needs, from the register and the snapshots behind it.

    The page embeds its data as JSON: the views read the register's document (its
    ``to_dict()``, what register.json holds). ``docs_pages`` are the docs pages beside the page
    (``docs/…`` paths): references to them are linked."""
    hosts = _host_views(register, register.head, snapshots)
    shared = _share_host_parts(hosts)
    return _context(register, hosts, shared, docs_pages)


def _context(
    register: Register,
    hosts: list[dict[str, Any]],
    shared: dict[str, list[Any]],
    docs_pages: Set[str],
    chunks: Sequence[str] = (),
) -> dict[str, Any]:
    """The template's context; ``chunks`` name the files that hold the hosts' details when
    they are not in the page (their hosts then carry only their summaries)."""
    document = register.head
    risks = risk_views(document, docs_pages)
    summary = document["summary"]
    script = page_script()
    page_data: dict[str, Any] = {
        "findings": [_page_finding(f) for f in document["findings"]],
        "risks": risks,
        "hosts": hosts,
        "shared": shared,
        "gpu_columns": GPU_COLUMNS,
    }
    if chunks:
        page_data["chunk_hosts"] = CHUNK_HOSTS
        page_data["chunk_files"] = list(chunks)
    return {
        "run_id": register.run_id or "",
        "generated_at": register.generated_at,
        "summary": summary,
        "severity_bars": _bars(summary["findings_by_severity"]),
        "category_bars": _bars(summary["findings_by_category"]),
        "risks": risks,
        "risk_status_counts": status_counts(risks),
        "waived": [r for r in risks if r["status"] == "waived" or r["waiver"]],
        "options": filter_options(risks),
        "trends": trends_view(document, risks),
        "provenance": provenance_view(document),
        "checklists": checklist_views(document, docs_pages),
        "hosts": hosts,
        "attention_hosts": [h for h in hosts if h["status"] != "ok"],
        "rollouts": document.get("rollouts") or [],
        "page_data": page_data,
        "css": Markup(_asset("report.css")),
        "script": Markup(script),
        "csp": _csp(script, local_scripts=bool(chunks)),
        "version": __version__,
        "register_schema_version": REGISTER_SCHEMA_VERSION,
    }


def chunk_file(number: int) -> str:
    """The run-directory path of the file holding the details of the ``number``-th
    CHUNK_HOSTS hosts of the page."""
    return f"{PAGE_DIR}/hosts-{number:04d}.js"


def host_search_parts(host: Mapping[str, Any]) -> list[Any]:
    """What the search finds a host by besides its summary: each GPU's UUID, serial, bus id
    and name, then its XID incidents (the page script's hostText reads the same)."""
    at = {name: i for i, name in enumerate(GPU_COLUMNS)}
    parts: list[Any] = []
    for row in host["gpus"]:
        parts += [row[at["uuid"]], row[at["serial"]], row[at["bus"]], row[at["name"]]]
    parts += [incident["what"] for incident in host["xid"]["incidents"]]
    # Each value once: the script joins them with newlines and the search box holds one line,
    # so a repeated value (the GPU model, eight times) can add no match.
    return list(dict.fromkeys(part for part in parts if part is not None))


def _chunk_text(number: int, details: list[dict[str, Any]]) -> str:
    """A detail file: one call of the page script's loader with the hosts' details as a JSON
    literal, escaped as the page's own data is (JSON is also a JavaScript literal)."""
    return f"gpuauditHostChunk({number},{json_for_script(details)});\n"


def render_page(
    register: Register,
    snapshots: Sequence[HostSnapshot],
    *,
    docs_pages: Set[str] = frozenset(),
    split_above: int = SPLIT_ABOVE,
) -> Iterator[tuple[str, Iterable[str]]]:
    """The page's files, (path in the run directory, its text in pieces), one at a time:
    index.html alone for up to ``split_above`` hosts (:func:`render_html`); above that, first
    the detail files (:func:`chunk_file`), each made and handed on before the next, then
    index.html with the hosts' summaries, its pieces made as they are written (the page of a
    large fleet is tens of MiB: never held whole beside its data)."""
    if len(snapshots) <= split_above:
        yield HTML_FILE, (render_html(register, snapshots, docs_pages=docs_pages),)
        return
    shared: dict[str, list[Any]] = {part: [] for part in SHARED_HOST_PARTS}
    sharing = _HostPartSharing(shared)
    summaries: list[dict[str, Any]] = []
    chunks: list[str] = []
    details: list[dict[str, Any]] = []
    for view in _iter_host_views(register, register.head, snapshots):
        sharing.share(view)
        summary = {key: view.pop(key) for key in HOST_SUMMARY_KEYS}
        summary["search"] = host_search_parts(view)
        summary["chunk"] = len(chunks)
        summaries.append(summary)
        details.append(view)
        if len(details) == CHUNK_HOSTS:
            chunks.append(chunk_file(len(chunks)))
            yield chunks[-1], (_chunk_text(len(chunks) - 1, details),)
            details = []
    if details:
        chunks.append(chunk_file(len(chunks)))
        yield chunks[-1], (_chunk_text(len(chunks) - 1, details),)
    context = _context(register, summaries, shared, docs_pages, chunks)
    del summaries, shared, details  # the context holds what the page still needs
    data = _StreamedData(context["page_data"])
    context["page_data"] = data
    yield HTML_FILE, _streamed(environment().get_template(PAGE_TEMPLATE).generate(context), data)


def page_script() -> str:
    """The page's one inline script: its parts in one function scope, so they share helpers
    without leaving globals behind (the CSP hash is taken over exactly this text)."""
    parts = "\n".join(_asset(name) for name in SCRIPT_PARTS)
    return f'(function () {{\n"use strict";\n{parts}\n}})();\n'


def render_html(
    register: Register,
    snapshots: Sequence[HostSnapshot],
    *,
    docs_pages: Set[str] = frozenset(),
) -> str:
    """Render the risk register page (one string, no external resources).

    References to the docs pages in ``docs_pages`` become links relative to the page: pass only
    pages that will sit beside it (RunDir.write_report copies them)."""
    context = build_context(register, snapshots, docs_pages)
    return environment().get_template(PAGE_TEMPLATE).render(context)
