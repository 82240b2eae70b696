"""`gpuaudit audit --shards N`: N pyinfra processes over disjoint parts of the inventory, into
one run directory, and one register in which every host is accounted for, even the hosts of
a shard that died."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuaudit.audit_run import AuditRun, run_shards
from gpuaudit.deploy import AUDIT_OPERATION
from gpuaudit.report.run import RunEnd, new_run_dir

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
DEMO_HOSTS = 17


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ, GPUAUDIT_SIM_DIR=str(tmp / "sim"))
    for name in ("GPUAUDIT_POLICY", "GPUAUDIT_RUN_ID", "GPUAUDIT_REPORTS_DIR"):
        env.pop(name, None)
    return env


def _register(run: Path) -> dict:
    return json.loads((run / "register.json").read_text())


def test_a_sharded_audit_writes_one_register_with_every_host(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    command = [
        sys.executable, "-m", "gpuaudit.cli", "audit", "inventory/demo.py", "--shards", "3",
        "--reports-dir", str(reports), "--run-id", "sharded",
    ]  # fmt: skip
    done = subprocess.run(
        command, cwd=REPO, env=_env(tmp_path), capture_output=True, text=True, timeout=900
    )
    run = reports / "sharded"
    assert (run / "register.json").exists(), done.stdout[-3000:] + done.stderr[-3000:]
    register = _register(run)
    statuses = {h["name"]: h["status"] for h in register["hosts"]}
    assert len(statuses) == DEMO_HOSTS
    # The faults are what they are unsharded: every host was collected by one shard.
    assert statuses["@sim/v100-02"] == "driver_not_responding"
    assert statuses["@sim/a10g-02"] == "unreachable"
    assert statuses["@sim/a100-hgx-01"] == "ok"
    assert "not_audited" not in statuses.values()
    assert len(list((run / "hosts").glob("*.json"))) == DEMO_HOSTS  # one snapshot each
    found = {(f["rule"], f["host"]) for f in register["findings"]}
    assert ("GA101", "@sim/v100-02") in found and ("GA001", "@sim/a10g-02") in found


def test_the_shards_split_the_hosts_into_disjoint_parts(tmp_path: Path) -> None:
    run = new_run_dir(tmp_path / "reports", "split")
    env = {**_env(tmp_path), "GPUAUDIT_RUN_DIR": str(run.path)}
    audit = AuditRun(run, ["-y", "inventory/demo.py", AUDIT_OPERATION], env, shards=4)
    commands = audit.shard_commands()
    assert len(commands) == 4
    parts = [[a.split("=", 1)[1] for a in c if a.startswith("--limit=")] for c, _ in commands]
    every = [name for part in parts for name in part]
    assert len(every) == len(set(every)) == DEMO_HOSTS
    assert [e["GPUAUDIT_SHARD"] for _, e in commands] == ["1/4", "2/4", "3/4", "4/4"]
    assert all(c[-2:] == ["inventory/demo.py", AUDIT_OPERATION] for c, _ in commands)


def test_the_hosts_of_a_shard_that_died_are_in_the_register(tmp_path: Path) -> None:
    run = new_run_dir(tmp_path / "reports", "dead")
    env = {**_env(tmp_path), "GPUAUDIT_RUN_DIR": str(run.path)}
    argv = ["-y", "inventory/demo.py", AUDIT_OPERATION]
    audit = AuditRun(run, argv, env, shards=3)
    commands = audit.shard_commands()
    dead = [a.split("=", 1)[1] for a in commands[1][0] if a.startswith("--limit=")]
    # The second shard dies before it collects anything (killed: exit status 137).
    commands[1] = ([sys.executable, "-c", "import sys; sys.exit(137)"], commands[1][1])
    status = run_shards(commands)
    assert status == 137
    audit.close(RunEnd(exit_status=status))
    register = _register(run.path)
    hosts = {h["name"]: h for h in register["hosts"]}
    assert len(hosts) == DEMO_HOSTS
    for name in dead:
        if name == "@sim/a10g-02":  # unreachable whatever the shard did
            assert hosts[name]["status"] == "unreachable"
            continue
        assert hosts[name]["status"] == "not_audited", name
        assert "exit status 137" in hosts[name]["status_detail"]
    alive = set(hosts) - set(dead)
    assert all(hosts[name]["status"] != "not_audited" for name in alive)


def test_every_host_name_reaches_one_shard_as_it_is(tmp_path: Path) -> None:
    # Names an inventory file may give: a line break or a tab inside, two that differ only in
    # case, a wildcard character, one that is also a group's name.
    names = ["gpu-a\nb", "gpu-x\ty", "GPU-c", "gpu-c", "gpu-[d]", "gpus"]
    inventory = tmp_path / "odd.py"
    inventory.write_text(f"gpus = {names!r}\n")
    run = new_run_dir(tmp_path / "reports", "odd")
    env = {**_env(tmp_path), "GPUAUDIT_RUN_DIR": str(run.path)}
    audit = AuditRun(run, ["-y", str(inventory), AUDIT_OPERATION], env, shards=4)
    commands = audit.shard_commands()
    parts = [[a.split("=", 1)[1] for a in c if a.startswith("--limit=")] for c, _ in commands]
    assert sorted(name for part in parts for name in part) == sorted(names)
    assert all(len(part) == len(set(part)) for part in parts)
