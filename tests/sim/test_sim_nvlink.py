"""NVLink as the simulated nvidia-smi reports it, read through the collector and the rules."""

from __future__ import annotations

from pathlib import Path

from simhelpers import collect

from gpuaudit.assemble.build import build_snapshot
from gpuaudit.rules import evaluate
from gpuaudit.sim.host import materialize
from gpuaudit.sim.profiles import PROFILES


def test_healthy_nvswitch_host_has_every_link_up(tmp_path: Path) -> None:
    bundle = collect(materialize("a100-hgx-01", "a100-hgx-01", tmp_path))
    assert bundle.sections["nvlink_status"].rc == 0
    assert "\t Link 11: 25 GB/s" in bundle.sections["nvlink_status"].stdout
    snap = build_snapshot("a100-hgx-01", bundle)
    assert "nvlink_status" not in snap.parse_errors
    assert len(snap.nvlink) == 8
    assert all(len(gpu.links) == 12 and not gpu.all_inactive for gpu in snap.nvlink)
    assert not [f for f in evaluate([snap]) if f.rule in ("GA510", "GA511")]


def test_inactive_link_and_crc_errors_are_findings(tmp_path: Path) -> None:
    profile = dict(PROFILES["a100-hgx-01"])
    profile["gpus"] = {2: {"nvlink": {"inactive": [3, 7], "errors": {5: {"CRC": 4000}}}}}
    bundle = collect(materialize("a100-nvl", profile, tmp_path))
    assert "\t Link 3: <inactive>" in bundle.sections["nvlink_status"].stdout
    assert "\t Link 5: CRC Errors: 4000" in bundle.sections["nvlink_errors"].stdout
    findings = evaluate([build_snapshot("a100-nvl", bundle)])
    inactive = [f for f in findings if f.rule == "GA510"]
    counters = [f for f in findings if f.rule == "GA511"]
    assert [f.gpu for f in inactive] == [2]
    assert [f.gpu for f in counters] == [2]


def test_gpus_without_nvlink_print_headers_only(tmp_path: Path) -> None:
    bundle = collect(materialize("t4-01", "t4-01", tmp_path))
    section = bundle.sections["nvlink_status"]
    assert section.rc == 0
    assert section.stdout.startswith("GPU 0: Tesla T4 (UUID: GPU-")
    assert "Link" not in section.stdout
