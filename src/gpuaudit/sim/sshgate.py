"""Simulated hosts behind a real sshd: the command each host's key is forced to run, and the
port that stands for the host's network link.

Over SSH a simulated host is reached the way a real one is: pyinfra's ``@ssh`` connector
(paramiko), a real sshd on 127.0.0.1, a real login. What makes it *that* host, and keeps what
its commands change off this machine, is one line per host in the authorized_keys file of the
account sshd logs in to::

    command="/path/to/python -m gpuaudit.sim.sshgate /abs/sim-dir gpu-a" ssh-ed25519 AAAA…

sshd authenticates the key, then runs the gate instead of the client's command, which it passes
in ``SSH_ORIGINAL_COMMAND``. The gate runs that command inside the host's isolated root
(:mod:`gpuaudit.sim.isolation`), exactly as the ``@sim`` connector runs its commands: pyinfra's
``files.put`` (an SFTP session: sshd passes the sftp-server's path as the command, and the
server runs inside the root), ``apt-get install``, ``sed -i`` or a reboot change only the host's
own files and state. A host that cannot be isolated here runs nothing: the gate says why.

A real host that reboots drops its sessions and refuses connections until it has booted.
:class:`PowerSwitch` gives a simulated host that behaviour: a port on 127.0.0.1 that forwards to
sshd while the host is up and is closed while it is down (``down_until``, ``stays_down`` in its
state, see :mod:`gpuaudit.sim.rehearsal`), so a connection is refused by the kernel as by a
booting machine. The sessions open at a reboot are cut a moment after it (``grace``, a second by
default, the delay of ``systemd-run --on-active=1`` that lets the command asking for the reboot
return), and a command reaching the gate meanwhile is refused with exit status 255, as ssh
reports a dropped connection.

Imports stay light: sshd starts the gate once per command.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shlex
import socket
import sys
import threading
import time
from pathlib import Path
from types import TracebackType

from gpuaudit.sim.isolation import ensure_base, enter_command
from gpuaudit.sim.rehearsal import down_reason
from gpuaudit.sim.rootfs import INSIDE_ENV, STATE_FILE
from gpuaudit.sim.state import SimStateError, load_state

_USAGE = "usage: python -m gpuaudit.sim.sshgate SIM_DIR HOST (as an authorized_keys command=)"


def gate_command(sim_dir: Path, name: str, python: str = sys.executable) -> str:
    """The ``command="…"`` option of host ``name``'s authorized_keys line."""
    return " ".join(
        shlex.quote(part)
        for part in (python, "-m", "gpuaudit.sim.sshgate", str(Path(sim_dir).resolve()), name)
    )


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print(_USAGE, file=sys.stderr)
        return 2
    sim_dir, name = Path(args[0]), args[1]
    if not name or "/" in name or name.startswith("."):
        print(f"gpuaudit simulator: bad simulated host name {name!r}", file=sys.stderr)
        return 2
    command = os.environ.get("SSH_ORIGINAL_COMMAND")
    if not command:
        print(
            f"gpuaudit simulator: {name} runs commands only; there is no interactive login",
            file=sys.stderr,
        )
        return 1
    host_dir = sim_dir.resolve() / name
    try:
        state = load_state(host_dir / "root" / STATE_FILE)
    except SimStateError as exc:
        print(f"gpuaudit simulator: {name}: {exc}", file=sys.stderr)
        return 255
    down = down_reason(state)
    if down:
        print(f"Connection to {name} closed: the simulated host {down}", file=sys.stderr)
        return 255
    try:
        ensure_base(sim_dir)
    except OSError as exc:
        print(f"gpuaudit simulator: {name} cannot be isolated here: {exc}", file=sys.stderr)
        return 1
    exports = " ".join(f"{key}={shlex.quote(value)}" for key, value in INSIDE_ENV.items())
    argv_ = enter_command(host_dir, sim_dir, f"export {exports}\n{command}")
    try:
        os.execvp(argv_[0], argv_)
    except OSError as exc:
        print(f"gpuaudit simulator: {name} cannot be isolated here: {exc}", file=sys.stderr)
    return 1


class PowerSwitch:
    """A port on 127.0.0.1 forwarding to sshd while the simulated host whose state is at
    ``state_file`` is up; closed while it is down; its sessions cut ``grace`` seconds after each
    reboot. Use it as a context manager; ``port`` is where an inventory points the host."""

    def __init__(
        self,
        state_file: Path,
        sshd_port: int,
        *,
        poll: float = 0.05,
        grace: float = 1.0,
    ) -> None:
        self.state_file = Path(state_file)
        self.sshd_port = sshd_port
        self.poll = poll
        self.grace = grace
        self._listener: socket.socket | None = None
        self._sessions: list[socket.socket] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpuaudit-power", daemon=True)
        self.port = self._listen(0)  # bound now, so the port is known before start
        self.down_polls = 0  # polls that found the host down (how long it was off)

    def __enter__(self) -> PowerSwitch:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._close_listener()
        self._cut()

    def _listen(self, port: int) -> int:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(16)
        self._listener = listener
        return int(listener.getsockname()[1])

    def _close_listener(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    def _state(self) -> tuple[bool, str | None]:
        """(up, boot id); a state file being replaced reads as the last one did."""
        try:
            state = json.loads(self.state_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return self._listener is not None, None
        return down_reason(state) is None, state.get("boot_id")

    def _run(self) -> None:
        up, boot = self._state()
        cut_at: float | None = None
        while not self._stop.is_set():
            up, now_boot = self._state()
            if now_boot is not None and now_boot != boot:
                boot, cut_at = now_boot, time.monotonic() + self.grace
            if cut_at is not None and time.monotonic() >= cut_at:
                self._cut()
                cut_at = None
            if not up:
                self.down_polls += 1
                self._close_listener()
            elif self._listener is None:
                # The port may still be held by the kernel: then the next poll tries again.
                with contextlib.suppress(OSError):
                    self._listen(self.port)
            if self._listener is None:
                self._stop.wait(self.poll)
                continue
            ready, _, _ = select.select([self._listener], [], [], self.poll)
            if ready:
                with contextlib.suppress(OSError):
                    client, _ = self._listener.accept()
                    self._forward(client)

    def _forward(self, client: socket.socket) -> None:
        try:
            server = socket.create_connection(("127.0.0.1", self.sshd_port), timeout=10)
        except OSError:
            client.close()
            return
        server.settimeout(None)
        with self._lock:
            self._sessions = [s for s in self._sessions if s.fileno() != -1]
            self._sessions += [client, server]
        for source, sink in ((client, server), (server, client)):
            threading.Thread(target=_pump, args=(source, sink), daemon=True).start()

    def _cut(self) -> None:
        """Drop every open session, as a reboot does."""
        with self._lock:
            sessions, self._sessions = self._sessions, []
        for sock in sessions:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


if __name__ == "__main__":
    sys.exit(main())
