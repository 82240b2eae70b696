"""A large fleet's page keeps its hosts' details in files beside it, loaded only when a host is
opened (html.render_page): the page opens and searches with none of them, opening a host loads
its file then, and a page copied without them says where the details are.

The split is forced on a small synthetic fleet (``split_above``) so the test stays quick; the
files are exactly those a 10,000-host run writes, only fewer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import TIMEOUT_MS
from playwright.sync_api import expect
from synthetic_fleet import synthetic_fleet

from gpuaudit.model.snapshot import HostSnapshot
from gpuaudit.report.html import CHUNK_HOSTS, render_page
from gpuaudit.report.layout import PAGE_DIR
from gpuaudit.report.register import build_register, sort_snapshots
from gpuaudit.rules import evaluate  # type: ignore[attr-defined,unused-ignore]

HOSTS = 2 * CHUNK_HOSTS + 30
# Host output is untrusted: a GPU name that tries to end the script and open a comment, with
# the line separators JavaScript once read as newlines, travels in a detail file.
HOSTILE = '</script><script>alert(1)</script><!-- \u2028\u2029 & "quoted"'


def _fleet() -> list[HostSnapshot]:
    snapshots = synthetic_fleet(HOSTS)
    first = snapshots[0]
    gpus = (dataclasses.replace(first.gpus[0], name=HOSTILE), *first.gpus[1:])
    snapshots[0] = dataclasses.replace(first, gpus=gpus)
    return snapshots


@pytest.fixture(scope="module")
def split_page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[HostSnapshot]]:
    snapshots = _fleet()
    register = build_register(snapshots, evaluate(snapshots), run_id="split")
    directory = tmp_path_factory.mktemp("split-run")
    for name, pieces in render_page(register, snapshots, split_above=CHUNK_HOSTS):
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text("".join(pieces), encoding="utf-8")
    return directory, sort_snapshots(snapshots)


class Opened:
    def __init__(self, page: Any) -> None:
        self.page = page
        self.requests: list[str] = []
        self.errors: list[str] = []
        self.dialogs: list[str] = []


@pytest.fixture
def opened(browser: Any) -> Iterator[Any]:
    """Pages opened in the session's browser (conftest.py), each recording its requests; the
    detail files it loads are requests too, which conftest's open_report refuses."""
    contexts: list[Any] = []

    def _open(path: Path) -> Opened:
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        context.set_default_timeout(TIMEOUT_MS)
        contexts.append(context)
        page = context.new_page()
        seen = Opened(page)
        page.on("request", lambda request: seen.requests.append(request.url))
        page.on("pageerror", lambda error: seen.errors.append(str(error)))

        def on_dialog(dialog: Any) -> None:
            seen.dialogs.append(dialog.message)
            dialog.dismiss()

        page.on("dialog", on_dialog)
        page.goto(path.as_uri())
        page.wait_for_selector("html[data-ready=true]", state="attached")
        return seen

    yield _open
    for context in contexts:
        context.close()


def _chunk_requests(seen: Opened) -> list[str]:
    return [url.rsplit("/", 2)[-2] + "/" + url.rsplit("/", 1)[-1] for url in seen.requests[1:]]


def test_host_details_load_only_when_a_host_is_opened(
    opened: Any, split_page: tuple[Path, list[HostSnapshot]]
) -> None:
    directory, ordered = split_page
    files = sorted(p.name for p in (directory / PAGE_DIR).iterdir())
    assert files == ["hosts-0000.js", "hosts-0001.js", "hosts-0002.js"]
    seen = opened(directory / "index.html")
    page = seen.page
    hosts = page.locator("details.host:not(.filtered-out)")
    expect(hosts).to_have_count(HOSTS)
    assert page.locator("table.gpus").count() == 0
    assert seen.requests == [(directory / "index.html").as_uri()]  # no detail file yet

    # The search finds a host by a GPU's UUID without its details: the page has what it needs.
    target = ordered[CHUNK_HOSTS + 5]  # in the second detail file
    page.fill("input[name=q]", target.gpus[3].uuid or "")
    expect(page.locator("#host-count")).to_have_text(f"Showing 1 of {HOSTS} hosts")
    section = hosts.first
    expect(section.locator(".host-name")).to_have_text(target.host)
    assert _chunk_requests(seen) == []

    section.locator("summary").click()
    expect(section.locator("table.gpus tbody tr")).to_have_count(len(target.gpus))
    expect(section.locator("table.gpus")).to_contain_text(target.gpus[3].uuid or "")
    assert _chunk_requests(seen) == [f"{PAGE_DIR}/hosts-0001.js"]

    # Another host of the same file needs no second load; one of another file loads that one.
    page.fill("input[name=q]", ordered[CHUNK_HOSTS + 6].host)
    expect(hosts).to_have_count(1)
    expect(hosts.first.locator(".host-name")).to_have_text(ordered[CHUNK_HOSTS + 6].host)
    hosts.first.locator("summary").click()
    expect(hosts.first.locator("table.gpus tbody tr")).to_have_count(8)
    assert _chunk_requests(seen) == [f"{PAGE_DIR}/hosts-0001.js"]

    # The hostile GPU name (first file) is shown as text, and ran nothing. (By the Host filter:
    # other hosts' drift findings name the first host, so a search for it finds them too.)
    page.fill("input[name=q]", "")
    page.fill("input[name=host]", ordered[0].host)
    expect(hosts).to_have_count(1)
    expect(hosts.first.locator(".host-name")).to_have_text(ordered[0].host)
    hosts.first.locator("summary").click()
    expect(hosts.first.locator("table.gpus")).to_contain_text("</script><script>alert(1)")
    assert _chunk_requests(seen) == [f"{PAGE_DIR}/hosts-0001.js", f"{PAGE_DIR}/hosts-0000.js"]
    assert seen.dialogs == [] and seen.errors == []


def test_page_without_its_detail_files_says_where_they_are(
    opened: Any, split_page: tuple[Path, list[HostSnapshot]], tmp_path: Path
) -> None:
    directory, ordered = split_page
    alone = tmp_path / "index.html"  # the page mailed or copied on its own
    alone.write_text((directory / "index.html").read_text(encoding="utf-8"), encoding="utf-8")
    seen = opened(alone)
    page = seen.page
    section = page.locator("details.host").first
    expect(section.locator(".host-name")).to_have_text(ordered[0].host)
    section.locator("summary").click()
    expect(section.locator(".host-body")).to_contain_text(f"{PAGE_DIR}/hosts-0000.js")
    assert page.locator("table.gpus").count() == 0
    assert seen.errors == [] and seen.dialogs == []
