"""pyinfra connector for simulated GPU hosts: ``@sim/<name>`` in an inventory.

    # inventory/demo.py
    a100 = [("@sim/a100-hgx-01", {"expected_gpu_count": 8})]

Commands run on this machine, like ``@local``, with the simulated host's environment
(``PATH`` with its shims first, ``GPUAUDIT_SIM_STATE``, ``GPUAUDIT_ROOT``) exported in front of
each one. Host data:

- ``sim_profile``: the profile to build the host from (default: the host's name);
- ``sim_reset``: rebuild the host's state from its profile when connecting (default False,
  so a host keeps what earlier runs changed: MIG mode, persistence, held packages).

Hosts live under ``$GPUAUDIT_SIM_DIR`` (default ``./.gpuaudit-sim``). A host whose state
carries the ``unreachable`` fault refuses the connection with pyinfra's ``ConnectError``, so
pyinfra reports it and carries on with the others, as for an SSH host that is down; one with
``auth_refused`` raises the error pyinfra's SSH connector raises when a server rejects the key.
``sim_profile`` may also be a profile dict (what ``build.build_state`` accepts), for hosts
that only a test needs.

A command run with a time limit (``_timeout``) runs in a session of its own, and at the limit
every process it started is killed: pyinfra's local runner stops waiting but leaves them
running, and a simulated host that hangs must not leave sleeping tools behind.

Privilege arguments (``_sudo``, ``_su_user``, ``_doas``…) are dropped: the simulated host has
no users, and the real ``sudo`` must never act on this machine for it. For the same reason
``put_file`` / ``get_file`` map absolute paths into the host's root directory.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyinfra.api.exceptions import ConnectError, InventoryError
from pyinfra.connectors.base import DataMeta
from pyinfra.connectors.local import LocalConnector
from pyinfra.connectors.util import (
    make_unix_command_for_host,
    read_output_buffers,
    write_stdin,
)
from typing_extensions import TypedDict

from gpuaudit.sim.host import SimHost, default_sim_dir, materialize, resolve_profile
from gpuaudit.sim.state import has_fault

if TYPE_CHECKING:
    from pyinfra.api.command import StringCommand
    from pyinfra.connectors.util import CommandOutput

_PRIVILEGE_ARGUMENTS = (
    "_sudo", "_sudo_user", "_use_sudo_login", "_sudo_password", "_preserve_sudo_env",
    "_su_user", "_use_su_login", "_su_shell", "_preserve_su_env", "_su_password",
    "_doas", "_doas_user", "_dzdo", "_dzdo_user",
)  # fmt: skip


class SimConnectorData(TypedDict, total=False):
    sim_profile: str | dict[str, Any]
    sim_reset: bool


class SimConnector(LocalConnector):
    """Runs commands against a simulated GPU host (see gpuaudit.sim)."""

    handles_execution = True
    data_cls = SimConnectorData
    data_meta = {  # noqa: RUF012 (pyinfra declares it on BaseConnector as a plain attribute)
        "sim_profile": DataMeta("simulator profile of the host (default: its name)"),
        "sim_reset": DataMeta("rebuild the host state from its profile on connect", False),
    }

    sim_host: SimHost | None = None

    @staticmethod
    def make_names_data(name: str | None = None):
        if not name:
            raise InventoryError("A simulated host needs a name: @sim/<name>")
        yield f"@sim/{name}", {"sim_name": name}, ["@sim"]

    def connect(self) -> None:
        name = self.host.name.split("/", 1)[-1]
        try:
            profile = resolve_profile(self.data.get("sim_profile") or name)
            self.sim_host = materialize(
                name, profile, default_sim_dir(), reset=bool(self.data.get("sim_reset"))
            )
        except (ValueError, OSError) as exc:
            raise ConnectError(f"Could not build simulated host: {exc}") from exc
        state = self.sim_host.state()
        if has_fault(state, "unreachable"):
            raise ConnectError("Could not connect (timed out): simulated host is unreachable")
        if has_fault(state, "auth_refused"):
            # pyinfra's SSH connector words it "Authentication error (<user, key>) (<paramiko>)".
            raise ConnectError("Authentication error (simulated host) (Authentication failed.)")

    def run_shell_command(
        self,
        command: StringCommand,
        print_output: bool = False,
        print_input: bool = False,
        **arguments: Any,
    ) -> tuple[bool, CommandOutput]:
        host = self._require_host()
        for key in _PRIVILEGE_ARGUMENTS:
            arguments.pop(key, None)
        # The host's own variables win: an operation's _env must not point PATH elsewhere.
        arguments["_env"] = {**(arguments.get("_env") or {}), **host.env()}
        if arguments.get("_timeout") is None:
            return super().run_shell_command(command, print_output, print_input, **arguments)
        return self._run_bounded(command, print_output, **arguments)

    def _run_bounded(
        self, command: StringCommand, print_output: bool, **arguments: Any
    ) -> tuple[bool, CommandOutput]:
        """Run ``command`` in its own session; kill the whole session at ``_timeout``."""
        timeout = arguments.pop("_timeout")
        stdin = arguments.pop("_stdin", None)
        success = arguments.pop("_success_exit_codes", None) or (0,)
        arguments.pop("_get_pty", None)
        unix_command = make_unix_command_for_host(self.state, self.host, command, **arguments)
        process = subprocess.Popen(
            unix_command.get_raw_value(),
            shell=True,
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
        target = self._in_root(remote_filename)
        target.parent.mkdir(parents=True, exist_ok=True)
        return super().put_file(filename_or_io, str(target), *args, **kwargs)

    def get_file(self, remote_filename, filename_or_io, *args: Any, **kwargs: Any) -> bool:
        return super().get_file(
            str(self._in_root(remote_filename)), filename_or_io, *args, **kwargs
        )

    def _require_host(self) -> SimHost:
        if self.sim_host is None:
            raise ConnectError("simulated host used before connect()")
        return self.sim_host

    def _in_root(self, remote_filename: str) -> Path:
        root = self._require_host().root_dir
        path = Path(os.path.normpath(os.path.join("/", str(remote_filename))))
        return root / path.relative_to("/")
