"""The risk register page in headless Chromium: filters, search, sorting, drill-down, print."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from page_factories import EXPIRED_REASON, WAIVER_REASON, full_register
from playwright.sync_api import expect
from report_page import ReportPage

from gpuaudit.report.html import render_html

OpenReport = Callable[..., ReportPage]


@pytest.fixture
def report(open_report: OpenReport) -> ReportPage:
    register, snapshots = full_register()
    return open_report(render_html(register, snapshots))


def test_opens_without_errors_or_network(report: ReportPage) -> None:
    page = report.page
    assert page.title() == "GPU readiness audit run-2"
    assert report.visible_risks().count() == 4
    assert page.locator("#filter-count").text_content() == "4 risks"
    # Draw everything the page can draw: still not one request beyond the page itself.
    for button in page.locator("button.expand").all():
        button.click()
    page.click("#hosts-expand")
    expect(page.locator("details.host[open]")).to_have_count(3)
    assert page.locator("table.gpus").count() == 2  # the unreachable host has no GPUs
    assert report.requests == [report.url]
    assert report.console_errors == [] and report.page_errors == []


def test_severity_filter(report: ReportPage) -> None:
    page = report.page
    page.uncheck("input[name=severity][value=critical]")
    assert report.visible_risks().count() == 3
    page.uncheck("input[name=severity][value=high]")
    assert report.visible_risks().count() == 2
    assert page.locator("#filter-count").text_content() == "Showing 2 of 4 risks (filtered)"
    page.click("button[type=reset]")
    expect(page.locator("#filter-count")).to_have_text("4 risks")


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("category", "topology", ["GA501"]),
        ("owner", "ml-engineering", ["GA101"]),
        ("rule", "GA301", ["GA301:79"]),
        ("status", "waived", ["GA501"]),
        ("status", "open", ["GA001", "GA301:79", "GA101"]),
    ],
)
def test_select_filters(report: ReportPage, name: str, value: str, expected: list[str]) -> None:
    report.page.select_option(f"select[name={name}]", value)
    ids = report.visible_risks().locator(".risk-title .code").all_text_contents()
    assert ids == expected


def test_host_filter_narrows_risks_hosts_and_findings(report: ReportPage) -> None:
    page = report.page
    page.fill("input[name=host]", "gpu-b01")
    expect(page.locator("#host-count")).to_have_text("Showing 1 of 3 hosts")
    assert report.visible_risks().count() == 2  # GA301:79 and GA101
    assert report.visible_hosts().locator(".host-name").all_text_contents() == ["gpu-b01"]
    page.click("#risk-1 .expand")
    rows = page.locator("#risk-1 tr.finding")
    assert rows.count() == 1 and "gpu-b01" in rows.first.text_content()


def test_search_matches_risks_and_findings(report: ReportPage) -> None:
    page = report.page
    page.fill("input[name=q]", "no route to host")  # only in the unreachable host's detail
    expect(page.locator("#host-count")).to_have_text("Showing 1 of 3 hosts")
    assert report.visible_risks().count() == 0
    page.fill("input[name=q]", "nvrm: xid 79")  # a kernel-log excerpt of two findings
    expect(page.locator("#filter-count")).to_have_text("Showing 1 of 4 risks (filtered)")
    assert report.visible_risks().locator(".risk-title .code").all_text_contents() == ["GA301:79"]
    page.fill("input[name=q]", "title of ga5")  # a risk title
    expect(report.visible_risks().locator(".risk-title .code")).to_have_text(["GA501"])


def test_expanding_a_risk_shows_its_findings_with_evidence(report: ReportPage) -> None:
    page = report.page
    assert page.locator("#risk-1 tr.risk-detail").count() == 0  # drawn on demand
    page.click("#risk-1 .risk-title")
    detail = page.locator("#risk-1 tr.risk-detail")
    assert detail.is_visible()
    rows = detail.locator("tr.finding")
    assert rows.count() == 2
    assert rows.locator(".host-link").all_text_contents() == ["gpu-a01", "gpu-b01"]
    first = rows.first
    assert "actual true" in " ".join(first.locator(".evidence").text_content().split())
    first.locator(".excerpt summary").click()
    assert first.locator(".excerpt pre").text_content() == "NVRM: Xid 79"
    assert detail.locator("a[href^='https://']").count() == 1  # only http(s) references link
    page.click("#risk-1 .expand")
    assert not detail.is_visible()


def test_waivers_and_override_reasons_are_shown(report: ReportPage) -> None:
    page = report.page
    assert WAIVER_REASON in page.locator("#risk-2 .risk-row").text_content()
    assert "waiver expired" in page.locator("#risk-3 .risk-row").text_content()
    assert EXPIRED_REASON in page.locator("#waivers").text_content()
    page.click("#risk-3 .expand")
    assert "severity set by site policy" in page.locator("#risk-3 tr.finding").text_content()


def test_sorting_by_column(report: ReportPage) -> None:
    page = report.page
    ids = report.visible_risks().locator(".risk-title .code")
    assert ids.all_text_contents() == ["GA001", "GA301:79", "GA501", "GA101"]
    page.click("button.sort[data-sort=hosts]")
    assert ids.all_text_contents()[0] == "GA301:79"
    page.click("button.sort[data-sort=id]")
    assert ids.all_text_contents() == ["GA001", "GA101", "GA301:79", "GA501"]
    page.click("button.sort[data-sort=id]")
    assert ids.all_text_contents() == ["GA501", "GA301:79", "GA101", "GA001"]
    assert page.locator("th[aria-sort=descending] button").text_content() == "Risk"


def test_host_drill_down_from_a_finding(report: ReportPage) -> None:
    page = report.page
    page.click("#risk-1 .expand")
    page.locator("#risk-1 .host-link", has_text="gpu-a01").click()
    section = page.locator("details.host", has_text="gpu-a01")
    assert section.get_attribute("open") is not None
    assert section.locator("table.gpus tbody tr").count() == 8
    assert section.locator("table.topo").is_visible()
    assert "fallen off the bus" in section.locator("table.xid").text_content()
    assert "Pre-production checklist" in section.locator(".host-body").text_content()
    # The host's findings link back to their risks.
    section.locator(".host-findings a.risk-link", has_text="GA501").click()
    assert page.locator("#risk-2 tr.risk-detail").is_visible()


def test_print_expands_everything_shown(report: ReportPage) -> None:
    page = report.page
    page.uncheck("input[name=severity][value=low]")
    page.emulate_media(media="print")
    page.evaluate("window.dispatchEvent(new Event('beforeprint'))")
    assert not page.locator("#filters").is_visible()
    assert page.locator("tr.risk-detail:visible").count() == 3  # the low risk stays filtered
    assert page.locator("details.host[open]").count() == 3
    assert page.locator("table.gpus:visible").count() == 2
    page.evaluate("window.dispatchEvent(new Event('afterprint'))")
    page.emulate_media(media="screen")
    assert page.locator("details.host[open]").count() == 0
    assert page.locator("tr.risk-detail:visible").count() == 0
    assert page.pdf()[:5] == b"%PDF-"
