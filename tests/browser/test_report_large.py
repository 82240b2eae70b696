"""A 2,000-host × 8-GPU register opens and filters in the browser without drawing every GPU.

No durations are asserted (benchmarks/ measures them); the test shows that the page finishes
loading, that filters and search complete and change what is shown, and that host details
are drawn only when opened.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from playwright.sync_api import expect
from report_page import ReportPage
from synthetic_fleet import synthetic_fleet

from gpuaudit.report.html import render_html
from gpuaudit.report.register import Register, build_register
from gpuaudit.rules import evaluate  # type: ignore[attr-defined,unused-ignore]

HOSTS = 2000
GPUS = 8


@pytest.fixture(scope="module")
def large() -> tuple[Register, str]:
    snapshots = synthetic_fleet(HOSTS, GPUS)
    register = build_register(snapshots, evaluate(snapshots), run_id="large")
    return register, render_html(register, snapshots)


def test_large_fleet_opens_and_filters(
    open_report: Callable[..., ReportPage], large: tuple[Register, str]
) -> None:
    register, html = large
    report = open_report(html)
    page = report.page
    risks = register.risks
    assert report.visible_hosts().count() == HOSTS
    assert report.visible_risks().count() == len(risks)
    assert page.locator("table.gpus").count() == 0  # no GPU row drawn before it is asked for

    severity = max({r.severity.value for r in risks}, key=[r.severity.value for r in risks].count)
    page.uncheck(f"input[name=severity][value={severity}]")
    remaining = sum(1 for r in risks if r.severity.value != severity)
    expect(report.visible_risks()).to_have_count(remaining)
    page.check(f"input[name=severity][value={severity}]")
    expect(report.visible_risks()).to_have_count(len(risks))

    host = register.hosts[-1].name
    page.fill("input[name=q]", host)
    expect(page.locator("#host-count")).to_have_text(f"Showing 1 of {HOSTS} hosts")
    on_host = sum(1 for r in risks if host in r.affected_hosts)
    expect(report.visible_risks()).to_have_count(on_host)
    section = report.visible_hosts().first
    section.locator("summary").click()
    expect(section.locator("table.gpus tbody tr")).to_have_count(GPUS)

    page.fill("input[name=q]", "")
    expect(page.locator("#host-count")).to_have_text(f"{HOSTS} hosts")
    largest = max(risks, key=lambda r: r.finding_count)
    group = page.locator(f"#risk-{risks.index(largest)}")
    group.locator("button.expand").click()
    shown = min(largest.finding_count, 100)
    expect(group.locator("tr.finding")).to_have_count(shown)
    if largest.finding_count > 100:
        group.locator("button.more").click()
        expect(group.locator("tr.finding")).to_have_count(min(largest.finding_count, 200))
