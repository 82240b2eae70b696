"""The audit as pyinfra deploy code: collect each host once, write its snapshot as it arrives,
then write the risk register once for the whole run.

``deploys/audit.py`` calls :func:`audit`. Two operations are queued per run:

1. on every host, ``GpuAuditSections`` (one remote command) → snapshot JSON in the run directory;
2. once, after every host has finished step 1: snapshots of hosts that never connected are
   added as ``unreachable`` or ``auth_failed`` and ``register.json`` / ``index.html`` are
   written.

pyinfra runs an operation on all hosts (in parallel) before starting the next, which is what
makes step 2 see the whole fleet.

Settings come from the environment so the same deploy file serves prod and the demo:
``GPUAUDIT_RUN_DIR`` (use exactly this run directory), else ``GPUAUDIT_REPORTS_DIR`` (default
``reports``) and ``GPUAUDIT_RUN_ID`` (default: UTC time) name a new one; ``GPUAUDIT_TIMEOUT``
(seconds for one host's collection, default 300; each GPU tool call inside it is bounded by a
fifth of that, at most 60 s); ``GPUAUDIT_PREVIOUS`` (the run trends compare
with; default the newest earlier one); ``GPUAUDIT_FAIL_ON`` (junit.xml's failure threshold);
``GPUAUDIT_POLICY`` (a site policy file, see gpuaudit.policy: loaded once per run, copied into
the run directory as policy.yaml so ``gpuaudit report`` judges the run the same way later).
"""

from __future__ import annotations

import logging
import os
import time
from datetime import datetime, timezone
from typing import Any

from pyinfra import logger
from pyinfra.api.exceptions import ConnectError
from pyinfra.api.host import Host
from pyinfra.api.state import State
from pyinfra.context import ctx_state
from pyinfra.operations import python

from gpuaudit.collect import new_nonce
from gpuaudit.facts.gpu import GpuAuditSections
from gpuaudit.model.build import build_snapshot, failed_snapshot
from gpuaudit.model.status import connection_failed_snapshot, timed_out_snapshot
from gpuaudit.parsers.bundle import Bundle
from gpuaudit.policy import Policy, PolicyError, load_policy
from gpuaudit.report.run import RunDir, new_run_dir
from gpuaudit.rules.policy_defaults import policy_keys

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

_runs: dict[int, RunDir] = {}
_policies: dict[int, Policy | None] = {}


def host_data_for_snapshot(h: Host) -> dict[str, Any]:
    """The inventory data the rules and the remediation read for a host: the keys above, every
    policy setting the host's data sets (see rules.policy_defaults), and its groups."""
    keys = (*HOST_DATA_KEYS, *policy_keys())
    data: dict[str, Any] = {key: h.data.get(key) for key in keys if h.data.get(key) is not None}
    data["groups"] = sorted(g for g in h.groups if g != "all")
    return data


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def current_run() -> RunDir:
    """The run directory shared by every host of this pyinfra run."""
    key = id(ctx_state.get())
    if key not in _runs and os.environ.get("GPUAUDIT_RUN_DIR"):
        _runs[key] = RunDir(os.environ["GPUAUDIT_RUN_DIR"])
    if key not in _runs:
        _runs[key] = new_run_dir(
            os.environ.get("GPUAUDIT_REPORTS_DIR", "reports"),
            os.environ.get("GPUAUDIT_RUN_ID") or None,
        )
        logger.info(f"--> gpuaudit run directory: {_runs[key].path}")
    return _runs[key]


def current_policy() -> Policy | None:
    """The run's site policy (GPUAUDIT_POLICY), read once and copied into the run directory.

    A policy with mistakes raises PolicyError here, while the deploy is being prepared: better
    no audit than a register judged by half a policy.
    """
    key = id(ctx_state.get())
    if key not in _policies:
        path = policy_path(ctx_state.get())
        policy = load_policy(path) if path else None
        if policy is not None:
            copied = policy.copy_to(current_run().path)
            logger.info(f"--> gpuaudit policy: {path} (copied to {copied})")
        _policies[key] = policy
    return _policies[key]


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


def collect_host(state: State, host: Host, run: RunDir) -> None:
    """Collect one host and write its snapshot. Never raises: a sick host is a finding."""
    host_data = host_data_for_snapshot(host)
    started = _now()
    timeout, tool_timeout = collection_timeouts()
    clock = time.monotonic()
    try:
        # _ignore_errors: pyinfra fails a host whose fact command failed or timed out, and a
        # failed host runs no later operation; were it the host the register is written on
        # (_run_once), the run would end without a register.
        raw = host.get_fact(
            GpuAuditSections,
            nonce=new_nonce(),
            command_timeout=tool_timeout,
            _timeout=timeout,
            _ignore_errors=True,
        )
        bundle = Bundle.from_dict(raw)
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
    path = run.write_snapshot(snapshot)
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


def write_register(state: State, host: Host, run: RunDir, policy: Policy | None = None) -> None:
    """Account for every inventory host, then write the register and the page.

    Hosts that failed to connect get one more attempt: a host that answers now is collected,
    the others are written as unreachable, or auth_failed when the host refused the login,
    with the connection error.
    """
    collected = {s.host for s in run.load_snapshots()}
    for other in state.inventory:
        if other.name in collected or not state.is_host_in_limit(other):
            continue
        host_data = host_data_for_snapshot(other)
        if other.connected:
            run.write_snapshot(
                failed_snapshot(
                    other.name,
                    "the host failed before its collection finished",
                    host_data=host_data,
                    collected_at=_now(),
                )
            )
            continue
        error = _retry_connect(other)
        if error is None:
            collect_host(state, other, run)
        else:
            run.write_snapshot(
                connection_failed_snapshot(
                    other.name, error, host_data=host_data, collected_at=_now()
                )
            )
    # Set by `gpuaudit audit --previous/--fail-on`; unset, trends use the newest earlier run.
    index = run.write_report(
        run.load_snapshots(),
        policy=policy,
        previous=os.environ.get("GPUAUDIT_PREVIOUS") or None,
        fail_on=os.environ.get("GPUAUDIT_FAIL_ON") or None,
    )
    logger.info(f"--> gpuaudit risk register: {index}")
    print(f"gpuaudit report: {index}")


def audit() -> None:
    """Queue the audit for the current host (call from a deploy file)."""
    run = current_run()
    policy = current_policy()
    python.call(
        name="gpuaudit: collect every audit section (one remote command)",
        function=collect_host,
        run=run,
    )
    python.call(
        name="gpuaudit: write the risk register",
        function=write_register,
        run=run,
        policy=policy,
        _run_once=True,
    )
