"""The self-contained HTML risk register.

Host output is untrusted (GPU names, host names, kernel log lines, evidence excerpts all come
from the hosts), so:

- the jinja2 environment escapes every value, whatever the template's name;
- data handed to JavaScript goes through :func:`json_for_script` into a
  ``<script type="application/json">`` block, never into executable script;
- the page carries a Content-Security-Policy that forbids every network load and allows only
  the one inline script this module wrote (by its hash), so even a missed escape cannot run code
  or phone home.

The page loads nothing from anywhere: CSS and JS are inlined from ``templates/``.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup

from gpuaudit import __version__
from gpuaudit.model.snapshot import HostSnapshot
from gpuaudit.report.register import REGISTER_SCHEMA_VERSION, SEVERITY_ORDER, sort_snapshots
from gpuaudit.report.views import SEVERITY_CLASSES, STATUS_CLASSES, css_class, host_view, show

TEMPLATES = Path(__file__).parent / "templates"
PAGE_TEMPLATE = "index.html.j2"

# Characters that could end a <script> element or open an HTML comment/CDATA inside it, and
# the line separators JavaScript once treated as newlines; JSON allows \\u escapes for all.
_SCRIPT_UNSAFE = {
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}


def json_for_script(value: Any) -> Markup:
    """JSON text that is safe inside ``<script type="application/json">``."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    for char, escape in _SCRIPT_UNSAFE.items():
        text = text.replace(char, escape)
    return Markup(text)


def is_web_link(ref: Any) -> bool:
    """Only plain http(s) references become links; anything else (javascript:, data:) is text."""
    return isinstance(ref, str) and ref.lower().startswith(("https://", "http://"))


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
    )
    env.filters["show"] = show
    env.filters["json_script"] = json_for_script
    env.filters["severity_class"] = lambda v: css_class(v, SEVERITY_CLASSES)
    env.filters["status_class"] = lambda v: css_class(v, STATUS_CLASSES)
    env.tests["web_link"] = is_web_link
    return env


@functools.lru_cache(maxsize=4)
def _asset(name: str) -> str:
    return (TEMPLATES / name).read_text(encoding="utf-8")


def _csp(script: str) -> str:
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    return (
        "default-src 'none'; "
        f"script-src 'sha256-{digest}'; "
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


def build_context(register: dict[str, Any], snapshots: Sequence[HostSnapshot]) -> dict[str, Any]:
    """Everything the page template needs, from the register and the snapshots behind it."""
    ordered = sort_snapshots(snapshots)
    anchors: dict[str, str] = {}
    for number, snap in enumerate(ordered, 1):
        # Anchors are numbered, not derived from host names, so ids are always valid and unique.
        anchors.setdefault(snap.host, f"host-{number}")
    findings_by_host: dict[str, list[dict[str, Any]]] = {}
    rows = []
    for finding in register["findings"]:
        row = {**finding, "host_anchor": anchors.get(finding["host"])}
        rows.append(row)
        findings_by_host.setdefault(finding["host"], []).append(row)
    hosts = []
    for number, snap in enumerate(ordered, 1):
        anchor = f"host-{number}"
        # Two snapshots of one host (a re-collect) share its findings: list them once.
        own = findings_by_host.get(snap.host, []) if anchors[snap.host] == anchor else []
        hosts.append(host_view(snap, anchor, own))
    summary = register["summary"]
    script = _asset("report.js")
    return {
        "register": register,
        "run_id": register.get("run_id") or "",
        "generated_at": register.get("generated_at") or "",
        "summary": summary,
        "severity_order": [s.value for s in SEVERITY_ORDER],
        "severity_bars": _bars(summary["findings_by_severity"]),
        "category_bars": _bars(summary["findings_by_category"]),
        "findings": rows,
        "hosts": hosts,
        "attention_hosts": [h for h in hosts if h["status"] != "ok"],
        "finding_hosts": sorted({f["host"] for f in rows}),
        "css": Markup(_asset("report.css")),
        "script": Markup(script),
        "csp": _csp(script),
        "version": __version__,
        "register_schema_version": REGISTER_SCHEMA_VERSION,
    }


def render_html(register: dict[str, Any], snapshots: Sequence[HostSnapshot]) -> str:
    """Render the risk register page (one string, no external resources)."""
    return environment().get_template(PAGE_TEMPLATE).render(build_context(register, snapshots))
