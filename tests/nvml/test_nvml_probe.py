"""The NVML probe against a fake pynvml built from real nvidia-smi captures (no GPU here).

The real probe script runs in its own python3 process exactly as the collector runs it, reads the
fake devices through the pynvml API, and its output goes through the real parser; the GPUs it
gives must equal the XML parser's GPUs field by field.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from nvml_fakes import (
    FAKE_PYNVML,
    FIXTURES,
    fake_env,
    fake_host,
    run_probe,
    xml_log,
)

from gpuaudit.collect import collector_script, nvml_probe_source
from gpuaudit.model.snapshot import Gpu, RemappedRows
from gpuaudit.parsers.errors import ParseError
from gpuaudit.parsers.nvml import clock_event_reasons, fill_gaps, parse_nvml_probe

# The fields both paths fill: they must be equal for every GPU of every capture.
COMPARED = (
    "index", "vendor", "status", "name", "uuid", "serial", "pci_bus_id", "architecture",
    "vbios_version", "inforom_image", "driver_version", "cuda_version", "memory_total_mib",
    "memory_used_mib", "ecc_mode_current", "ecc_mode_pending", "ecc_volatile", "ecc_aggregate",
    "retired_pages", "remapped_rows", "temperature_c", "temperature_slowdown_c", "power_draw_w",
    "power_limit_w", "utilization_gpu_pct", "clock_event_reasons", "pcie_gen_current",
    "pcie_gen_max", "pcie_width_current", "pcie_width_max", "pcie_replay_count",
    "mig_mode_current", "mig_mode_pending", "persistence_mode",
)  # fmt: skip
# Only the XML fills these (the probe does not read MIG devices, the reset status or the
# memory repair states), or the two paths word them differently (NVML cannot tell N/A from
# "not supported").
XML_ONLY = (
    "status_detail", "mig_devices", "reset_required", "drain_and_reset_recommended",
    "recovery_action", "channel_repair_pending", "tpc_repair_pending", "unrepairable_memory",
    "sram_threshold_exceeded", "unavailable",
)  # fmt: skip
OLD_PYTHON = Path("/root/.pyenv/versions/3.6.15/bin/python3")
CAPTURES = sorted(p.name for p in FIXTURES.glob("*.xml"))


def probe_doc(tmp_path: Path, host: dict[str, Any], python: str | None = None) -> dict[str, Any]:
    result = run_probe(tmp_path, host, python) if python else run_probe(tmp_path, host)
    assert result.returncode == 0, result.stderr
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def probe_gpus(tmp_path: Path, host: dict[str, Any]) -> tuple[Gpu, ...]:
    return parse_nvml_probe(run_probe(tmp_path, host).stdout).gpus


def assert_same_fields(nvml: Gpu, xml: Gpu) -> None:
    differing = {
        name: (getattr(nvml, name), getattr(xml, name))
        for name in COMPARED
        if getattr(nvml, name) != getattr(xml, name)
    }
    assert differing == {}


def test_every_gpu_field_is_compared_or_listed_as_xml_only() -> None:
    fields = {f.name for f in dataclasses.fields(Gpu)}
    assert fields == set(COMPARED) | set(XML_ONLY)


@pytest.mark.parametrize("capture", CAPTURES)
def test_nvml_gives_the_same_gpus_as_the_xml(tmp_path: Path, capture: str) -> None:
    log = xml_log(capture)
    probe = parse_nvml_probe(run_probe(tmp_path, fake_host(log)).stdout)
    assert probe.library == "pynvml" and probe.init_error is None
    assert (probe.driver_version, probe.cuda_version) == (log.driver_version, log.cuda_version)
    assert probe.device_count == len(log.gpus) == len(probe.gpus)
    for nvml, xml in zip(probe.gpus, log.gpus, strict=True):
        assert_same_fields(nvml, xml)


def test_probe_output_names_units_and_keeps_the_raw_values(tmp_path: Path) -> None:
    doc = probe_doc(
        tmp_path, fake_host(xml_log("telegraf-a100-sxm4-80gb-mig-enabled-driver535.xml"))
    )
    assert (doc["probe"], doc["library"], doc["cuda_driver_version"]) == (1, "pynvml", 12020)
    gpu = doc["gpus"][0]
    assert gpu["memory_total_bytes"] == 81920 * 1024 * 1024
    assert (gpu["power_draw_mw"], gpu["power_limit_mw"]) == (67030, 500000)
    assert (gpu["mig_mode_current"], gpu["ecc_mode_current"]) == (1, 1)
    assert gpu["pci_bus_id"] == "00000000:01:00.0"  # bytes from the binding, decoded
    # MIG mode: utilisation is not available; retired pages do not exist on Ampere.
    assert gpu["errors"]["utilization"] == "not_supported"
    assert gpu["errors"]["retired_pages_sbe"] == "not_supported"


def test_older_binding_falls_back_to_throttle_reasons(tmp_path: Path) -> None:
    host = fake_host(xml_log("datakit-gtx1050-driver515.xml"))
    assert host["event_reasons"] is False  # CUDA 11.7: the fake has no ...EventReasons
    doc = probe_doc(tmp_path, host)
    assert doc["gpus"][0]["clocks_event_reasons"] == 0x1
    assert "clocks_event_reasons" not in doc["gpus"][0]["errors"]


def test_one_gpu_lost_does_not_hide_the_others(tmp_path: Path) -> None:
    log = xml_log("telegraf-2x-rtx2070-driver590-v13.xml")
    host = fake_host(log)
    host["devices"][1]["lost"] = True
    gpus = probe_gpus(tmp_path, host)
    assert [g.status for g in gpus] == ["ok", "error"]
    assert gpus[1].status_detail == "NVML could not open the GPU: gpu_lost: GPU is lost"
    assert gpus[1].name is None and gpus[1].index == 1
    assert_same_fields(gpus[0], log.gpus[0])


def test_gpu_lost_mid_read_stops_reading_that_gpu(tmp_path: Path) -> None:
    host = fake_host(xml_log("telegraf-2x-rtx2070-driver590-v13.xml"))
    host["devices"][0]["raise"] = {"nvmlDeviceGetPowerUsage": 15}
    doc = probe_doc(tmp_path, host)
    first, second = doc["gpus"]
    assert first["errors"] == {"serial": "not_supported", "power_draw_mw": "gpu_lost: GPU is lost"}
    assert "pcie_gen_current" not in first  # no call after the lost one
    gpus = parse_nvml_probe(json.dumps(doc)).gpus
    assert gpus[0].status == "error"
    assert gpus[0].status_detail == "NVML reported 'GPU is lost' for power_draw_mw"
    assert gpus[0].name == "NVIDIA GeForce RTX 2070"  # read before the GPU went
    assert gpus[1].status == "ok" and "errors" in second


def test_unknown_error_in_identity_marks_the_gpu_in_a_counter_does_not(tmp_path: Path) -> None:
    host = fake_host(xml_log("telegraf-2x-rtx2070-driver590-v13.xml"))
    host["devices"][0]["raise"] = {"nvmlDeviceGetUUID": 999}
    host["devices"][1]["raise"] = {"nvmlDeviceGetPcieReplayCounter": 999}
    gpus = probe_gpus(tmp_path, host)
    assert (gpus[0].status, gpus[0].uuid) == ("error", None)
    assert gpus[0].status_detail == "NVML reported 'Unknown Error' for uuid"
    assert (gpus[1].status, gpus[1].pcie_replay_count) == ("ok", None)
    assert gpus[1].unavailable["pcie_replay_count"] == "unreadable"
    assert gpus[1].unavailable["serial"] == "not_supported"


def test_init_failure_is_a_document_not_a_crash(tmp_path: Path) -> None:
    host = fake_host(xml_log("telegraf-tesla-t4-driver515.xml"))
    host["init_error"] = 9  # NVML_ERROR_DRIVER_NOT_LOADED
    doc = probe_doc(tmp_path, host)
    assert doc == {
        "probe": 1, "library": "pynvml", "library_version": None, "init_error": "Driver Not Loaded"
    }  # fmt: skip
    probe = parse_nvml_probe(json.dumps(doc))
    assert (probe.init_error, probe.gpus) == ("Driver Not Loaded", ())


def test_no_library_exits_127(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        ["python3", "-B", "-"], input=nvml_probe_source(), capture_output=True, text=True, env=env
    )
    if result.returncode == 0:
        pytest.skip("this machine's python3 has pynvml or amdsmi installed")
    assert (result.returncode, result.stdout) == (127, "")
    assert result.stderr == "pynvml not installed (nor amdsmi)\n"


def test_binding_chatter_on_stdout_does_not_corrupt_the_document(tmp_path: Path) -> None:
    """amdsmi prints to stdout when its shared library is missing; only JSON may reach it."""
    noisy = tmp_path / "noisy"
    noisy.mkdir()
    (noisy / "amdsmi.py").write_text("print('Unable to find libamd_smi.so')\nraise OSError('x')\n")
    data = tmp_path / "host.json"
    host = fake_host(xml_log("telegraf-tesla-t4-driver515.xml"))
    host["init_error"] = 9
    data.write_text(json.dumps(host))
    env = fake_env(data) | {"PYTHONPATH": f"{FAKE_PYNVML}{os.pathsep}{noisy}"}
    result = subprocess.run(
        ["python3", "-B", "-"], input=nvml_probe_source(), capture_output=True, text=True, env=env
    )
    doc = json.loads(result.stdout)
    assert doc["also_tried"] == [{"library": "amdsmi", "init_error": "import failed: x"}]
    assert "Unable to find libamd_smi.so" in result.stderr


def test_probe_parses_as_python36() -> None:
    ast.parse(nvml_probe_source(), feature_version=(3, 6))
    assert "from __future__" not in nvml_probe_source()
    assert not re.search(r"^\s*(import|from) gpuaudit", nvml_probe_source(), re.MULTILINE)


@pytest.mark.skipif(not OLD_PYTHON.exists(), reason="no python3.6 on this machine")
def test_probe_runs_on_python36(tmp_path: Path) -> None:
    log = xml_log("telegraf-a10g-driver515.xml")
    doc = probe_doc(tmp_path, fake_host(log), str(OLD_PYTHON))
    (gpu,) = parse_nvml_probe(json.dumps(doc)).gpus
    assert_same_fields(gpu, log.gpus[0])


def test_collector_section_runs_the_probe(tmp_path: Path) -> None:
    from gpuaudit.facts.gpu import GpuAuditSections

    data = tmp_path / "host.json"
    data.write_text(json.dumps(fake_host(xml_log("telegraf-a10g-driver515.xml"))))
    script = collector_script("nvml01")
    env = fake_env(data)
    result = subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env)
    section = GpuAuditSections().process(result.stdout.splitlines())["sections"]["nvml"]
    assert section["rc"] == 0, section["stderr"]
    assert parse_nvml_probe(section["stdout"]).gpus[0].name == "NVIDIA A10G"

    disabled = subprocess.run(
        ["sh", "-c", script], capture_output=True, text=True, env=env | {"GPUAUDIT_NVML": "0"}
    )
    section = GpuAuditSections().process(disabled.stdout.splitlines())["sections"]["nvml"]
    assert (section["rc"], section["stdout"]) == (127, "")
    assert "GPUAUDIT_NVML=0" in section["stderr"]


# --- the parser on its own -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty output"),
        ("Traceback (most recent call last):", "not JSON"),
        ('{"probe": 1, "gpus"', "not JSON"),
        ("[1, 2]", "top level is not an object"),
        ('{"probe": 2}', "unknown probe format 2"),
        ('{"probe": 1, "gpus": {}}', "'gpus' is not a list"),
    ],
)
def test_unreadable_documents_raise_parse_error(text: str, reason: str) -> None:
    with pytest.raises(ParseError, match=re.escape(reason)):
        parse_nvml_probe(text)


def test_values_of_an_unexpected_shape_read_as_missing() -> None:
    odd = {"index": "x", "ecc_volatile": {"corrected": []}, "temperature_c": "N/A", "errors": []}
    doc = {"probe": 1, "gpus": [{"index": 0, "name": "A"}, odd, "not an object"]}
    gpus = parse_nvml_probe(json.dumps(doc)).gpus
    assert [(g.index, g.status) for g in gpus] == [(0, "ok"), (1, "ok")]  # index by position
    assert (gpus[1].ecc_volatile.corrected, gpus[1].temperature_c) == (None, None)


def test_clock_event_reasons_by_xml_names() -> None:
    assert clock_event_reasons(0x1 | 0x8 | 0x40) == (
        "gpu_idle",
        "hw_slowdown",
        "hw_thermal_slowdown",
    )
    assert clock_event_reasons(0x100 | 0x200) == ("display_clocks_setting",)  # 0x200: no XML name
    assert clock_event_reasons(None) == clock_event_reasons(0) == ()


def test_amdsmi_document_gives_amd_gpus() -> None:
    doc = {
        "probe": 1, "library": "amdsmi", "driver_version": "6.7.0",
        "gpus": [{
            "index": 0, "vendor": "amd", "name": "AMD Instinct MI100", "architecture": "gfx908",
            "pci_bus_id": "0000:c1:00.0", "driver_version": "6.7.0", "memory_total_mb": 32752,
            "memory_used_mb": 10, "temperature_c": 34, "power_draw_w": 39,
            "power_limit_uw": 290000000, "utilization_gpu_pct": "N/A",
            "pcie_speed_current_mts": 16000, "pcie_width_current": 16,
            "errors": {"serial": "not_supported", "ecc_volatile": "unreadable: Error code: 12"},
        }],
    }  # fmt: skip
    (gpu,) = parse_nvml_probe(json.dumps(doc)).gpus
    assert (gpu.vendor, gpu.status, gpu.name, gpu.architecture) == (
        "amd", "ok", "AMD Instinct MI100", "gfx908"
    )  # fmt: skip
    assert (gpu.pci_bus_id, gpu.memory_total_mib, gpu.cuda_version) == ("0000:C1:00.0", 32752, None)
    assert (gpu.power_draw_w, gpu.power_limit_w, gpu.utilization_gpu_pct) == (39.0, 290.0, None)
    assert (gpu.pcie_gen_current, gpu.pcie_width_current) == (4, 16)
    assert gpu.unavailable == {"serial": "not_supported", "ecc_volatile": "unreadable"}


def test_fill_gaps_fills_only_what_the_primary_lacks() -> None:
    primary = (Gpu(index=0, pci_bus_id="0000:01:00.0", temperature_c=40.0),)
    secondary = (
        Gpu(index=7, pci_bus_id="0000:01:00.0", temperature_c=99.0, architecture="Volta"),
        Gpu(index=1, pci_bus_id="0000:02:00.0", name="not in the primary"),
    )
    (gpu,) = fill_gaps(primary, secondary)
    assert (gpu.index, gpu.temperature_c, gpu.architecture) == (0, 40.0, "Volta")
    by_uuid = fill_gaps((Gpu(index=0, uuid="GPU-1"),), (Gpu(index=0, uuid="GPU-1", serial="s"),))
    assert by_uuid[0].serial == "s"


def test_a_filled_field_is_no_longer_unavailable() -> None:
    xml = Gpu(
        index=0,
        uuid="GPU-1",
        unavailable={"remapped_rows": "not_applicable", "utilization_gpu_pct": "not_applicable"},
    )
    nvml = Gpu(index=0, uuid="GPU-1", remapped_rows=RemappedRows(pending=False))
    (gpu,) = fill_gaps((xml,), (nvml,))
    assert gpu.remapped_rows.pending is False
    assert gpu.unavailable == {"utilization_gpu_pct": "not_applicable"}
