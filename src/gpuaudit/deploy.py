"""The audit as pyinfra deploy code: collect each host once, write its snapshot as it arrives,
then write the risk register once for the whole run.

``deploys/audit.py`` calls :func:`audit`. Two operations are queued per run:

1. on every host, ``GpuAuditSections`` (one remote command) → snapshot JSON in the run directory;
2. once, after every host has finished step 1: snapshots of hosts that never connected are
   added as ``unreachable`` or ``auth_failed`` and ``register.json`` / ``index.html`` are
   written.

pyinfra runs an operation on all hosts (in parallel) before starting the next, which is what
makes step 2 see the whole fleet.

When no host connects, pyinfra stops ("No hosts remaining!") before it loads the deploy, so
step 2 never runs; nor does it when ``gpuaudit audit`` is interrupted and stops pyinfra. For
those runs ``gpuaudit audit`` starts :func:`close_run_main` in a second pyinfra process, which
loads the same inventory with the same options, gives every host without a snapshot one (its
connection error, or ``not_audited``) and writes the register as step 2 does
(:func:`account_for_hosts` and :func:`write_run_register` serve both).

Settings come from the environment so the same deploy file serves prod and the demo:
``GPUAUDIT_RUN_DIR`` (use exactly this run directory), else ``GPUAUDIT_REPORTS_DIR`` (default
``reports``) and ``GPUAUDIT_RUN_ID`` (default: UTC time) name a new one; ``GPUAUDIT_TIMEOUT``
(seconds for one host's collection, default 300; each GPU tool call inside it is bounded by a
fifth of that, at most 60 s); ``GPUAUDIT_PREVIOUS`` (the run trends compare
with; default the newest earlier one); ``GPUAUDIT_FAIL_ON`` (junit.xml's failure threshold, a
severity in any case);
``GPUAUDIT_POLICY`` (a site policy file, see gpuaudit.policy: loaded once per run, copied into
the run directory as policy.yaml so ``gpuaudit report`` judges the run the same way later).
``gpuaudit audit`` also sets ``GPUAUDIT_VERDICT_FILE``: the register's summary and gate counts
are written there for it (report/verdict.py), so it prints them without reading register.json.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from types import FrameType
from typing import Any, get_type_hints

import click
import pyinfra
from gevent.pool import Pool
from pyinfra import logger
from pyinfra.api.exceptions import ConnectError, PyinfraError
from pyinfra.api.host import Host
from pyinfra.api.state import State
from pyinfra.api.util import PYINFRA_INSTALL_DIR
from pyinfra.connectors.ssh import SSHConnector
from pyinfra.context import ctx_host, ctx_state
from pyinfra.operations import python

from gpuaudit.assemble.build import build_snapshot, failed_snapshot
from gpuaudit.audit_run import SEVERITIES
from gpuaudit.collect import new_nonce
from gpuaudit.facts.gpu import NOT_UNPACKED, GpuAuditSections
from gpuaudit.model.jsonable import as_given_json
from gpuaudit.model.status import (
    connection_failed_snapshot,
    not_audited_snapshot,
    timed_out_snapshot,
)
from gpuaudit.parsers.bundle import Bundle
from gpuaudit.policy import Policy, PolicyError, load_policy
from gpuaudit.policy.defaults import policy_keys
from gpuaudit.policy.diag import DiagRequest, diag_request
from gpuaudit.policy.settings import resolve_settings
from gpuaudit.report.cycles import settle_for_collection
from gpuaudit.report.provenance import pyinfra_scope, record_provenance
from gpuaudit.report.run import RunDir, RunEnd, new_run_dir, os_error_text
from gpuaudit.report.verdict import hand_over

# Inventory data copied into snapshots. Only these keys: host data also holds connection
# settings (ssh_password, keys) that must never reach a report.
HOST_DATA_KEYS = (
    "expected_gpu_count",
    "gpu_model",
    "gpu_vendor",
    "desired_driver_version",
    "desired_driver_branch",
    "required_cuda_versions",
    "mig_config_name",
    "required_models",
    "multi_tenant",
    "nvlink_expected",
    "rollout_stage",
    "site",
    "rack",
    "owner",
)

# Each GPU tool call in the collector gets this share of the host's time limit, at most MAX.
_TOOL_TIMEOUT_SHARE = 5
_TOOL_TIMEOUT_MAX_S = 60
# gevent's loop clock, which ends pyinfra's wait for a command, may lag time.monotonic().
_CLOCK_SLACK_S = 0.5
# paramiko's transport wakes every 0.1 s on each open connection to see whether it is to stop
# (Transport._active_check_timeout), and pyinfra holds every host's connection open for the
# whole run: on a fleet most of the controller's CPU went to those wake-ups while hosts were
# collecting. The audit's connections check every 30 s: a wake-up costs the controller 0.1 to
# 0.3 ms, and a connection open for a host's whole collection (seconds on a real host, most of a
# minute for a hundred simulated ones sharing one CPU) woke every 2 s for about 2 ms per host.
# Nothing waits on these wake-ups: data arriving wakes the transport at once, and a closed
# connection still ends at once (closing the socket ends its pending read). The connections
# carry no keepalive, which would be sent from them.
_SSH_IDLE_CHECK_S = 30.0

_runs: dict[int, RunDir] = {}
_policies: dict[int, Policy | None] = {}


def host_data_for_snapshot(h: Host) -> dict[str, Any]:
    """The inventory data the rules and the remediation read for a host: the keys above, every
    policy setting the host's data sets (see policy.defaults), and its groups. Each value in
    the form JSON gives back (``as_given_json``: a set of models is a sorted list): the snapshot
    file holds it so, and the register judges the same value whether it is made now or rebuilt
    from the file."""
    keys = (*HOST_DATA_KEYS, *policy_keys())
    # pyinfra's data layers merged once, as it reads them (the first that has a key wins):
    # asked key by key, each of some sixty keys, mostly unset, went through every layer and
    # raised an exception in each. Data that is a plain mapping is read as it is.
    merge = getattr(h.data, "dict", None)
    merged = merge() if callable(merge) else h.data
    data: dict[str, Any] = {
        key: as_given_json(value) for key in keys if (value := merged.get(key)) is not None
    }
    data["groups"] = sorted(g for g in h.groups if g != "all")
    return data


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def current_run() -> RunDir:
    """The run directory shared by every host of this pyinfra run."""
    key = id(ctx_state.get())
    # Not sharded, this process writes the register from the snapshots it wrote itself.
    remember = not os.environ.get("GPUAUDIT_SHARD")
    if key not in _runs and os.environ.get("GPUAUDIT_RUN_DIR"):
        _runs[key] = RunDir(os.environ["GPUAUDIT_RUN_DIR"], remember_written=remember)
    if key not in _runs:
        reports = os.environ.get("GPUAUDIT_REPORTS_DIR") or "reports"
        try:
            made = new_run_dir(reports, os.environ.get("GPUAUDIT_RUN_ID") or None)
            _runs[key] = RunDir(made.path, remember_written=remember)
        except ValueError as error:  # GPUAUDIT_RUN_ID that is no plain directory name
            raise PyinfraError(f"gpuaudit: GPUAUDIT_RUN_ID: {error}") from None
        except OSError as error:
            raise PyinfraError(
                f"gpuaudit: cannot create a run directory in {reports}: {os_error_text(error)}"
            ) from None
        logger.info(f"--> gpuaudit run directory: {_runs[key].path}")
    return _runs[key]


def current_policy() -> Policy | None:
    """The run's site policy (GPUAUDIT_POLICY), read once and copied into the run directory.

    A policy with mistakes stops the deploy here, while it is being prepared, with pyinfra's
    one-line error (a PyinfraError naming the file, line and column): better no audit than a
    register judged by half a policy. It is read before the run directory is made, so a run
    refused for its policy leaves no directory behind.
    """
    key = id(ctx_state.get())
    if key not in _policies:
        try:
            path = policy_path(ctx_state.get())
            policy = load_policy(path) if path else None
        except PolicyError as error:
            raise PyinfraError(f"gpuaudit: the site policy cannot be used: {error}") from None
        if policy is not None:
            try:
                copied = policy.copy_to(current_run().path)
            except OSError as error:
                raise PyinfraError(
                    f"gpuaudit: cannot keep the policy in the run: {os_error_text(error)}"
                ) from None
            logger.info(f"--> gpuaudit policy: {path} (copied to {copied})")
        _policies[key] = policy
    return _policies[key]


def fail_on_threshold() -> str | None:
    """junit.xml's failure threshold (``GPUAUDIT_FAIL_ON``): one of ``gpuaudit audit
    --fail-on``'s severities, in any case (``HIGH`` is high); None where it is unset.

    Any other value stops the run before a host is collected, with one error line: a run asked
    to fail on some severity that could not would pass every CI gate that reads its junit.xml,
    and one that guessed another threshold would gate on something nobody asked for."""
    given = os.environ.get("GPUAUDIT_FAIL_ON") or None
    if given is None:
        return None
    threshold = given.strip().lower()
    if threshold not in SEVERITIES:
        raise PyinfraError(
            f"gpuaudit: GPUAUDIT_FAIL_ON={given!r} is no severity: use one of "
            + ", ".join(SEVERITIES)
        )
    return threshold


def policy_path(state: State) -> str | None:
    """The site policy of a run: ``GPUAUDIT_POLICY``, else the ``gpuaudit_policy`` host data
    the inventory gives (one file for the whole inventory)."""
    if os.environ.get("GPUAUDIT_POLICY"):
        return os.environ["GPUAUDIT_POLICY"]
    named = {str(h.data.get("gpuaudit_policy")) for h in state.inventory}
    named.discard("None")
    if len(named) > 1:
        raise PolicyError(f"the inventory names several policies: {', '.join(sorted(named))}")
    return named.pop() if named else None


def collection_timeouts() -> tuple[int, int]:
    """Seconds for one host's whole collection (GPUAUDIT_TIMEOUT), and for each GPU tool call
    inside it: a fifth of that, at most 60, so that a driver that hangs costs one bounded call
    and the host still reports every other section before its own time is up."""
    timeout = max(1, int(os.environ.get("GPUAUDIT_TIMEOUT", "300")))
    return timeout, max(1, min(_TOOL_TIMEOUT_MAX_S, timeout // _TOOL_TIMEOUT_SHARE))


def host_diag_request(name: str, host_data: dict[str, Any]) -> DiagRequest:
    """The dcgmi diag level the run's policy sets for a host (policy/diag.py); none when the
    policy cannot be read here (the run refuses such a policy before any host is collected)."""
    try:
        policy = current_policy()
    except PyinfraError:
        return DiagRequest()
    return diag_request(resolve_settings(policy, name, host_data).values)


def _over_ssh(host: Host) -> bool:
    return isinstance(getattr(host, "connector", None), SSHConnector)


def calm_ssh_transport(host: Host) -> None:
    """Let the host's open SSH connection wake every :data:`_SSH_IDLE_CHECK_S` instead of
    every 0.1 s (see above); nothing for other connectors."""
    if not _over_ssh(host):
        return
    client = getattr(host.connector, "client", None)
    transport = client.get_transport() if client is not None else None
    sock = getattr(transport, "sock", None)
    if sock is not None and hasattr(sock, "settimeout"):
        sock.settimeout(_SSH_IDLE_CHECK_S)


def operation_order(state: State) -> list[int]:
    """What pyinfra's ``get_operation_order_from_stack`` gives, read from the frames alone.

    In CLI mode pyinfra orders each operation it is given by the line numbers of the calls that
    led to it: the deploy file's and every frame below it outside pyinfra. It reads them through
    ``inspect.stack()``, which for every frame also looks the file's source up and searches
    ``sys.modules`` for its module: 1 to 4 ms for each operation on each host, on the control
    node. A frame's own code object names the same file (the source file of a module loaded
    from one) and its line, so this gives the same list in microseconds
    (tests/facts/test_operation_order.py compares the two from the same calls).
    """
    frames = []
    outer: FrameType | None = sys._getframe(1)  # pyinfra's caller, as for pyinfra's own
    while outer is not None:
        frames.append(outer)
        outer = outer.f_back
    frames.reverse()
    first = 0
    deploy = state.current_deploy_filename
    if deploy:
        # From the outermost frame of the deploy file; without one, no frame (pyinfra's own
        # search then stops at its own frame, which it does not count).
        found = (i for i, frame in enumerate(frames) if frame.f_code.co_filename == deploy)
        first = next(found, len(frames))
    lines = [state.current_op_file_number] if pyinfra.is_cli else []
    for frame in frames[first:]:
        if not frame.f_code.co_filename.startswith(PYINFRA_INSTALL_DIR):
            lines.append(frame.f_lineno)
    return lines


def use_quick_operation_order() -> None:
    """Have pyinfra order operations with :func:`operation_order` (the same order, without
    reading every frame's source for each operation and host); left as it is where this
    pyinfra has no such function to replace."""
    # The module, not the decorator of the same name that pyinfra.api exports.
    module = importlib.import_module("pyinfra.api.operation")
    if callable(getattr(module, "get_operation_order_from_stack", None)):
        module.get_operation_order_from_stack = operation_order  # type: ignore[attr-defined]


_GLOBAL_ARGUMENTS: list[tuple[str, type]] = []


def global_arguments() -> list[tuple[str, type]]:
    """What pyinfra's ``all_global_arguments`` gives (each global argument and its type, from
    ``get_type_hints`` of its ``AllArguments`` TypedDict), read once per process: pyinfra
    resolves those hints afresh for every operation on every host (about 0.2 ms a call). A new
    list each call, as pyinfra's is."""
    if not _GLOBAL_ARGUMENTS:
        from pyinfra.api.arguments import AllArguments

        _GLOBAL_ARGUMENTS.extend(get_type_hints(AllArguments).items())
    return list(_GLOBAL_ARGUMENTS)


def use_cached_global_arguments() -> None:
    """Have pyinfra read its global arguments' types once (:func:`global_arguments`); left as
    it is where this pyinfra has no such function to replace."""
    for name in ("pyinfra.api.arguments", "pyinfra.api.facts"):
        module = importlib.import_module(name)
        if callable(getattr(module, "all_global_arguments", None)):
            module.all_global_arguments = global_arguments  # type: ignore[attr-defined]


def _collect(host: Host, timeout: int, tool_timeout: int, diag: DiagRequest) -> dict[str, Any]:
    """The collector's fact on ``host``: packed over SSH (a third of the bytes), plain again
    where the host cannot unpack it, plain through every other connector."""
    packed = _over_ssh(host)
    while True:
        # _ignore_errors: pyinfra fails a host whose fact command failed or timed out, and a
        # failed host runs no later operation; were it the host the register is written on
        # (_run_once), the run would end without a register.
        raw: dict[str, Any] = host.get_fact(
            GpuAuditSections,
            nonce=new_nonce(),
            command_timeout=tool_timeout,
            dcgm_diag_level=diag.level,
            dcgm_diag_timeout=diag.timeout_s or None,
            packed=packed,
            _timeout=timeout,
            _ignore_errors=True,
        )
        if not (packed and raw.get("problems") == [NOT_UNPACKED]):
            return raw
        packed = False


def collect_host(state: State, host: Host, run: RunDir) -> None:
    """Collect one host and write its snapshot. Never raises: a sick host is a finding, and a
    snapshot that cannot be written is one error line (the host stays in the run, so that the
    register step still runs and says what it can)."""
    host_data = host_data_for_snapshot(host)
    started = _now()
    timeout, tool_timeout = collection_timeouts()
    diag = host_diag_request(host.name, host_data)
    # The host's time limit grows by the diagnostic's own bound: a level-3 run is most of an
    # hour, which GPUAUDIT_TIMEOUT (sized for passive reads) does not cover.
    timeout += diag.timeout_s
    clock = time.monotonic()
    try:
        bundle = Bundle.from_dict(_collect(host, timeout, tool_timeout, diag))
        if bundle.sections:
            snapshot = build_snapshot(host.name, bundle, host_data=host_data, collected_at=started)
        elif time.monotonic() - clock + _CLOCK_SLACK_S >= timeout:
            # pyinfra answers a command stopped at _timeout with the fact's default, as it does
            # a command that failed: only the time it took tells the two apart.
            snapshot = timed_out_snapshot(
                host.name, timeout, host_data=host_data, collected_at=started
            )
        else:
            problem = "; ".join(bundle.problems) or "no output"
            snapshot = failed_snapshot(
                host.name,
                f"the collector failed or the connection dropped before any output: {problem}",
                host_data=host_data,
                collected_at=started,
            )
    except Exception as error:  # any failure on one host stays on that host
        logging.getLogger(__name__).debug("collection failed on %s", host.name, exc_info=True)
        snapshot = failed_snapshot(
            host.name,
            f"collection failed: {type(error).__name__}: {error}",
            host_data=host_data,
            collected_at=started,
        )
    try:
        path = run.write_snapshot(snapshot)
    except OSError as error:  # a full or read-only reports directory: say so, once, per host
        host.log_styled(
            f"gpuaudit: cannot write the snapshot in {run.hosts_dir}: {os_error_text(error)}",
            fg="red",
            log_func=logger.error,
        )
        return
    logger.info(f"{host.print_prefix}gpuaudit snapshot: {snapshot.status.value} → {path}")


def _retry_connect(other: Host) -> str | None:
    """Connect once more to a host that failed to connect; None when it now answers.

    pyinfra logs a connection error but does not keep it, and the register must say why a
    host could not be audited (refused, timed out, authentication failed).
    """
    try:
        other.connect(raise_exceptions=True, show_errors=False)
    except ConnectError as error:
        return str(error) or type(error).__name__
    except Exception as error:
        return f"{type(error).__name__}: {error}"
    return None


def _retry_connects(state: State, hosts: Sequence[Host]) -> dict[Host, str | None]:
    """:func:`_retry_connect` for each host, as many at a time as pyinfra connects (a pool of
    its own: the caller may hold a slot of pyinfra's)."""
    if not hosts:
        return {}
    pool = Pool(max(1, min(len(hosts), state.config.PARALLEL or len(hosts))))
    greenlets = {other: pool.spawn(_retry_connect, other) for other in hosts}
    pool.join()
    return {other: greenlet.get() for other, greenlet in greenlets.items()}


def account_for_hosts(state: State, run: RunDir, end: RunEnd | None = None) -> None:
    """Give every host of the run (the inventory within --limit) that has no snapshot yet one
    that says why, so that no host is missing from the register.

    ``end`` is how the run ended when pyinfra did not get to write the register. Stopped by a
    signal, each such host is not audited. Otherwise a host that connected has failed before
    its collection finished, and a host that did not gets one more connection attempt (all at
    once): those that fail are written as unreachable, or auth_failed when the host refused the
    login, with the connection error; one that answers now is collected, or, when the run has
    ended already (``end``), not audited.
    """
    # Which hosts have a snapshot, from the file names alone: the snapshots are loaded once,
    # for the register.
    written = {p.name for p in run.snapshot_files()}
    missing = [
        h
        for h in state.inventory
        if state.is_host_in_limit(h) and run.snapshot_path(h.name).name not in written
    ]
    if end is not None and end.signal is not None:
        for other in missing:
            snapshot = not_audited_snapshot(
                other.name, end.not_audited_detail, host_data=host_data_for_snapshot(other)
            )
            run.write_snapshot(snapshot)
        return
    for other in (h for h in missing if h.connected):
        run.write_snapshot(
            failed_snapshot(
                other.name,
                "the host failed before its collection finished",
                host_data=host_data_for_snapshot(other),
                collected_at=_now(),
            )
        )
    retried = _retry_connects(state, [h for h in missing if not h.connected])
    for other, error in retried.items():
        host_data = host_data_for_snapshot(other)
        if error is not None:
            snapshot = connection_failed_snapshot(other.name, error, host_data=host_data)
        elif end is None:
            collect_host(state, other, run)
            continue
        else:
            snapshot = not_audited_snapshot(other.name, end.not_audited_detail, host_data=host_data)
        run.write_snapshot(snapshot)


def write_run_register(run: RunDir, policy: Policy | None) -> Path:
    """Write the register and its views from the run's snapshots; return index.html."""
    # Imported here: a shard that only collects never loads the rules and the renderers.
    from gpuaudit.pipeline import ReportRequest, write_request

    record_provenance(run.path, pyinfra_scope(), policy)  # inventory, --limit, who, versions
    # Set by `gpuaudit audit --previous/--fail-on`; unset, trends use the newest earlier run.
    previous = os.environ.get("GPUAUDIT_PREVIOUS") or None
    request = ReportRequest(
        run.load_snapshots(), policy=policy, previous=previous, fail_on=fail_on_threshold()
    )
    register = write_request(run, request)
    hand_over(register, run.register_path)  # to `gpuaudit audit`, which then reads no register
    return run.html_path


def write_register(state: State, host: Host, run: RunDir, policy: Policy | None = None) -> bool:
    """Account for every inventory host (:func:`account_for_hosts`), then write the register
    and the page. A reports directory that cannot take them, or a previous run to compare with
    that is this run (GPUAUDIT_PREVIOUS), is one error line, not a traceback (and the operation
    fails)."""
    from gpuaudit.pipeline import PreviousRunError

    try:
        account_for_hosts(state, run)
        index = write_run_register(run, policy)
    except (OSError, PreviousRunError) as error:
        why = os_error_text(error) if isinstance(error, OSError) else str(error)
        host.log_styled(
            f"gpuaudit: cannot write the register in {run.path}: {why}",
            fg="red",
            log_func=logger.error,
        )
        return False
    logger.info(f"--> gpuaudit risk register: {index}")
    print(f"gpuaudit report: {index}")
    return True


def audit() -> None:
    """Queue the audit for the current host (call from a deploy file). In a shard of a
    sharded run (``GPUAUDIT_SHARD``) the host is only collected: ``gpuaudit audit`` writes the
    register once, after every shard."""
    fail_on_threshold()  # first: a threshold or policy that cannot be used leaves no run
    policy = current_policy()  # directory behind
    if id(ctx_state.get()) not in _runs:
        settle_for_collection()  # once per run, before its first host is collected
    run = current_run()
    calm_ssh_transport(ctx_host.get())  # connected already: pyinfra connects before deploys
    use_quick_operation_order()
    use_cached_global_arguments()
    python.call(
        name="gpuaudit: collect every audit section (one remote command)",
        function=collect_host,
        run=run,
    )
    if os.environ.get("GPUAUDIT_SHARD"):
        return
    python.call(
        name="gpuaudit: write the risk register",
        function=write_register,
        run=run,
        policy=policy,
        _run_once=True,
    )


# --- the register of a run pyinfra ended early (`gpuaudit audit` runs this after pyinfra) ------

# The operation pyinfra is given in `gpuaudit audit`'s command line: audit() above.
AUDIT_OPERATION = f"{__name__}.audit"


def close_run_main(argv: Sequence[str]) -> int:
    """Write the register of a run that pyinfra ended before writing it: every host connection
    failed ("No hosts remaining!", where pyinfra stops before any operation), --fail-percent
    was reached, or ``gpuaudit audit`` was interrupted and stopped pyinfra.

    ``argv``: a :class:`RunEnd` word, then the pyinfra command line of the run (its options,
    the inventory and :data:`AUDIT_OPERATION`). The inventory is loaded by pyinfra's own
    command (as ``pyinfra … debug-inventory`` does, connecting nothing), so --limit, --data
    and the other options mean what they meant to the run. Returns 0 when the register was
    written, 2 (after one line on stderr) when it could not be.
    """
    end = RunEnd.from_arg(argv[0])
    pyinfra_argv = list(argv[1:])
    sys.argv = ["pyinfra", *pyinfra_argv]  # the run's command line, for its provenance
    state = _inventory_state(pyinfra_argv)
    if state is None:
        return 2
    logger.setLevel(logging.WARNING)  # pyinfra said its part; "Connected" again is noise
    try:
        policy = current_policy()
        run = current_run()
        account_for_hosts(state, run, end)
        write_run_register(run, policy)
    except PyinfraError as error:
        print(error, file=sys.stderr)
        return 2
    except OSError as error:
        print(f"gpuaudit: cannot write the register: {os_error_text(error)}", file=sys.stderr)
        return 2
    finally:
        for other in state.inventory:
            if other.connected:
                other.disconnect()
    return 0


def shard_main(argv: Sequence[str]) -> int:
    """pyinfra's own command for one shard of a sharded run (``argv``: its command line, one
    ``--limit`` per host of the shard, each a host's name).

    pyinfra matches each --limit against every host of the inventory (fnmatch): a shard of a
    10,000-host run is millions of matches, some 16 s of CPU for a quarter of the hosts,
    before a host is connected. Here a --limit that names a host is that host, looked up by
    name: the same host, and only it, even where a group has the same name or the name holds
    a wildcard character (which pyinfra would read as the group, or as a pattern). Any other
    --limit, and every --exclude, goes to pyinfra's matching as before."""
    from pyinfra_cli import cli as pyinfra_cli  # the caller imported pyinfra_cli first (gevent)
    from pyinfra_cli.main import main

    matches = getattr(pyinfra_cli, "_get_inventory_pattern_matches", None)
    if callable(matches):
        pyinfra_cli._get_inventory_pattern_matches = hosts_by_name(matches)
    sys.argv = ["pyinfra", *argv]
    main()
    return 0


def hosts_by_name(matches: Any) -> Any:
    """pyinfra's pattern matching (``matches``), with each --limit that names a host taken as
    that host (see :func:`shard_main`)."""

    def pattern_matches(inventory: Any, patterns: Any, option_name: str) -> list[Host]:
        patterns = list(patterns)
        hosts: dict[str, Host] = getattr(inventory, "hosts", None) or {}
        if option_name != "--limit" or not hosts:
            return list(matches(inventory, patterns, option_name))
        others = [p for p in patterns if p not in hosts]
        found = [hosts[p] for p in patterns if p in hosts]
        if others:
            found += matches(inventory, others, option_name)
        return list(set(found))

    return pattern_matches


def list_hosts_main(argv: Sequence[str]) -> int:
    """Print the name of every host a run's pyinfra command line (``argv``) selects, one
    ``host<TAB>NAME`` line each, NAME as a JSON string (an inventory's name may hold a line
    break), in inventory order (the hosts a sharded run splits); 2 when pyinfra refuses the
    command line."""
    state = _inventory_state(list(argv))
    if state is None:
        return 2
    for host in state.inventory:
        if state.is_host_in_limit(host):
            print(f"host\t{json.dumps(host.name)}")
    return 0


def _inventory_state(pyinfra_argv: list[str]) -> State | None:
    """pyinfra's state for a run's command line, built by pyinfra's command up to where it
    would connect to the hosts; None (after one line on stderr) when pyinfra refuses it."""
    from pyinfra_cli.cli import cli  # the caller imported pyinfra_cli first (gevent)

    args = [a for a in pyinfra_argv if a != AUDIT_OPERATION]
    chatter = io.StringIO()  # pyinfra's log lines and the inventory listing
    try:
        with contextlib.redirect_stdout(chatter), contextlib.redirect_stderr(chatter):
            cli.main([*args, "debug-inventory"], "pyinfra", standalone_mode=False)
    except SystemExit:
        pass  # how pyinfra's command ends after debug-inventory
    except click.ClickException as error:
        # pyinfra's own errors keep what went wrong as .exception (an inventory that does not
        # load); click's (an option pyinfra does not know) are their message.
        cause = getattr(error, "exception", None)
        problem = f"{type(cause).__name__}: {cause}" if cause is not None else str(error)
        print(f"gpuaudit: pyinfra refused the run's inventory: {problem}", file=sys.stderr)
        return None
    if not ctx_state.isset():
        print("gpuaudit: pyinfra loaded no inventory", file=sys.stderr)
        return None
    return ctx_state.get()
