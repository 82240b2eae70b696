"""The page's panels for the register's optional keys: risks, waivers, trends, checklists."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from page_factories import EXPIRED_REASON, WAIVER_REASON, full_register

from gpuaudit.report.html import render_html
from gpuaudit.report.register_views import PANEL_LIST_LIMIT


def _data(page: str) -> dict[str, Any]:
    block = page.split('<script type="application/json" id="gpuaudit-data">', 1)[1]
    data: dict[str, Any] = json.loads(block.split("</script>", 1)[0])
    return data


def _section(page: str, section_id: str) -> str:
    return page.split(f'<section id="{section_id}"', 1)[1].split("</section>", 1)[0]


def test_risk_rows_show_waivers_and_expired_waivers() -> None:
    register, snapshots = full_register()
    page = render_html(register, snapshots)
    table = page.split('id="risks-table"', 1)[1].split("</table>", 1)[0]
    assert table.count('<tbody class="risk ') == 4
    waived = table.split('id="risk-2"', 1)[1].split("</tbody>", 1)[0]
    assert "waived" in waived and WAIVER_REASON in waived and "until 2027-03-31" in waived
    expired = table.split('id="risk-3"', 1)[1].split("</tbody>", 1)[0]
    assert "waiver expired" in expired and EXPIRED_REASON in expired
    waivers = _section(page, "waivers")
    assert WAIVER_REASON in waivers and EXPIRED_REASON in waivers
    assert waivers.count('class="flag"') == 1  # only the expired one is flagged


def test_trends_panel_lists_changes_since_the_previous_run() -> None:
    register, snapshots = full_register()
    trends = _section(render_html(register, snapshots), "trends")
    assert "run-1" in trends
    new = trends.split("trend-new", 1)[1].split("trend-resolved", 1)[0]
    assert 'href="#risk-1"' in new and "GA301:79" in new
    assert "GA304" in trends.split("trend-resolved", 1)[1]
    assert "gpu-old-07" in trends and "+1" in trends
    assert "535.161.08" in trends and "550.127.05" in trends
    assert "ecc_aggregate.uncorrected" in trends and "0000:19:00.0" in trends


def test_first_run_has_no_trends() -> None:
    register, snapshots = full_register()
    first = dataclasses.replace(register, trends=None)
    assert "No earlier run to compare with" in _section(render_html(first, snapshots), "trends")


def test_long_panel_lists_are_cut_with_a_count() -> None:
    register, snapshots = full_register()
    assert register.trends is not None
    growth = register.trends.growth[0]
    trends_now = dataclasses.replace(register.trends, growth=(growth,) * (PANEL_LIST_LIMIT + 50))
    register = dataclasses.replace(register, trends=trends_now)
    trends = _section(render_html(register, snapshots), "trends")
    assert trends.count("ecc_aggregate.uncorrected") == PANEL_LIST_LIMIT
    assert "… and 50 more" in trends


def test_checklists_panel_and_host_scores() -> None:
    register, snapshots = full_register()
    page = render_html(register, snapshots)
    panel = _section(page, "checklists")
    assert "Pre-production checklist" in panel and "50%" in panel
    assert "fails on 2 hosts" in panel and "check by hand" in panel
    host = page.split('id="host-2"', 1)[1].split("</details>", 1)[0]  # gpu-b01
    assert "Pre-production checklist" in host and "0%" in host
    data_host = _data(page)["hosts"][1]
    assert data_host["checklists"][0]["failed"] == [
        "PP1: Driver loaded on every GPU",
        "PP2: No XID 79 in the log",
    ]


def test_page_data_keeps_finding_status_and_override_reason() -> None:
    register, snapshots = full_register()
    findings = _data(render_html(register, snapshots))["findings"]
    assert findings[4]["override_reason"].startswith("site policy")
    assert findings[3]["status"] == "waived" and findings[3]["waiver"]["reason"] == WAIVER_REASON
    # Evidence values are shown as text once, here, not by the page script.
    assert findings[0]["evidence"]["actual"] == "true"


def test_filter_choices_come_from_the_risks() -> None:
    register, snapshots = full_register()
    form = render_html(register, snapshots).split('id="filters"', 1)[1].split("</form>", 1)[0]
    for value in ("GA301", "topology", "ml-engineering", "waived", "gpu-z99"):
        assert f'value="{value}"' in form
    assert 'value="resolved"' not in form  # no resolved risk in this register
