"""The HTML report in a real headless Chromium, driven through Playwright.

Debian's chromium is used (``make test`` installs it); Playwright's own browser downloads are
never needed. A missing browser or Playwright is a test failure with the fix in the message,
never a skip: these tests are how the page is checked as a person sees it.

Every page opened through :func:`open_report` records each request, console message, page
error and dialog; the fixture fails the test when the page asked the network for anything, logged
an error, or opened a dialog.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from report_page import ReportPage

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError as exc:  # a collection error that says what to do, never a skip
    raise ImportError(
        "playwright is not installed: pip install -e '.[test]' (or run `make test`)"
    ) from exc

# The report tests' factories and the benchmarks' synthetic fleet serve here too.
_ROOT = Path(__file__).resolve().parent.parent.parent
sys.path[:0] = [str(_ROOT / "tests" / "report"), str(_ROOT / "benchmarks")]

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# Generous: two shared cores may be busy with other work; no test asserts a duration.
TIMEOUT_MS = 120_000


def chromium_path() -> str:
    for candidate in (os.environ.get("GPUAUDIT_CHROMIUM"), "/usr/bin/chromium"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    pytest.fail(
        "Chromium not found: the browser tests need Debian's chromium package "
        "(`make test` installs it: apt-get install chromium), or GPUAUDIT_CHROMIUM=/path/to/it",
        pytrace=False,
    )


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    executable = chromium_path()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        expect.set_options(timeout=TIMEOUT_MS)
        yield browser
        browser.close()


@pytest.fixture
def open_report(browser: Any, tmp_path: Path) -> Iterator[Callable[..., ReportPage]]:
    opened: list[tuple[Any, ReportPage]] = []

    def _open(html: str, *, bypass_csp: bool = False) -> ReportPage:
        path = tmp_path / f"report-{len(opened)}.html"
        path.write_text(html, encoding="utf-8")
        # bypass_csp: checks that escaping alone keeps host text inert, without the CSP's help.
        context = browser.new_context(
            bypass_csp=bypass_csp, viewport={"width": 1400, "height": 900}
        )
        context.set_default_timeout(TIMEOUT_MS)
        page = context.new_page()
        report = ReportPage(page=page, url=path.as_uri())
        page.on("request", lambda request: report.requests.append(request.url))
        page.on(
            "console",
            lambda msg: report.console_errors.append(msg.text) if msg.type == "error" else None,
        )
        page.on("pageerror", lambda error: report.page_errors.append(str(error)))

        def on_dialog(dialog: Any) -> None:
            report.dialogs.append(dialog.message)
            dialog.dismiss()

        page.on("dialog", on_dialog)
        opened.append((context, report))
        page.goto(report.url)
        page.wait_for_selector("html[data-ready=true]", state="attached")
        return report

    yield _open
    for context, report in opened:
        context.close()
        assert report.requests == [report.url], "the page requested more than itself"
        assert report.console_errors == [] and report.page_errors == []
        assert report.dialogs == []
