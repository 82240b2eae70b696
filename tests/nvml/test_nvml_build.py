"""How the snapshot builder combines the nvidia-smi XML with the NVML probe's reading."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nvml_fakes import FIXTURES, fake_host, run_probe, xml_log

from gpuaudit.assemble.build import build_snapshot
from gpuaudit.model.snapshot import HostSnapshot, HostStatus, Section
from gpuaudit.parsers.bundle import Bundle

CAPTURE = "datakit-tesla-v100-pcie-32gb-driver460.xml"
TOOLS = "nvidia-smi=1\nrocm-smi=0\namd-smi=0\nsystemctl=1\nlspci=1\npython3=1\n"


def ok(stdout: str) -> Section:
    return Section(rc=0, stdout=stdout)


def bundle(**sections: Section) -> Bundle:
    base = {
        "meta": ok("hostname=gpu-v01\nkernel=5.15.0\n"),
        "tools": ok(TOOLS),
        "nvidia_smi_xml": ok((FIXTURES / CAPTURE).read_text(encoding="utf-8")),
        "nvidia_topo": ok("\tGPU0\tCPU Affinity\nGPU0\t X \t0-19\n"),
        "lspci": ok("0000:21:01.0 0302: 10de:1db6 (rev a1)\n"),
        "rocm_smi": Section(rc=127, stderr="rocm-smi: command not found\n"),
    }
    base.update(sections)
    return Bundle(sections=base, complete=True)


def nvml_section(tmp_path: Path, host: dict[str, Any]) -> Section:
    result = run_probe(tmp_path, host)
    return Section(rc=result.returncode, stdout=result.stdout, stderr=result.stderr)


def build(b: Bundle) -> HostSnapshot:
    return build_snapshot("gpu-v01", b)


def test_xml_stays_primary_and_nvml_fills_what_it_left_out(tmp_path: Path) -> None:
    host = fake_host(xml_log(CAPTURE))
    # This capture's driver does not print the architecture; NVML knows it. A value both have
    # (the temperature, read a moment apart) is taken from the XML.
    host["devices"][0].update(architecture=5, temperature=71)
    snap = build(bundle(nvml=nvml_section(tmp_path, host)))
    without = build(bundle())
    assert snap.status is HostStatus.OK, snap.status_detail
    (gpu,) = snap.gpus
    assert (gpu.architecture, gpu.temperature_c) == ("Volta", 66.0)
    assert gpu.ecc_volatile == without.gpus[0].ecc_volatile
    assert (snap.driver_version, snap.cuda_version, snap.attached_gpus) == ("460.39", "11.2", 1)


def test_nvml_stands_in_when_nvidia_smi_is_missing(tmp_path: Path) -> None:
    xml_only = build(bundle())
    missing = Section(rc=127, stderr="nvidia-smi: command not found\n")
    snap = build(
        bundle(
            tools=ok(TOOLS.replace("nvidia-smi=1", "nvidia-smi=0")),
            nvidia_smi_xml=missing,
            nvidia_topo=missing,
            nvml=nvml_section(tmp_path, fake_host(xml_log(CAPTURE))),
        )
    )
    assert [g.name for g in snap.gpus] == ["Tesla V100-PCIE-32GB"]
    assert snap.gpus[0].retired_pages == xml_only.gpus[0].retired_pages
    assert (snap.driver_version, snap.cuda_version, snap.attached_gpus) == ("460.39", "11.2", 1)
    # The GPUs were read, but nvidia-smi (and with it topology and MIG) was not there.
    assert snap.status is HostStatus.DEGRADED
    assert "nvidia-smi exited with status 127" in snap.status_detail


def test_nvml_stands_in_when_nvidia_smi_hangs(tmp_path: Path) -> None:
    snap = build(
        bundle(
            nvidia_smi_xml=Section(rc=124, stdout="<?xml version=", stderr=""),
            nvml=nvml_section(tmp_path, fake_host(xml_log(CAPTURE))),
        )
    )
    assert len(snap.gpus) == 1 and snap.gpus[0].status == "ok"
    assert snap.status is HostStatus.DEGRADED
    assert "exited with status 124" in snap.status_detail


def test_nvml_init_failure_leaves_the_xml_snapshot_as_it_was(tmp_path: Path) -> None:
    host = fake_host(xml_log(CAPTURE))
    host["init_error"] = 9
    section = nvml_section(tmp_path, host)
    assert json.loads(section.stdout)["init_error"] == "Driver Not Loaded"
    snap, xml_only = build(bundle(nvml=section)), build(bundle())
    assert snap.gpus == xml_only.gpus
    assert (snap.status, snap.status_detail) == (xml_only.status, xml_only.status_detail)
    assert "nvml" not in snap.parse_errors


def test_a_gpu_nvml_sees_but_nvidia_smi_does_not_list_is_not_added(tmp_path: Path) -> None:
    host = fake_host(xml_log(CAPTURE))
    extra = dict(host["devices"][0], pci_bus_id="00000000:22:00.0", uuid="GPU-other")
    host["devices"].append(extra)
    snap = build(bundle(nvml=nvml_section(tmp_path, host)))
    assert [g.pci_bus_id for g in snap.gpus] == ["0000:21:01.0"]


def test_unreadable_probe_output_is_a_parse_error_not_a_crash() -> None:
    snap = build(bundle(nvml=Section(rc=1, stdout="", stderr="SyntaxError: invalid syntax\n")))
    assert snap.parse_errors["nvml"] == "exit status 1: SyntaxError: invalid syntax"
    assert snap.status is HostStatus.OK and len(snap.gpus) == 1
