"""Take docs/report-screenshot.png from a report page, the way a reader first sees it.

    .venv/bin/python docs/report_screenshot.py reports/example/index.html docs/report-screenshot.png

Opens the page in Debian's headless chromium (through Playwright), opens the first risk that
has a raw log excerpt so the picture shows a risk with its evidence, and saves the top of the
page.
"""

from __future__ import annotations

import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


def main(page_path: str, png_path: str) -> None:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 2600})
        page.goto(Path(page_path).resolve().as_uri())
        page.wait_for_selector("html[data-ready=true]", state="attached")
        for group in page.locator("#risks-table tbody.risk").all():
            group.locator("button.expand").click()
            if group.locator(".excerpt").count():
                group.locator(".excerpt summary").first.click()
                break
            group.locator("button.expand").click()
        # Clicking scrolled the risk into view: the picture starts at the top of the page.
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=png_path, full_page=False, clip=None)
        browser.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
