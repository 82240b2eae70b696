from __future__ import annotations

import base64
import hashlib
import json
import re
from html.parser import HTMLParser
from typing import Any

from report_factories import (
    EVIL,
    GENERATED_AT,
    evil_host,
    finding,
    healthy_host,
    unreachable_host,
)

from gpuaudit.model.snapshot import HostSnapshot, XidEvent
from gpuaudit.report.html import json_for_script, page_script, render_html
from gpuaudit.report.register import build_register
from gpuaudit.report.views import timestamp_key, xid_view
from gpuaudit.rules.base import Finding, Severity


def _page(snapshots: list[HostSnapshot], findings: list[Finding]) -> str:
    register = build_register(snapshots, findings, generated_at=GENERATED_AT, run_id="run-1")
    return render_html(register, snapshots)


def _data_text(page: str) -> str:
    block = page.split('<script type="application/json" id="gpuaudit-data">', 1)[1]
    return block.split("</script>", 1)[0]


def _data(page: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(_data_text(page))
    return data


def _evil_page() -> str:
    evil_finding = finding(
        "GA999",
        Severity.CRITICAL,
        EVIL,
        message=f"message {EVIL}",
        excerpt="kernel: </script><script>alert(5)</script>",
    )
    return _page([evil_host(), healthy_host()], [evil_finding])


class _TagCollector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.script_bodies: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.script_bodies.append(data)


def _parse(page: str) -> _TagCollector:
    collector = _TagCollector()
    collector.feed(page)
    return collector


def test_page_contains_rule_codes_and_host_names(
    fleet: list[HostSnapshot], fleet_findings: list[Finding]
) -> None:
    page = _page(fleet, fleet_findings)
    assert page.startswith("<!doctype html>")
    for f in fleet_findings:
        assert f.rule in page
    for snap in fleet:
        assert snap.host in page
    assert "run-1" in page and GENERATED_AT in page
    # Unreachable host: listed with its status in the attention block and in its section.
    attention = page.split('id="attention"', 1)[1].split("</section>", 1)[0]
    assert "gpu-z99" in attention and "unreachable" in attention
    assert "No route to host" in attention


def test_register_table_sorted_by_severity(
    fleet: list[HostSnapshot], fleet_findings: list[Finding]
) -> None:
    page = _page(fleet, fleet_findings)
    table = page.split('id="risks-table"', 1)[1].split("</table>", 1)[0]
    severities = re.findall(r'<tbody class="risk sev-(\w+)', table)
    assert severities == ["critical", "high", "medium", "low"]


def test_host_sections_carry_inventory_topology_and_xid_timeline(
    fleet: list[HostSnapshot], fleet_findings: list[Finding]
) -> None:
    page = _page(fleet, fleet_findings)
    # The one-line summary is in the page; the body is drawn from the page data when opened.
    summary = page.split('id="host-2"', 1)[1].split("</details>", 1)[0]
    assert "gpu-b01" in summary and "2× NVIDIA H100 80GB HBM3" in summary
    assert "550.127.05" in summary and "1 high" in summary
    host = _data(page)["hosts"][1]
    assert host["name"] == "gpu-b01" and host["anchor"] == "host-2"
    gpu = dict(zip(_data(page)["gpu_columns"], host["gpus"][0], strict=True))
    assert gpu["name"] == "NVIDIA H100 80GB HBM3" and gpu["bus"] == "0000:18:00.0"
    assert gpu["memory"] == "81559 MiB" and gpu["pcie_gen"] == "Gen 5/5"
    assert gpu["pcie_width"] == "x16/16"
    # Hosts with the same layout share one topology entry.
    assert _data(page)["hosts"][0]["topology"] == host["topology"] == 0
    assert _data(page)["hosts"][2]["topology"] is None  # unreachable
    topology = _data(page)["topologies"][host["topology"]]
    assert topology["rows"][0]["cells"][1] == ["NV18", "nvlink"]
    assert topology["legend"] == [["NIC0", "mlx5_0"]]
    assert topology["rows"][0]["cpu"] == "0-47"
    # Timeline in time order: uptime 49 s (XID 13) before 200 s (XID 79).
    messages = [e["message"] for e in host["xid"]["events"]]
    assert messages == ["Graphics SM Warp Exception", "GPU has fallen off the bus."]
    findings = [_data(page)["findings"][i] for i in host["findings"]]
    assert [f["rule"] for f in findings] == ["GA301"]


def test_untrusted_text_is_escaped_everywhere() -> None:
    page = _evil_page()
    assert "<script>alert" not in page
    assert "<img src=x" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    parsed = _parse(page)
    scripts = [attrs for tag, attrs in parsed.tags if tag == "script"]
    # Exactly the page's own two script elements: the JSON data block and the page script.
    assert [s.get("type") for s in scripts] == ["application/json", None]
    assert not [t for t, _ in parsed.tags if t == "img"]
    assert not any(k.startswith("on") for _, attrs in parsed.tags for k in attrs)


def test_inline_json_cannot_break_out_and_round_trips() -> None:
    page = _evil_page()
    body = _data_text(page)
    assert "<" not in body and ">" not in body and "&" not in body
    data = json.loads(body)
    assert data["hosts"][0]["name"] == EVIL
    assert data["findings"][0]["evidence"]["excerpt"].startswith("kernel: </script>")


def test_json_for_script_escapes_markup_characters() -> None:
    text = str(json_for_script({"a": "</script><!-- & \u2028"}))
    assert text == '{"a":"\\u003c/script\\u003e\\u003c!-- \\u0026 \\u2028"}'
    assert json.loads(text) == {"a": "</script><!-- & \u2028"}


def test_no_network_resources(fleet: list[HostSnapshot], fleet_findings: list[Finding]) -> None:
    for page in (_page(fleet, fleet_findings), _evil_page()):
        lowered = page.lower()
        assert 'src="http' not in lowered and "src='http" not in lowered
        assert not re.search(r"<link[^>]*href=[\"']?(https?:)?//", lowered)
        assert "@import" not in lowered and "url(" not in lowered
        parsed = _parse(page)
        for tag, attrs in parsed.tags:
            assert "src" not in attrs, tag
            if tag == "link":
                raise AssertionError("the page must not link external resources")
        csp = next(a["content"] for t, a in parsed.tags if a.get("http-equiv"))
        assert csp is not None and "default-src 'none'" in csp


def test_reference_links_only_for_http_urls() -> None:
    f = finding()
    sneaky = Finding(**{**f.__dict__, "references": ("javascript:alert(1)", "https://x.test/doc")})
    page = _page([healthy_host()], [sneaky])
    assert _data(page)["risks"][0]["references"] == [
        ["javascript:alert(1)", False],
        ["https://x.test/doc", True],
    ]
    assert 'href="javascript:' not in page


def test_docs_references_link_only_to_pages_beside_the_page() -> None:
    refs = (
        "docs/field-guide/xid.md#common-xid-codes",
        "docs/field-guide/mig.md",
        "docs/../etc/passwd.md",
        'docs/field-guide/xid.md#x" onclick="alert(1)',
        "javascript:docs/field-guide/xid.md",
    )
    f = finding()
    snaps = [healthy_host()]
    register = build_register(
        snaps, [Finding(**{**f.__dict__, "references": refs})], generated_at=GENERATED_AT
    )
    # Without the pages beside it the page links none of them: the paths stay text.
    assert [
        linked for _, linked in _data(render_html(register, snaps))["risks"][0]["references"]
    ] == [False] * 5
    page = render_html(register, snaps, docs_pages=frozenset({"docs/field-guide/xid.md"}))
    assert _data(page)["risks"][0]["references"] == [
        ["docs/field-guide/xid.md#common-xid-codes", True],
        ["docs/field-guide/mig.md", False],  # not beside the page
        ["docs/../etc/passwd.md", False],
        ['docs/field-guide/xid.md#x" onclick="alert(1)', False],
        ["javascript:docs/field-guide/xid.md", False],
    ]
    # The checklists panel links its reference the same way, escaped like every value.
    checklists = page.split('id="checklists"', 1)[1].split("</section>", 1)[0]
    assert "docs/field-guide/readiness-checklists.md#pre-production-checklist" in checklists
    assert '<a href="docs/' not in checklists
    linked = render_html(
        register, snaps, docs_pages=frozenset({"docs/field-guide/readiness-checklists.md"})
    )
    checklists = linked.split('id="checklists"', 1)[1].split("</section>", 1)[0]
    assert (
        '<a href="docs/field-guide/readiness-checklists.md#pre-production-checklist"' in checklists
    )


def test_csp_script_hash_matches_the_inline_script(
    fleet: list[HostSnapshot], fleet_findings: list[Finding]
) -> None:
    page = _page(fleet, fleet_findings)
    script = page.rsplit("<script>", 1)[1].split("</script>", 1)[0]
    assert script == page_script()
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    csp = next(a["content"] for t, a in _parse(page).tags if a.get("http-equiv"))
    assert csp is not None and f"script-src 'sha256-{digest}'" in csp


def test_empty_fleet_renders() -> None:
    page = _page([], [])
    assert "No findings." in page


def test_timestamp_ordering_across_formats() -> None:
    assert timestamp_key("[Sun Feb 23 16:24:18 2025]") < timestamp_key("2025-02-23T16:24:19Z")
    # Same instant written in two zones; the fraction after the comma still counts.
    assert timestamp_key("2025-01-21T02:21:33,498559+00:00") > timestamp_key(
        "2025-01-21T03:21:33+01:00"
    )
    assert timestamp_key("2025-01-21T02:00:00+00:00") == timestamp_key("2025-01-21T03:00:00+01:00")
    assert timestamp_key("[   49.261458]") < timestamp_key("[14328.198496]")
    assert timestamp_key("Nov 29 11:28:11") < timestamp_key("Nov 29 11:28:12")
    assert timestamp_key(None)[0] == timestamp_key("garbage")[0] == 3


def test_xid_flood_is_capped_but_counted() -> None:
    events = [
        XidEvent("xid", 13, "0000:18:00.0", f"e{i}", f"raw {i}", f"[{i:>6}.000000]", 0)
        for i in range(650)
    ]
    view = xid_view(events)
    assert view["total"] == 650
    assert len(view["events"]) == 200 and view["omitted"] == 450
    assert view["events"][-1]["message"] == "e649"
    assert view["summary"] == [{"kind": "xid", "code": "13", "count": 650, "gpus": "GPU 0"}]


def test_unreachable_host_section_is_rendered() -> None:
    page = _page([unreachable_host()], [])
    section = page.split('id="host-1"', 1)[1].split("</details>", 1)[0]
    assert "gpu-z99" in section and "unreachable" in section
    assert "No route to host" in _data(page)["hosts"][0]["status_detail"]
