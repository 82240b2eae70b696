"""What a person finds on the page about real (simulated demo) hosts: the evidence of each host
and GPU, found by search, and XID storms as incidents with the raw lines one click away."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest
from page_factories import DemoPage, demo_page
from playwright.sync_api import expect
from report_page import ReportPage

from gpuaudit.model.snapshot import parse_warning
from gpuaudit.parsers.kernel_log import parse_earlier_boots
from gpuaudit.report.html import render_html
from gpuaudit.report.register import build_register

HOSTS = ("a100-hgx-02", "a10g-01", "v100-02")
KLOG = Path(__file__).parents[1] / "fixtures" / "kernel-log"


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
    assert not [f for f in demo.register.findings if f.finding.gpu_uuid == gpu0.uuid]
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


def test_xids_of_earlier_boots_are_listed_with_their_boot(
    open_report: Callable[..., ReportPage], demo: DemoPage
) -> None:
    # a10g-01's XIDs of this boot, and an XID 31 the journal kept from two reboots ago.
    journal = (KLOG / "issue-dxvk-1799-xid31-mmu-fault-journalctl-k-rtx2080.log").read_text()
    earlier = parse_earlier_boots(f"-- boot -2 --\n{journal}")
    snapshots = dict(demo.snapshots)
    snap = snapshots["a10g-01"]
    snapshots["a10g-01"] = dataclasses.replace(snap, previous_boot_xid_events=earlier)
    register = build_register(list(snapshots.values()), [], run_id="boots")
    report = open_report(render_html(register, list(snapshots.values())))
    page = report.page
    section = page.locator("details.host", has=page.locator(".host-name", has_text="a10g-01"))
    section.locator("summary").first.click()
    total = len(snap.xid_events) + len(earlier)
    expect(section.locator("h4", has_text="XID incidents")).to_contain_text(f"{total} events in ")
    expect(section.locator("h4", has_text="XID incidents")).to_contain_text(
        f"{len(earlier)} in earlier boots"
    )
    expect(section.locator("table.xid thead th").nth(2)).to_have_text("Boot")
    rows = section.locator("table.xid tbody tr")
    expect(rows.first.locator("td").nth(0)).to_have_text("XID 31")
    expect(rows.first.locator("td").nth(2)).to_have_text("2 reboots ago")
    expect(rows.last.locator("td").nth(2)).to_have_text("this boot")
    # The same host without earlier events: no such column.
    plain = open_report(demo.html).page
    section = plain.locator("details.host", has=plain.locator(".host-name", has_text="a10g-01"))
    section.locator("summary").first.click()
    expect(section.locator("table.xid thead th")).to_have_count(7)
    expect(section.locator("table.xid thead th", has_text="Boot")).to_have_count(0)


def test_a_host_checklist_names_what_it_could_not_verify_and_why(
    open_report: Callable[..., ReportPage], demo: DemoPage
) -> None:
    # v100-02's driver does not answer: its GPU list could not be read, so the checklist item
    # that needs it is not verified, and counted against the score rather than passed.
    pre = next(c for c in demo.register.checklists if c.key == "pre_production")
    entry = pre.hosts["v100-02"]
    unknown = list(entry.unknown_reasons)
    assert unknown and entry.unknown_reasons[unknown[0]]
    report = open_report(demo.html)
    page = report.page
    section = page.locator("details.host", has=page.locator(".host-name", has_text="v100-02"))
    section.locator("summary").first.click()
    listed = section.locator("ul.not-verified li")
    expect(listed.first).to_contain_text(f"not verified: {unknown[0]}")
    expect(listed.first).to_contain_text(entry.unknown_reasons[unknown[0]][0])
    healthy = page.locator("details.host", has=page.locator(".host-name", has_text="a10g-01"))
    healthy.locator("summary").first.click()
    expect(healthy.locator("ul.not-verified")).to_have_count(0)


def test_output_the_parsers_could_not_place_is_shown_on_the_host(
    open_report: Callable[..., ReportPage], demo: DemoPage
) -> None:
    # Derived: a demo host's snapshot with two parse warnings, one of them hostile markup.
    snapshots = dict(demo.snapshots)
    warned = dataclasses.replace(
        snapshots["a10g-01"],
        parse_warnings=(
            parse_warning("nvidia-smi -q", "unknown field", "    Widget Count : 3", gpu=0),
            parse_warning("kernel log", "NVRM line of an unknown form", "<img src=x onerror=1>"),
        ),
    )
    snapshots["a10g-01"] = warned
    register = build_register(list(snapshots.values()), [], run_id="warned")
    report = open_report(render_html(register, list(snapshots.values())))
    page = report.page
    section = page.locator("details.host", has=page.locator(".host-name", has_text="a10g-01"))
    section.locator("summary").first.click()
    unplaced = section.locator("details.collection", has_text="Output not understood (2)")
    unplaced.locator("summary").click()
    items = unplaced.locator("li")
    expect(items).to_have_count(2)
    expect(items.nth(0)).to_contain_text("nvidia-smi -q GPU 0: unknown field")
    expect(items.nth(0).locator("pre")).to_have_text("Widget Count : 3")
    expect(items.nth(1).locator("pre")).to_have_text("<img src=x onerror=1>")
    assert page.locator("img").count() == 0  # shown as text, never as markup
    # Another host shows its own warnings, if it has any, and not a10g-01's.
    other = page.locator("details.host", has=page.locator(".host-name", has_text="v100-02"))
    other.locator("summary").first.click()
    own = len(snapshots["v100-02"].parse_warnings)
    block = other.locator("details.collection", has_text="Output not understood")
    expect(block).to_have_count(1 if own else 0)
    expect(other.get_by_text("Widget Count : 3")).to_have_count(0)
