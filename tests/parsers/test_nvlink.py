"""`nvidia-smi nvlink -s` / `-e` listings, and how the snapshot builder fills ``nvlink``."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuaudit.assemble.build import build_snapshot
from gpuaudit.model.snapshot import GpuNvLink, HostSnapshot, Section
from gpuaudit.parsers.bundle import Bundle
from gpuaudit.parsers.errors import ParseError
from gpuaudit.parsers.nvlink import merge_nvlink, parse_nvlink

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
ALL_INACTIVE = "topo/azhc-a100-sxm4-80gb-nvlink-status-all-links-inactive.txt"

STATUS = """GPU 7: NVIDIA A100-SXM4-80GB (UUID: GPU-c7e253b0-c227-6f10-e860-7482c85e7ce8)
\t Link 0: 25 GB/s
\t Link 1: 25 GB/s
\t Link 2: <inactive>
"""
ERRORS = """GPU 7: NVIDIA A100-SXM4-80GB (UUID: GPU-c7e253b0-c227-6f10-e860-7482c85e7ce8)
\t Link 0: Replay Errors: 0
\t Link 0: Recovery Errors: 1
\t Link 0: CRC Errors: 0

\t Link 1: Replay Errors: 3
\t Link 1: CRC Flit Errors: 4
\t Link 1: CRC Data Errors: 5
"""


def test_all_links_inactive_fixture() -> None:
    text = (FIXTURES / ALL_INACTIVE).read_text(encoding="utf-8")
    (gpu,) = parse_nvlink(text)
    assert gpu == GpuNvLink(
        gpu=6, uuid="GPU-9667d95e-6d22-0c22-1f57-c481f13e7c44", links=(), all_inactive=True
    )


def test_status_listing_gives_state_and_speed() -> None:
    (gpu,) = parse_nvlink(STATUS)
    assert gpu.gpu == 7 and gpu.uuid == "GPU-c7e253b0-c227-6f10-e860-7482c85e7ce8"
    assert [(link.link, link.active, link.speed_gb_s) for link in gpu.links] == [
        (0, True, 25.0),
        (1, True, 25.0),
        (2, False, None),
    ]
    assert not gpu.all_inactive


def test_error_listing_gives_counters_and_sums_crc_kinds() -> None:
    (gpu,) = parse_nvlink(ERRORS)
    link0, link1 = gpu.links
    assert (link0.replay_errors, link0.recovery_errors, link0.crc_errors) == (0, 1, 0)
    assert (link1.replay_errors, link1.recovery_errors, link1.crc_errors) == (3, None, 9)
    assert link1.counters == {"Replay": 3, "CRC Flit": 4, "CRC Data": 5}
    assert link0.active is None  # -e says nothing about state


def test_status_and_errors_merge_per_gpu_and_link() -> None:
    both = merge_nvlink(parse_nvlink(STATUS), parse_nvlink(ERRORS))
    assert merge_nvlink(parse_nvlink(STATUS + ERRORS)) == both
    (gpu,) = both
    assert [(x.link, x.active, x.recovery_errors) for x in gpu.links] == [
        (0, True, 1),
        (1, True, None),
        (2, False, None),
    ]


def test_empty_output_is_no_nvlink_and_garbage_is_an_error() -> None:
    assert parse_nvlink("") == ()
    assert parse_nvlink("GPU 0: Tesla T4 (UUID: GPU-1)\n") == (GpuNvLink(0, "GPU-1"),)
    with pytest.raises(ParseError, match="nvlink"):
        parse_nvlink("NVIDIA-SMI has failed because it couldn't communicate with the driver\n")


def test_snapshot_nvlink_from_sections_and_round_trip() -> None:
    inactive = (FIXTURES / ALL_INACTIVE).read_text(encoding="utf-8")
    sections = {
        "meta": Section(rc=0, stdout="hostname=h\n"),
        "nvlink_status": Section(rc=0, stdout=STATUS + inactive),
        "nvlink_errors": Section(rc=0, stdout=ERRORS),
    }
    snap = build_snapshot("h", Bundle(sections=sections, complete=True))
    assert snap.nvlink is not None
    assert [(g.gpu, g.all_inactive, len(g.links)) for g in snap.nvlink] == [
        (6, True, 0),
        (7, False, 3),
    ]
    assert HostSnapshot.from_json(snap.to_json()).nvlink == snap.nvlink

    none = build_snapshot("h", Bundle(sections={"meta": sections["meta"]}, complete=True))
    assert none.nvlink is None  # not collected: not "no links"
    bad = dict(sections, nvlink_status=Section(rc=0, stdout="garbage\n"))
    damaged = build_snapshot("h", Bundle(sections=bad, complete=True))
    assert "nvlink_status" in damaged.parse_errors
    assert damaged.nvlink is not None and damaged.nvlink[0].gpu == 7  # counters still read
