"""Shared value helpers: "no value" spellings, Gpu.unavailable, ECC schemas, reason names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuaudit.model.snapshot import Gpu, HostSnapshot
from gpuaudit.parsers.nvidia_common import ecc_counts, reason_name
from gpuaudit.parsers.nvidia_xml import parse_nvidia_smi_xml
from gpuaudit.parsers.values import FieldReader, clean, missing_reason, parse_flag, parse_int

FIXTURES = Path(__file__).parents[1] / "fixtures"
REPO = Path(__file__).parents[2]


@pytest.mark.parametrize(
    ("printed", "reason"),
    [
        ("N/A", "not_applicable"),
        ("[N/A]", "not_applicable"),
        ("None", "not_applicable"),
        ("[Not Supported]", "not_supported"),
        ("Not Supported", "not_supported"),
        ("[Requested functionality has been deprecated]", "not_supported"),
        ("Unknown Error", "unreadable"),
        ("[Unknown Error]", "unreadable"),
        ("GPU is lost", "unreadable"),
        ("[Insufficient Permissions]", "unreadable"),
        ("ERR!", "unreadable"),
        ("81559 MiB", None),
        ("", None),
        (None, None),
    ],
)
def test_missing_reason(printed: str | None, reason: str | None) -> None:
    assert missing_reason(printed) == reason
    assert (clean(printed) is None) == (printed is None or reason is not None or not printed)


def test_field_reader_tells_the_three_cases_apart() -> None:
    r = FieldReader()
    assert r.as_int("memory_total_mib", "80 MiB") == 80
    assert r.as_float("power_draw_w", "[Not Supported]") is None
    assert r.as_float("temperature_c", "N/A") is None
    assert r.as_int("pcie_width_max", "sixteen") is None  # printed, but not a number
    assert r.as_flag("persistence_mode", "Maybe") is None
    assert r.as_text("serial", None) is None  # not printed at all: no entry
    assert r.unavailable == {
        "power_draw_w": "not_supported",
        "temperature_c": "not_applicable",
        "pcie_width_max": "unreadable",
        "persistence_mode": "unreadable",
    }


def test_totals_inherit_the_reason_their_parts_share() -> None:
    r = FieldReader()
    a = r.as_int("a", "N/A")
    b = r.as_int("b", "N/A")
    c = r.as_int("c", "[Not Supported]")
    assert r.total("ab", {"a": a, "b": b}) is None and r.unavailable["ab"] == "not_applicable"
    assert r.total("ac", {"a": a, "c": c}) is None and r.unavailable["ac"] == "unreadable"
    assert r.total("a1", {"a": a, "one": 1}) == 1 and "a1" not in r.unavailable


def test_flags_and_numbers() -> None:
    assert [parse_flag(v) for v in ("Yes", "Enabled", "On", "Active")] == [True] * 4
    assert [parse_flag(v) for v in ("No", "Disabled", "Off", "Not Active")] == [False] * 4
    assert parse_flag("N/A") is None
    assert parse_int("1,024 MiB") == 1024 and parse_int("16x") == 16


@pytest.mark.parametrize(
    "label",
    [
        "clocks_event_reason_hw_slowdown",  # XML v13
        "clocks_throttle_reason_hw_slowdown",  # XML up to v12
        "clocks_event_reasons.hw_slowdown",  # --query-gpu
        "clocks_throttle_reasons.hw_slowdown",  # --query-gpu, older drivers
        "HW Slowdown",  # -q text
    ],
)
def test_reason_names_agree_across_formats(label: str) -> None:
    assert reason_name(label) == "hw_slowdown"


def test_text_only_reason_labels() -> None:
    assert reason_name("Idle") == "gpu_idle"
    assert reason_name("Display Clock Setting") == "display_clocks_setting"
    assert reason_name("Applications Clocks Setting") == "applications_clocks_setting"


def test_ecc_schemas() -> None:
    legacy = ecc_counts({"single_bit_total": "3", "double_bit_total": "0"}, FieldReader(), "e")
    assert (legacy.corrected, legacy.uncorrected, legacy.sram_uncorrected) == (3, 0, None)
    split = ecc_counts(
        {
            "sram_correctable": "1",
            "dram_correctable": "2",
            "sram_uncorrectable_parity": "3",
            "sram_uncorrectable_secded": "4",
            "dram_uncorrectable": "5",
        },
        FieldReader(),
        "e",
    )
    assert (split.corrected, split.sram_uncorrected, split.uncorrected) == (3, 7, 12)
    # A plain SRAM total is the sum of the detection kinds; it is not added to them.
    plain = ecc_counts(
        {"sram_uncorrectable": "7", "sram_uncorrectable_parity": "3"}, FieldReader(), "e"
    )
    assert plain.sram_uncorrected == 7
    # Query CSV prints both schemas; legacy totals are used only when the split has no value.
    r = FieldReader()
    both = ecc_counts(
        {"single_bit_total": "9", "double_bit_total": "1", "dram_correctable": "N/A"}, r, "e"
    )
    assert (both.corrected, both.uncorrected) == (9, 1)


def test_xml_records_why_values_are_missing() -> None:
    text = (FIXTURES / "nvidia-smi-xml" / "telegraf-a10g-driver515.xml").read_text()
    text = text.replace("<gpu_util>0 %</gpu_util>", "<gpu_util>[Not Supported]</gpu_util>")
    text = text.replace(
        "<power_draw>25.58 W</power_draw>", "<power_draw>Unknown Error</power_draw>"
    )
    gpu = parse_nvidia_smi_xml(text).gpus[0]
    assert gpu.unavailable["utilization_gpu_pct"] == "not_supported"
    assert gpu.unavailable["power_draw_w"] == "unreadable"
    assert gpu.unavailable["mig_mode_current"] == "not_applicable"
    assert gpu.status == "ok"  # power is not one of the fields that mark the GPU as broken
    mig = FIXTURES / "nvidia-smi-xml" / "telegraf-a100-sxm4-80gb-mig-enabled-driver535.xml"
    a100 = parse_nvidia_smi_xml(mig.read_text()).gpus[0]
    assert a100.unavailable["utilization_gpu_pct"] == "not_applicable"
    assert a100.unavailable["remapped_rows"] == "not_applicable"  # <remapped_rows>N/A</...>


def test_snapshots_written_before_unavailable_still_read() -> None:
    current = json.loads(
        sorted((REPO / "reports" / "example" / "hosts").glob("*.json"))[0].read_text()
    )
    for gpu_data in current["gpus"]:
        gpu_data.pop("unavailable", None)  # as schema 1.0 snapshots were written
    old = json.dumps(current)
    assert '"unavailable"' not in old
    snapshot = HostSnapshot.from_json(old)
    assert snapshot.gpus and all(g.unavailable == {} for g in snapshot.gpus)
    marked = Gpu(index=0, unavailable={"power_draw_w": "not_supported"})
    again = HostSnapshot.from_json(
        HostSnapshot(host="h", status=snapshot.status, collected_at="t", gpus=(marked,)).to_json()
    )
    assert again.gpus[0].unavailable == {"power_draw_w": "not_supported"}
