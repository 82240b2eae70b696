"""The forced command that puts a simulated host behind sshd, and the port that stands for its
network link (gpuaudit.sim.sshgate); tests/integration/test_rollout_ssh.py runs them with a
real sshd."""

from __future__ import annotations

import os
import socket
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from gpuaudit.sim.host import SimHost, materialize
from gpuaudit.sim.isolation import ensure_base, isolation_problem
from gpuaudit.sim.sshgate import PowerSwitch, gate_command
from gpuaudit.sim.state import edit_state


@pytest.fixture
def host(tmp_path: Path) -> SimHost:
    sims = tmp_path / "sim"
    built = materialize("gate-01", "t4-01", sims)
    ensure_base(sims)
    return built


def gate(host: SimHost, command: str | None) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    if command is not None:
        env["SSH_ORIGINAL_COMMAND"] = command
    sim_dir = host.host_dir.parent
    return subprocess.run(
        [sys.executable, "-m", "gpuaudit.sim.sshgate", str(sim_dir), host.name],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_gate_runs_the_command_inside_the_hosts_root(host: SimHost) -> None:
    problem = isolation_problem(host.host_dir.parent)
    assert problem is None, problem  # CI runs as root, where hosts are always isolated
    motd = Path("/etc/motd")
    before = motd.read_bytes() if motd.exists() else None
    done = gate(host, "echo changed > /etc/motd && nvidia-smi -L")
    assert done.returncode == 0, done.stderr
    assert "Tesla T4" in done.stdout  # the host's simulated nvidia-smi
    assert host.upper("/etc/motd").read_text() == "changed\n"
    assert (motd.read_bytes() if motd.exists() else None) == before


def test_the_gate_refuses_a_login_shell_and_a_host_that_is_down(host: SimHost) -> None:
    login = gate(host, None)
    assert login.returncode == 1 and "no interactive login" in login.stderr
    with edit_state(host.state_file) as state:
        state["down_until"] = time.time() + 60
    down = gate(host, "touch /etc/ran")
    assert down.returncode == 255
    assert "gate-01 closed: the simulated host is rebooting" in down.stderr
    assert not host.upper("/etc/ran").exists()
    assert gate_command(host.host_dir.parent, "gate-01").endswith(
        f"-m gpuaudit.sim.sshgate {host.host_dir.parent} gate-01"
    )


def test_the_gate_refuses_a_host_name_that_leaves_the_simulator(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gpuaudit.sim.sshgate", str(tmp_path), "../etc"],
        env={"SSH_ORIGINAL_COMMAND": "true", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2 and "bad simulated host name" in done.stderr


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(1024):
            self.request.sendall(data)


@contextmanager
def echo_server() -> Iterator[int]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def wait_for(predicate, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def connects(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except ConnectionRefusedError:
        return False
    return True


def test_the_power_switch_refuses_connections_while_the_host_reboots(host: SimHost) -> None:
    with echo_server() as sshd_port, PowerSwitch(host.state_file, sshd_port, grace=0.2) as power:
        session = socket.create_connection(("127.0.0.1", power.port), timeout=5)
        session.sendall(b"ping")
        assert session.recv(16) == b"ping"

        with edit_state(host.state_file) as state:  # what a reboot does to the state
            state["down_until"] = time.time() + 1.5
            state["boot_id"] = "new-boot"
        assert wait_for(lambda: not connects(power.port))
        # The session open at the reboot is cut: the peer closes it.
        session.settimeout(5)
        assert session.recv(16) == b""
        session.close()
        assert power.down_polls > 0

        assert wait_for(lambda: connects(power.port))  # booted: the port answers again
        again = socket.create_connection(("127.0.0.1", power.port), timeout=5)
        again.sendall(b"pong")
        assert again.recv(16) == b"pong"
        again.close()

        with edit_state(host.state_file) as state:  # never comes back
            state["stays_down"] = True
        assert wait_for(lambda: not connects(power.port))
