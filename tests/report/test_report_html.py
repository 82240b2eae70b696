from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from page_factories import DemoPage, demo_page
from report_factories import (
    EVIL,
    GENERATED_AT,
    evil_host,
    finding,
    healthy_host,
    unreachable_host,
)

from gpuaudit.model.snapshot import HostSnapshot
from gpuaudit.parsers.kernel_log import parse_kernel_log
from gpuaudit.report.html import json_for_script, page_script, render_html
from gpuaudit.report.register import build_register
from gpuaudit.report.xid_timeline import (
    MAX_RAW_LINES,
    LogTime,
    log_time,
    timestamp_key,
    xid_view,
)
from gpuaudit.rules.base import Finding, Severity

KERNEL_LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "kernel-log"
# Demo hosts whose snapshots hold the evidence these tests look for (inventory/demo.py).
DEMO_HOSTS = ("a100-hgx-02", "a100-hgx-05", "a10g-01", "rtx4000ada-01", "v100-02", "p100-01")


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
    topology = _data(page)["shared"]["topology"][host["topology"]]
    assert topology["rows"][0]["cells"][1] == ["NV18", "nvlink"]
    assert topology["legend"] == [["NIC0", "mlx5_0"]]
    assert topology["rows"][0]["cpu"] == "0-47"
    # Incidents in time order: uptime 49 s (XID 13) before 200 s (XID 79).
    incidents = host["xid"]["incidents"]
    assert [(i["what"], i["gpu"]) for i in incidents] == [("XID 13", "GPU 0"), ("XID 79", "GPU 1")]
    assert incidents[1]["message"] == "GPU has fallen off the bus."
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
    # Stamps past what a clock can hold sort with the unreadable ones and keep their text.
    for stamp in ("[" + "9" * 400 + "]", "0001-01-01T00:00:00+01:00", "2025-02-30T00:00:00Z"):
        assert log_time(stamp) == LogTime(3, 0.0, "none", stamp)


def _log_events(name: str) -> list[Any]:
    return list(parse_kernel_log((KERNEL_LOGS / name).read_text(encoding="utf-8")))


def test_xid_flood_becomes_incidents_with_capped_raw_lines() -> None:
    events = _log_events("gpud-xid13-flood-629-lines-xid43.log")
    view = xid_view(events)
    assert view["total"] == len(events) == sum(i["count"] for i in view["incidents"])
    assert [i["what"] for i in view["incidents"]] == ["XID 13", "XID 43"]
    storm = view["incidents"][0]
    assert storm["count"] > MAX_RAW_LINES
    # The dmesg --time-format=iso stamps are wall-clock times, shown in UTC.
    assert storm["first_seen"] == "2025-01-21 02:21:33 UTC"
    lines = storm["raw"].splitlines()
    assert len(lines) == MAX_RAW_LINES + 1  # the cap plus one line saying what was left out
    xid13 = [e.raw for e in events if e.code == 13]
    assert lines[0] == xid13[0] and lines[-1] == xid13[-1]
    assert f"{storm['count'] - MAX_RAW_LINES} more lines" in storm["raw"]


@pytest.mark.parametrize(
    ("log", "what", "first", "last", "count"),
    [
        # dmesg -T: the host's local clock, year included.
        (
            "gpud-xid119-gsp-rpc-timeout-dell-xe9680.log",
            "XID 119",
            "2025-02-23 16:24:18 host clock",
            "2025-02-23 16:30:13 host clock",
            5,
        ),
        # journalctl -k / syslog: the host's clock without a year.
        (
            "issue-dxvk-1799-xid31-mmu-fault-journalctl-k-rtx2080.log",
            "XID 31",
            "Nov 29 11:28:11 host clock",
            "Nov 29 11:28:11 host clock",
            2,
        ),
        # Plain dmesg: seconds since boot, and nothing in the snapshot says when that was.
        (
            "issue-chia-gigahorse-301-xid31-ce2-priv-violation-xid62-xid45-dmesg.log",
            "XID 31",
            "3 h 58 min 48 s after boot",
            "3 h 58 min 48 s after boot",
            1,
        ),
        (
            "issue-open-gpu-kernel-modules-363-xid31-chrome-gtx1660ti-no-timestamps.log",
            "XID 31",
            "—",
            "—",
            2,
        ),
    ],
)
def test_incident_times_say_which_clock_they_read(
    log: str, what: str, first: str, last: str, count: int
) -> None:
    incident = xid_view(_log_events(log))["incidents"][0]
    assert (incident["what"], incident["first_seen"], incident["last_seen"]) == (what, first, last)
    assert incident["count"] == count


def test_seconds_since_boot_are_dated_from_the_hosts_boot_time() -> None:
    events = _log_events("issue-chia-gigahorse-301-xid31-ce2-priv-violation-xid62-xid45-dmesg.log")
    undated = xid_view(events)["incidents"][0]
    dated = xid_view(events, "2025-03-01T08:00:00Z")["incidents"][0]
    assert undated["first_seen"] == "3 h 58 min 48 s after boot"
    assert dated["first_seen"] == "2025-03-01 11:58:48 UTC from boot"
    # A boot time that is not one leaves the times as time after boot.
    assert xid_view(events, "yesterday")["incidents"][0]["first_seen"] == undated["first_seen"]


def test_legacy_fallen_off_bus_lines_form_an_incident() -> None:
    view = xid_view(_log_events("issue-bumblebee-554-legacy-gpu-fallen-off-bus-no-xid.log"))
    assert [(i["what"], i["gpu"], i["count"]) for i in view["incidents"]] == [
        ("GPU fell off the bus", "0000:01:00.0 (not a listed GPU)", 2)
    ]
    assert view["incidents"][0]["first_seen"] == "49.26 s after boot"
    assert any("boot" in note for note in view["notes"])


def test_unreachable_host_section_is_rendered() -> None:
    page = _page([unreachable_host()], [])
    section = page.split('id="host-1"', 1)[1].split("</details>", 1)[0]
    assert "gpu-z99" in section and "unreachable" in section
    assert "No route to host" in _data(page)["hosts"][0]["status_detail"]


# --- the evidence of real (simulated demo) snapshots -------------------------------------------


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoPage:
    return demo_page(DEMO_HOSTS, tmp_path_factory.mktemp("sim"))


def _demo_host(demo: DemoPage, name: str) -> dict[str, Any]:
    return next(h for h in _data(demo.html)["hosts"] if h["name"] == name)


def _gpus(demo: DemoPage, name: str) -> list[dict[str, Any]]:
    columns = _data(demo.html)["gpu_columns"]
    return [dict(zip(columns, row, strict=True)) for row in _demo_host(demo, name)["gpus"]]


def _shared(demo: DemoPage, name: str, kind: str) -> Any:
    index = _demo_host(demo, name)[kind]
    return None if index is None else _data(demo.html)["shared"][kind][index]


def test_gpu_rows_carry_serial_inforom_and_uuid(demo: DemoPage) -> None:
    snap = demo.snapshots["a100-hgx-02"]
    rows = _gpus(demo, "a100-hgx-02")
    assert len(rows) == len(snap.gpus) == 8
    for row, gpu in zip(rows, sorted(snap.gpus, key=lambda g: g.index), strict=True):
        assert gpu.serial and gpu.inforom_image and gpu.uuid
        assert (row["serial"], row["inforom"], row["uuid"]) == (
            gpu.serial,
            gpu.inforom_image,
            gpu.uuid,
        )


def test_a_pending_row_remap_is_not_shown_as_ok(demo: DemoPage) -> None:
    gpu3 = next(g for g in demo.snapshots["a100-hgx-02"].gpus if g.index == 3)
    assert gpu3.status == "ok" and gpu3.remapped_rows.pending  # what nvidia-smi says
    rows = {row["index"]: row for row in _gpus(demo, "a100-hgx-02")}
    assert rows[3]["status"] == "attention" and rows[3]["attention"]
    assert any("row remap pending" in problem for problem in rows[3]["problems"])
    assert [i for i, row in rows.items() if row["status"] != "ok"] == [3]


def test_host_evidence_packages_services_sysctls_and_device_nodes(demo: DemoPage) -> None:
    for name in ("a100-hgx-02", "p100-01"):
        snap = demo.snapshots[name]
        assert snap.packages and snap.services and snap.sysctls and snap.device_nodes
        assert _shared(demo, name, "packages") == [
            [p.name, p.version, p.held] for p in sorted(snap.packages, key=lambda p: p.name)
        ]
        assert _shared(demo, name, "services") == [
            [s.name, s.active, s.enabled] for s in snap.services
        ]
        assert _shared(demo, name, "sysctls") == [[k, v] for k, v in sorted(snap.sysctls.items())]
        assert _shared(demo, name, "device_nodes") == [
            [d.path, d.mode, d.owner, d.group] for d in snap.device_nodes
        ]
    # p100-01's driver packages are not held; a100-hgx-02's are.
    assert not any(held for _, _, held in _shared(demo, "p100-01", "packages"))
    assert any(held for _, _, held in _shared(demo, "a100-hgx-02", "packages"))


def test_nvlink_is_shown_per_link(demo: DemoPage) -> None:
    snap = demo.snapshots["a100-hgx-02"]
    assert snap.nvlink
    nvlink = _shared(demo, "a100-hgx-02", "nvlink")
    expected = [(g.gpu, link.link) for g in snap.nvlink for link in g.links]
    assert len(expected) == 8 * 12
    assert [(row[0], row[1]) for row in nvlink["rows"]] == expected
    first = snap.nvlink[0].links[0]
    assert nvlink["rows"][0][2:] == [
        "active" if first.active else "inactive",
        f"{first.speed_gb_s:g} GB/s",
        first.replay_errors,
        first.recovery_errors,
        first.crc_errors,
        "",  # no counters beyond the three named ones
    ]
    assert nvlink["summary"] == "96 links on 8 GPUs: 96 active, none with errors"
    # The PCIe-only A10G lists no NVLink: nothing to show.
    assert _demo_host(demo, "a10g-01")["nvlink"] is None


def test_xid_storm_is_shown_as_incidents(demo: DemoPage) -> None:
    snap = demo.snapshots["a10g-01"]
    xid = _demo_host(demo, "a10g-01")["xid"]
    assert xid["total"] == len(snap.xid_events) > 600
    assert sum(i["count"] for i in xid["incidents"]) == len(snap.xid_events)
    assert len(xid["incidents"]) <= 3
    assert all(len(i["raw"].splitlines()) <= MAX_RAW_LINES + 1 for i in xid["incidents"])
    assert xid["incidents"][0]["first_seen"] == "2025-01-21 02:21:33 UTC"
    # A boot-relative log is dated from the boot time the host gave (its /proc/stat btime);
    # the GPU that fell off the bus is no longer in nvidia-smi's list, so its bus id names it.
    assert demo.snapshots["a100-hgx-05"].os.boot_time == "2024-06-01T00:00:00Z"
    fallen_view = _demo_host(demo, "a100-hgx-05")["xid"]
    fallen = fallen_view["incidents"]
    assert [(i["what"], i["gpu"]) for i in fallen] == [
        ("XID 79", "0000:90:00.0 (not a listed GPU)")
    ]
    assert fallen[0]["first_seen"] == "2024-06-01 03:59:30 UTC from boot"
    assert any("/proc/stat" in note for note in fallen_view["notes"])


def test_slowdown_finding_reads_without_missing_values(demo: DemoPage) -> None:
    gpu = demo.snapshots["rtx4000ada-01"].gpus[0]
    assert gpu.temperature_slowdown_c is None  # this GPU reports no slowdown threshold
    message = next(
        f.finding.message
        for f in demo.register.findings
        if f.rule == "GA320" and f.host == "rtx4000ada-01"
    )
    assert "None" not in message
    assert f"temperature {gpu.temperature_c:g} °C" in message
    assert "slowdown at" not in message


def test_backticks_in_finding_text_become_code(demo: DemoPage) -> None:
    table = demo.html.split('id="risks-table"', 1)[1].split("</table>", 1)[0]
    assert "<code>lsmod | grep nvidia</code>" in table  # GA101 on v100-02
    assert "`" not in table


def test_code_spans_escape_host_text_first() -> None:
    f = finding(message="Xid `31`")
    hostile = dataclasses.replace(f, remediation=f"Run `{EVIL}` then `a & b` and an odd ` tick")
    page = _page([healthy_host()], [hostile])
    table = page.split('id="risks-table"', 1)[1].split("</table>", 1)[0]
    assert "<code>&lt;script&gt;alert(1)&lt;/script&gt;</code>" in table
    assert "<code>a &amp; b</code> and an odd ` tick" in table
    assert "<script>" not in table
