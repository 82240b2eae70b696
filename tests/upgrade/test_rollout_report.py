"""The rollout page: status, stages, timelines, gates, rollbacks, versions; escaping and CSP."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from html.parser import HTMLParser
from pathlib import Path

import pytest

from gpuaudit.upgrade.journal import Journal, RolloutMeta, RolloutState, load_state
from gpuaudit.upgrade.report import REPORT_FILE, render_rollout_html, write_rollout_report

EVIL_HOST = "<script>alert('host')</script>"
EVIL_DETAIL = '"><img src=x onerror=alert(1)>'
EVIL_EVIDENCE = "</pre><script>alert('evidence')</script>"
META = RolloutMeta(
    rollout_id="r-2025-01-31",
    target_version="550.127.05",
    stages={"canary": ("gpu-01",), "wave1": ("gpu-02", EVIL_HOST, "gpu-04")},
)


class Page(HTMLParser):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def csp(self) -> str:
        return next(str(a["content"]) for t, a in self.tags if a.get("http-equiv"))

    def element_text(self, page: str, element_id: str) -> str:
        match = re.search(rf'<(\w+)[^>]* id="{element_id}"[^>]*>(.*?)</\1>', page, re.S)
        assert match, element_id
        return " ".join(re.sub(r"<[^>]+>", " ", match.group(2)).split())


def _clock() -> Callable[[], datetime]:
    moments = (datetime(2025, 1, 31, 10, tzinfo=timezone.utc) + timedelta(seconds=n)
               for n in range(1000))  # fmt: skip
    return lambda: next(moments)


def halted_rollout(tmp_path: Path) -> RolloutState:
    j = Journal.open(tmp_path, clock=_clock())
    j.record(None, "rollout", "started", "to 550.127.05")
    j.record("gpu-01", "precheck", "done", version_before="535.161.08", pin_before="535.161.08")
    for step in ("drain", "install", "gate", "undrain"):
        j.record("gpu-01", step, "started")
        data = {"version_after": "550.127.05"} if step == "install" else {}
        j.record("gpu-01", step, "done", **data)
    j.record("gpu-01", "rollout", "done")
    j.record(EVIL_HOST, "precheck", "done", version_before="535.161.08")
    j.record(EVIL_HOST, "install", "done", EVIL_DETAIL, version_after="550.127.05")
    j.record(
        EVIL_HOST,
        "gate",
        "failed",
        "fail: xid",
        outcome="fail",
        checks=[
            {
                "name": "xid",
                "outcome": "fail",
                "detail": "XID 79 on GPU 3",
                "evidence": EVIL_EVIDENCE,
            },
            {"name": "ecc", "outcome": "pass", "detail": "no growth", "evidence": {"GPU 0": 0}},
        ],
    )
    j.record(EVIL_HOST, "rollback", "started")
    j.record(EVIL_HOST, "rollback", "done", "535.161.08 reinstalled", version_after="535.161.08")
    j.record("gpu-02", "rollout", "skipped", "already on 550.127.05")
    j.record(None, "halt", "info", f"{EVIL_HOST} failed its gate")
    return load_state(tmp_path)


@pytest.fixture
def page(tmp_path: Path) -> str:
    path = write_rollout_report(tmp_path, halted_rollout(tmp_path), META)
    assert path == tmp_path / REPORT_FILE
    return path.read_text(encoding="utf-8")


def test_hostile_host_names_and_details_are_escaped(page: str) -> None:
    assert "<script" not in page.lower()
    assert "<img" not in page.lower()
    assert "&lt;script&gt;alert(&#39;host&#39;)&lt;/script&gt;" in page
    assert "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;" in page
    assert "&lt;/pre&gt;&lt;script&gt;alert(&#39;evidence&#39;)&lt;/script&gt;" in page
    parsed = Page(page)
    assert not [tag for tag, _ in parsed.tags if tag in ("script", "img", "iframe", "object")]
    assert EVIL_HOST in "".join(parsed.text)  # shown, as text


def test_csp_forbids_scripts_and_network_loads(page: str) -> None:
    parsed = Page(page)
    csp = parsed.csp()
    assert "default-src 'none'" in csp
    assert "script-src" not in csp  # falls back to default-src 'none': no script at all
    assert "connect-src" not in csp and "http" not in csp
    for tag, attrs in parsed.tags:
        assert "src" not in attrs, tag
        assert tag != "link", "the page must not link external resources"
        href = attrs.get("href")
        assert href is None or href.startswith("#"), href
    assert "@import" not in page and "url(" not in page


def test_audit_stylesheet_is_inlined(page: str) -> None:
    css = (Path(__file__).parents[2] / "src/gpuaudit/report/templates/report.css").read_text()
    assert css.strip()[:200] in page


def test_status_banner_says_halted_with_the_reason(page: str) -> None:
    banner = Page(page).element_text(page, "status")
    assert banner.startswith("Rollout halted.")
    assert "&lt;script&gt;alert(&#39;host&#39;)&lt;/script&gt; failed its gate" in banner
    assert re.search(r'class="banner bad" id="status"', page)


@pytest.mark.parametrize(
    ("rollout_events", "text", "css"),
    [
        ([("rollout", "done", "")], "Rollout completed.", "good"),
        ([("pause", "info", "gate inconclusive on gpu-01")], "Rollout paused", "warn"),
        ([("rollout", "started", "")], "Rollout running.", "info"),
    ],
)
def test_status_banner_for_each_status(
    tmp_path: Path, rollout_events: list[tuple[str, str, str]], text: str, css: str
) -> None:
    j = Journal.open(tmp_path)
    for step, status, detail in rollout_events:
        j.record(None, step, status, detail)
    page = render_rollout_html(load_state(tmp_path), META)
    banner = Page(page).element_text(page, "status")
    assert banner.startswith(text)
    assert f'class="banner {css}" id="status"' in page
    if rollout_events[0][2]:
        assert rollout_events[0][2] in banner


def test_every_host_is_listed_per_stage_with_its_outcome(page: str) -> None:
    stages = Page(page).element_text(page, "stages")
    assert re.search(r"canary 1 host gpu-01 upgraded", stages), stages
    evil = "&lt;script&gt;alert(&#39;host&#39;)&lt;/script&gt;"
    assert f"wave1 3 hosts gpu-02 skipped {evil} rolled back gpu-04 untouched" in stages, stages
    assert 'class="outcome oc-rolled_back"' in page and 'class="outcome oc-untouched"' in page


def test_host_timeline_gates_and_rollback(page: str) -> None:
    assert "<code>2025-01-31T10:00:01.000Z</code>" in page  # each event's time
    timeline = re.findall(r'<tr class="row-(\w+)">\s*<td[^>]*><code>([^<]+)</code></td>\s*'
                          r'<td[^>]*>(\w+)</td>', page)  # fmt: skip
    assert ("failed", "2025-01-31T10:00:13.000Z", "gate") in timeline
    assert ("done", "2025-01-31T10:00:15.000Z", "rollback") in timeline
    assert ("info", "2025-01-31T10:00:17.000Z", "halt") in timeline  # rollout-level events
    assert "XID 79 on GPU 3" in page
    assert "&#34;GPU 0&#34;: 0" in page  # structured evidence, as JSON
    rolled_back = Page(page).element_text(page, "rolled-back")
    assert "gate failed: fail: xid" in rolled_back
    assert "535.161.08 reinstalled" in rolled_back


def test_driver_versions_before_and_after(page: str) -> None:
    versions = Page(page).element_text(page, "versions")
    # Before: gpu-01 and the rolled-back host on 535; gpu-02 (skipped) and gpu-04 (untouched)
    # never reported one. Now: gpu-01 on 550, the rolled-back host back on 535.
    assert (
        "Driver Hosts before Hosts now 535.161.08 2 1 550.127.05 0 1 not recorded 2 2" in versions
    )
    rows = re.findall(
        r'<tr>\s*<td><a href="#host-\d+" class="wrap">([^<]+)</a></td>\s*<td>([^<]*)</td>\s*'
        r"<td>.*?</td>\s*<td>(.*?)</td>\s*<td>(.*?)</td>\s*<td>(.*?)</td>\s*</tr>",
        page.split('id="versions"')[1],
        re.S,
    )
    table = {name: (stage, *(re.sub("<[^>]+>", "", c) for c in cells))
             for name, stage, *cells in rows}  # fmt: skip
    assert table["gpu-01"] == ("canary", "535.161.08", "535.161.08", "550.127.05")
    assert table["&lt;script&gt;alert(&#39;host&#39;)&lt;/script&gt;"] == (
        "wave1",
        "535.161.08",
        "—",
        "535.161.08",
    )
    assert table["gpu-04"] == ("wave1", "—", "—", "—")
    assert len(table) == 4


def test_journal_warnings_are_shown(tmp_path: Path) -> None:
    j = Journal.open(tmp_path)
    j.record("gpu-01", "drain", "started")
    with open(tmp_path / "journal.jsonl", "ab") as handle:
        handle.write(b'{"seq":2,"at":"2025-')
    page = render_rollout_html(load_state(tmp_path), META)
    assert "Journal warnings" in page and "torn last line" in page


def test_page_names_the_gpuaudit_version(page: str) -> None:
    from gpuaudit import __version__

    assert f'<meta name="generator" content="gpuaudit {__version__}">' in page
    assert f"gpuaudit {__version__} · rollout r-2025-01-31" in page
