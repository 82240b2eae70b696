"""Sections sent gzipped: read back byte for byte as the plain ones, far fewer bytes on the
wire, and bounded however far a hostile stream would inflate."""

from __future__ import annotations

import base64
import gzip
import re
import sys
from pathlib import Path

import pytest

from gpuaudit.parsers.bundle import parse_bundle_text
from gpuaudit.parsers.limits import OutputLimits
from gpuaudit.sim.host import materialize

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sim"))
from simhelpers import collector_output


def _bundle(sections: dict[str, bytes], enc: str = "gzb64") -> str:
    lines = ["@@gpuaudit-collector 1 n1@@"]
    for name, data in sections.items():
        encoded = base64.b64encode(gzip.compress(data) if enc == "gzb64" else data).decode()
        lines += [
            f"@@n1 begin {name} enc={enc}@@",
            encoded,
            "@@n1 stderr@@",
            f"@@n1 end {name} rc=0@@",
        ]
    lines.append("@@n1 done@@")
    return "\n".join(lines) + "\n"


def _timeless(text: str) -> str:
    return re.sub(r"<timestamp>[^<]*</timestamp>", "", text)


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    host = materialize("a100-hgx-01", "a100-hgx-01", tmp_path_factory.mktemp("sim"))
    return collector_output(host), collector_output(host, GPUAUDIT_COMPRESS="0")


def test_a_host_with_gzip_sends_its_sections_gzipped_and_they_read_back_the_same(
    both: tuple[str, str],
) -> None:
    zipped, plain = both
    assert " enc=gzb64@@" in zipped and " enc=gzb64@@" not in plain
    a, b = parse_bundle_text(zipped), parse_bundle_text(plain)
    assert a.complete and b.complete and not a.problems
    assert a.sections.keys() == b.sections.keys()
    for name in ("nvidia_smi_xml", "nvidia_topo", "lspci", "packages", "kernel_log"):
        # The two runs differ only in the time nvidia-smi prints.
        assert _timeless(a.sections[name].stdout) == _timeless(b.sections[name].stdout), name
        assert a.sections[name].rc == b.sections[name].rc
    # An 8-GPU host's output on the wire (the bytes measured, not a time).
    assert len(zipped) * 4 < len(plain)


def test_a_stream_that_would_inflate_past_the_bound_is_cut_at_the_bound() -> None:
    limits = OutputLimits(section_bytes=64 * 1024, output_bytes=256 * 1024, floor_bytes=1024)
    bomb = b"\0" * (50 * 1024 * 1024)  # 50 MiB of zeros: about 50 KiB gzipped
    bundle = parse_bundle_text(_bundle({"nvidia_smi_xml": bomb}), limits)
    section = bundle.sections["nvidia_smi_xml"]
    assert len(section.stdout) == 64 * 1024
    assert section.truncated
    assert any("truncated at 65536 bytes" in p for p in bundle.problems)


def test_a_stream_that_is_no_gzip_keeps_the_bytes_sent() -> None:
    text = _bundle({"lspci": b"0000:01:00.0 0302: 10de:20b2 (rev a1)\n"}, enc="b64").replace(
        "enc=b64", "enc=gzb64"
    )
    section = parse_bundle_text(text).sections["lspci"]
    assert section.stdout == "0000:01:00.0 0302: 10de:20b2 (rev a1)\n"


def test_a_gzip_stream_cut_on_the_way_gives_what_arrived() -> None:
    data = ("NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n" * 2000).encode()
    zipped = gzip.compress(data)
    cut = base64.b64encode(zipped[: len(zipped) // 2]).decode()
    text = (
        "@@gpuaudit-collector 1 n1@@\n@@n1 begin kernel_log enc=gzb64@@\n"
        f"{cut}\n@@n1 stderr@@\n@@n1 end kernel_log rc=0@@\n@@n1 done@@\n"
    )
    section = parse_bundle_text(text).sections["kernel_log"]
    assert section.stdout and data.decode().startswith(section.stdout)
