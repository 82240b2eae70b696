from __future__ import annotations

from gpuaudit.model.snapshot import EccCounts, RemappedRows, RetiredPages, Section
from gpuaudit.rules.base import Severity

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
