"""Printing the register: the printed header names the filters, and a summary-only print."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from page_factories import full_register
from playwright.sync_api import expect
from report_page import ReportPage

from gpuaudit.report.html import render_html

OpenReport = Callable[..., ReportPage]
NO_FILTERS = "No filters: every risk and host of the register is shown."


@pytest.fixture
def report(open_report: OpenReport) -> ReportPage:
    register, snapshots = full_register()
    return open_report(render_html(register, snapshots))


def printing(report: ReportPage) -> None:
    """Print the page as a browser does: print media, then the beforeprint event."""
    report.page.emulate_media(media="print")
    report.page.evaluate("window.dispatchEvent(new Event('beforeprint'))")


def pdf_pages(report: ReportPage) -> int:
    """Pages of the PDF the page prints to (Chromium fires beforeprint and afterprint)."""
    return len(re.findall(rb"/Type\s*/Page\b(?!s)", report.page.pdf()))


def done_printing(report: ReportPage) -> None:
    report.page.evaluate("window.dispatchEvent(new Event('afterprint'))")
    report.page.emulate_media(media="screen")


def test_the_printed_header_names_the_filters(report: ReportPage) -> None:
    page = report.page
    note = page.locator("#print-filters")
    expect(note).to_have_text(NO_FILTERS)
    assert not note.is_visible()  # on screen the filters themselves show
    page.uncheck("input[name=severity][value=low]")
    page.fill("input[name=host]", "GPU-b01")
    expect(page.locator("#host-count")).to_have_text("Showing 1 of 3 hosts")
    printing(report)
    assert note.is_visible() and not page.locator("#filters").is_visible()
    assert note.text_content() == (
        "Filtered: severity critical, high, medium, info; host contains \u201cGPU-b01\u201d. "
        "Shown: 1 of 4 risks, 1 of 3 hosts."
    )
    done_printing(report)
    page.click("button[type=reset]")
    expect(note).to_have_text(NO_FILTERS)


def test_print_summary_only_leaves_out_findings_and_hosts(report: ReportPage) -> None:
    page = report.page
    full_pages = pdf_pages(report)
    page.check("#print-summary-only")
    assert pdf_pages(report) < full_pages  # otherwise every host prints on a page of its own

    printing(report)
    assert page.locator("#summary").is_visible() and page.locator("#trends").is_visible()
    assert report.visible_risks().locator("tr.risk-row:visible").count() == 4
    assert page.locator("tr.risk-detail:visible").count() == 0
    assert page.locator("#hosts").is_hidden()
    assert page.locator("#print-filters").text_content() == (
        f"{NO_FILTERS} Summary only: findings and host details are left out "
        "(register.json holds them)."
    )
    done_printing(report)
    assert page.locator("#hosts").is_visible()

    page.uncheck("#print-summary-only")  # the ordinary print shows everything again
    printing(report)
    assert page.locator("details.host[open]").count() == 3
    assert page.locator("tr.risk-detail:visible").count() == 4
    done_printing(report)
