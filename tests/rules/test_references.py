"""Every reference a user sees can be followed, and none points at a document users lack.

A rule or checklist reference is an https address or a page of the project's docs with an
optional section anchor (``docs/field-guide/xid.md#common-xid-codes``): the page must exist and
the anchor must be one of its headings, as GitHub renders them. The field guide's own links
between pages are held to the same standard.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuaudit.policy import load_policy
from gpuaudit.report.checklists import CHECKLISTS
from gpuaudit.report.run import RunDir
from gpuaudit.rules import all_rules, evaluate
from gpuaudit.rules.xid_catalog import lookup, other_readings

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
EXAMPLE_RUN = REPO / "reports" / "example"
# Text that points at the internal documents the project was first written from.
UNFOLLOWABLE = re.compile(r"seed|shared/(?:seeds|reference)|reference notes", re.IGNORECASE)

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_MD_LINK = re.compile(r"\]\(([^()\s]+)\)")


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped (letters,
    digits, ``_`` and ``-`` stay), spaces turned into hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link counts by its text
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading anchor of a Markdown page, ``-1``, ``-2`` … for repeated headings as GitHub
    numbers them; headings inside fenced code blocks are not headings."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else _HEADING.match(line)
        if match is None:
            continue
        anchor = github_anchor(match.group(2))
        count = seen.get(anchor, 0)
        seen[anchor] = count + 1
        found.add(anchor if count == 0 else f"{anchor}-{count}")
    return found


def problem(ref: object, base: Path = REPO) -> str | None:
    """Why a reference cannot be followed, or None when it can. ``base`` is what a relative
    path starts from: the repository root for rule references, a page's folder for its links."""
    if not isinstance(ref, str) or not ref:
        return "not a non-empty string"
    if UNFOLLOWABLE.search(ref):
        return "cites a document users do not have"
    if ref.startswith("https://"):
        return None if re.fullmatch(r"https://[\w.-]+\.[a-z]{2,}(?:/\S*)?", ref) else "bad URL"
    path, _, anchor = ref.partition("#")
    target = (base / path).resolve()
    if not target.is_relative_to(DOCS.resolve()):
        return "neither an https URL nor a path under docs/"
    if target.suffix != ".md" or not target.is_file():
        return f"no such docs page: {path}"
    if anchor and anchor not in anchors(target):
        return f"{path} has no heading with anchor #{anchor}"
    return None


def rule_references() -> Iterator[tuple[str, str]]:
    for rule in all_rules():
        for ref in rule.references:
            yield rule.code, ref


def checklist_references() -> Iterator[tuple[str, str]]:
    for checklist in CHECKLISTS:
        yield checklist.key, checklist.reference


@pytest.mark.parametrize(
    ("owner", "ref"),
    [*rule_references(), *checklist_references()],
    ids=lambda value: str(value),
)
def test_every_reference_can_be_followed(owner: str, ref: str) -> None:
    assert problem(ref) is None, (owner, ref, problem(ref))


def test_the_check_rejects_what_cannot_be_followed(tmp_path: Path) -> None:
    assert problem("docs/field-guide/xid.md#common-xid-codes") is None
    assert problem("docs/field-guide/xid.md") is None
    assert problem("https://docs.nvidia.com/deploy/xid-errors/index.html") is None
    for bad in (
        "seed 000: XID table (Common XID error codes)",
        "reference: xid-ecc-rules.md, XID catalogue",
        "gpuaudit design: partial failure is data",
        "http://docs.nvidia.com/deploy/xid-errors/",
        "https://",
        "docs/field-guide/xid.md#no-such-section",
        "docs/field-guide/no-such-page.md#common-xid-codes",
        "docs/../README.md",
        "README.md",
        "docs/field-guide/",
        "",
    ):
        assert problem(bad) is not None, bad


def test_anchors_follow_github() -> None:
    assert github_anchor("Row remapping (Ampere and later)") == "row-remapping-ampere-and-later"
    assert github_anchor("NVIDIA's `nvidia-smi` / DCGM") == "nvidias-nvidia-smi--dcgm"
    assert github_anchor("GA301") == "ga301"
    page = DOCS / "field-guide" / "multi-tenant-isolation.md"
    # A comment line inside a code block is not a heading.
    assert "etcmodprobedconfnvidia-device-permissionsconf" not in {
        a.replace("-", "") for a in anchors(page)
    }
    assert "device-permissions" in anchors(page)


def test_links_inside_the_docs_can_be_followed() -> None:
    pages = [*sorted((DOCS / "field-guide").glob("*.md")), DOCS / "audit-coverage.md"]
    assert len(pages) > 10
    for page in pages:
        for link in _MD_LINK.findall(page.read_text(encoding="utf-8")):
            if link.startswith("https://"):
                continue
            target = link if not link.startswith("#") else page.name + link
            assert problem(target, base=page.parent) is None, (page.name, link)


def _texts_users_see() -> Iterator[tuple[str, str]]:
    for rule in all_rules():
        for what in ("title", "doc", "remediation"):
            yield f"{rule.code} {what}", getattr(rule, what)
        for ref in rule.references:
            yield f"{rule.code} reference", ref
    for checklist in CHECKLISTS:
        yield checklist.key, f"{checklist.title} {checklist.reference}"
        for item in checklist.items:
            yield f"{checklist.key} {item.id}", f"{item.text} {item.note}"
    for code in range(0, 200):
        for reading in other_readings(lookup(code)):
            yield f"XID {code} reading", reading


def test_no_user_facing_rule_text_cites_unavailable_documents() -> None:
    cited = [(where, text) for where, text in _texts_users_see() if UNFOLLOWABLE.search(text)]
    assert cited == []


def test_demo_findings_cite_no_unavailable_documents() -> None:
    # The committed example run is the demo fleet: evaluate its snapshots afresh.
    snapshots = RunDir(EXAMPLE_RUN).load_snapshots()
    assert len(snapshots) > 10
    findings = evaluate(snapshots, load_policy(EXAMPLE_RUN / "policy.yaml"))
    assert {f.rule for f in findings} >= {"GA101", "GA301", "GA304", "GA402"}
    # XID 63's reading in the field guide is given with the section it comes from.
    assert any("(docs/field-guide/xid.md#common-xid-codes)" in f.message for f in findings)
    for f in findings:
        for text in (f.message, f.remediation, *f.references):
            assert not UNFOLLOWABLE.search(text), (f.rule, f.host, text)
            if text in f.references:
                assert problem(text) is None, (f.rule, text)
