"""What a person finds on the page about real (simulated demo) hosts: the evidence of each host
and GPU, found by search, and XID storms as incidents with the raw lines one click away."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from page_factories import DemoPage, demo_page
from playwright.sync_api import expect
from report_page import ReportPage

HOSTS = ("a100-hgx-02", "a10g-01", "v100-02")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoPage:
    return demo_page(HOSTS, tmp_path_factory.mktemp("sim"))


def test_gpu_uuid_search_and_host_evidence(
    open_report: Callable[..., ReportPage], demo: DemoPage
) -> None:
    report = open_report(demo.html)
    page = report.page
    snap = demo.snapshots["a100-hgx-02"]
    gpu0 = next(g for g in snap.gpus if g.index == 0)
    assert gpu0.uuid and gpu0.serial
    # No finding names GPU 0: only the host's own evidence can find it.
    assert not [f for f in demo.register["findings"] if f["gpu_uuid"] == gpu0.uuid]
    page.fill("input[name=q]", gpu0.uuid.upper())
    expect(page.locator("#host-count")).to_have_text(f"Showing 1 of {len(HOSTS)} hosts")
    section = report.visible_hosts().first
    expect(section.locator(".host-name")).to_have_text("a100-hgx-02")

    section.locator("summary").first.click()
    rows = section.locator("table.gpus tbody tr")
    expect(rows).to_have_count(8)
    assert gpu0.serial in rows.nth(0).text_content()
    assert gpu0.inforom_image and gpu0.inforom_image in rows.nth(0).text_content()
    # GPU 3 has a row remap pending: not "ok".
    expect(rows.nth(3).locator(".gpu-status")).to_have_text("attention")
    assert "row remap pending" in rows.nth(3).text_content()
    expect(rows.nth(0).locator(".gpu-status")).to_have_text("ok")
    # Every NVLink, folded (none is down or counts errors), and the host's system evidence.
    nvlink = section.locator("details.nvlink")
    assert nvlink.get_attribute("open") is None
    nvlink.locator("summary").click()
    expect(nvlink.locator("tbody tr")).to_have_count(sum(len(g.links) for g in snap.nvlink or ()))
    held = [p.name for p in snap.packages if p.held]
    expect(section.locator("table.packages tbody tr")).to_have_count(len(snap.packages))
    hold = section.locator("table.packages tr", has_text=held[0]).locator("td").nth(2)
    expect(hold).to_have_text("held")
    expect(section.locator("table.services")).to_contain_text("nvidia-fabricmanager")
    expect(section.locator("table.sysctls")).to_contain_text("net.core.rmem_max")


def test_xid_storm_is_a_few_incidents_with_raw_lines(
    open_report: Callable[..., ReportPage], demo: DemoPage
) -> None:
    report = open_report(demo.html)
    page = report.page
    events = demo.snapshots["a10g-01"].xid_events
    section = page.locator("details.host", has=page.locator(".host-name", has_text="a10g-01"))
    section.locator("summary").first.click()
    incidents = section.locator("table.xid tbody tr")
    expect(incidents).to_have_count(len({(e.kind, e.code, e.gpu_index) for e in events}))
    first = incidents.first
    expect(first).to_contain_text("2025-01-21 02:21:33 UTC")
    raw = first.locator("details.excerpt pre")
    expect(raw).to_be_hidden()
    first.locator("details.excerpt summary").click()
    expect(raw).to_be_visible()
    assert raw.text_content().splitlines()[0] == events[0].raw


def test_a_host_checklist_names_what_it_could_not_verify_and_why(
    open_report: Callable[..., ReportPage], demo: DemoPage
) -> None:
    # v100-02's driver does not answer: its GPU list could not be read, so the checklist item
    # that needs it is not verified, and counted against the score rather than passed.
    entry = demo.register["checklists"]["pre_production"]["hosts"]["v100-02"]
    unknown = entry["unknown_items"]
    assert unknown and entry["unknown_reasons"][unknown[0]]
    report = open_report(demo.html)
    page = report.page
    section = page.locator("details.host", has=page.locator(".host-name", has_text="v100-02"))
    section.locator("summary").first.click()
    listed = section.locator("ul.not-verified li")
    expect(listed.first).to_contain_text(f"not verified: {unknown[0]}")
    expect(listed.first).to_contain_text(entry["unknown_reasons"][unknown[0]][0])
    healthy = page.locator("details.host", has=page.locator(".host-name", has_text="a10g-01"))
    healthy.locator("summary").first.click()
    expect(healthy.locator("ul.not-verified")).to_have_count(0)
