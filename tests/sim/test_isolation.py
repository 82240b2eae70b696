"""A simulated host is a rehearsal ground: what pyinfra runs against it changes that host's own
root and state, never this machine's files, packages or kernel settings.

Real pyinfra runs real operations (its own files.line, files.put, server.sysctl(persist=True),
apt.packages, server.shell) against @sim hosts; the test then compares this machine's files
with what they were before and reads the host's root and state.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from simhelpers import digest, machine_fingerprint

import gpuaudit
from gpuaudit.sim.host import host_paths
from gpuaudit.sim.isolation import ensure_base, runtime_paths
from gpuaudit.sim.profiles import get_profile

REPO = Path(__file__).resolve().parents[2]
# Every path of this machine an operation below names, and what it looks like now.
WATCHED = (
    "/etc/environment",
    "/etc/sysctl.d",
    "/etc/gpuaudit-put.conf",
    "/etc/passwd",
    "/usr/bin/gpuaudit-canary",
    "/usr/local/bin",
    "/root/gpuaudit-canary",
    "/tmp/gpuaudit-canary",
)
DEPLOY = """
from pyinfra.operations import apt, files, server
files.line(name="line", path="/etc/environment", line="GPUAUDIT_REHEARSAL=1")
files.put(name="put", src={src!r}, dest="/etc/gpuaudit-put.conf")
server.sysctl(name="sysctl", key="net.core.rmem_max", value=134217728, persist=True,
              persist_file="/etc/sysctl.d/90-gpu.conf")
apt.packages(name="apt", packages=["nvidia-utils-515=515.105.02-0ubuntu1"])
server.shell(name="hostile", commands=[
    "rm -rf /etc/passwd /usr/local/bin",
    "echo canary > /usr/bin/gpuaudit-canary && echo canary > /root/gpuaudit-canary",
    "echo canary > /tmp/gpuaudit-canary",
    "sed -i 's/^/#/' /etc/environment.bak 2>/dev/null || true",
    "! /usr/sbin/sysctl -w vm.swappiness=77 2>/dev/null",
    "! mount -t tmpfs none /mnt 2>/dev/null",
    "! test -e /proc/1/cmdline",
    "! ls /dev/vda /dev/sda 2>/dev/null",
])
"""


def fingerprint() -> dict[str, str]:
    return machine_fingerprint(WATCHED, ("net/core/rmem_max", "vm/swappiness"), dpkg=True)


def pyinfra(sim_dir: Path, inventory: Path, deploy: Path, *extra: str, **env: str):
    return subprocess.run(
        [sys.executable, "-m", "pyinfra", "-y", *extra, str(inventory), str(deploy)],
        cwd=REPO,
        env={**os.environ, "GPUAUDIT_SIM_DIR": str(sim_dir), **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture
def rehearsal(tmp_path: Path) -> tuple[Path, Path, Path]:
    profile = {**get_profile("t4-02"), "repository": ["515.105.02"], "packages_held": False}
    inventory = tmp_path / "inventory.py"
    inventory.write_text(f"hosts = [('@sim/t4-02', {{'sim_profile': {profile!r}}})]\n")
    source = tmp_path / "put.conf"
    source.write_text("from the controller\n")
    deploy = tmp_path / "deploy.py"
    deploy.write_text(DEPLOY.format(src=str(source)))
    return tmp_path / "sim", inventory, deploy


@pytest.mark.parametrize("mode", ["", "userns"], ids=["as-root", "user-namespace"])
def test_operations_change_the_hosts_root_and_never_this_machine(
    rehearsal: tuple[Path, Path, Path], mode: str
) -> None:
    # "userns" enters each host through a user namespace, as a user other than root does.
    sim_dir, inventory, deploy = rehearsal
    before = fingerprint()
    run = pyinfra(sim_dir, inventory, deploy, GPUAUDIT_SIM_ISOLATION=mode)
    assert run.returncode == 0, run.stdout + run.stderr
    assert fingerprint() == before

    host = host_paths("t4-02", sim_dir)
    assert host.upper("/etc/environment").read_text().endswith("GPUAUDIT_REHEARSAL=1\n")
    assert host.upper("/etc/gpuaudit-put.conf").read_text() == "from the controller\n"
    assert host.upper("/etc/sysctl.d/90-gpu.conf").read_text() == (
        "net.core.rmem_max = 134217728\n"
    )
    assert host.upper("/usr/bin/gpuaudit-canary").read_text() == "canary\n"
    assert host.upper("/root/gpuaudit-canary").read_text() == "canary\n"
    removed = host.upper("/etc/passwd").lstat()  # the host's copy is gone: a whiteout
    assert stat.S_ISCHR(removed.st_mode) and removed.st_rdev == 0
    state = json.loads(host.state_file.read_text())
    assert state["sysctls"]["net.core.rmem_max"] == "134217728"
    versions = {p["name"]: p["version"] for p in state["packages"]}
    assert versions["nvidia-utils-515"] == "515.105.02-0ubuntu1"
    assert (host.root_dir / "proc/sys/net/core/rmem_max").read_text() == "134217728\n"


def test_dry_run_leaves_the_host_byte_identical(rehearsal: tuple[Path, Path, Path]) -> None:
    sim_dir, inventory, deploy = rehearsal
    # Connect once so the host exists, then compare everything under it around a --dry run.
    first = pyinfra(sim_dir, inventory, deploy, "--dry")
    assert first.returncode == 0, first.stdout + first.stderr
    host_dir = host_paths("t4-02", sim_dir).host_dir
    before = {str(p): digest(p) for p in sorted(host_dir.rglob("*")) if "work" not in p.parts}
    again = pyinfra(sim_dir, inventory, deploy, "--dry")
    assert again.returncode == 0, again.stdout + again.stderr
    after = {str(p): digest(p) for p in sorted(host_dir.rglob("*")) if "work" not in p.parts}
    assert after == before


def test_without_isolation_only_the_collector_runs(
    rehearsal: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    sim_dir, inventory, deploy = rehearsal
    before = fingerprint()
    run = pyinfra(sim_dir, inventory, deploy, GPUAUDIT_SIM_ISOLATION="off")
    assert run.returncode != 0
    assert "is read-only here" in run.stdout + run.stderr
    assert "GPUAUDIT_SIM_ISOLATION=off" in run.stdout + run.stderr
    assert fingerprint() == before
    host = host_paths("t4-02", sim_dir)
    assert "GPUAUDIT_REHEARSAL" not in host.upper("/etc/environment").read_text()

    audit = subprocess.run(
        [sys.executable, "-m", "gpuaudit.cli", "audit", str(inventory), "--reports-dir",
         str(tmp_path / "reports"), "--run-id", "ro"],
        cwd=REPO,
        env={**os.environ, "GPUAUDIT_SIM_DIR": str(sim_dir), "GPUAUDIT_SIM_ISOLATION": "off"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )  # fmt: skip
    assert audit.returncode == 0, audit.stdout + audit.stderr
    register = json.loads((tmp_path / "reports/ro/register.json").read_text())
    codes = {risk["rule"] for risk in register["risks"]}
    assert "GA401" in codes  # t4-02: persistence off, read through the collector


def test_a_process_with_other_runtime_paths_keeps_the_skeleton_in_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sshd starts a host's commands in the login's home directory, which is on their
    ``sys.path``: a gate's runtime paths differ from those of the process that built the
    skeleton. The gate adds a mount point; the skeleton other hosts' commands run on stays."""
    sims = tmp_path / "sim"
    base = ensure_base(sims)
    in_use = base / "etc" / "passwd"
    before = (base.stat().st_ino, in_use.stat().st_ino)
    home = tmp_path / "login-home"
    home.mkdir()
    monkeypatch.setattr(sys, "path", [str(home), *sys.path])
    assert str(home.resolve()) in runtime_paths()
    assert ensure_base(sims) == base
    assert (base.stat().st_ino, in_use.stat().st_ino) == before
    assert (base / str(home.resolve()).lstrip("/")).is_dir()
    # A skeleton of another version is built anew.
    (base / ".gpuaudit-base").write_text("0\n")
    assert ensure_base(sims) == base
    assert (base / ".gpuaudit-base").read_text().startswith("1\n")
    assert in_use.is_file() and in_use.stat().st_ino != before[1]


def test_the_directory_a_command_starts_in_is_not_shown_to_the_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `python -m` puts the directory it starts in on sys.path; under sshd that is the login's
    # home (/root for root), which is no runtime path of the simulated tools.
    home = tmp_path / "login-home"
    home.mkdir()
    monkeypatch.chdir(home)
    monkeypatch.setattr(sys, "path", [str(home), *sys.path])
    paths = runtime_paths()
    assert str(home.resolve()) not in paths
    own = str(Path(gpuaudit.__file__).resolve().parents[1])  # gpuaudit itself is still there
    assert any(own == p or own.startswith(p + "/") for p in paths), paths
