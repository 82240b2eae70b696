from __future__ import annotations

from pathlib import Path

import pytest

from gpuaudit.model.snapshot import EccCounts, RemappedRows, RetiredPages, Section
from gpuaudit.parsers.nvidia_text import parse_nvidia_smi_text
from gpuaudit.parsers.nvidia_xml import parse_nvidia_smi_xml
from gpuaudit.parsers.query_csv import parse_query_gpu_csv
from gpuaudit.rules import assess
from gpuaudit.rules.base import Outcome, Severity

XML = """<?xml version="1.0" ?>
<nvidia_smi_log>
  <gpu id="00000000:18:00.0">
    <remapped_rows>
      <remapped_row_corr>0</remapped_row_corr>
      <remapped_row_unc>0</remapped_row_unc>
      <remapped_row_pending>No</remapped_row_pending>
      <remapped_row_failure>No</remapped_row_failure>
    </remapped_rows>
  </gpu>
  <gpu id="00000000:19:00.0">
    <remapped_rows>
      <remapped_row_corr>0</remapped_row_corr>
      <remapped_row_unc>2</remapped_row_unc>
      <remapped_row_pending>Yes</remapped_row_pending>
      <remapped_row_failure>No</remapped_row_failure>
    </remapped_rows>
  </gpu>
</nvidia_smi_log>
"""


def test_volatile_uncorrectable_ecc_is_high(make_host, make_gpu, findings):
    gpu = make_gpu(1, ecc_volatile=EccCounts(uncorrected=3), ecc_aggregate=EccCounts(uncorrected=5))
    (f,) = findings("GA303", make_host(gpus=[make_gpu(0), gpu]))
    assert (f.severity, f.gpu) == (Severity.HIGH, 1)
    assert f.evidence.fact == "gpus[1].ecc_volatile.uncorrected"
    assert f.evidence.actual == {"volatile": 3, "aggregate": 5, "sram": 0}


def test_aggregate_only_uncorrectable_ecc_is_medium(make_host, make_gpu, findings):
    gpu = make_gpu(0, ecc_aggregate=EccCounts(uncorrected=2, sram_uncorrected=1))
    (f,) = findings("GA303", make_host(gpus=[gpu]))
    assert f.severity is Severity.MEDIUM
    assert f.evidence.fact == "gpus[0].ecc_aggregate.uncorrected"
    assert "SRAM" in f.message


def test_row_remap_pending_quotes_the_gpus_own_xml(make_host, make_gpu, findings):
    gpu = make_gpu(1, remapped_rows=RemappedRows(uncorrectable=2, pending=True, failure=False))
    snap = make_host(
        gpus=[make_gpu(0), gpu], sections={"nvidia_smi_xml": Section(rc=0, stdout=XML)}
    )
    (f,) = findings("GA304", snap)
    assert (f.severity, f.gpu, f.evidence.actual) == (Severity.HIGH, 1, True)
    assert "<remapped_row_pending>Yes</remapped_row_pending>" in f.evidence.excerpt
    assert "<remapped_row_pending>No" not in f.evidence.excerpt


def test_row_remap_failure_is_critical_and_not_repeated_by_the_limit_rule(
    make_host, make_gpu, findings
):
    gpu = make_gpu(0, remapped_rows=RemappedRows(uncorrectable=512, pending=False, failure=True))
    snap = make_host(gpus=[gpu])
    (f,) = findings("GA305", snap)
    assert f.severity is Severity.CRITICAL and "512 uncorrectable remaps" in f.message
    assert findings("GA306", snap) == []


def test_uncorrectable_remaps_at_limit(make_host, make_gpu, findings):
    at_limit = make_gpu(0, remapped_rows=RemappedRows(uncorrectable=512, failure=False))
    below = make_gpu(1, remapped_rows=RemappedRows(uncorrectable=511, failure=False))
    (f,) = findings("GA306", make_host(gpus=[at_limit, below]))
    assert (f.gpu, f.severity, f.evidence.actual) == (0, Severity.CRITICAL, 512)
    # A site may be stricter.
    stricter = findings("GA306", make_host(gpus=[below]), policy={
        "remapped_rows_uncorrectable_limit": 100
    })  # fmt: skip
    assert [f.gpu for f in stricter] == [1]


def test_retired_pages_thresholds(make_host, make_gpu, findings):
    gpus = [
        make_gpu(0, retired_pages=RetiredPages(single_bit=40, double_bit=23, pending=False)),
        make_gpu(1, retired_pages=RetiredPages(single_bit=50, double_bit=12, pending=True)),
        make_gpu(2, retired_pages=RetiredPages(single_bit=1, double_bit=0, pending=True)),
        make_gpu(3, retired_pages=RetiredPages(single_bit=30, double_bit=2, pending=False)),
    ]
    result = findings("GA307", make_host(gpus=gpus))
    assert [(f.gpu, f.severity) for f in result] == [
        (0, Severity.HIGH),
        (1, Severity.HIGH),
        (2, Severity.MEDIUM),
    ]
    assert "RMA limit 63" in result[0].message
    assert "table full" in result[1].message


def test_hardware_slowdowns_flagged_but_not_power_cap_or_idle(make_host, make_gpu, findings):
    gpus = [
        make_gpu(0, clock_event_reasons=("sw_power_cap",)),
        make_gpu(1, clock_event_reasons=("gpu_idle",)),
        make_gpu(2, clock_event_reasons=("hw_slowdown", "hw_thermal_slowdown", "sw_power_cap")),
        make_gpu(3, clock_event_reasons=("clocks_event_reason_hw_power_brake_slowdown",)),
    ]
    result = findings("GA320", make_host(gpus=gpus, host_data={"expected_gpu_count": 4}))
    assert [(f.gpu, f.evidence.actual) for f in result] == [
        (2, ["hw_slowdown", "hw_thermal_slowdown"]),
        (3, ["hw_power_brake_slowdown"]),
    ]
    assert all(f.severity is Severity.MEDIUM for f in result)


def test_healthy_gpus_are_silent(make_host, findings):
    snap = make_host()
    for code in ("GA303", "GA304", "GA305", "GA306", "GA307", "GA320"):
        assert findings(code, snap) == [], code


# --- row remapping on MIG-enabled GPUs (real captures) ----------------------------------------

FIXTURES = Path(__file__).parents[1] / "fixtures"
MIG_CAPTURES = [
    (parse_nvidia_smi_xml, "nvidia-smi-xml/telegraf-a100-sxm4-80gb-mig-enabled-driver535.xml"),
    (parse_nvidia_smi_text, "nvidia-smi-q/utk-h100-mig-driver590-load.nvidia-smi-q.txt"),
    (parse_nvidia_smi_text, "nvidia-smi-q/utk-h200-mig-driver590-idle.nvidia-smi-q.txt"),
    (parse_query_gpu_csv, "query-csv/utk-h100-mig-driver590-load-query-gpu-all-fields.csv"),
    (parse_query_gpu_csv, "query-csv/utk-h200-mig-driver590-idle-query-gpu-all-fields.csv"),
]


@pytest.mark.parametrize(("parse", "capture"), MIG_CAPTURES)
def test_row_remapping_is_not_judged_where_mig_mode_hides_it(make_host, parse, capture):
    # nvidia-smi prints N/A for the remapped rows of a GPU in MIG mode: a remap pending or
    # failed there is unknown, not absent.
    gpus = parse((FIXTURES / capture).read_text()).gpus
    assert [g.mig_mode_current for g in gpus] == ["Enabled"]
    outcomes = {o.rule: o for o in assess([make_host(gpus=gpus)]).outcomes}
    for code in ("GA304", "GA305", "GA306"):
        outcome = outcomes[code]
        assert outcome.outcome is Outcome.NOT_EVALUATED, code
        ((gpu, judged, reason),) = [(g.gpu, g.outcome, g.reason) for g in outcome.gpus]
        assert (gpu, judged) == (0, Outcome.NOT_EVALUATED), code
        assert "MIG mode" in reason and "N/A" in reason, code


@pytest.mark.parametrize(
    ("parse", "capture"),
    [
        (parse_nvidia_smi_text, "nvidia-smi-q/utk-h100-80gb-hbm3-driver590.nvidia-smi-q.txt"),
        (parse_nvidia_smi_text, "nvidia-smi-q/utk-h200-driver590-idle.nvidia-smi-q.txt"),
        # A GPU that does not remap rows at all (Turing): N/A there is no gap.
        (parse_nvidia_smi_xml, "nvidia-smi-xml/telegraf-2x-rtx2070-driver590-v13.xml"),
    ],
)
def test_row_remapping_is_judged_with_mig_mode_off(make_host, parse, capture):
    gpus = parse((FIXTURES / capture).read_text()).gpus
    outcomes = {o.rule: o for o in assess([make_host(gpus=gpus)]).outcomes}
    for code in ("GA304", "GA305", "GA306"):
        assert outcomes[code].outcome is Outcome.PASS, code


def test_sram_uncorrectable_count_is_not_counted_twice(make_host, findings):
    # The real ECC block: 1 SRAM uncorrectable error since the driver loaded, 5 in the GPU's
    # lifetime (which includes that one).
    capture = (
        "nvidia-smi-q/mleng-ecc-sram-uncorrectable-volatile1-aggregate5.nvidia-smi-q-excerpt.txt"
    )
    (gpu,) = parse_nvidia_smi_text((FIXTURES / capture).read_text()).gpus
    (f,) = findings("GA303", make_host(gpus=[gpu]))
    assert f.evidence.actual == {"volatile": 1, "aggregate": 5, "sram": 5}
    assert "Some are in SRAM" in f.message


def test_memory_repair_pending_or_impossible(make_host, make_gpu, findings):
    gpus = [
        make_gpu(0),
        make_gpu(1, channel_repair_pending=True, tpc_repair_pending=False),
        make_gpu(2, tpc_repair_pending=True, sram_threshold_exceeded=True),
        make_gpu(3, unrepairable_memory=True, channel_repair_pending=True),
        make_gpu(4, unrepairable_memory=None, sram_threshold_exceeded=None),  # N/A
    ]
    found = {f.gpu: f for f in findings("GA314", make_host(gpus=gpus))}
    assert sorted(found) == [1, 2, 3]
    assert found[1].severity is Severity.HIGH
    assert "a memory channel repair pending: drain and reset it" in found[1].message
    assert found[1].evidence.actual == {"channel_repair_pending": True,
                                        "tpc_repair_pending": False}  # fmt: skip
    # The most severe state sets the severity and the step; every state is named.
    assert found[2].message.endswith(
        "reports its SRAM uncorrectable errors past the driver's threshold; a TPC repair "
        "pending: drain it, run field diagnostics (dcgmi diag -r 3) and open an RMA."
    )
    assert found[3].severity is Severity.CRITICAL
    assert found[3].evidence.fact == "gpus[3].unrepairable_memory"
    assert "memory it can no longer repair; a memory channel repair pending" in found[3].message
