"""Integration-test fixtures: a real OpenSSH server on 127.0.0.1.

Each authorised client key carries its own environment (``environment="..."`` in
authorized_keys, allowed by ``PermitUserEnvironment``), so one sshd can stand in for several
hosts: every key logs in to a different simulated GPU host.
"""

from __future__ import annotations

import contextlib
import getpass
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

SSHD_CANDIDATES = ("/usr/sbin/sshd", "/usr/bin/sshd")


def find_sshd() -> str:
    for candidate in (shutil.which("sshd"), *SSHD_CANDIDATES):
        if candidate and Path(candidate).exists():
            return candidate
    raise RuntimeError(
        "sshd not found: the SSH integration test needs openssh-server "
        "(`make test` installs it with apt-get)"
    )


def sftp_server() -> str:
    for candidate in ("/usr/lib/openssh/sftp-server", "/usr/libexec/openssh/sftp-server"):
        if Path(candidate).exists():
            return candidate
    return "internal-sftp"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def keygen(path: Path) -> Path:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)],
        check=True,
        capture_output=True,
    )
    return path


@dataclass(frozen=True)
class Sshd:
    port: int
    user: str
    log: Path


@contextmanager
def running_sshd(
    workdir: Path,
    clients: Mapping[Path, Mapping[str, str]],
    commands: Mapping[Path, str] | None = None,
) -> Iterator[Sshd]:
    """Start sshd authorising each client key (private key path → environment), each key in
    ``commands`` forced to run its command (authorized_keys ``command="…"``)."""
    workdir.mkdir(parents=True, exist_ok=True)
    host_key = keygen(workdir / "ssh_host_ed25519_key")
    lines = []
    for key, env in clients.items():
        forced = (commands or {}).get(key)
        options = ",".join(
            ([f'command="{forced}"'] if forced else [])
            + [f'environment="{k}={v}"' for k, v in env.items()]
        )
        public = Path(f"{key}.pub").read_text().strip()
        lines.append(f"{options} {public}" if options else public)
    authorized = workdir / "authorized_keys"
    authorized.write_text("\n".join(lines) + "\n")
    authorized.chmod(0o600)
    port = free_port()
    log = workdir / "sshd.log"
    config = workdir / "sshd_config"
    config.write_text(
        "\n".join(
            [
                f"Port {port}",
                "ListenAddress 127.0.0.1",
                f"HostKey {host_key}",
                f"AuthorizedKeysFile {authorized}",
                f"PidFile {workdir / 'sshd.pid'}",
                "PermitUserEnvironment yes",
                "PermitRootLogin prohibit-password",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "UsePAM no",
                "StrictModes no",
                f"Subsystem sftp {sftp_server()}",
                "LogLevel DEBUG1",  # logs each exec request: the test counts remote commands
                "",
            ]
        )
    )
    with contextlib.suppress(PermissionError):  # privilege separation directory (root only)
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [find_sshd(), "-D", "-e", "-f", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
    )
    try:
        deadline = time.monotonic() + 15
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"sshd exited: {log.read_text()}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"sshd did not listen: {log.read_text()}") from None
                time.sleep(0.1)
        yield Sshd(port=port, user=getpass.getuser(), log=log)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def start_sshd(tmp_path: Path) -> Iterator[Callable[..., Sshd]]:
    """Start a real sshd for the test (``start_sshd(clients, commands=None)``); it stops when
    the test ends."""
    with contextlib.ExitStack() as stack:
        yield lambda clients, commands=None: stack.enter_context(
            running_sshd(tmp_path / "sshd", clients, commands)
        )


@pytest.fixture
def ssh_keygen() -> Callable[[Path], Path]:
    return keygen


@pytest.fixture
def unused_port() -> Callable[[], int]:
    """A port on 127.0.0.1 that nothing listens on (a host that is down)."""
    return free_port
