from __future__ import annotations

import pytest

from gpuaudit.model.snapshot import EccCounts, Section
from gpuaudit.policy.defaults import DEFAULT_POLICY
from gpuaudit.rules.base import Severity
from gpuaudit.rules.hardware import is_datacenter_gpu

XML = """<?xml version="1.0" ?>
<nvidia_smi_log>
  <gpu id="00000000:19:00.0">
    <ecc_mode>
      <current_ecc>Disabled</current_ecc>
      <pending_ecc>Disabled</pending_ecc>
    </ecc_mode>
  </gpu>
</nvidia_smi_log>
"""

# --- GA308 corrected ECC volume ---------------------------------------------------------------


def test_corrected_volume_names_every_threshold_crossed(make_host, make_gpu, findings):
    worn = make_gpu(
        1,
        ecc_volatile=EccCounts(corrected=10, uncorrected=0),
        ecc_aggregate=EccCounts(
            corrected=60_000_000, uncorrected=0, sram_corrected=12_000, dram_corrected=5
        ),
    )
    (f,) = findings("GA308", make_host(gpus=[make_gpu(0), worn]))
    assert (f.gpu, f.severity) == (1, Severity.MEDIUM)
    assert f.evidence.actual == {"corrected": 60_000_000, "SRAM correctable": 12_000}
    assert f.evidence.expected["SRAM correctable"] == "<= 10000"
    assert "Meta gcm warns above 50,000,000" in f.message and "Azure" in f.message


def test_corrected_volume_below_limits_is_silent_and_limits_are_policy(
    make_host, make_gpu, findings
):
    gpu = make_gpu(0, ecc_aggregate=EccCounts(corrected=0, dram_corrected=19_999_999))
    assert findings("GA308", make_host(gpus=[gpu])) == []
    (f,) = findings("GA308", make_host(gpus=[gpu]), policy={"ecc_dram_corrected_limit": 1000})
    assert f.evidence.actual == {"DRAM correctable": 19_999_999}


# --- GA309 ECC disabled / GA310 ECC change pending ------------------------------------------


def test_ecc_disabled_on_a_datacenter_gpu(make_host, make_gpu, findings):
    off = make_gpu(1, ecc_mode_current="Disabled", ecc_mode_pending="Disabled")
    workstation = make_gpu(
        2, name="NVIDIA RTX 6000 Ada Generation", ecc_mode_current="Disabled",
        ecc_mode_pending="Disabled",
    )  # fmt: skip
    snap = make_host(
        gpus=[make_gpu(0), off, workstation],
        sections={"nvidia_smi_xml": Section(rc=0, stdout=XML)},
    )
    (f,) = findings("GA309", snap)
    assert (f.gpu, f.severity) == (1, Severity.MEDIUM)
    assert "<current_ecc>Disabled</current_ecc>" in f.evidence.excerpt


def test_ecc_being_enabled_is_a_pending_change_not_disabled(make_host, make_gpu, findings):
    gpu = make_gpu(0, ecc_mode_current="Disabled", ecc_mode_pending="Enabled")
    snap = make_host(gpus=[gpu])
    assert findings("GA309", snap) == []
    (f,) = findings("GA310", snap)
    assert (f.gpu, f.severity) == (0, Severity.MEDIUM)
    assert f.evidence.actual == {"current": "Disabled", "pending": "Enabled"}
    assert "reset may not be enough" in f.message


def test_no_pending_ecc_change_or_no_ecc_is_silent(make_host, make_gpu, findings):
    na = make_gpu(1, name="NVIDIA GeForce RTX 4090", ecc_mode_current=None, ecc_mode_pending=None)
    assert findings("GA310", make_host(gpus=[make_gpu(0), na])) == []
    assert findings("GA309", make_host(gpus=[make_gpu(0), na])) == []


@pytest.mark.parametrize(
    ("name", "datacenter"),
    [
        ("NVIDIA A100-SXM4-80GB", True),
        ("NVIDIA H100 80GB HBM3", True),
        ("NVIDIA L40S", True),
        ("NVIDIA A10G", True),
        ("Tesla T4", True),
        ("Tesla V100-PCIE-32GB", True),
        ("NVIDIA GH200 480GB", True),
        ("NVIDIA B200", True),
        ("NVIDIA RTX A400", False),
        ("NVIDIA RTX 4000 SFF Ada Generation", False),
        ("Quadro T600", False),
        ("NVIDIA GeForce RTX 3090", False),
        ("NVIDIA TITAN V", False),
    ],
)
def test_datacenter_gpu_by_name(make_gpu, name, datacenter):
    assert is_datacenter_gpu(make_gpu(0, name=name), DEFAULT_POLICY) is datacenter


# --- GA311 driver asks for a recovery action --------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "severity", "step"),
    [
        ({"recovery_action": "Reboot"}, Severity.CRITICAL, "reboot the node"),
        ({"recovery_action": "Drain P2P"}, Severity.HIGH, "drain peer-to-peer"),
        ({"recovery_action": "Drain and Reset"}, Severity.HIGH, "and reset the GPU"),
        ({"reset_required": True}, Severity.HIGH, "reset the GPU"),
        ({"recovery_action": "Reset", "drain_and_reset_recommended": True}, Severity.HIGH, "reset"),
    ],
)
def test_recovery_action_requested(make_host, make_gpu, findings, changes, severity, step):
    (f,) = findings("GA311", make_host(gpus=[make_gpu(0), make_gpu(1, **changes)]))
    assert (f.gpu, f.severity) == (1, severity)
    assert step in f.message and step.lower() in f.remediation.lower()


def test_recovery_action_none_is_silent(make_host, make_gpu, findings):
    gpu = make_gpu(0, recovery_action="None", reset_required=False)
    assert findings("GA311", make_host(gpus=[gpu])) == []


# --- GA321 temperature ------------------------------------------------------------------------


def test_hot_gpu_medium_and_at_slowdown_high(make_host, make_gpu, findings):
    gpus = [
        make_gpu(0, temperature_c=80.0),  # at the threshold: not above
        make_gpu(1, temperature_c=83.0),
        make_gpu(2, temperature_c=88.0, temperature_slowdown_c=87.0),
    ]
    result = {f.gpu: f for f in findings("GA321", make_host(gpus=gpus))}
    assert sorted(result) == [1, 2]
    assert result[1].severity is Severity.MEDIUM and result[1].evidence.actual == 83.0
    assert result[2].severity is Severity.HIGH and "cutting clocks" in result[2].message
    assert "5 minutes" in result[1].message


# --- GA330 memory headroom --------------------------------------------------------------------


def test_memory_headroom_low_and_pressure_medium(make_host, make_gpu, findings):
    gpus = [
        make_gpu(0, memory_used_mib=40000),  # 49 %
        make_gpu(1, memory_used_mib=70000),  # 86 %
        make_gpu(2, memory_used_mib=79000),  # 97 %
    ]
    result = {f.gpu: f for f in findings("GA330", make_host(gpus=gpus))}
    assert sorted(result) == [1, 2]
    assert (result[1].severity, result[1].owner.value) == (Severity.LOW, "ml-engineering")
    assert result[1].evidence.actual["used_pct"] == 85.8
    assert result[2].severity is Severity.MEDIUM and "alert above 95 %" in result[2].message


def test_memory_headroom_follows_policy(make_host, make_gpu, findings):
    snap = make_host(gpus=[make_gpu(0, memory_used_mib=70000)])
    assert findings("GA330", snap, policy={"memory_headroom_pct": 10}) == []
