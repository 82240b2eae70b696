"""Fake NVML hosts made from real nvidia-smi captures, and a runner for the real probe script.

An XML fixture is parsed with the XML parser and each GPU turned back into what NVML hands out
(bytes, milliwatts, whole degrees, NVML_FEATURE_* numbers, reason bitmasks); the fake pynvml in
``fake_pynvml/`` serves that, raising NVMLError_NotSupported where the capture printed N/A or
[Not Supported]. The probe then runs in a separate python3, as it does on a host.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from gpuaudit.collect import nvml_probe_source
from gpuaudit.model.snapshot import EccCounts, Gpu
from gpuaudit.parsers.nvidia_xml import NvidiaSmiLog, parse_nvidia_smi_xml

FIXTURES = Path(__file__).parents[1] / "fixtures" / "nvidia-smi-xml"
FAKE_PYNVML = Path(__file__).parent / "fake_pynvml"
MIB = 1024 * 1024
# pynvml's nvmlClocksEventReason* values, by the names nvidia-smi's XML gives the reasons.
REASON_BITS = {
    "gpu_idle": 0x1,  # nvmlClocksEventReasonGpuIdle
    "applications_clocks_setting": 0x2,  # ...ApplicationsClocksSetting
    "sw_power_cap": 0x4,  # ...SwPowerCap
    "hw_slowdown": 0x8,  # ...HwSlowdown
    "sync_boost": 0x10,  # ...SyncBoost
    "sw_thermal_slowdown": 0x20,  # ...SwThermalSlowdown
    "hw_thermal_slowdown": 0x40,  # ...HwThermalSlowdown
    "hw_power_brake_slowdown": 0x80,  # ...HwPowerBrakeSlowdown
    "display_clocks_setting": 0x100,  # ...DisplayClockSetting
}
# pynvml's NVML_DEVICE_ARCH_* values, by nvidia-smi's product_architecture.
ARCHITECTURES = {"Pascal": 4, "Volta": 5, "Turing": 6, "Ampere": 7, "Ada Lovelace": 8, "Hopper": 9}


def xml_log(fixture: str) -> NvidiaSmiLog:
    return parse_nvidia_smi_xml((FIXTURES / fixture).read_text(encoding="utf-8"))


def fake_host(log: NvidiaSmiLog) -> dict[str, Any]:
    """What the fake pynvml serves for the host nvidia-smi described in ``log``."""
    major, _, minor = (log.cuda_version or "0.0").partition(".")
    return {
        "driver_version": log.driver_version,
        "cuda_driver_version": int(major) * 1000 + int(minor or 0) * 10,
        # nvmlDeviceGetCurrentClocksEventReasons arrived with CUDA 12.2.
        "event_reasons": (int(major), int(minor or 0)) >= (12, 2),
        "devices": [fake_device(gpu) for gpu in log.gpus],
    }


def fake_device(gpu: Gpu) -> dict[str, Any]:
    def feature(value: str | bool | None) -> int | None:
        if value is None:
            return None
        return 1 if value in ("Enabled", True) else 0

    def pair(current: str | None, pending: str | None) -> list[int | None] | None:
        if current is None:
            return None
        return [feature(current), feature(pending)]

    remapped = gpu.remapped_rows
    return {
        "name": gpu.name,
        "uuid": gpu.uuid,
        "serial": gpu.serial,
        "architecture": ARCHITECTURES.get(gpu.architecture or ""),
        "vbios_version": gpu.vbios_version,
        "inforom_image": gpu.inforom_image,
        # NVML prints the eight-digit PCI domain.
        "pci_bus_id": f"0000{gpu.pci_bus_id}" if gpu.pci_bus_id else None,
        "memory_total": gpu.memory_total_mib * MIB if gpu.memory_total_mib is not None else None,
        "memory_used": gpu.memory_used_mib * MIB if gpu.memory_used_mib is not None else None,
        "temperature": _whole(gpu.temperature_c),
        "temperature_slowdown": _whole(gpu.temperature_slowdown_c),
        "power_usage_mw": _milli(gpu.power_draw_w),
        "power_limit_mw": _milli(gpu.power_limit_w),
        "utilization_gpu": _whole(gpu.utilization_gpu_pct),
        "clocks_event_reasons": sum(REASON_BITS[r] for r in gpu.clock_event_reasons),
        "pcie_gen_current": gpu.pcie_gen_current,
        "pcie_gen_max": gpu.pcie_gen_max,
        "pcie_width_current": gpu.pcie_width_current,
        "pcie_width_max": gpu.pcie_width_max,
        "pcie_replay_count": gpu.pcie_replay_count,
        "persistence_mode": feature(gpu.persistence_mode),
        "mig_mode": pair(gpu.mig_mode_current, gpu.mig_mode_pending),
        "ecc_mode": pair(gpu.ecc_mode_current, gpu.ecc_mode_pending),
        "ecc_volatile": _ecc(gpu.ecc_volatile),
        "ecc_aggregate": _ecc(gpu.ecc_aggregate),
        "retired_pages_sbe": gpu.retired_pages.single_bit,
        "retired_pages_dbe": gpu.retired_pages.double_bit,
        "retired_pages_pending": feature(gpu.retired_pages.pending),
        "remapped_rows": None
        if remapped.correctable is None
        else [
            remapped.correctable,
            remapped.uncorrectable,
            feature(remapped.pending),
            feature(remapped.failure),
        ],
    }


def run_probe(
    tmp_path: Path, host: dict[str, Any], python: str = sys.executable
) -> subprocess.CompletedProcess[str]:
    """Run the real probe as the collector does (``python3 -B -``) against the fake pynvml."""
    data = tmp_path / "fake-pynvml.json"
    data.write_text(json.dumps(host), encoding="utf-8")
    return subprocess.run(
        [python, "-B", "-"],
        input=nvml_probe_source(),
        capture_output=True,
        text=True,
        env=fake_env(data),
        check=False,
        timeout=60,
    )


def fake_env(data: Path) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(FAKE_PYNVML), "FAKE_PYNVML_DATA": str(data)}


def _ecc(counts: EccCounts) -> dict[str, int | None]:
    return {
        "corrected": counts.corrected,
        "uncorrected": counts.uncorrected,
        "sram_corrected": counts.sram_corrected,
        "sram_uncorrected": counts.sram_uncorrected,
        "dram_corrected": counts.dram_corrected,
        "dram_uncorrected": counts.dram_uncorrected,
    }


def _whole(value: float | None) -> int | None:
    return round(value) if value is not None else None


def _milli(value: float | None) -> int | None:
    return round(value * 1000) if value is not None else None
