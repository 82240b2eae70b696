"""Two audits of the same simulated hosts: a fault fixed between them shows as resolved, a
waiver hides a risk until it expires, and --fail-on counts only what is still open."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from gpuaudit.sim.host import materialize

REPO = Path(__file__).resolve().parents[2]

POLICY = """\
version: 1
waivers:
  - rule: GA401
    hosts: "t4-02"
    reason: "persistence handled by the job prologue"
    expires: {expires}
    owner: ml-infra
"""


def _audit(tmp: Path, run_id: str, *extra: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, GPUAUDIT_SIM_DIR=str(tmp / "sim"))
    return subprocess.run(
        [sys.executable, "-m", "gpuaudit.cli", "audit", str(tmp / "inventory.py"),
         "--reports-dir", str(tmp / "reports"), "--run-id", run_id, *extra],
        cwd=tmp, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def _register(tmp: Path, run_id: str) -> dict:
    return json.loads((tmp / "reports" / run_id / "register.json").read_text())


def test_fixed_fault_resolves_and_waivers_expire(tmp_path: Path) -> None:
    (tmp_path / "inventory.py").write_text("hosts = ['@sim/t4-01', '@sim/t4-02']\n")
    first = _audit(tmp_path, "run1")
    assert first.returncode == 0, first.stderr[-2000:]
    before = {r["id"] for r in _register(tmp_path, "run1")["risks"]}
    assert {"GA601:net.core.rmem_max", "GA601:net.core.wmem_max"} <= before

    # Fix one of t4-02's faults on the host, as an operator would.
    host = materialize("t4-02", "t4-02", tmp_path / "sim")
    subprocess.run(
        [str(host.bin_dir / "sysctl"), "-w", "net.core.rmem_max=134217728"],
        env=dict(os.environ, **host.env()), check=True, capture_output=True,
    )  # fmt: skip

    (tmp_path / "live.yaml").write_text(POLICY.format(expires="2099-12-31"))
    second = _audit(tmp_path, "run2", "--previous", str(tmp_path / "reports/run1"),
                    "--policy", str(tmp_path / "live.yaml"), "--fail-on", "medium")  # fmt: skip
    register = _register(tmp_path, "run2")
    trends = register["trends"]
    assert trends["previous_run_id"] == "run1"
    assert [r["id"] for r in trends["resolved"]] == ["GA601:net.core.rmem_max"]
    assert "GA601:net.core.wmem_max" in trends["persisting"]
    risks = {r["id"]: r for r in register["risks"]}
    assert risks["GA401"]["status"] == "waived"
    assert risks["GA401"]["waiver"]["reason"] == "persistence handled by the job prologue"
    # The open wmem_max risk (medium) still fails the gate; the waived GA401 does not count.
    assert second.returncode == 1
    page = (tmp_path / "reports/run2/index.html").read_text()
    assert "persistence handled by the job prologue" in page

    (tmp_path / "expired.yaml").write_text(POLICY.format(expires="2020-01-31"))
    third = _audit(tmp_path, "run3", "--policy", str(tmp_path / "expired.yaml"))
    assert third.returncode == 0, third.stderr[-2000:]
    risks = {r["id"]: r for r in _register(tmp_path, "run3")["risks"]}
    assert risks["GA401"]["status"] == "open"
    assert risks["GA401"]["waiver_expired"] is True


LIMITED_FLEET = ("@sim/t4-01", "@sim/t4-02", "@sim/p100-01")


def test_a_limit_run_between_full_runs_changes_nothing(tmp_path: Path) -> None:
    """A --limit audit between two full audits of unchanged hosts: no risk is resolved or new,
    the hosts left out are "not in scope", and each register records how it was made."""
    inventory = tmp_path / "inventory.py"
    inventory.write_text(f"hosts = {list(LIMITED_FLEET)!r}\n")
    (tmp_path / "site.yaml").write_text(POLICY.format(expires="2099-12-31"))
    policy = ("--policy", str(tmp_path / "site.yaml"))
    runs = ("20261101T000000Z", "20261102T000000Z", "20261103T000000Z")
    for run_id, extra in zip(runs, ((), ("--limit", "@sim/t4-01"), ()), strict=True):
        result = _audit(tmp_path, run_id, *extra, *policy)
        assert result.returncode == 0, result.stderr[-2000:]
    full = {r["id"] for r in _register(tmp_path, runs[0])["risks"]}
    assert {"GA602", "GA106", "GA601:net.core.wmem_max"} <= full

    limited = _register(tmp_path, runs[1])
    trends = limited["trends"]
    assert trends["previous_run_id"] == runs[0]
    assert trends["new"] == [] and trends["resolved"] == [] and trends["unverified"] == []
    assert trends["hosts_removed"] == ["@sim/p100-01", "@sim/t4-02"]
    assert {"GA602", "GA106"} <= {r["id"] for r in trends["risks_not_in_scope"]}
    provenance = limited["provenance"]
    assert provenance["scope"] == {
        "source": "inventory",
        "inventory": str(inventory),
        "limit": ["@sim/t4-01"],
        "exclude": [],
        "bundles": [],
    }
    assert provenance["policy"]["path"] == str(tmp_path / "site.yaml")
    assert len(provenance["policy"]["sha256"]) == 64
    assert provenance["pyinfra_version"] and provenance["operator"].count("@") == 1
    command = provenance["command"]  # the pyinfra command line that collected the hosts
    assert command[0] == "pyinfra" and str(inventory) in command
    assert any(arg.startswith("--limit") for arg in command)
    page = (tmp_path / "reports" / runs[1] / "index.html").read_text()
    assert "About this run" in page and "--limit @sim/t4-01" in page

    # The next full run is compared with the full run before the --limit run.
    trends = _register(tmp_path, runs[2])["trends"]
    assert trends["previous_run_id"] == runs[0]
    assert trends["new"] == [] and trends["resolved"] == []
    assert trends["hosts_added"] == [] and trends["hosts_removed"] == []
    assert set(trends["persisting"]) == full
