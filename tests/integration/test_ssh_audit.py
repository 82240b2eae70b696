"""The audit through pyinfra's @ssh connector against a real sshd on 127.0.0.1.

Each authorised key logs in to a different simulated GPU host (its environment puts the
simulated nvidia-smi, dmesg, systemctl … first on PATH); everything else is real: sshd, the
SSH session, pyinfra, the shell running the collector, the deploy and the register.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from gpuaudit.sim.host import materialize

REPO = Path(__file__).resolve().parents[2]


def _ssh_host(name: str, port: int, user: str, key: Path, known_hosts: Path, **data: object):
    return (
        name,
        {
            "ssh_hostname": "127.0.0.1",
            "ssh_port": port,
            "ssh_user": user,
            "ssh_key": str(key),
            "ssh_known_hosts_file": str(known_hosts),
            "ssh_allow_agent": False,
            "ssh_look_for_keys": False,
            **data,
        },
    )


def audit(
    tmp_path: Path, hosts: list, run_id: str
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``gpuaudit audit`` over an inventory of ``hosts``: the run, and its run directory."""
    inventory = tmp_path / "inventory.py"
    inventory.write_text(f"gpu_hosts = {hosts!r}\n")
    reports = tmp_path / "reports"
    result = subprocess.run(
        [sys.executable, "-m", "gpuaudit.cli", "audit", str(inventory),
         "--reports-dir", str(reports), "--run-id", run_id],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    return result, reports / run_id


def test_audit_over_real_ssh(tmp_path, start_sshd, ssh_keygen, unused_port) -> None:
    sims = tmp_path / "sim"
    remap = materialize("a100-hgx-02", "a100-hgx-02", sims)  # row remap pending on GPU 3
    nodriver = materialize("v100-02", "v100-02", sims)  # driver not loaded
    keys = tmp_path / "keys"
    keys.mkdir()
    key_remap = ssh_keygen(keys / "remap")
    key_nodriver = ssh_keygen(keys / "nodriver")
    key_unknown = ssh_keygen(keys / "unknown")  # never authorised: authentication refused
    sshd = start_sshd({key_remap: remap.env(), key_nodriver: nodriver.env()})

    known = tmp_path / "known_hosts"
    hosts = [
        _ssh_host("gpu-remap", sshd.port, sshd.user, key_remap, known,
                  expected_gpu_count=8, gpu_model="NVIDIA A100-SXM4-80GB"),
        _ssh_host("gpu-nodriver", sshd.port, sshd.user, key_nodriver, known,
                  expected_gpu_count=2),
        _ssh_host("gpu-refused", sshd.port, sshd.user, key_unknown, known),
        _ssh_host("gpu-down", unused_port(), sshd.user, key_remap, known),
    ]  # fmt: skip
    result, run = audit(tmp_path, hosts, "ssh-run")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    register = json.loads((run / "register.json").read_text())

    hosts_by_name = {h["name"]: h for h in register["hosts"]}
    assert set(hosts_by_name) == {"gpu-remap", "gpu-nodriver", "gpu-refused", "gpu-down"}
    assert hosts_by_name["gpu-remap"]["status"] == "ok"
    assert len(hosts_by_name["gpu-remap"]["gpus"]) == 8
    assert hosts_by_name["gpu-nodriver"]["status"] == "driver_not_responding"
    # sshd answered and refused the key: not the same as a host that is down.
    assert hosts_by_name["gpu-refused"]["status"] == "auth_failed"
    assert "authentication failed" in hosts_by_name["gpu-refused"]["status_detail"].lower()
    assert hosts_by_name["gpu-down"]["status"] == "unreachable"

    found = {(f["rule"], f["host"], f["gpu"]) for f in register["findings"]}
    assert ("GA304", "gpu-remap", 3) in found  # row remap pending
    assert ("GA101", "gpu-nodriver", None) in found  # driver not responding
    assert ("GA001", "gpu-refused", None) in found
    assert ("GA001", "gpu-down", None) in found

    # The collection really went over SSH: sshd accepted both keys and refused the third.
    log = sshd.log.read_text()
    assert log.count("Accepted publickey") == 2
    # One remote command per audited host: the collector.
    assert log.count("request exec") == 2, log
    # Snapshots were written per host, and the page lists every host.
    assert sorted(p.name for p in (run / "hosts").iterdir()) == sorted(
        f"{name}.json" for name in hosts_by_name
    )
    page = (run / "index.html").read_text()
    for name in hosts_by_name:
        assert name in page


def test_audit_where_no_ssh_host_answers(tmp_path, ssh_keygen, unused_port) -> None:
    """Every host down: pyinfra stops with "No hosts remaining!" before the deploy's end, and
    `gpuaudit audit` still writes the register, each host with the connection's error."""
    key = ssh_keygen(tmp_path / "key")
    known = tmp_path / "known_hosts"
    ports = {"gpu-a": unused_port(), "gpu-b": unused_port()}
    hosts = [_ssh_host(name, port, "nobody", key, known) for name, port in ports.items()]
    result, run = audit(tmp_path, hosts, "down")
    output = result.stdout[-3000:] + result.stderr[-3000:]
    assert result.returncode == 1, output
    for name in ("register.json", "index.html", "register.csv", "junit.xml", "gpuaudit.prom"):
        assert (run / name).is_file(), (name, output)
    register = json.loads((run / "register.json").read_text())
    status = {h["name"]: (h["status"], h["status_detail"]) for h in register["hosts"]}
    assert set(status) == {"gpu-a", "gpu-b"}
    for name, (state, detail) in status.items():
        assert state == "unreachable", (name, detail)
        # The connection's own error, from the controller's second attempt.
        assert "Could not connect" in detail and f"port {ports[name]}" in detail, detail
    assert {(f["rule"], f["host"]) for f in register["findings"]} == {
        ("GA001", "gpu-a"),
        ("GA001", "gpu-b"),
    }
    assert "no host could be audited" in result.stderr
