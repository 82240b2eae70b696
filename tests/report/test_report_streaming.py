"""A large fleet's outputs are written in pieces, never held whole: the split page's data and
register.csv. Joined, the pieces are the text made in one piece, byte for byte."""

from __future__ import annotations

import csv
import io
import json
from datetime import date
from typing import Any

from report_factories import GENERATED_AT, finding, healthy_host

from gpuaudit.report.html import json_for_script, render_page, script_json_pieces
from gpuaudit.report.layout import HTML_FILE
from gpuaudit.report.outputs import CSV_COLUMNS, csv_chunks, render_csv
from gpuaudit.report.register import build_register
from gpuaudit.rules.base import Severity

DATA_OPEN = '<script type="application/json" id="gpuaudit-data">'
HOSTILE = '</script><script>alert(1)</script><!-- \u2028 & "q" \u2264 \U0001f600'


def test_page_data_in_pieces_is_the_one_piece_text() -> None:
    data: dict[str, Any] = {
        "zeta": [{"b": HOSTILE, "a": [1, 2.5, None, True]}, "<&>", 3],
        "alpha": [],
        "mid": {"nested": [HOSTILE], "when": date(2026, 12, 1)},  # default=str
        "pair": ("<", ">"),
        "hosts": [{"name": f"h{i}", "gpus": [[i, "A100"]]} for i in range(50)],
        "text": HOSTILE,
    }
    pieces = list(script_json_pieces(data))
    assert "".join(pieces) == str(json_for_script(data))
    # Each entry of a list is a piece of its own: no piece holds the hosts' whole list.
    assert len(pieces) > 50
    assert max(map(len, pieces)) < len(json.dumps(data["hosts"])) / 10
    assert all("<" not in piece and ">" not in piece and "&" not in piece for piece in pieces)
    assert "".join(script_json_pieces({})) == str(json_for_script({}))


def test_split_page_writes_its_data_in_pieces_and_keeps_it_whole() -> None:
    # A host named like the place the data goes cannot take the data's place: that place is
    # marked with text no escaped value holds.
    names = ["<!--gpuaudit-page-data-00-->", *(f"gpu-{i:02d}" for i in range(5))]
    snapshots = [healthy_host(name) for name in names]
    findings = [finding("GA301", Severity.HIGH, name) for name in names]
    register = build_register(snapshots, findings, generated_at=GENERATED_AT, run_id="split")
    files = dict(render_page(register, snapshots, split_above=2))
    pieces = list(files[HTML_FILE])
    page = "".join(pieces)
    assert page.count(DATA_OPEN) == 1
    text = page.split(DATA_OPEN, 1)[1].split("</script>", 1)[0]
    data = json.loads(text)
    assert [h["name"] for h in data["hosts"]] == sorted(names)
    assert len(data["findings"]) == len(names)
    assert not any(text in piece for piece in pieces)  # never made in one piece
    assert "<!--gpuaudit-page-data-" not in page  # the mark is gone, the name escaped


def test_register_csv_comes_in_pieces_of_whole_rows() -> None:
    hosts = [f"gpu-{i:04d}" for i in range(1200)]
    findings = [
        finding("GA301", Severity.HIGH, host, message=f"line one\r\nline two of {host}")
        for host in hosts
    ] + [finding("GA501", Severity.MEDIUM, host, gpu_index=None) for host in hosts]
    register = build_register(
        [healthy_host(h) for h in hosts], findings, generated_at=GENERATED_AT, run_id="csv"
    )
    chunks = list(csv_chunks(register))
    assert len(chunks) == 3  # 2,400 rows, a thousand a piece
    assert "".join(chunks) == render_csv(register)
    rows = [row for chunk in chunks for row in csv.reader(io.StringIO(chunk, newline=""))]
    assert rows[0] == list(CSV_COLUMNS)
    assert len(rows) == 1 + len(findings)  # every row whole in one piece, the header once
    assert sum("line one\r\nline two" in cell for row in rows for cell in row) == len(hosts)
