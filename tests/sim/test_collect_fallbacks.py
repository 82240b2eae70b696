"""What the collector asks for besides the XML report: the text report when nvidia-smi gave no
whole XML report, and the MIG placements on a host with MIG enabled, still in one run."""

from __future__ import annotations

import stat
from collections.abc import Callable
from pathlib import Path

from simhelpers import collect, collector_output

from gpuaudit.assemble.build import build_snapshot
from gpuaudit.model.snapshot import HostStatus
from gpuaudit.parsers.bundle import parse_bundle_text
from gpuaudit.sim.host import SimHost

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TEXT_REPORT = (
    FIXTURES / "nvidia-smi-q" / "thamada-4x-a100-sxm4-80gb-driver555.42.02.nvidia-smi-q.txt"
)
XML_REPORT = FIXTURES / "nvidia-smi-xml" / "telegraf-a100-sxm4-80gb-mig-enabled-driver535.xml"


def test_a_mig_host_gives_its_placements(make_host: Callable[..., SimHost]) -> None:
    bundle = collect(make_host("a100-hgx-04"))
    section = bundle.sections["mig_placements"]
    assert section.rc == 0
    snap = build_snapshot("a100-hgx-04", bundle)
    # The seven GPUs with MIG on (GPU 7's is only pending) list the six profiles the simulated
    # A100 80GB has (NVIDIA's MIG user guide): 1g.10gb (ID 19) anywhere in 0-6, 7g.80gb (ID 0)
    # at 0 only.
    by_gpu = {(p.gpu, p.profile_id): p for p in snap.mig_placements}
    assert len(by_gpu) == len(snap.mig_placements) == 7 * 6
    assert {gpu for gpu, _ in by_gpu} == set(range(7))
    assert by_gpu[(0, 19)].starts == (0, 1, 2, 3, 4, 5, 6) and by_gpu[(0, 19)].size == 1
    assert by_gpu[(0, 0)].starts == (0,) and by_gpu[(0, 0)].size == 8
    assert "nvidia_smi_q" not in bundle.sections  # the XML was whole: no text report


def test_a_host_without_mig_is_not_asked_for_placements(make_host: Callable[..., SimHost]) -> None:
    bundle = collect(make_host("a100-hgx-01"))
    assert "mig_placements" not in bundle.sections
    assert build_snapshot("a100-hgx-01", bundle).mig_placements == ()


def _refusing_nvidia_smi(front: Path, real: str) -> None:
    """An nvidia-smi that crashes half way through its XML report (the first half of a real
    report, as a killed nvidia-smi leaves it) and prints its text report (a real capture) in
    full; anything else goes to the host's own."""
    half = XML_REPORT.read_text(encoding="utf-8")
    half = half[: len(half) // 2]
    (front / "xml-half.xml").write_text(half, encoding="utf-8")
    script = front / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$*" = "-q -x" ]; then cat {front / "xml-half.xml"}; exit 0; fi\n'
        f'if [ "$*" = "-q" ]; then cat {TEXT_REPORT}; exit 0; fi\n'
        f'exec {real} "$@"\n',
        encoding="utf-8",
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def test_a_refused_xml_report_is_read_from_the_text_report(
    make_host: Callable[..., SimHost], tmp_path: Path
) -> None:
    host = make_host("a100-hgx-01")
    real = str(Path(host.env()["PATH"].split(":")[0]) / "nvidia-smi")
    _refusing_nvidia_smi(tmp_path, real)
    bundle = parse_bundle_text(collector_output(host, front=tmp_path))
    assert bundle.sections["nvidia_smi_q"].rc == 0
    snap = build_snapshot("a100-hgx-01", bundle)
    # The text capture's four A100s, not the XML's one, and the host says how they were read.
    assert [g.name for g in snap.gpus] == ["NVIDIA A100-SXM4-80GB"] * 4
    assert snap.driver_version == "555.42.02"
    assert snap.status is HostStatus.DEGRADED
    assert "read from its text report (nvidia-smi -q)" in snap.status_detail
    assert "nvidia_smi_xml" in snap.parse_errors


def test_a_driver_that_does_not_answer_still_reads_as_not_responding(
    make_host: Callable[..., SimHost],
) -> None:
    bundle = collect(make_host("v100-02"))
    assert bundle.sections["nvidia_smi_q"].rc == 9  # asked, and refused the same way
    snap = build_snapshot("v100-02", bundle)
    assert snap.status is HostStatus.DRIVER_NOT_RESPONDING
    assert snap.gpus == ()
