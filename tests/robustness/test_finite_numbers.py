"""Numbers a host prints that are no reading (``1e999``, a 400-digit count, ``NaN``,
``Infinity``) never reach register.json or a snapshot as anything but ``null``.

Each case is a real capture with one number changed, read by the parser gpuaudit uses for it:
the field becomes ``None`` with ``unreadable`` as the reason, the host's raw text keeps what it
printed, and the files the audit writes parse with a JSON parser that refuses ``NaN`` and
``Infinity`` (as every reader outside Python does). The writers themselves refuse non-finite
numbers, so no later parser can bring them back.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from gpuaudit.assemble.build import build_snapshot
from gpuaudit.model.jsonable import NonFiniteNumberError, to_jsonable
from gpuaudit.model.snapshot import Gpu, HostSnapshot, HostStatus, Section
from gpuaudit.parsers.amd_smi import parse_amd_smi_json
from gpuaudit.parsers.bundle import Bundle
from gpuaudit.parsers.nvidia_text import parse_nvidia_smi_text
from gpuaudit.parsers.nvml import parse_nvml_probe
from gpuaudit.parsers.query_csv import parse_query_gpu_csv
from gpuaudit.parsers.rocm_smi import parse_rocm_smi_json
from gpuaudit.pipeline import write_report
from gpuaudit.report.run import RunDir
from gpuaudit.rules.base import Evidence, Finding, Owner, Severity

FIXTURES = Path(__file__).parents[1] / "fixtures"
T4_XML = FIXTURES / "nvidia-smi-xml" / "telegraf-tesla-t4-driver515.xml"
DIGITS_400 = "9" * 400
DIGITS_300 = "7" * 300  # fits a float, but no counter or reading is that large


def strict_loads(text: str) -> Any:
    """json.loads as a reader outside Python sees the file: NaN and Infinity are errors."""

    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


def mutated(path: Path, old: str, new: str) -> str:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) >= 1, old
    return text.replace(old, new, 1)


# (element as the capture prints it, the same with one number changed, the Gpu field)
POWER = "<power_draw>26.78 W</power_draw>"
TEMPERATURE = "<gpu_temp>40 C</gpu_temp>"
MEMORY = "<total>15360 MiB</total>"
XML_CASES = [
    pytest.param(POWER, POWER.replace("26.78", "1e999"), "power_draw_w", id="power-1e999"),
    pytest.param(POWER, POWER.replace("26.78", DIGITS_400), "power_draw_w", id="power-400-digits"),
    pytest.param(
        TEMPERATURE, TEMPERATURE.replace("40", DIGITS_400 + ".5"), "temperature_c", id="temp-huge"
    ),
    pytest.param(MEMORY, MEMORY.replace("15360", DIGITS_300), "memory_total_mib", id="mem-huge"),
    pytest.param(MEMORY, MEMORY.replace("15360", "1e999"), "memory_total_mib", id="mem-1e999"),
]


@pytest.mark.parametrize(("old", "new", "field"), XML_CASES)
def test_nvidia_smi_xml_number_out_of_range_is_null_in_every_file(
    tmp_path: Path, old: str, new: str, field: str
) -> None:
    xml = mutated(T4_XML, old, new)
    bundle = Bundle(
        {"tools": Section(0, "nvidia-smi=1\n"), "nvidia_smi_xml": Section(0, xml)}, True
    )
    snapshot = build_snapshot("t4-overflow", bundle)
    (gpu,) = snapshot.gpus
    assert getattr(gpu, field) is None
    assert gpu.unavailable[field] == "unreadable"
    assert gpu.name == "Tesla T4"  # the rest of the GPU is read as before

    run = RunDir(tmp_path / "run")
    written = run.write_snapshot(snapshot)
    write_report(run, [snapshot])
    register = strict_loads(run.register_path.read_text(encoding="utf-8"))
    saved = strict_loads(written.read_text(encoding="utf-8"))
    (host,) = register["hosts"]
    assert host["name"] == "t4-overflow"
    assert saved["gpus"][0][field] is None
    assert saved["gpus"][0]["unavailable"][field] == "unreadable"
    # What the host printed stays in the snapshot as evidence.
    assert new in saved["sections"]["nvidia_smi_xml"]["stdout"]
    assert HostSnapshot.from_json(written.read_text(encoding="utf-8")).gpus[0].name == "Tesla T4"


def test_nvidia_smi_text_and_query_csv() -> None:
    q_text = mutated(
        FIXTURES / "nvidia-smi-q" / "thamada-l4-driver550.90.07.nvidia-smi-q.txt",
        "Power Draw                        : 16.47 W",
        f"Power Draw                        : {DIGITS_400} W",
    )
    (gpu,) = parse_nvidia_smi_text(q_text).gpus
    assert gpu.power_draw_w is None and gpu.unavailable["power_draw_w"] == "unreadable"
    strict_loads(json.dumps(to_jsonable(gpu)))

    csv = mutated(
        FIXTURES / "query-csv" / "netdata-tesla-p100-query-gpu.csv",
        ", 37, 28.16, ",
        f", 1e999, {DIGITS_400}, ",
    )
    (row,) = parse_query_gpu_csv(csv).gpus
    assert row.temperature_c is None and row.power_draw_w is None
    assert row.unavailable["temperature_c"] == row.unavailable["power_draw_w"] == "unreadable"
    strict_loads(json.dumps(to_jsonable(row)))


def test_rocm_smi_and_amd_smi_json() -> None:
    rocm = mutated(
        FIXTURES / "rocm-smi" / "telegraf-mi100-rocm5.7.1.json",
        '"Temperature (Sensor edge) (C)": "31.0"',
        f'"Temperature (Sensor edge) (C)": "{DIGITS_400}"',
    )
    assert parse_rocm_smi_json(rocm)[0].temperature_c is None
    strict_loads(json.dumps(to_jsonable(parse_rocm_smi_json(rocm))))

    metric = FIXTURES / "amd-smi" / "luckylinux-rx6600-amd-smi-metric.json"
    for number in ("1e999", DIGITS_400, "NaN", "-Infinity"):
        unit = '\n                "unit": "C"'
        text = mutated(metric, f'"value": 36,{unit}', f'"value": {number},{unit}')
        (gpu,) = parse_amd_smi_json(text)
        assert gpu.temperature_c is None, number
        assert gpu.unavailable["temperature_c"] == "unreadable", number
        strict_loads(json.dumps(to_jsonable(gpu)))


def nvml_document(**readings: str) -> str:
    """The NVML probe's document (collect/nvml_probe.py) for one GPU, its readings as JSON
    literals, as a host's python3 prints them."""
    fields = "".join(f', "{name}": {literal}' for name, literal in readings.items())
    return (
        '{"probe": 1, "library": "pynvml", "driver_version": "550.90.07", '
        '"cuda_driver_version": 12040, "device_count": 1, "gpus": [{"index": 0, '
        '"vendor": "nvidia", "name": "NVIDIA L4", "uuid": "GPU-1", '
        f'"pci_bus_id": "00000000:01:00.0"{fields}}}]}}\n'
    )


def test_nvml_probe_json_with_constants_and_huge_literals() -> None:
    probe = parse_nvml_probe(
        nvml_document(
            temperature_c="Infinity",
            utilization_gpu_pct="NaN",
            power_draw_mw="1e999",
            power_limit_mw=DIGITS_400,
            memory_total_bytes=DIGITS_300,
            pcie_replay_count="-Infinity",
        )
    )
    (gpu,) = probe.gpus
    assert gpu.status == "ok" and gpu.name == "NVIDIA L4"
    assert gpu.temperature_c is None
    assert gpu.utilization_gpu_pct is None
    assert gpu.power_draw_w is None
    assert gpu.power_limit_w is None
    assert gpu.memory_total_mib is None
    assert gpu.pcie_replay_count is None
    strict_loads(json.dumps(to_jsonable(probe)))
    # A reading in range is read as before.
    (fine,) = parse_nvml_probe(nvml_document(power_draw_mw="70500")).gpus
    assert fine.power_draw_w == 70.5


def test_writers_refuse_non_finite_numbers(tmp_path: Path) -> None:
    gpu = Gpu(index=0, power_draw_w=math.inf)
    snapshot = HostSnapshot("bad", HostStatus.OK, "2025-01-01T00:00:00Z", gpus=(Gpu(1), gpu))
    with pytest.raises(NonFiniteNumberError, match=r"gpus\[1\]\.power_draw_w"):
        snapshot.to_json()
    with pytest.raises(ValueError, match="finite"):
        to_jsonable({"evidence": [1.0, math.nan]})

    good = HostSnapshot("good", HostStatus.OK, "2025-01-01T00:00:00Z")
    finding = Finding(
        rule="GA999",
        title="t",
        severity=Severity.LOW,
        category="audit",
        owner=Owner.INFRA,
        host="good",
        message="m",
        evidence=Evidence(fact="x", actual=math.nan, expected=1),
        remediation="r",
    )
    run = RunDir(tmp_path / "run")
    with pytest.raises(ValueError):
        write_report(run, [good], [finding])
    assert not run.register_path.exists()
