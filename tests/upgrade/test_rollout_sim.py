"""``gpuaudit upgrade`` end to end on simulated fleets: real pyinfra, the real deploy file, the
simulator's apt, modprobe and reboots; the journal, rollout.json and the lease as written.

inventory/rehearsal.py is five T4 hosts on 515.105.01 (a canary, two waves of two) whose
repositories offer 535.161.08; its canary logs an XID after the upgrade. The clean fleet is the
same hosts without that fault.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from gpuaudit.sim.host import host_paths
from gpuaudit.upgrade.lease import acquire

REPO = Path(__file__).resolve().parents[2]
TARGET = "535.161.08"
OLD = "515.105.01"
HOSTS = ("rh-canary-01", "rh-wave1-01", "rh-wave1-02", "rh-wave2-01", "rh-wave2-02")
WAVES = HOSTS[1:]

pytestmark = pytest.mark.slow

CLEAN_INVENTORY = f"""
import runpy
rehearsal = runpy.run_path({str(REPO / "inventory/rehearsal.py")!r})
_host = rehearsal["_host"]
fleet = [_host(name, name.split("-")[1] if "wave" in name else "canary")
         for name in {list(HOSTS)!r}]
"""


def policy(tmp: Path, **upgrade: object) -> Path:
    settings = {"stages": ["canary", "wave1", "wave2"], "reboot": "auto", **upgrade}
    path = tmp / "policy.yaml"
    path.write_text("version: 1\nupgrade: " + json.dumps(settings) + "\n")
    return path


def upgrade(tmp: Path, inventory: Path, policy_file: Path, *extra: str) -> subprocess.Popen:
    command = [
        sys.executable,
        "-m",
        "gpuaudit.cli",
        "upgrade",
        str(inventory),
        "--to",
        TARGET,
        "--policy",
        str(policy_file),
        "--reports-dir",
        str(tmp / "reports"),
        *extra,
    ]
    env = {**os.environ, "GPUAUDIT_SIM_DIR": str(tmp / "sim")}
    env.pop("GPUAUDIT_POLICY", None)
    return subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def finish(process: subprocess.Popen) -> tuple[int, str]:
    output, _ = process.communicate(timeout=900)
    return process.returncode, output


def events(rollout: Path) -> list[dict]:
    return [json.loads(line) for line in (rollout / "journal.jsonl").read_text().splitlines()]


def hosts(rollout: Path) -> dict[str, dict]:
    document = json.loads((rollout / "rollout.json").read_text())
    return {h["name"].removeprefix("@sim/"): h for h in document["hosts"]}


def installed(tmp: Path, name: str) -> str:
    state = json.loads(host_paths(name, tmp / "sim").state_file.read_text())
    return state["nvidia"]["driver"]["loaded"]


def test_a_canary_that_fails_its_gate_is_rolled_back_and_nothing_else_is_touched(
    tmp_path: Path,
) -> None:
    rollout = tmp_path / "reports/upgrades/rehearsal"
    code, output = finish(
        upgrade(
            tmp_path,
            REPO / "inventory/rehearsal.py",
            REPO / "policies/rehearsal.yaml",
            "--rollout-id",
            "rehearsal",
        )
    )
    assert code == 1, output
    document = json.loads((rollout / "rollout.json").read_text())
    assert document["schema_version"] == 1 and document["status"] == "halted"
    assert document["target_version"] == TARGET
    by_name = hosts(rollout)
    canary = by_name["rh-canary-01"]
    assert (canary["outcome"], canary["before"], canary["after"]) == ("rolled_back", OLD, OLD)
    assert [gate["outcome"] for gate in canary["gates"]] == ["fail", "pass"]
    assert any(
        check["name"] == "xid" and check["outcome"] == "fail"
        for check in canary["gates"][0]["checks"]
    )
    for name in WAVES:
        assert by_name[name]["outcome"] == "untouched", name
        assert installed(tmp_path, name) == OLD
        # Not one step ran on a wave host: only the plan's note about it.
        steps = {e["step"] for e in events(rollout) if e["host"] == f"@sim/{name}"}
        assert steps <= {"rollout"}, (name, steps)
    assert installed(tmp_path, "rh-canary-01") == OLD
    pin = host_paths("rh-canary-01", tmp_path / "sim").upper(
        "/etc/apt/preferences.d/gpuaudit-nvidia-driver"
    )
    assert f"Pin: version {OLD}*" in pin.read_text()
    assert (rollout / "index.html").read_text().count("rolled back") >= 1


def test_a_clean_rollout_goes_canary_first_and_keeps_to_max_unavailable(tmp_path: Path) -> None:
    inventory = tmp_path / "clean.py"
    inventory.write_text(CLEAN_INVENTORY)
    code, output = finish(
        upgrade(
            tmp_path,
            inventory,
            policy(
                tmp_path,
                max_parallel=2,
                max_unavailable=2,
                gate={"command": "test -s /etc/os-release"},
            ),
            "--rollout-id",
            "clean",
        )
    )
    assert code == 0, output
    rollout = tmp_path / "reports/upgrades/clean"
    by_name = hosts(rollout)
    assert {name: h["outcome"] for name, h in by_name.items()} == dict.fromkeys(HOSTS, "upgraded")
    assert all(installed(tmp_path, name) == TARGET for name in HOSTS)
    for name, host in by_name.items():
        # The site's gate command ran on the host, and DCGM's diagnostic (level 1, the
        # simulator's real capture of a passing run) was read test by test.
        checks = {c["name"]: c for c in host["gates"][-1]["checks"]}
        assert checks["site_command"]["outcome"] == "pass", (name, checks)
        diag = checks["dcgm_diag"]
        assert (diag["outcome"], diag["detail"]) == (
            "pass",
            "dcgmi diag -r 1: 9 test(s), none failed",
        ), name
    journal = events(rollout)
    # Canary first: every wave host starts after the canary's last step.
    canary_done = max(e["seq"] for e in journal if e["host"] == "@sim/rh-canary-01")
    first_wave = min(
        e["seq"]
        for e in journal
        if e["host"] in {f"@sim/{n}" for n in WAVES} and e["step"] != "rollout"
    )
    assert canary_done < first_wave
    # From drain started to undrain done a host is unavailable: never more than 2 at once.
    spans = {}
    for e in journal:
        if e["step"] == "drain" and e["status"] == "started":
            spans[e["host"]] = [datetime.fromisoformat(e["at"].replace("Z", "+00:00")), None]
        if e["step"] == "undrain" and e["status"] in ("done", "skipped"):
            spans[e["host"]][1] = datetime.fromisoformat(e["at"].replace("Z", "+00:00"))
    assert len(spans) == 5 and all(end for _, end in spans.values())
    for _host, (start, _end) in spans.items():
        overlapping = sum(1 for s, e in spans.values() if s <= start < e)
        assert overlapping <= 2
    assert max(sum(1 for s, e in spans.values() if s <= t < e) for t, _ in spans.values()) == 2


def test_a_killed_controller_is_resumed_without_repeating_a_host(tmp_path: Path) -> None:
    inventory = tmp_path / "clean.py"
    inventory.write_text(CLEAN_INVENTORY)
    policy_file = policy(tmp_path)
    rollout = tmp_path / "reports/upgrades/resumed"
    first = upgrade(tmp_path, inventory, policy_file, "--rollout-id", "resumed")
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:  # kill it as wave 1's first host installs
        assert first.poll() is None, finish(first)[1][-3000:]  # it must not end by itself
        if (rollout / "journal.jsonl").exists() and any(
            e["host"] == "@sim/rh-wave1-01" and e["step"] == "install" and e["status"] == "started"
            for e in events(rollout)
        ):
            break
        time.sleep(0.2)
    first.send_signal(signal.SIGKILL)
    first.wait()
    before = events(rollout)
    assert hosts(rollout)["rh-canary-01"]["outcome"] == "upgraded"

    # A second controller is refused while the lease is held (here by this test).
    lease = acquire(rollout, "another controller", 600)
    refused, output = finish(upgrade(tmp_path, inventory, policy_file, "--resume", str(rollout)))
    assert refused == 3 and "another controller" in output
    lease.release()

    code, output = finish(upgrade(tmp_path, inventory, policy_file, "--resume", str(rollout)))
    assert code == 0, output
    assert {n: h["outcome"] for n, h in hosts(rollout).items()} == dict.fromkeys(HOSTS, "upgraded")
    after = events(rollout)[len(before) :]
    # The canary was finished: the resumed controller ran nothing on it.
    assert not [e for e in after if e["host"] == "@sim/rh-canary-01"]
    # Steps wave 1's first host had finished are not run again.
    finished = {
        e["step"]
        for e in before
        if e["host"] == "@sim/rh-wave1-01" and e["status"] in ("done", "skipped")
    }
    again = {
        e["step"] for e in after if e["host"] == "@sim/rh-wave1-01" and e["status"] == "started"
    }
    assert finished and not finished & again
    assert "install" in again  # the step it was killed in is repeated


WAVE_FAILURE_INVENTORY = f"""
import runpy
rehearsal = runpy.run_path({str(REPO / "inventory/rehearsal.py")!r})
_host = rehearsal["_host"]
fleet = [
    _host("rw-canary-01", "canary"),
    _host("rw-wave1-01", "wave1"),
    _host("rw-wave2-01", "wave2", sim_upgrade_faults={{"install_fails": {{}}}}),
    _host("rw-wave3-01", "wave3"),
]
"""


def test_a_failure_in_wave_2_halts_before_wave_3_and_keeps_wave_1(tmp_path: Path) -> None:
    inventory = tmp_path / "waves.py"
    inventory.write_text(WAVE_FAILURE_INVENTORY)
    stages = ["canary", "wave1", "wave2", "wave3"]
    code, output = finish(
        upgrade(tmp_path, inventory, policy(tmp_path, stages=stages), "--rollout-id", "waves")
    )
    assert code == 1, output
    rollout = tmp_path / "reports/upgrades/waves"
    outcomes = {name: h["outcome"] for name, h in hosts(rollout).items()}
    assert outcomes == {
        "rw-canary-01": "upgraded",
        "rw-wave1-01": "upgraded",
        "rw-wave2-01": "rolled_back",
        "rw-wave3-01": "untouched",
    }
    assert installed(tmp_path, "rw-wave1-01") == TARGET  # wave 1 is kept
    assert installed(tmp_path, "rw-wave2-01") == OLD
    assert installed(tmp_path, "rw-wave3-01") == OLD
    document = json.loads((rollout / "rollout.json").read_text())
    assert document["status"] == "halted" and "stage wave2" in document["reason"]
    failed = hosts(rollout)["rw-wave2-01"]
    assert any(e["step"] == "install" and e["status"] == "failed" for e in failed["events"])
