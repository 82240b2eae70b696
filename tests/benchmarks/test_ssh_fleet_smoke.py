"""Benchmark (a) in a tiny configuration: three hosts over a real sshd, and what sshd's log
says of the audit: one connection and exactly one remote command per audited host, fewer
than 50 KiB on the wire for an 8-GPU host (the collector travels packed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

from ssh_fleet import audit_commands, build_fleet, measure, write_inventory  # noqa: E402
from sshd import running_sshd  # noqa: E402

pytestmark = pytest.mark.slow


def test_audit_is_one_command_per_host_over_ssh(tmp_path: Path) -> None:
    fleet = build_fleet(tmp_path, 3, ["a100-hgx-02", "v100-02", "mi100-01"])
    with running_sshd(tmp_path / "sshd", fleet.logins) as sshd:
        inventory = write_inventory(tmp_path / "inventory.py", fleet, sshd, tmp_path / "known")
        command, env = audit_commands(inventory, tmp_path / "runs")["audit"]
        run = measure("audit", command, sshd, env)
    assert run.returncode == 0
    assert run.log.accepted == 3
    assert run.log.exec_requests == 3
    assert len(run.log.transferred) == 3
    # The 8-GPU host's connection is the largest; every one stays under 50 KiB both ways.
    assert max(sent + received for sent, received in run.log.transferred) < 50 * 1024
    register = (tmp_path / "runs" / "audit" / "register.json").read_text()
    for name, _ in fleet.hosts:
        assert f'"{name}"' in register


def test_packed_collector_prints_what_the_plain_one_does(tmp_path: Path) -> None:
    """The packed command, run by sh on a recorded host, gives the same sections."""
    from gpuaudit.facts.gpu import GpuAuditSections

    fleet = build_fleet(tmp_path, 1, ["a100-hgx-02"])
    env = fleet.recorded["a100-hgx-02"].env()
    fact = GpuAuditSections()
    results = []
    for packed in (False, True):
        done = subprocess.run(
            ["sh", "-c", fact.command(nonce="pk01", packed=packed)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        results.append(fact.process(done.stdout.splitlines()))
    plain, packed_result = results
    assert packed_result["complete"] is True
    assert set(packed_result["sections"]) == set(plain["sections"])
    for name, section in plain["sections"].items():
        if name != "meta":  # meta holds the time of the run
            assert packed_result["sections"][name] == section, name


def test_host_without_gzip_is_told_to_get_the_plain_script(tmp_path: Path) -> None:
    """A host lacking gzip answers the packed command with the marker, never a half bundle."""
    import shutil

    from gpuaudit.collect import collector_script, packed_command, unpacked_command
    from gpuaudit.facts.gpu import NOT_UNPACKED, GpuAuditSections

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("cat", "base64"):  # base64 but no gzip
        found = shutil.which(tool)
        assert found is not None
        (bin_dir / tool).symlink_to(found)
    command = GpuAuditSections().command(nonce="pk02", packed=True)
    assert unpacked_command(command) == collector_script("pk02", comments=False)
    assert unpacked_command(packed_command("echo hi\n")) == "echo hi\n"
    done = subprocess.run(
        ["/bin/sh", "-c", command], env={"PATH": str(bin_dir)}, capture_output=True, text=True
    )
    fact = GpuAuditSections().process(done.stdout.splitlines())
    assert fact == {"complete": False, "problems": [NOT_UNPACKED], "sections": {}}
