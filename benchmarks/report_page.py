"""How the HTML register behaves in Chromium for a large fleet.

Builds the page for ``--hosts`` synthetic hosts (synthetic_fleet.py, real rules and register),
opens it in Debian's headless chromium through Playwright, and measures side by side:

  parse    the page opened with scripts off (HTML parse and first layout only);
  ready    the page opened with its script, until the script has set everything up;
  filter   unticking one severity until the risk list has changed;
  search   typing a host name until the host list shows that one host (includes the debounce);
  open     opening one host section (its GPU table, topology and XIDs are drawn then; above
           html.SPLIT_ABOVE hosts its details file is loaded first);
  print    drawing and opening everything the way printing does.

It prints each time, the DOM size before and after printing, and ready / parse: how much the
page script adds to opening the page. Run it with::

    .venv/bin/python benchmarks/report_page.py                # 2,000 hosts × 8 GPUs
    .venv/bin/python benchmarks/report_page.py --hosts 10000
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic_fleet import synthetic_fleet

from gpuaudit.report.html import SPLIT_ABOVE, render_page
from gpuaudit.report.register import build_register
from gpuaudit.rules import evaluate  # type: ignore[attr-defined,unused-ignore]

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
DOM_SIZE = "document.getElementsByTagName('*').length"


def say(line: str) -> None:
    """A measurement, printed as soon as it is taken (a large page takes minutes in all)."""
    print(line, flush=True)


def seconds(action: Callable[[], Any]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=2000)
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per host")
    args = parser.parse_args(argv)
    from playwright.sync_api import expect, sync_playwright

    snapshots = synthetic_fleet(args.hosts, args.gpus)
    register = build_register(snapshots, evaluate(snapshots), run_id="bench")
    host = register.hosts[-1].name
    severity = register.risks[0].severity.value if register.risks else "critical"
    with tempfile.TemporaryDirectory(prefix="gpuaudit-page-") as tmp:
        # As a run directory holds it: above SPLIT_ABOVE hosts, the hosts' details beside it.
        details = 0
        for name, pieces in render_page(register, snapshots):
            text = "".join(pieces)
            (Path(tmp) / name).parent.mkdir(parents=True, exist_ok=True)
            (Path(tmp) / name).write_text(text, encoding="utf-8")
            details += len(text.encode("utf-8")) if name != "index.html" else 0
        path = Path(tmp) / "index.html"
        size = path.stat().st_size / 2**20
        print(f"page       {args.hosts} hosts × {args.gpus} GPUs, {len(register.risks)} risks,")
        print(f"           {len(register.findings)} findings, {size:.1f} MiB")
        if args.hosts > SPLIT_ABOVE:
            print(f"           + {details / 2**20:.1f} MiB of host details in page/*.js")
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            plain = browser.new_context(java_script_enabled=False).new_page()
            parse = seconds(lambda: plain.goto(path.as_uri(), wait_until="load"))
            say(f"parse      {parse:8.2f} s   scripts off: HTML parse + layout")
            page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
            page.set_default_timeout(600_000)
            expect.set_options(timeout=600_000)
            ready = seconds(
                lambda: (
                    page.goto(path.as_uri(), wait_until="load"),
                    page.wait_for_selector("html[data-ready=true]", state="attached"),
                )
            )
            nodes = page.evaluate(DOM_SIZE)
            say(
                f"ready      {ready:8.2f} s   with the page script, until it is set up "
                f"({nodes} elements)"
            )
            say(f"ratio      {ready / parse:8.1f} ×  ready / parse")
            risks = page.locator("#risks-table tbody.risk:not(.filtered-out)")
            before = risks.count()
            # The filter runs in the change handler, so it has finished when the click returns.
            filtered = seconds(lambda: page.uncheck(f"input[name=severity][value={severity}]"))
            after = risks.count()
            say(f"filter     {filtered:8.2f} s   untick '{severity}': {before} → {after} risks")
            page.check(f"input[name=severity][value={severity}]")
            search = seconds(
                lambda: (
                    page.fill("input[name=q]", host),
                    page.locator("#host-count", has_text="Showing 1 of").wait_for(),
                )
            )
            say(f"search     {search:8.2f} s   one host name (150 ms debounce included)")
            section = page.locator("details.host:not(.filtered-out) > summary").first
            loaded = "document.querySelectorAll('script[src]').length"
            files_before = page.evaluate(loaded)
            opened = seconds(lambda: (section.click(), page.locator("table.gpus").wait_for()))
            files_after = page.evaluate(loaded)
            say(f"open host  {opened:8.2f} s   one host section drawn")
            if args.hosts > SPLIT_ABOVE:
                say(f"           detail files loaded: {files_before} before, {files_after} after")
            page.fill("input[name=q]", "")
            expect(page.locator("#host-count")).to_have_text(f"{args.hosts} hosts")
            # Above SPLIT_ABOVE hosts the detail files load as the hosts are drawn: waited for.
            printed = seconds(
                lambda: (
                    page.evaluate("window.dispatchEvent(new Event('beforeprint'))"),
                    page.wait_for_function(
                        "document.querySelectorAll('details.host[data-drawn] > .host-body:empty')"
                        ".length === 0",
                        timeout=600_000,
                    ),
                )
            )
            print_nodes = page.evaluate(DOM_SIZE)
            say(
                f"print      {printed:8.2f} s   everything drawn and opened "
                f"({print_nodes} elements)"
            )
            browser.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
