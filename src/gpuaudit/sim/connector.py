"""pyinfra connector for simulated GPU hosts: ``@sim/<name>`` in an inventory.

    # inventory/demo.py
    a100 = [("@sim/a100-hgx-01", {"expected_gpu_count": 8})]

Every command runs inside the host's own isolated root (see :mod:`gpuaudit.sim.isolation`):
whatever an operation does — ``files.line``, ``files.put``, ``sed -i``, ``server.sysctl``,
``apt.packages``, ``rm`` — changes that host's files and state, never this machine's. Where
isolation is not available (not root, no overlayfs) the host is read-only: the audit's
collector runs, with the host's environment in front of it, and every other command is
refused with the reason. Host data:

- ``sim_profile``: the profile to build the host from (default: the host's name);
- ``sim_reset``: rebuild the host from its profile when connecting (default False, so a host
  keeps what earlier runs changed: MIG mode, persistence, held packages, files);
- ``sim_upgrade_faults``: upgrade faults for a staged-upgrade rehearsal, ``{name: {params}}``
  (``state.UPGRADE_FAULTS``), copied into the host's state on connect;
- ``sim_reboot_seconds``: how long a reboot keeps the host down (default 3).

A host inside the reboot time after a reboot (see :mod:`gpuaudit.sim.rehearsal`) is down, as an
SSH host is while it boots: ``connect()`` raises ``ConnectError`` and a command on a connection
made before the reboot fails with "Connection refused", so a reconnect loop (pyinfra's
``host.connect()`` retried, as ``upgrade.reboot_and_wait`` and ``server.reboot`` do) waits for it
as for a real host.

Hosts live under ``$GPUAUDIT_SIM_DIR`` (default ``./.gpuaudit-sim``). A host whose state
carries the ``unreachable`` fault refuses the connection with pyinfra's ``ConnectError``, so
pyinfra reports it and carries on with the others, as for an SSH host that is down; one with
``auth_refused`` raises the error pyinfra's SSH connector raises when a server rejects the key.
``sim_profile`` may also be a profile dict (what ``build.build_state`` accepts), for hosts
that only a test needs.

Each command runs in a session of its own, and at its time limit (``_timeout``) every process
it started is killed: pyinfra's local runner stops waiting but leaves them running, and a
simulated host that hangs must not leave sleeping tools behind.

Privilege arguments (``_sudo``, ``_su_user``, ``_doas``…) are dropped: a command on the host
already runs as its root, and the real ``sudo`` must never act on this machine for it.
``put_file`` / ``get_file`` copy through the host's own /tmp, inside its root.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyinfra import logger
from pyinfra.api import QuoteString, StringCommand
from pyinfra.api.exceptions import ConnectError, InventoryError
from pyinfra.api.output import echo
from pyinfra.connectors.base import DataMeta
from pyinfra.connectors.local import LocalConnector
from pyinfra.connectors.util import (
    CommandOutput,
    OutputLine,
    make_unix_command_for_host,
    read_output_buffers,
    write_stdin,
)
from typing_extensions import TypedDict

from gpuaudit.collect import collector_script
from gpuaudit.sim.host import INSIDE_ENV, SimHost, default_sim_dir, materialize, resolve_profile
from gpuaudit.sim.isolation import ensure_base, enter_command, isolation_problem
from gpuaudit.sim.rehearsal import FaultError, down_reason, on_connect
from gpuaudit.sim.state import has_fault

if TYPE_CHECKING:
    from collections.abc import Callable

# The collector's own nonce line: the only command a read-only host runs.
_COLLECTOR_NONCE = re.compile(r'^N="\$\{GPUAUDIT_NONCE:-([A-Za-z0-9]{4,64})\}"$', re.M)
# The settings GpuAuditSections.command puts before the script (numbers only).
_COLLECTOR_TIMEOUT = re.compile(
    r"\A(?:GPUAUDIT_TIMEOUT=\d+\n)?(?:GPUAUDIT_DCGM_DIAG=\d+\n(?:GPUAUDIT_DCGM_DIAG_TIMEOUT=\d+\n)?)?"
)
_PRIVILEGE_ARGUMENTS = (
    "_sudo", "_sudo_user", "_use_sudo_login", "_sudo_password", "_preserve_sudo_env",
    "_su_user", "_use_su_login", "_su_shell", "_preserve_su_env", "_su_password",
    "_doas", "_doas_user", "_dzdo", "_dzdo_user",
)  # fmt: skip


class SimConnectorData(TypedDict, total=False):
    sim_profile: str | dict[str, Any]
    sim_reset: bool
    sim_upgrade_faults: dict[str, Any]
    sim_reboot_seconds: float


class SimConnector(LocalConnector):
    """Runs commands against a simulated GPU host (see gpuaudit.sim)."""

    handles_execution = True
    data_cls = SimConnectorData
    data_meta = {  # noqa: RUF012 (pyinfra declares it on BaseConnector as a plain attribute)
        "sim_profile": DataMeta("simulator profile of the host (default: its name)"),
        "sim_reset": DataMeta("rebuild the host state from its profile on connect", False),
        "sim_upgrade_faults": DataMeta("upgrade faults to inject (state.UPGRADE_FAULTS)", None),
        "sim_reboot_seconds": DataMeta("seconds a reboot keeps the host down (default 3)", None),
    }

    sim_host: SimHost | None = None
    read_only_reason: str | None = None

    @staticmethod
    def make_names_data(name: str | None = None):
        if not name:
            raise InventoryError("A simulated host needs a name: @sim/<name>")
        yield f"@sim/{name}", {"sim_name": name}, ["@sim"]

    def connect(self) -> None:
        name = self.host.name.split("/", 1)[-1]
        sim_dir = default_sim_dir()
        try:
            profile = resolve_profile(self.data.get("sim_profile") or name)
            self.sim_host = materialize(
                name, profile, sim_dir, reset=bool(self.data.get("sim_reset"))
            )
            self.read_only_reason = isolation_problem(sim_dir)
            if self.read_only_reason is None:
                ensure_base(sim_dir)
        except (ValueError, OSError) as exc:
            raise ConnectError(f"Could not build simulated host: {exc}") from exc
        state = self.sim_host.state()
        if has_fault(state, "unreachable"):
            raise ConnectError("Could not connect (timed out): simulated host is unreachable")
        if has_fault(state, "auth_refused"):
            # pyinfra's SSH connector words it "Authentication error (<user, key>) (<paramiko>)".
            raise ConnectError("Authentication error (simulated host) (Authentication failed.)")
        try:
            down = on_connect(
                self.sim_host.state_file,
                self.data.get("sim_upgrade_faults"),
                self.data.get("sim_reboot_seconds"),
            )
        except (FaultError, TypeError, ValueError) as exc:
            raise ConnectError(f"Could not build simulated host: {exc}") from exc
        if down:
            raise ConnectError(f"Could not connect (Connection refused): simulated host {down}")

    def run_shell_command(
        self,
        command: StringCommand,
        print_output: bool = False,
        print_input: bool = False,
        **arguments: Any,
    ) -> tuple[bool, CommandOutput]:
        host = self._require_host()
        if print_input:  # pyinfra -vv: the command as the host runs it
            echo(f"{self.host.print_prefix}>>> {command}", err=True)
        down = down_reason(host.state())
        if down:  # the host rebooted after this connection was made
            return False, _refusal(f"Connection refused (simulated host {down})")
        for key in _PRIVILEGE_ARGUMENTS:
            arguments.pop(key, None)
        if self.read_only_reason is None:
            # The host's own variables win: an operation's _env must not point them elsewhere.
            arguments["_env"] = {**(arguments.get("_env") or {}), **INSIDE_ENV}
            unix = make_unix_command_for_host(self.state, self.host, command, **_shell(arguments))
            argv = enter_command(host.host_dir, default_sim_dir(), unix.get_raw_value())
            return self._run(argv, print_output, **arguments)
        if not _is_collector(command):
            return False, _refusal(
                f"gpuaudit simulator: {self.host.name} is read-only here, because simulated "
                f"hosts cannot be isolated on this machine ({self.read_only_reason}); only the "
                "audit's collector runs. Run as root, or where unprivileged user namespaces are "
                "allowed, to rehearse changes on simulated hosts."
            )
        arguments["_env"] = {**(arguments.get("_env") or {}), **host.env()}
        unix = make_unix_command_for_host(self.state, self.host, command, **_shell(arguments))
        return self._run(["/bin/sh", "-c", unix.get_raw_value()], print_output, **arguments)

    def _run(
        self, argv: list[str], print_output: bool, **arguments: Any
    ) -> tuple[bool, CommandOutput]:
        """Run ``argv`` in its own session; kill the whole session at ``_timeout``."""
        logger.debug(f"--> Running command on {self.host.name}: {argv[-1][:200]}")
        timeout = arguments.get("_timeout")
        stdin = arguments.get("_stdin")
        success = arguments.get("_success_exit_codes") or (0,)
        process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        assert process.stdin and process.stdout and process.stderr  # all three are pipes
        if stdin:
            write_stdin(stdin, process.stdin)
        process.stdin.close()
        try:
            output = read_output_buffers(
                process.stdout,
                process.stderr,
                timeout=timeout,
                print_output=print_output,
                print_prefix=self.host.print_prefix,
            )
        except TimeoutError:
            os.killpg(process.pid, signal.SIGKILL)
            raise
        finally:
            process.wait()
            process.stdout.close()
            process.stderr.close()
        return process.returncode in success, output

    def put_file(self, filename_or_io, remote_filename, *args: Any, **kwargs: Any) -> bool:
        def copy(staged: str, staged_path: Path) -> StringCommand:
            from pyinfra.api.util import get_file_io

            with get_file_io(filename_or_io) as file_io:
                data = file_io.read()
            staged_path.write_bytes(data.encode() if isinstance(data, str) else data)
            return StringCommand("cp", staged, QuoteString(str(remote_filename)))

        return self._through_tmp(copy, lambda staged_path: None, **kwargs)

    def get_file(self, remote_filename, filename_or_io, *args: Any, **kwargs: Any) -> bool:
        def copy(staged: str, staged_path: Path) -> StringCommand:
            return StringCommand("cp", QuoteString(str(remote_filename)), staged)

        def fetched(staged_path: Path) -> None:
            from pyinfra.api.util import get_file_io

            with get_file_io(filename_or_io, "wb") as file_io:
                file_io.write(staged_path.read_bytes())

        return self._through_tmp(copy, fetched, **kwargs)

    def _through_tmp(
        self,
        command_for: Callable[[str, Path], StringCommand],
        after: Callable[[Path], None],
        **kwargs: Any,
    ) -> bool:
        """Move a file between this machine and the host through a file in the host's /tmp,
        which is in the host's root; the copy itself runs on the host, like any command."""
        host = self._require_host()
        staged = f"/tmp/.gpuaudit-transfer-{secrets.token_hex(8)}"
        staged_path = host.upper(staged)
        staged_path.parent.mkdir(parents=True, exist_ok=True)
        kwargs.pop("print_output", None)
        kwargs.pop("print_input", None)
        kwargs.pop("remote_temp_filename", None)
        try:
            ok, output = self.run_shell_command(command_for(staged, staged_path), **kwargs)
            if not ok:
                raise OSError(output.stderr)
            after(staged_path)
        finally:
            staged_path.unlink(missing_ok=True)
        return True

    def _require_host(self) -> SimHost:
        if self.sim_host is None:
            raise ConnectError("simulated host used before connect()")
        return self.sim_host


def _shell(arguments: dict[str, Any]) -> dict[str, Any]:
    """The arguments make_unix_command_for_host takes (the rest are for running it)."""
    return {
        key: value
        for key, value in arguments.items()
        if key not in ("_timeout", "_stdin", "_success_exit_codes", "_get_pty")
    }


def _is_collector(command: StringCommand | str) -> bool:
    text = command.get_raw_value() if isinstance(command, StringCommand) else str(command)
    text = _COLLECTOR_TIMEOUT.sub("", text, count=1)
    match = _COLLECTOR_NONCE.search(text)
    return match is not None and text == collector_script(match.group(1), comments=False)


def _refusal(message: str) -> CommandOutput:
    return CommandOutput([OutputLine("stderr", message)])
