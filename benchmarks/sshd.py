"""One real OpenSSH server for the SSH benchmarks, standing in for many hosts.

Every simulated host is one authorised key whose ``environment="…"`` options (allowed by
``PermitUserEnvironment``) put that host's tools first on PATH and give the login an empty
HOME, so that the login shell finds no rc file to read. sshd logs at DEBUG1, which holds what
the benchmarks count: ``Accepted publickey`` (one line a connection), ``req exec`` (one line a
remote command) and ``Transferred: sent N, received M bytes`` (the SSH packet bytes of one
connection, both directions, written when it closes).

The server listens on 127.0.0.1, or inside a network namespace behind a veth pair whose two
ends delay every packet with ``tc netem`` (:func:`netem_link`); where the kernel has no netem,
:class:`DelayProxy` puts the delay on the way to it instead.
"""

from __future__ import annotations

import asyncio
import getpass
import os
import re
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

_TRANSFERRED = re.compile(r"Transferred: sent (\d+), received (\d+) bytes")


@dataclass(frozen=True)
class Login:
    """One simulated host as sshd sees it: a client key and the environment it logs in with."""

    key: Path
    env: Mapping[str, str]


@dataclass(frozen=True)
class LogCounts:
    """What sshd's log says of the connections it served (since ``since`` bytes into it)."""

    accepted: int
    exec_requests: int
    # Per closed connection: (bytes sent by sshd, bytes received by sshd).
    transferred: tuple[tuple[int, int], ...]

    @property
    def bytes_total(self) -> int:
        return sum(sent + received for sent, received in self.transferred)


@dataclass(frozen=True)
class Sshd:
    address: str
    port: int
    user: str
    log: Path
    host_key: Path  # its public half: what the clients' known_hosts holds

    def known_hosts_line(self) -> str:
        kind, key = self.host_key.with_suffix(".pub").read_text().split()[:2]
        target = self.address if self.port == 22 else f"[{self.address}]:{self.port}"
        return f"{target} {kind} {key}\n"

    def log_size(self) -> int:
        return self.log.stat().st_size

    def counts(self, since: int = 0) -> LogCounts:
        with self.log.open("rb") as handle:
            handle.seek(since)
            text = handle.read().decode("utf-8", "replace")
        return LogCounts(
            accepted=text.count("Accepted publickey"),
            exec_requests=text.count(" req exec"),
            transferred=tuple(
                (int(m.group(1)), int(m.group(2))) for m in _TRANSFERRED.finditer(text)
            ),
        )


def new_key(path: Path) -> Path:
    """An ed25519 key pair at ``path`` (kept when it is there already)."""
    if path.exists():
        return path
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)],
        check=True,
        capture_output=True,
    )
    return path


def _sshd_binary() -> str:
    found = shutil.which("sshd") or next(
        (p for p in ("/usr/sbin/sshd", "/usr/bin/sshd") if Path(p).exists()), None
    )
    if found is None:
        raise SystemExit("the SSH benchmarks need sshd (Debian: apt-get install openssh-server)")
    return found


def _port_free(address: str) -> int:
    with socket.socket() as probe:
        probe.bind((address, 0))
        return int(probe.getsockname()[1])


def _authorized_keys(logins: Mapping[str, Login], home: Path) -> str:
    lines = []
    for login in logins.values():
        env = {"HOME": str(home), **login.env}
        options = ",".join(f'environment="{name}={value}"' for name, value in env.items())
        lines.append(f"{options} {Path(f'{login.key}.pub').read_text().strip()}")
    return "\n".join(lines) + "\n"


@contextmanager
def running_sshd(
    workdir: Path,
    logins: Mapping[str, Login],
    address: str = "127.0.0.1",
    prefix: Sequence[str] = (),
    cpus: Collection[int] = (),
) -> Iterator[Sshd]:
    """sshd on ``address`` authorising every login's key; it is
    stopped when the block ends. Its CPU is its own: the benchmarks measure the controller.
    ``prefix`` runs it inside something, e.g. ``ip netns exec NAME`` (then on port 22).
    ``cpus``: the only CPUs sshd and every login it starts may run on (see host_cpus)."""
    workdir.mkdir(parents=True, exist_ok=True)
    home = workdir / "home"  # the logins' HOME: empty, so no ~/.bashrc, ~/.profile, ~/.ssh/rc
    home.mkdir(exist_ok=True)
    host_key = new_key(workdir / "host_key")
    authorized = workdir / "authorized_keys"
    authorized.write_text(_authorized_keys(logins, home))
    authorized.chmod(0o600)
    port = 22 if prefix else _port_free(address)  # a namespace of its own has every port free
    log = workdir / "sshd.log"
    settings = {
        "Port": port,
        "ListenAddress": address,
        "HostKey": host_key,
        "AuthorizedKeysFile": authorized,
        "PidFile": workdir / "sshd.pid",
        "PermitUserEnvironment": "yes",
        "PermitUserRC": "no",
        "PermitRootLogin": "prohibit-password",
        "PasswordAuthentication": "no",
        "KbdInteractiveAuthentication": "no",
        "UsePAM": "no",
        "StrictModes": "no",
        "PrintMotd": "no",
        "MaxStartups": "1000:30:1000",  # a whole fleet connects at once
        "MaxSessions": 100,
        "LogLevel": "DEBUG1",
    }
    config = workdir / "sshd_config"
    config.write_text("".join(f"{key} {value}\n" for key, value in settings.items()))
    with suppress(PermissionError):  # sshd's privilege separation directory (root only)
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)
    argv = [*prefix, _sshd_binary(), "-D", "-e", "-f", str(config)]
    with log.open("w") as stderr:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=stderr)
    if cpus:
        os.sched_setaffinity(proc.pid, set(cpus))  # before any login: they inherit it
    try:
        _wait_listening(proc, log, address, port)
        yield Sshd(address, port, getpass.getuser(), log, host_key)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def host_cpus() -> tuple[set[int], set[int]]:
    """(the controller's CPUs, the simulated hosts' CPUs): CPU 0 for the controller and the
    others for sshd and the hosts' collectors where there are two or more, so that a hundred
    hosts collecting at once on the same machine do not take the controller's CPU (real hosts
    are other machines); both every CPU where there is one."""
    mine = os.sched_getaffinity(0)
    if len(mine) < 2:
        return set(mine), set(mine)
    first = min(mine)
    return {first}, mine - {first}


def _wait_listening(proc: subprocess.Popen[bytes], log: Path, address: str, port: int) -> None:
    deadline = time.monotonic() + 15
    while "Server listening" not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"sshd did not start: {log.read_text(errors='replace')}")
        time.sleep(0.05)
    socket.create_connection((address, port), timeout=5).close()


# --- added round-trip delay --------------------------------------------------------------


class DelayProxy:
    """A TCP relay on 127.0.0.1 that holds every chunk ``one_way_s`` before passing it on, in
    each direction: a round trip through it takes twice that longer. (``tc netem`` on a veth
    pair is the usual way; it needs the kernel's sch_netem, which not every machine has.) It
    runs in a thread of the calling process, so a subprocess's CPU time does not include it."""

    def __init__(self, target: tuple[str, int], one_way_s: float = 0.0) -> None:
        self.target = target
        self.one_way_s = one_way_s
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> DelayProxy:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._relay, "127.0.0.1", 0))
        self.port = int(server.sockets[0].getsockname()[1])
        self._ready.set()
        self._loop.run_forever()

    async def _relay(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection(*self.target)
        await asyncio.gather(self._pipe(client_r, server_w), self._pipe(server_r, client_w))
        for writer in (client_w, server_w):
            writer.close()

    async def _pipe(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, data = await queue.get()
                if due > loop.time():
                    await asyncio.sleep(due - loop.time())
                if not data:
                    with suppress(OSError):
                        sink.write_eof()
                    return
                sink.write(data)
                with suppress(ConnectionError):
                    await sink.drain()

        delivering = asyncio.create_task(deliver())
        while True:
            try:
                data = await source.read(65536)
            except ConnectionError:
                data = b""
            queue.put_nowait((loop.time() + self.one_way_s, data))
            if not data:
                break
        await delivering


# --- a delayed link: network namespace, veth pair, tc netem ------------------------------

NETNS = "gpuaudit-bench"
_CONTROL_END, _HOST_END = "ga-bench0", "ga-bench1"
_CONTROL_ADDRESS, _HOST_ADDRESS = "10.213.37.1", "10.213.37.2"


class NetemUnavailable(RuntimeError):
    """The kernel (or the user) cannot put a netem qdisc on a veth pair."""


@dataclass(frozen=True)
class NetemLink:
    """The hosts' side of the link: run sshd with :attr:`prefix`, reach it at :attr:`address`."""

    address: str
    prefix: tuple[str, ...]

    def set_delay(self, one_way_ms: int) -> None:
        """Every packet waits ``one_way_ms`` on each end: a round trip takes twice that more."""
        for command in _netem_commands("change", one_way_ms):
            _ip(command)


def _ip(argv: Sequence[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise NetemUnavailable(f"{' '.join(argv)}: {done.stderr.strip() or done.returncode}")


def _netem_commands(verb: str, one_way_ms: int) -> list[list[str]]:
    delay = ["netem", "delay", f"{one_way_ms}ms"]
    return [
        ["tc", "qdisc", verb, "dev", _CONTROL_END, "root", *delay],
        ["ip", "netns", "exec", NETNS, "tc", "qdisc", verb, "dev", _HOST_END, "root", *delay],
    ]


@contextmanager
def netem_link(one_way_ms: int = 0) -> Iterator[NetemLink]:
    """A network namespace holding one end of a veth pair (the hosts' side), the other end
    here, both ends under ``tc netem``; removed when the block ends. Needs root and the
    kernel's sch_netem: :class:`NetemUnavailable` says why not."""
    if shutil.which("ip") is None or shutil.which("tc") is None:
        raise NetemUnavailable("ip and tc (iproute2) are needed")
    subprocess.run(["ip", "netns", "del", NETNS], capture_output=True, timeout=30)  # leftover
    try:
        _ip(["ip", "netns", "add", NETNS])
        _ip(["ip", "link", "add", _CONTROL_END, "type", "veth", "peer", "name", _HOST_END])
        _ip(["ip", "link", "set", _HOST_END, "netns", NETNS])
        _ip(["ip", "addr", "add", f"{_CONTROL_ADDRESS}/30", "dev", _CONTROL_END])
        _ip(["ip", "link", "set", _CONTROL_END, "up"])
        inside = ["ip", "netns", "exec", NETNS]
        _ip([*inside, "ip", "addr", "add", f"{_HOST_ADDRESS}/30", "dev", _HOST_END])
        _ip([*inside, "ip", "link", "set", _HOST_END, "up"])
        _ip([*inside, "ip", "link", "set", "lo", "up"])
        for command in _netem_commands("add", one_way_ms):
            _ip(command)
        yield NetemLink(_HOST_ADDRESS, tuple(inside))
    finally:
        subprocess.run(["ip", "link", "del", _CONTROL_END], capture_output=True, timeout=30)
        subprocess.run(["ip", "netns", "del", NETNS], capture_output=True, timeout=30)
