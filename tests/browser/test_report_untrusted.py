"""Host output that tries to become markup stays text in the browser."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from playwright.sync_api import expect
from report_factories import EVIL, GENERATED_AT, evil_host, finding, gpu, healthy_host
from report_page import ReportPage

from gpuaudit.model.snapshot import XidEvent
from gpuaudit.report.html import render_html
from gpuaudit.report.register import build_register
from gpuaudit.rules.base import Severity

IMG = '"><img src=x onerror=alert(1)>'
KERNEL_LINE = f"NVRM: Xid (PCI:0000:18:00): 31, {EVIL} {IMG}"


def _evil_page() -> str:
    host = dataclasses.replace(
        evil_host(),
        gpus=(gpu(0, name=EVIL), gpu(1, name=IMG, uuid=IMG)),
        xid_events=(
            XidEvent("xid", 31, "0000:18:00.0", KERNEL_LINE, KERNEL_LINE, f"[ 1.0] {IMG}", 0),
        ),
    )
    findings = [
        finding("GA301", Severity.CRITICAL, EVIL, message=f"XID 31 {IMG}", excerpt=KERNEL_LINE),
        finding("GA999", Severity.LOW, IMG, message=EVIL, category=IMG),
        finding("GA998", Severity.LOW, EVIL, message=f"run `{EVIL}` then `{IMG}`", category="x"),
    ]
    snapshots = [host, healthy_host(IMG)]
    register = build_register(snapshots, findings, generated_at=GENERATED_AT, run_id="evil")
    return render_html(register, snapshots)


def test_hostile_host_text_stays_text(open_report: Callable[..., ReportPage]) -> None:
    # With the CSP switched off, so the test shows that escaping alone keeps the text inert.
    report = open_report(_evil_page(), bypass_csp=True)
    page = report.page
    for button in page.locator("button.expand").all():
        button.click()
    page.click("#hosts-expand")
    expect(page.locator("details.host[open]")).to_have_count(2)
    for details in page.locator("details.excerpt").all():
        details.locator("summary").click()

    names = page.locator("details.host .host-name").all_text_contents()
    assert sorted(names) == sorted([EVIL, IMG])
    expect(page.locator("tr.finding a.host-link", has_text=IMG)).to_be_visible()
    evil = page.locator("details.host", has=page.locator(".host-name", has_text=EVIL))
    gpu_names = evil.locator("table.gpus tbody tr td:nth-child(2)").all_text_contents()
    assert gpu_names[0].startswith(EVIL) and gpu_names[1].startswith(IMG)
    # The XID incident: its message, its unreadable time as printed, its raw line opened.
    expect(evil.locator("table.xid td.wrap", has_text=KERNEL_LINE)).to_be_visible()
    expect(evil.locator("table.xid td.nowrap", has_text=f"[ 1.0] {IMG}")).to_have_count(2)
    expect(evil.locator("table.xid pre", has_text=KERNEL_LINE)).to_be_visible()
    expect(page.locator("tr.finding .excerpt pre", has_text=KERNEL_LINE)).to_be_visible()
    expect(page.locator(".risk-title", has_text=IMG)).to_have_count(1)  # as the category
    expect(page.get_by_text(f"XID 31 {IMG}", exact=True)).to_have_count(2)  # risk + host

    # Backtick pairs in a message become code elements whose content stays text.
    codes = page.locator("tr.finding code").all_text_contents()
    assert codes.count(EVIL) == 1 and codes.count(IMG) == 1

    assert page.locator("img").count() == 0
    assert page.locator("script").count() == 2  # the page's data block and its own script
    assert page.evaluate("document.querySelectorAll('[onerror]').length") == 0
    assert report.dialogs == []
