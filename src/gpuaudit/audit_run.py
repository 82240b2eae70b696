"""``gpuaudit audit``: the controller of an audit run.

It runs pyinfra (deploys/audit.py) in a process group of its own and stays its controller: when
pyinfra ends without a register (no host connected: pyinfra stops with "No hosts remaining!"
before any operation) or the audit is interrupted (SIGINT, SIGTERM, SIGHUP: pyinfra's whole
group is stopped), a second pyinfra process (gpuaudit.deploy.close_run_main) loads the same
inventory and writes the register of what the run has, every host of the run in it. Then it
prints the run's summary and gives the exit status ``--fail-on`` asks for.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from gpuaudit.report.run import RunDir, RunEnd, new_run_dir, os_error_text
from gpuaudit.report.verdict import VERDICT_ENV, AuditVerdict, count_of, taken_over

SEVERITIES = ("critical", "high", "medium", "low", "info")
# pyinfra's options that take a value (pyinfra_cli.cli): `gpuaudit audit` passes every option
# it does not know on to pyinfra, and must know these to tell their values from the inventory.
PYINFRA_VALUE_OPTIONS = frozenset(
    {
        "--chdir", "--config", "--data", "--dzdo-user", "--exclude", "--fail-percent",
        "--group-data", "--key", "--key-password", "--limit", "--parallel", "--password",
        "--port", "--retry", "--retry-delay", "--shell-executable", "--ssh-key",
        "--ssh-key-password", "--ssh-password", "--ssh-port", "--ssh-user", "--su-user",
        "--sudo-user", "--user",
    }
)  # fmt: skip
_NO_COLLECTION = "pyinfra would stop before the collection, and the audit would have no data"
_NO_TERMINAL = (
    "gpuaudit audit runs pyinfra without a terminal to ask on; give the password in the "
    "inventory (ssh_password, _sudo_password host data) or run plain pyinfra"
)
# pyinfra options an audit cannot honour, and why.
REFUSED_PYINFRA_OPTIONS = {
    "--dry": "an audit changes nothing on the hosts; under --dry " + _NO_COLLECTION,
    "--debug-facts": _NO_COLLECTION,
    "--debug-operations": _NO_COLLECTION,
    "--support": "pyinfra --support prints pyinfra's own report",
    "--version": "gpuaudit --version prints gpuaudit's and pyinfra's versions",
    "--ssh-password-prompt": _NO_TERMINAL,
    "--use-sudo-password": _NO_TERMINAL,
}
AUDIT_OPERATION = "gpuaudit.deploy.audit"
# The second pyinfra process: pyinfra_cli first, since importing it patches the interpreter
# for gevent, as the pyinfra command does before anything else.
_CLOSE_RUN = (
    "import pyinfra_cli, sys\n"
    "from gpuaudit.deploy import close_run_main\n"
    "sys.exit(close_run_main(sys.argv[1:]))\n"
)
_SHARD = (
    "import pyinfra_cli, sys\n"
    "from gpuaudit.deploy import shard_main\n"
    "sys.exit(shard_main(sys.argv[1:]))\n"
)
_LIST_HOSTS = (
    "import pyinfra_cli, sys\n"
    "from gpuaudit.deploy import list_hosts_main\n"
    "sys.exit(list_hosts_main(sys.argv[1:]))\n"
)
# Seconds pyinfra gets to end after SIGTERM before its group is killed; and the second process
# for a run that was interrupted (it connects nothing) or ended (it connects once more).
_STOP_GRACE_S = 5
# pyinfra's exit status for a command line it does not take (click's usage error).
_PYINFRA_USAGE = 2
_CLOSE_TIMEOUT_S = {True: 120, False: 900}


class _Stopped(Exception):
    """SIGINT, SIGTERM or SIGHUP reached `gpuaudit audit`."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextmanager
def _stop_on_signals() -> Iterator[None]:
    """Turn the first SIGINT, SIGTERM or SIGHUP into :class:`_Stopped`; later ones are ignored
    while the audit stops pyinfra and writes what it has (that takes seconds, and is bounded).
    SIGHUP too: pyinfra has a session of its own, so a closed terminal reaches only this
    process, which must not leave pyinfra running without it."""
    caught: list[int] = []

    def stop(signum: int, frame: object) -> None:
        if not caught:
            caught.append(signum)
            raise _Stopped(signum)

    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {s: signal.signal(s, stop) for s in signals}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _run_pyinfra(command: list[str], env: Mapping[str, str], timeout: float | None = None) -> int:
    """Run a pyinfra process in a session (so a process group) of its own, with no terminal
    to prompt on; return its exit status (:func:`exit_status`). :class:`_Stopped` or a timeout
    stops its whole group first: SIGTERM, then SIGKILL for whatever is left after a grace
    period."""
    child = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        return exit_status(child.wait(timeout))
    except (_Stopped, subprocess.TimeoutExpired):
        with suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGTERM)
        with suppress(subprocess.TimeoutExpired):
            child.wait(_STOP_GRACE_S)
        with suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)  # the leader's group outlives the leader
        child.wait()
        raise


@dataclass(frozen=True)
class AuditRun:
    """One `gpuaudit audit`: its run directory, pyinfra's command line, its environment."""

    run: RunDir
    pyinfra_argv: list[str]
    env: dict[str, str]
    shards: int = 1

    def audit(self) -> RunEnd | None:
        """Run the audit; how it ended when pyinfra wrote no register (None: it did). A
        sharded run always ends so: its register is written once, by :meth:`close`."""
        if self.shards > 1:
            return RunEnd(exit_status=self._run_shards())
        status = _run_pyinfra([sys.executable, "-m", "pyinfra", *self.pyinfra_argv], self.env)
        return None if self.run.register_path.exists() else RunEnd(exit_status=status)

    def shard_commands(self) -> list[tuple[list[str], dict[str, str]]]:
        """The pyinfra command line and environment of each shard: the run's hosts (pyinfra's
        own reading of the inventory and --limit) dealt round-robin into disjoint parts, each
        part one --limit per host, each shard collecting only (``GPUAUDIT_SHARD``)."""
        listed = subprocess.run(
            [sys.executable, "-c", _LIST_HOSTS, *self.pyinfra_argv],
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
        )
        if listed.returncode != 0:
            sys.stderr.write(listed.stderr)
            return []
        names = [
            json.loads(line.split("\t", 1)[1])
            for line in listed.stdout.splitlines()
            if line.startswith("host\t")
        ]
        parts = [names[i :: self.shards] for i in range(self.shards)]
        options = [a for a in self.pyinfra_argv[:-2] if not a.startswith("--limit=")]
        inventory, operation = self.pyinfra_argv[-2:]
        commands = []
        for number, part in enumerate((p for p in parts if p), 1):
            limits = [f"--limit={name}" for name in part]
            command = [sys.executable, "-c", _SHARD, *options, *limits, inventory, operation]
            commands.append((command, {**self.env, "GPUAUDIT_SHARD": f"{number}/{self.shards}"}))
        return commands

    def _run_shards(self) -> int:
        """Run every shard at once; the worst exit status. Stopped, every shard is stopped."""
        return run_shards(self.shard_commands())

    def close(self, end: RunEnd) -> None:
        """Write the register of a run pyinfra ended early: the second pyinfra process, and
        where that fails, a register of the snapshots alone."""

        if end.exit_status == _PYINFRA_USAGE:
            return  # pyinfra said what it refused; the run never started
        command = [sys.executable, "-c", _CLOSE_RUN, end.to_arg(), *self.pyinfra_argv]
        with suppress(subprocess.TimeoutExpired):
            _run_pyinfra(command, self.env, _CLOSE_TIMEOUT_S[end.signal is not None])
        if not self.run.register_path.exists() and self.run.snapshot_files():
            from gpuaudit.pipeline import rebuild  # the rules and renderers: only here

            # The deploy's trends baseline and junit.xml threshold, as pyinfra would have read
            # them.
            with suppress(ValueError, OSError):  # said once, by the caller: no register
                rebuild(
                    self.run,
                    previous=self.env.get("GPUAUDIT_PREVIOUS"),
                    fail_on=self.env.get("GPUAUDIT_FAIL_ON") or None,
                )


def exit_status(returncode: int) -> int:
    """A process's exit status as a shell reports it: 128 + the signal for one killed by a
    signal (``Popen`` gives -SIGNAL), so that the worst of several statuses is the worst."""
    return 128 - returncode if returncode < 0 else returncode


def run_shards(commands: Sequence[tuple[list[str], Mapping[str, str]]]) -> int:
    """Run each (command, environment) at once, each pyinfra in a process group of its own;
    return the worst exit status (0 when there is none; a shard killed by a signal is 128 +
    the signal). :class:`_Stopped` stops them all, also those started when it came while the
    others were being started."""
    children: list[subprocess.Popen[bytes]] = []
    try:
        for command, env in commands:
            children.append(
                subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, start_new_session=True)
            )
        return max((exit_status(child.wait()) for child in children), default=0)
    except _Stopped:
        for child in children:
            with suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGTERM)
        for child in children:
            with suppress(subprocess.TimeoutExpired):
                child.wait(_STOP_GRACE_S)
            with suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        raise


def _pyinfra_argv(args: argparse.Namespace) -> list[str]:
    limits = [f"--limit={pattern}" for pattern in args.limit or ()]
    return ["-y", *args.pyinfra, *limits, args.inventory, AUDIT_OPERATION]


def cmd_audit(args: argparse.Namespace) -> int:
    refused = [o.partition("=")[0] for o in args.pyinfra]
    refused = [name for name in refused if name in REFUSED_PYINFRA_OPTIONS]
    for name in refused:
        print(
            f"gpuaudit: {name} is not for an audit: {REFUSED_PYINFRA_OPTIONS[name]}",
            file=sys.stderr,
        )
    if refused:
        return 2
    if args.previous and not (Path(args.previous) / "hosts").is_dir():
        print(f"gpuaudit: --previous {args.previous} is not a gpuaudit run", file=sys.stderr)
        return 2
    policy = args.policy or os.environ.get("GPUAUDIT_POLICY")
    if policy and not _policy_usable(policy):
        return 2  # checked before any host is contacted; the deploy loads it again
    kube_nodes = _kube_nodes_text(args)
    if kube_nodes is False:
        return 2
    try:
        run = new_run_dir(args.reports_dir, args.run_id)
    except OSError as error:
        print(f"gpuaudit: cannot make a run directory: {os_error_text(error)}", file=sys.stderr)
        return 2
    if not _store_kube_view(args, run, kube_nodes):
        return 2
    env = dict(os.environ, GPUAUDIT_RUN_DIR=str(run.path.resolve()))
    if policy:
        env["GPUAUDIT_POLICY"] = str(Path(policy).resolve())
    # The deploy writes the register: it reads the trends baseline and junit threshold here.
    if args.previous:
        env["GPUAUDIT_PREVIOUS"] = str(Path(args.previous).resolve())
    # junit.xml fails by this run's --fail-on, as the exit status does; never by one the
    # environment holds (for plain pyinfra), which the exit status would not follow.
    env.pop("GPUAUDIT_FAIL_ON", None)
    if args.fail_on:
        env["GPUAUDIT_FAIL_ON"] = args.fail_on
    # The process that writes the register leaves its verdict here (verdict.py).
    with tempfile.TemporaryDirectory(prefix="gpuaudit-") as private:
        handed = Path(private, "verdict.json")
        env[VERDICT_ENV] = str(handed)
        audit = AuditRun(run, _pyinfra_argv(args), env, shards=args.shards)
        with _stop_on_signals():
            try:
                end = audit.audit()
            except _Stopped as stop:
                end = RunEnd(signal=str(stop))
            if end is not None:
                audit.close(end)
        return _audit_result(run, end, args.fail_on, handed)


def _policy_usable(path: str) -> bool:
    from gpuaudit.policy.check import load_for_cli  # the policy and its YAML: only when given

    return load_for_cli(path) is not None


def _kube_nodes_text(args: argparse.Namespace) -> str | bool | None:
    """The text of ``--kube-nodes FILE`` (None without the option; False, said, when the file
    cannot be read or holds no node list: refused before any host is contacted)."""
    from gpuaudit.parsers.errors import ParseError

    path = getattr(args, "kube_nodes", None)
    if not path:
        return None
    if getattr(args, "kubeconfig", None) or getattr(args, "kube_context", None):
        print("gpuaudit: give --kube-nodes or --kubeconfig / --kube-context", file=sys.stderr)
        return False
    try:
        from gpuaudit.kubeview import read_file

        return read_file(path)
    except OSError as error:
        print(f"gpuaudit: --kube-nodes: {os_error_text(error)}", file=sys.stderr)
    except ParseError as error:
        print(f"gpuaudit: --kube-nodes {path}: {error}", file=sys.stderr)
    return False


def _store_kube_view(args: argparse.Namespace, run: RunDir, text: str | bool | None) -> bool:
    """Keep the run's Kubernetes view (kubeview.py) before pyinfra starts: the file given, or
    what ``kubectl get nodes -o json`` printed, or why kubectl failed (the audit goes on)."""
    asked = getattr(args, "kubeconfig", None) or getattr(args, "kube_context", None)
    if not isinstance(text, str) and not asked:
        return True  # no view asked for: the Kubernetes code is not even loaded
    from gpuaudit.kubeview import read_kubectl, store

    try:
        if isinstance(text, str):
            store(run.path, text=text, source=f"file {Path(args.kube_nodes).resolve()}")
        else:
            output, command, error = read_kubectl(args.kubeconfig, args.kube_context)
            if error is not None:
                print(f"gpuaudit: Kubernetes view not read: {error}", file=sys.stderr)
            store(run.path, text=output, source=command, error=error)
    except OSError as error:
        print(f"gpuaudit: cannot keep the Kubernetes view: {os_error_text(error)}", file=sys.stderr)
        return False
    return True


def _audit_result(
    run: RunDir, end: RunEnd | None, fail_on: str | None, handed: Path | None = None
) -> int:
    """Say how the audit went and give its exit status.

    pyinfra exits 1 whenever a host failed; for an audit that is a finding, so the status comes
    from the register: 0, or 1 where no host could be audited or --fail-on risks are open;
    2 when there is no register; 128 + the signal after an interruption. ``handed``: where the
    process that wrote the register left its verdict (verdict.py), read instead of the register.
    """
    interrupted = 128 + signal.Signals[end.signal] if end and end.signal else None
    if not run.register_path.exists():
        removed = run.discard_if_empty()
        said = f"{end}, " if end else ""
        where = (
            "nothing was collected, so the run directory was removed"
            if removed
            else f"what was collected is in {run.hosts_dir.resolve()}"
        )
        print(f"gpuaudit: no register was written ({said}see above); {where}", file=sys.stderr)
        return interrupted or 2
    verdict = taken_over(handed, run.register_path) if handed else None
    if verdict is None:  # what the summary and the gate read, without the hosts' outcomes
        verdict = AuditVerdict.of(run.load_register(outcomes=False))
    verdict.print_summary(run.html_path, run.register_path)
    if interrupted:
        print(
            f"gpuaudit: {end}: the register holds what was collected, {verdict.not_audited} of "
            f"{count_of(verdict.hosts, 'host')} not audited; rebuild it with: "
            f"gpuaudit report {run.path.resolve()}",
            file=sys.stderr,
        )
        return interrupted
    return verdict.status(fail_on)
