"""What a sick host prints cannot hide its XIDs or swamp the controller.

The real collector script runs against simulated hosts (``gpuaudit.sim``), with a tool put in
front of the host's own where a case needs one that misbehaves:

- a kernel log holding a NUL byte (grep would take it for binary and print nothing) still gives
  every XID, and the audit says the log had to be cleaned; a kernel log that cannot be filtered
  is a finding, not an empty log;
- a tool printing far more than a section's bound is cut on the host, the snapshot says where,
  and the whole output stays bounded (later sections still arrive, the kernel log first);
- the controller keeps no more than the bounds of a bundle that ignored them, and
  ``gpuaudit inspect`` reads no more than its bound of ``/dev/zero`` or a huge file.

Memory is measured as bytes retained (tracemalloc's peak, or an address-space limit on a child
process), never as time.
"""

from __future__ import annotations

import base64
import json
import resource
import shlex
import subprocess
import sys
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuaudit.assemble.build import build_snapshot
from gpuaudit.inspect import inspect_file
from gpuaudit.model.snapshot import HostSnapshot
from gpuaudit.parsers.bundle import Bundle, parse_bundle, parse_bundle_text
from gpuaudit.parsers.limits import FLOOR_BYTES, INPUT_BYTES, OUTPUT_BYTES, SECTION_BYTES
from gpuaudit.rules import evaluate
from gpuaudit.sim.host import SimHost, materialize
from gpuaudit.sim.state import save_state

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sim"))
from simhelpers import collector_output

MIB = 1024 * 1024
FIXTURES = Path(__file__).parents[1] / "fixtures"
XID_79 = "NVRM: Xid (PCI:0000:90:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off"


def host(tmp_path: Path, profile: str) -> SimHost:
    return materialize(profile, profile, tmp_path / "sim")


def run_collector(sim: SimHost, front: Path | None = None, **env: str) -> str:
    """The collector's output on ``sim``; tools in ``front`` come before the host's own."""
    return collector_output(sim, front, timeout=300, **env)


def tool(directory: Path, name: str, script: str) -> Path:
    directory.mkdir(exist_ok=True)
    path = directory / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)
    return directory


def snapshot_of(bundle: Bundle) -> HostSnapshot:
    return build_snapshot("sick", bundle)


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param("[ 10.000000] mce: \x00\x00\x00 torn record", id="nul-in-another-line"),
        pytest.param(None, id="nul-inside-the-xid-line"),
    ],
)
def test_nul_byte_in_the_kernel_log_keeps_every_xid(tmp_path: Path, damage: str | None) -> None:
    sim = host(tmp_path, "a100-hgx-05")  # GPU 5 fell off the bus: XID 79
    state = sim.state()
    log = state["kernel_log"]
    xid_at = next(i for i, line in enumerate(log) if ": 79," in line)
    if damage is None:
        log[xid_at] = log[xid_at].replace(": 79,", ": 79,\x00", 1)
    else:
        log.insert(xid_at, damage)
    save_state(sim.state_file, state)

    bundle = parse_bundle_text(run_collector(sim))
    section = bundle.sections["kernel_log"]
    assert section.rc == 0
    assert XID_79 in section.stdout
    assert "\x00" not in section.stdout
    assert "nul=" in section.stderr  # the collector's own count, kept as evidence

    snap = snapshot_of(bundle)
    assert 79 in {event.code for event in snap.xid_events}
    assert "NUL byte(s) removed from the kernel log" in snap.parse_errors["bundle"]
    findings = evaluate([snap])
    assert any(f.rule == "GA301" and "79" in f.message for f in findings)
    (gap,) = [f for f in findings if f.rule == "GA002"]
    assert "NUL byte(s) removed" in gap.message


def test_kernel_log_that_cannot_be_filtered_is_a_finding(tmp_path: Path) -> None:
    sim = host(tmp_path, "a100-hgx-05")
    # A grep that reads the whole log and then fails (as on a full disk or a memory limit).
    front = tool(
        tmp_path / "front", "grep", 'cat >/dev/null; echo "grep: write error" >&2; exit 2\n'
    )
    bundle = parse_bundle_text(run_collector(sim, front))
    section = bundle.sections["kernel_log"]
    assert section.rc == 2
    assert "could not be filtered" in section.stderr
    findings = evaluate([snapshot_of(bundle)])
    (unreadable,) = [f for f in findings if f.rule == "GA105"]
    assert "could not be read" in unreadable.message


def test_kernel_log_keeps_its_newest_lines_within_the_byte_bound(tmp_path: Path) -> None:
    sim = host(tmp_path, "t4-01")
    front = tool(
        tmp_path / "front",
        "dmesg",
        "i=0; while [ $i -lt 1000 ]; do\n"
        '  printf "[ %d.0] NVRM: Xid (PCI:0000:3b:00): 13, %0180d\\n" $i 0; i=$((i+1)); done\n',
    )
    bundle = parse_bundle_text(run_collector(sim, front, GPUAUDIT_SECTION_BYTES="50000"))
    section = bundle.sections["kernel_log"]
    lines = section.stdout.splitlines()
    assert 0 < len(section.stdout) <= 50000
    assert lines[-1].startswith("[ 999.0] NVRM: Xid")  # the newest line is kept ...
    assert all(line.startswith("[ ") for line in lines)  # ... and only whole lines
    assert section.truncated
    assert "lines=1000 max=5000" in section.stderr and "max_bytes=50000" in section.stderr
    assert snapshot_of(bundle).kernel_log_truncated


BABBLE_BYTES = 64 * MIB  # sixteen times a section's bound


def test_babbling_nvidia_smi_is_cut_on_the_host_and_bounded_overall(tmp_path: Path) -> None:
    sim = host(tmp_path, "a100-hgx-05")
    # Every nvidia-smi call starts as the real one does, then prints more than a section may
    # send: the XML query 64 MiB, the others just over the bound (together past the whole
    # output's bound).
    real = shlex.quote(str(sim.bin_dir / "nvidia-smi"))
    front = tool(
        tmp_path / "front",
        "nvidia-smi",
        f'{real} "$@" | head -c 200\n'
        f'if [ "$1" = -q ]; then n={BABBLE_BYTES}; else n={SECTION_BYTES}; fi\n'
        "head -c $n /dev/zero | tr '\\000' 'x'\n"
        "exit 0\n",
    )
    output = run_collector(sim, front)
    # The whole output: at most its bound (plus the floors of later streams), base64-encoded.
    assert len(output) < (OUTPUT_BYTES + 40 * FLOOR_BYTES) * 4 // 3 + MIB

    tracemalloc.start()
    try:
        bundle = parse_bundle_text(output)
        snap = snapshot_of(bundle)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Retained while reading: the bounded output (16 MiB) and the working copies of a few of its
    # sections, not the 84 MiB the host printed; the snapshot file is as bounded as the output.
    assert peak < 3 * OUTPUT_BYTES
    assert len(snap.to_json()) < OUTPUT_BYTES + 40 * FLOOR_BYTES + MIB

    xml = bundle.sections["nvidia_smi_xml"]
    assert xml.rc == 0 and xml.truncated
    assert len(xml.stdout.encode()) == SECTION_BYTES
    assert xml.stderr.endswith(
        f"[gpuaudit] stdout truncated at {SECTION_BYTES} bytes of {BABBLE_BYTES + 200}\n"
    )
    kept = sum(len(s.stdout.encode()) + len(s.stderr.encode()) for s in bundle.sections.values())
    assert kept < OUTPUT_BYTES + 40 * FLOOR_BYTES + 64 * 1024  # bound, floors, notes
    # Once the bound is spent, later nvidia-smi sections still send their floor ...
    assert len(bundle.sections["mig_ci"].stdout.encode()) == FLOOR_BYTES
    assert bundle.sections["mig_ci"].truncated
    # ... and the sections after them arrive whole: services, packages, the PCI bus.
    assert "nvidia-persistenced" in bundle.sections["services"].stdout
    assert "10de:" in bundle.sections["lspci"].stdout
    # The kernel log is read before the GPU tools: its XID survives the babble.
    assert XID_79 in bundle.sections["kernel_log"].stdout
    assert 79 in {event.code for event in snap.xid_events}

    cut = snap.parse_errors["bundle"]
    assert f"'nvidia_smi_xml': stdout truncated at {SECTION_BYTES} bytes" in cut
    assert "nvidia_smi_xml" in snap.parse_errors  # the cut XML does not parse: said too
    findings = evaluate([snap])
    assert any(f.rule == "GA002" and "truncated at" in f.message for f in findings)
    assert any(f.rule == "GA301" for f in findings)


def test_oversized_stderr_is_cut_too(tmp_path: Path) -> None:
    sim = host(tmp_path, "t4-01")
    front = tool(
        tmp_path / "front",
        "lspci",
        "head -c 300000 /dev/zero | tr '\\000' 'e' >&2; echo '0000:3b:00.0 0302: 10de:1eb8'\n",
    )
    bundle = parse_bundle_text(run_collector(sim, front, GPUAUDIT_SECTION_BYTES="100000"))
    lspci = bundle.sections["lspci"]
    assert lspci.rc == 0 and "10de:1eb8" in lspci.stdout
    assert lspci.stderr.startswith("e" * 100000 + "\n[gpuaudit] stderr truncated at 100000 bytes")
    assert lspci.truncated


def encoded_lines(total_bytes: int) -> Iterator[str]:
    """A base64 stream as a collector without bounds prints it: distinct 76-character lines."""
    for i in range(total_bytes // 57):
        yield base64.b64encode(f"<x>{i:053d}\n".encode()).decode()


def unbounded_bundle(total_bytes: int) -> Iterator[str]:
    yield "@@gpuaudit-collector 1 f00d@@"
    yield "@@f00d begin nvidia_smi_xml enc=b64@@"
    yield from encoded_lines(total_bytes)
    yield "@@f00d stderr@@"
    yield "@@f00d end nvidia_smi_xml rc=0@@"
    yield "@@f00d begin kernel_log enc=b64@@"
    yield base64.b64encode(f"[ 1.0] {XID_79} the bus.\n".encode()).decode()
    yield "@@f00d stderr@@"
    yield "@@f00d end kernel_log rc=0@@"
    yield "@@f00d done@@"


def test_controller_keeps_only_the_bounds_of_a_bundle_that_ignored_them() -> None:
    printed = 48 * MIB
    tracemalloc.start()
    try:
        bundle = parse_bundle(unbounded_bundle(printed))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * SECTION_BYTES  # the lines kept and a decoded copy, not 48 MiB of them
    assert bundle.complete
    xml = bundle.sections["nvidia_smi_xml"]
    assert len(xml.stdout) == SECTION_BYTES and xml.truncated
    printed_estimate = printed // 57 * 57
    assert xml.stderr == (
        f"[gpuaudit] stdout truncated at {SECTION_BYTES} bytes of {printed_estimate}\n"
    )
    assert "section 'nvidia_smi_xml': stdout truncated" in bundle.problems[0]
    assert XID_79 in bundle.sections["kernel_log"].stdout


def test_inspect_reads_only_the_start_of_a_huge_file(tmp_path: Path) -> None:
    log = (FIXTURES / "kernel-log" / "mleng-xid63-row-remapper-a100.log").read_bytes()
    huge = tmp_path / "huge-dmesg.log"
    with huge.open("wb") as handle:
        handle.write(log)
        handle.truncate(4 * INPUT_BYTES)  # the rest reads as NUL bytes, and takes no disk

    tracemalloc.start()
    try:
        result = inspect_file(huge)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * INPUT_BYTES  # today's read of the whole file alone holds 4x
    assert result["kind"] == "kernel-log"
    assert result["truncated_at"] == INPUT_BYTES
    assert any(event["code"] == 63 for event in result["parsed"])


def test_inspect_dev_zero_ends_with_a_clear_message_in_bounded_memory() -> None:
    limit = 1024 * MIB  # address space for the whole child interpreter

    def bounded() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    done = subprocess.run(
        [sys.executable, "-c", "import sys; from gpuaudit.cli import main; sys.exit(main())",
         "inspect", "/dev/zero"],
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=bounded,
        check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-2000:]
    (result,) = json.loads(done.stdout)
    assert result["kind"] == "unknown"
    assert result["truncated_at"] == INPUT_BYTES
    assert f"only its first {INPUT_BYTES} bytes were read" in result["error"]
