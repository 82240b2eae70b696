"""``gpuaudit upgrade``: a staged driver rollout over a pyinfra inventory.

    gpuaudit upgrade inventory/prod.py --to 550.127.05 [--policy FILE] [--dry]
    gpuaudit upgrade inventory/prod.py --to 550.127.05 --resume reports/upgrades/<rollout-id>

What it does, in order:

1. Audits every host (the audit's own one-command collector) into ``<rollout>/audit-before``
   and plans the rollout from those snapshots (:func:`gpuaudit.upgrade.plan.plan_rollout`):
   stages, which hosts are upgraded and which are skipped and why, the hosts already out of
   service. ``--dry`` prints that plan with each host's steps and stops there.
2. Takes the rollout's lease (a second controller is refused) and writes every step to the
   journal (``journal.jsonl``) before and after it runs, and ``rollout.json`` / ``index.html``
   after each, so ``--resume`` carries on after the controller died without repeating a
   finished step.
3. Per stage, canary first, per host (at most ``max_parallel`` at once, and never more hosts
   unavailable than ``max_unavailable`` allows, counting those out of service before the
   rollout and those it left out: :func:`gpuaudit.upgrade.limits.may_start`): drain
   through the site's hook, then the steps of ``deploys/driver_upgrade.py`` (stop services,
   unpin, install, pin, reload — or reboot where the reload is refused or the policy says so —,
   start services), then the health gate: a fresh audit of the host against the one before
   (:func:`gpuaudit.upgrade.gates.health_gate`), then undrain.
4. A failed gate rolls the host back to the version it had (and pins it there), re-checks it,
   and halts the rollout once a failure budget is spent (the canary's, or the waves' together,
   counted from the journal: :func:`gpuaudit.upgrade.limits.halt_reason`): no further host is
   started.
   An inconclusive gate pauses the rollout for a person (``--resume`` re-runs the gate).

Exit status: 0 completed (or a dry run), 1 halted, 4 paused, 3 another controller holds the
lease, 2 bad arguments.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any

from gpuaudit.model.snapshot import HostSnapshot
from gpuaudit.policy import Policy, load_policy
from gpuaudit.policy.upgrade import UpgradeSettings
from gpuaudit.report.run import RunDir
from gpuaudit.upgrade.drain import drain_commands
from gpuaudit.upgrade.gate_types import GateCheck, GateResult
from gpuaudit.upgrade.gates import health_gate
from gpuaudit.upgrade.health import expected_gpu_count
from gpuaudit.upgrade.host_checks import dcgm_diag_check, dcgm_diag_command, host_answer
from gpuaudit.upgrade.journal import (
    JOURNAL_FILE,
    EventStatus,
    HostOutcome,
    HostState,
    Journal,
    RolloutMeta,
    RolloutStatus,
    Step,
    load_state,
    parse_utc,
    utc_now,
    write_rollout_json,
)
from gpuaudit.upgrade.lease import Lease, LeaseError, LeaseHeld, acquire
from gpuaudit.upgrade.limits import unavailable_hosts
from gpuaudit.upgrade.plan import (
    HostPlan,
    InventoryHost,
    RolloutPlan,
    StagePlan,
    halt_reason,
    may_start,
    plan_rollout,
)
from gpuaudit.upgrade.report import write_rollout_report

EXIT_HALTED, EXIT_LEASE, EXIT_PAUSED = 1, 3, 4
# The steps of deploys/driver_upgrade.py a host goes through, between drain and gate.
DEPLOY_STEPS = ("stop_services", "unpin", "install", "pin", "reload", "start_services")
LEASE_TTL_S = 600
# A step's work: (True done | False failed | None skipped, detail).
StepAction = Callable[[], "tuple[bool | None, str]"]


@dataclass(frozen=True)
class Options:
    inventory: str
    target: str
    policy: str | None = None
    dry: bool = False
    resume: Path | None = None
    limit: tuple[str, ...] = ()
    reports_dir: Path = Path("reports")
    rollout_id: str | None = None
    deploy: Path = field(default_factory=lambda: default_deploy())


def default_deploy() -> Path:
    """deploys/driver_upgrade.py of this checkout, else of the current directory."""
    here = Path(__file__).resolve().parents[3] / "deploys" / "driver_upgrade.py"
    return here if here.is_file() else Path("deploys/driver_upgrade.py")


@dataclass
class Progress:
    """What the running controller counts while hosts run side by side."""

    running: set[str] = field(default_factory=set)
    halt: str = ""
    pause: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)


class Rollout:
    def __init__(self, opts: Options, policy: Policy | None, directory: Path) -> None:
        self.opts, self.policy, self.dir = opts, policy, directory
        self.settings: UpgradeSettings = policy.upgrade if policy else UpgradeSettings()
        self.journal: Journal | None = None
        self.before: dict[str, HostSnapshot] = {}
        self.plan: RolloutPlan | None = None
        self.meta: RolloutMeta | None = None
        self.progress = Progress()
        self._journal_lock = threading.Lock()
        self._lease_lock = threading.Lock()
        self._audits = 0
        # The audit each host's gate read: a rollback's re-check counts new errors from it, so
        # that what the failed driver logged is not held against the version it goes back to.
        self._gated: dict[str, HostSnapshot] = {}
        # Hosts out of service before the rollout that this controller audited again.
        self._rechecked_out: set[str] = set()

    # --- planning -------------------------------------------------------------------------

    def prepare(self) -> RolloutPlan:
        before_dir = self.dir / "audit-before"
        started = (self.dir / JOURNAL_FILE).exists()
        if not started and not RunDir(before_dir).register_path.exists():
            # No register: the audit never ran, or a controller killed during it left only
            # part of the fleet's snapshots (the rest would be planned as out of service).
            # No journal: nothing was touched yet, so that part is kept aside and the audit is
            # run anew. Once a journal exists the audit before is what the rollout was planned
            # from (and what a rollback returns to): it is never taken again.
            if before_dir.exists():
                before_dir.rename(_unused(self.dir / "audit-before.incomplete"))
            self._audit(before_dir, self.opts.limit)
        snapshots = RunDir(before_dir).load_snapshots()
        self.before = {s.host: s for s in snapshots}
        # Every inventory host in the rollout's scope is in the plan: one the audit wrote no
        # snapshot for is planned as not collected (skipped), never left out.
        hosts = [
            InventoryHost(
                name=entry.name,
                groups=entry.groups,
                host_data=snap.host_data if snap is not None else entry.data,
                snapshot=snap,
            )
            for entry in inventory_hosts(self.opts.inventory)
            if in_limit(entry, self.opts.limit)
            for snap in (self.before.get(entry.name),)
        ]
        listed = {h.name for h in hosts}
        hosts += [
            InventoryHost(
                name=s.host,
                groups=tuple(s.host_data.get("groups") or ()),
                host_data=s.host_data,
                snapshot=s,
            )
            for s in snapshots
            if s.host not in listed
        ]
        if not hosts:
            scope = f" matches --limit {' '.join(self.opts.limit)}" if self.opts.limit else ""
            raise RuntimeError(f"no host of the inventory {self.opts.inventory}{scope}")
        self.plan = plan_rollout(
            hosts, self.opts.target, self.settings, date.today(), policy=self.policy
        )
        stages = {stage.name: tuple(h.name for h in stage.hosts) for stage in self.plan.stages}
        self.meta = RolloutMeta(self.dir.name, self.opts.target, stages)
        return self.plan

    def _audit(self, run_dir: Path, limit: Sequence[str]) -> None:
        command = [
            sys.executable,
            "-m",
            "gpuaudit.cli",
            "audit",
            self.opts.inventory,
            "--reports-dir",
            str(run_dir.parent),
            "--run-id",
            run_dir.name,
        ]
        if self.opts.policy:
            command += ["--policy", self.opts.policy]
        for pattern in limit:
            command += ["--limit", pattern]
        done = _run(command)
        if not (run_dir / "hosts").is_dir():
            raise RuntimeError(f"the audit wrote no snapshots: {done.stderr.strip()[-500:]}")

    def audit_dir(self, name: str, why: str) -> Path:
        """A run directory no audit of this rollout has used: ``audits/NNN-<host>-<why>``.

        A resumed controller counts on from the audits already there. Were a name reused, the
        audit would write beside it (``…-2``) and the host would be judged by what the earlier
        audit left: a snapshot from before, or none from an audit cut short by a kill.
        """
        audits = self.dir / "audits"
        with self._journal_lock:
            if not self._audits and audits.is_dir():
                numbers = (p.name.partition("-")[0] for p in audits.iterdir())
                self._audits = max((int(n) for n in numbers if n.isdigit()), default=0)
            while True:
                self._audits += 1
                run_dir = audits / f"{self._audits:03d}-{_safe(name.rpartition('/')[2])}-{why}"
                if not run_dir.exists():
                    return run_dir

    def audit_host(self, name: str, why: str) -> HostSnapshot | None:
        run_dir = self.audit_dir(name, why)
        try:
            self._audit(run_dir, [name])
        except RuntimeError:
            return None
        snapshots = [s for s in RunDir(run_dir).load_snapshots() if s.host == name]
        return snapshots[0] if snapshots else None

    # --- journal ----------------------------------------------------------------------------

    def record(self, host: str | None, step: str, status: str, detail: str = "", **data) -> None:
        assert self.journal is not None and self.meta is not None
        with self._journal_lock:
            self.journal.record(host, step, status, detail, **data)
            state = load_state(self.dir)
            write_rollout_json(self.dir, state, self.meta)
            write_rollout_report(self.dir, state, self.meta)

    # --- running ----------------------------------------------------------------------------

    def run(self) -> int:
        assert self.plan is not None
        owner = f"{socket.gethostname()}:{os.getpid()}"
        try:
            lease = acquire(self.dir, owner, LEASE_TTL_S)
        except LeaseHeld as held:
            print(
                f"gpuaudit upgrade: {self.dir} is held by {held.holder} until "
                f"{held.expires_at}; not starting a second controller",
                file=sys.stderr,
            )
            return EXIT_LEASE
        stop = threading.Event()
        heartbeat = threading.Thread(
            target=self._keep_lease, args=(lease, stop), name="lease", daemon=True
        )
        heartbeat.start()
        try:
            return self._run(lease)
        finally:
            stop.set()
            heartbeat.join()
            lease.release()

    def _keep_lease(self, lease: Lease, stop: threading.Event) -> None:
        """Renew the lease every quarter of its time while the controller works: a soak, a
        reboot or a long diagnostic outlasts it, and an expired lease can be taken over by a
        second controller. Once it is lost, no further host is started."""
        while not stop.wait(LEASE_TTL_S / 4):
            try:
                with self._lease_lock:
                    lease.renew()
            except LeaseError as lost:
                self._halt(f"the lease was lost ({lost}): no further host is started")
                return

    def _run(self, lease: Lease) -> int:
        assert self.plan is not None and self.meta is not None
        self.journal = Journal.open(self.dir)
        if lease.taken_over:
            self.record(None, "rollout", "info", f"lease taken over: {lease.takeover_reason}")
        self.record(
            None,
            "rollout",
            "started",
            f"driver {self.opts.target}",
            target_version=self.opts.target,
        )
        state = load_state(self.dir)
        for host in self.plan.hosts:
            if state.host(host.name).events:
                continue  # a resumed rollout: recorded the first time
            if host.action == "skip":
                self.record(
                    host.name,
                    "rollout",
                    "skipped",
                    host.reason,
                    version_before=host.current_version,
                )
            else:
                self.record(
                    host.name,
                    "rollout",
                    "info",
                    f"planned in stage {host.stage}",
                    version_before=host.current_version,
                    pin_before=_pin(host),
                )
        self._finish_decided()
        for stage in self.plan.stages:
            # Counted from the journal before any host of the stage starts: a controller that
            # stopped between a failure and its halt, or a --resume of a halted rollout, must
            # not start a host the budget no longer allows.
            over = self._over_failure_budget()
            if over:
                self._halt(over)
                break
            todo = [h for h in self._stage_hosts(stage) if not self._finished(h.name)]
            if todo:
                self._run_stage(stage.name, todo, lease)
            if self.progress.halt or self.progress.pause:
                break
            if stage.name == self.settings.canary_stage and stage.to_upgrade:
                self._soak()
        if self.progress.pause:
            self.record(None, "pause", "info", self.progress.pause)
            if not self.progress.halt:
                return EXIT_PAUSED
        if self.progress.halt:  # a halt is the stronger: it is recorded last
            self.record(None, "halt", "info", self.progress.halt)
            return EXIT_HALTED
        self.record(None, "rollout", "done", "every stage finished")
        return 0

    def _stage_hosts(self, stage: StagePlan) -> list[HostPlan]:
        """The stage's hosts to upgrade, and any host of it that the journal shows this
        rollout began and did not finish although the plan, made again on resume, would now
        skip it (a waiver or the policy changed meanwhile): a host left mid-upgrade is carried
        on, never abandoned drained."""
        state = load_state(self.dir)
        return [h for h in stage.hosts if h.action == "upgrade" or _begun(state.host(h.name))]

    def _finish_decided(self) -> None:
        """Carry out, before any stage, what a controller before this one decided and did not
        finish, whatever the budgets now allow (it undoes or ends a change already made): the
        rollback of a host whose step or gate failed, and the undrain of a host rolled back
        and re-checked (healthy on its old driver; left drained it would count against
        max_unavailable for the rest of the rollout)."""
        assert self.plan is not None
        for host in self.plan.hosts:
            known = load_state(self.dir).host(host.name)
            due = _rollback_due(known)
            if due is not None:
                self._roll_back(host.name, due)
            elif known.outcome is HostOutcome.ROLLED_BACK and not known.is_finished("undrain"):
                self._step_once(host.name, "undrain", partial(self._drain, host.name, undrain=True))

    def _finished(self, name: str) -> bool:
        """Whether the host is done with: upgraded, rolled back, or failed and left as it
        stood; a host whose step failed and whose rollback never began (the controller stopped
        in between) is not: its rollback is still to run."""
        state = load_state(self.dir).host(name)
        if state.outcome is HostOutcome.FAILED:
            return _rollback_due(state) is None
        return state.outcome in (HostOutcome.UPGRADED, HostOutcome.ROLLED_BACK)

    def _run_stage(self, stage: str, hosts: list[HostPlan], lease: Lease) -> None:
        """Start the stage's hosts in order, each once :func:`may_start` allows it: at most
        ``max_parallel`` at once, and never more hosts out of service than ``max_unavailable``
        allows, counting those out before the rollout and those it left out (failed, not
        restored). A host that may not start waits for a running one to end; when none runs,
        it never could, and the rollout halts."""
        assert self.plan is not None
        pending = list(hosts)
        running: dict[Future[None], str] = {}
        with ThreadPoolExecutor(max_workers=self.settings.max_parallel) as pool:
            while pending or running:
                if pending and self._stopping():
                    pending.clear()  # no further host is started
                if pending:
                    out = self._out_of_service_now()
                    while pending:
                        busy = set(running.values())
                        decision = may_start(
                            pending[0].name, busy, out - busy, self.settings, self.plan.total_hosts
                        )
                        if not decision:
                            break
                        host = pending.pop(0)
                        running[pool.submit(self._guarded_host, stage, host, lease)] = host.name
                    if pending and not running:
                        if self._back_in_service(out):
                            continue  # judged again with the hosts that came back
                        self._halt(
                            f"max_unavailable ({self.plan.unavailable_budget}) is used up by "
                            f"hosts out of service: {self._describe_out(out)}"
                        )
                        pending.clear()
                if not running:
                    break
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    del running[future]
                    future.result()

    def _stopping(self) -> bool:
        with self.progress.lock:
            return bool(self.progress.halt or self.progress.pause)

    def _halt(self, reason: str) -> None:
        with self.progress.lock:
            if not self.progress.halt:
                self.progress.halt = reason

    def _out_of_service_now(self) -> set[str]:
        """Hosts out of service other than the running ones: those out before the rollout
        (but for those a fresh audit found back in service) and those it left out."""
        assert self.plan is not None
        state = load_state(self.dir)
        left_out = {h.name for h in self.plan.hosts if state.host(h.name).out_of_service}
        before = {
            name
            for name in self.plan.already_unavailable
            if not any(e.data.get(BACK_IN_SERVICE) for e in state.host(name).events)
        }
        return before | left_out

    def _back_in_service(self, out: set[str]) -> bool:
        """Audit again the hosts of ``out`` that were out of service before the rollout (each
        once per controller), and mark those now healthy by the same measure as back in
        service; whether any was. So a rollout blocked by ``max_unavailable`` goes on once a
        broken host is repaired (on ``--resume``, or while it runs), instead of halting on
        the audit taken before it for good. A host that came back is not upgraded by this
        rollout (it was planned without it)."""
        assert self.plan is not None
        back = False
        for name in sorted(out & self.plan.already_unavailable - self._rechecked_out):
            self._rechecked_out.add(name)
            snap = self.audit_host(name, "back")
            if snap is None:
                continue
            entry = InventoryHost(name, tuple(snap.host_data.get("groups") or ()),
                                  snap.host_data, snap)  # fmt: skip
            still = unavailable_hosts([entry], policy=self.policy)
            if still:
                continue
            self.record(
                name,
                "rollout",
                "info",
                "back in service: a fresh audit finds it healthy; no longer counted against "
                "max_unavailable",
                **{BACK_IN_SERVICE: True},
            )
            back = True
        return back

    def _describe_out(self, out: set[str]) -> str:
        """Each host of ``out`` with why it is out of service."""
        assert self.plan is not None
        before = {u.name: "; ".join(u.reasons) for u in self.plan.unavailable}
        state = load_state(self.dir)
        return ", ".join(
            f"{name} ({before.get(name) or state.host(name).reason or 'failed in this rollout'})"
            for name in sorted(out)
        )

    def _guarded_host(self, stage: str, host: HostPlan, lease: Lease) -> None:
        with self.progress.lock:
            if self.progress.halt or self.progress.pause:
                return  # no further host is touched
            self.progress.running.add(host.name)
        try:
            with self._lease_lock:
                lease.renew()
            ok = self._upgrade_host(host)
        finally:
            with self.progress.lock:
                self.progress.running.discard(host.name)
        if ok:
            return
        reason = self._over_failure_budget()
        if reason:
            self._halt(f"{reason}; last: {host.name} in stage {stage}")

    def _over_failure_budget(self) -> str | None:
        """Why the hosts this rollout failed exceed a budget (:func:`halt_reason`), counted
        from the journal: a resumed controller counts the failures before it too."""
        assert self.plan is not None
        state = load_state(self.dir)
        canary: list[str] = []
        waves: list[str] = []
        for host in self.plan.hosts:
            if state.host(host.name).failed:
                on_canary = host.stage == self.settings.canary_stage
                (canary if on_canary else waves).append(host.name)
        return halt_reason(self.settings, canary, waves)

    def _soak(self) -> None:
        """Wait ``soak_seconds`` after the canary, once per rollout: a resumed controller
        waits only what is left of a soak begun before it, and none after one that ended."""
        if self.settings.soak_seconds <= 0 or self.progress.halt:
            return
        events = [e for e in load_state(self.dir).events if e.host is None and e.step is Step.SOAK]
        if any(e.status is EventStatus.DONE for e in events):
            return
        begun = [e for e in events if e.status is EventStatus.STARTED]
        wait_s = float(self.settings.soak_seconds)
        if begun:
            elapsed = (utc_now() - parse_utc(begun[0].at)).total_seconds()
            wait_s = min(wait_s, max(0.0, wait_s - elapsed))
            self.record(None, "soak", "info", f"resumed: {wait_s:.0f} s of the soak left")
        else:
            self.record(None, "soak", "started", f"{self.settings.soak_seconds} s after the canary")
        time.sleep(wait_s)
        self.record(None, "soak", "done")

    # --- one host ---------------------------------------------------------------------------

    def _upgrade_host(self, host: HostPlan) -> bool:
        """Run the host's remaining steps; False when it failed (rolled back or not)."""
        name = host.name
        state = load_state(self.dir).host(name)
        if state.outcome is HostOutcome.UNTOUCHED:
            self.record(name, "rollout", "started", f"{host.current_version} → {self.opts.target}")
        # What a controller before this one decided stands: a rollback it began, or a failure
        # it had not yet rolled back, is carried out, never followed by the next step.
        due = _rollback_due(state)
        if due is not None:
            return self._roll_back(name, due)
        if not self._step_once(name, "drain", lambda: self._drain(name, undrain=False)):
            return False
        for step in DEPLOY_STEPS:
            action: StepAction = (
                partial(self._reload, name)
                if step == "reload"
                else partial(self._deploy, name, step)
            )
            try:
                if not self._step_once(name, step, action):
                    return self._roll_back(name, f"{step} failed")
            except _HostNotBack as lost:
                self.record(name, step, "info", str(lost))
                with self.progress.lock:
                    self.progress.pause = f"{name}: {lost}"
                return True  # paused: the step runs again on --resume
        gate_event = load_state(self.dir).host(name).latest("gate")
        if gate_event is None or gate_event.status is not EventStatus.DONE:
            gate = self._gate(name, self.opts.target)
            if gate is None:
                return True  # paused: the gate runs again on --resume
            if gate.outcome == "fail":
                return self._roll_back(name, f"health gate failed: {gate.summary()}")
        # else the gate passed before the controller stopped: it is not run again, so nothing
        # a second audit would read (a user's job's XID since) can undo its verdict.
        if not self._step_once(name, "undrain", lambda: self._drain(name, undrain=True)):
            return False
        self.record(
            name,
            "rollout",
            "done",
            f"upgraded to {self.opts.target}",
            version_after=self.opts.target,
        )
        return True

    def _step_once(self, name: str, step: str, run: StepAction) -> bool:
        if load_state(self.dir).host(name).is_finished(step):
            return True
        self.record(name, step, "started")
        ok, detail = run()
        if ok is None:
            self.record(name, step, "skipped", detail)
            return True
        self.record(name, step, "done" if ok else "failed", detail)
        return bool(ok)

    def _pyinfra(self, name: str, *arguments: str) -> list[str]:
        """pyinfra on one host of the rollout's inventory."""
        return [sys.executable, "-m", "pyinfra", "-y", "--limit", name, self.opts.inventory,
                *arguments]  # fmt: skip

    def _deploy(self, name: str, step: str, **data: str) -> tuple[bool, str]:
        command = self._pyinfra(
            name,
            str(self.opts.deploy),
            "--data",
            f"gpuaudit_step={step}",
            "--data",
            f"gpuaudit_target={_json_text(self.opts.target)}",
        )
        for key, value in data.items():
            command += ["--data", f"{key}={_json_text(value)}"]
        env = dict(os.environ)
        if self.opts.policy:
            env["GPUAUDIT_POLICY"] = str(Path(self.opts.policy).resolve())
        done = _run(command, env=env)
        return done.returncode == 0, _pyinfra_summary(done.stdout + done.stderr, name)

    def _reload(self, name: str) -> tuple[bool, str]:
        """Reload the driver, or reboot (``reboot: always``, or ``auto`` where the reload is
        refused); a host that does not answer within ``gate.wait_for_host_seconds`` of its
        reboot raises :class:`_HostNotBack`: the rollout pauses for a person."""
        if self.settings.reboot == "always":
            return self._reboot(name)
        begun = load_state(self.dir).host(name).latest("reboot")
        ok, detail = self._deploy(name, "reload")
        if ok and begun is not None and begun.status is EventStatus.STARTED:
            # A reboot the controller before this one began; the driver now reloads (the
            # reboot happened, or the module is no longer held): it is not repeated.
            self.record(name, "reboot", "skipped", "not repeated: the reload succeeded")
        if ok or self.settings.reboot == "never":
            return ok, detail
        self.record(name, "reboot", "started", f"the reload was refused: {detail[-200:]}")
        try:
            rebooted, why = self._reboot(name)
        except _HostNotBack as lost:
            self.record(name, "reboot", "info", str(lost))
            raise
        self.record(name, "reboot", "done" if rebooted else "failed", why)
        return rebooted, "reloaded by a reboot" if rebooted else why

    def _reboot(self, name: str) -> tuple[bool, str]:
        wait = self.settings.gate.wait_for_host_seconds
        ok, detail = self._deploy(name, "reboot", gpuaudit_reboot_timeout=str(wait))
        if not ok and REBOOT_NOT_BACK in detail:
            raise _HostNotBack(
                f"the host did not answer within {wait} s of its reboot "
                f"(gate.wait_for_host_seconds): {detail[-200:]}"
            )
        return ok, detail

    def _drain(self, name: str, undrain: bool) -> tuple[bool | None, str]:
        commands = drain_commands(self.settings.drain, name, self.opts.target, undrain)
        if not commands:
            return None, "no drain hook configured"
        for command in commands:
            done = _run(command, timeout=self.settings.drain.timeout_seconds)
            if done.returncode != 0:
                return False, f"{command}: {_tail(done.stdout + done.stderr)}"
        return True, "; ".join(commands)

    def _gate(self, name: str, version: str) -> GateResult | None:
        """Run the gate; None when it was inconclusive (the rollout pauses)."""
        self.record(name, "gate", "started")
        after = self.audit_host(name, "gate")
        if after is not None:
            self._gated[name] = after
        result = self._judge(name, self.before[name], after, version)
        if result.outcome == "inconclusive":
            self.record(name, "gate", "info", result.summary(), **result.to_dict())
            with self.progress.lock:
                self.progress.pause = f"{name}: health gate inconclusive: {result.summary()}"
            return None
        status = "done" if result.outcome == "pass" else "failed"
        self.record(name, "gate", status, result.summary(), **result.to_dict())
        return result

    def _judge(
        self,
        name: str,
        before: HostSnapshot,
        after: HostSnapshot | None,
        version: str,
        since: HostSnapshot | None = None,
    ) -> GateResult:
        """The health gate of ``after`` against ``before`` (new errors counted from ``since``
        where given), with the gate's commands run on the host when it answered. The GPUs
        expected are the host's ``expected_gpu_count`` setting (policy and host data)."""
        gpus = expected_gpu_count(self.before[name], self.policy)
        extra = self._gate_commands(name) if after is not None else ()
        return health_gate(before, after, version, gpus, extra, events_since=since)

    def _gate_commands(self, name: str) -> tuple[GateCheck, ...]:
        """DCGM's own diagnostic (``dcgmi diag -r <level>``, judged by the tests it reports)
        and the site's gate command (exit 0 passes), each run on the host."""
        gate = self.settings.gate
        checks = []
        if gate.dcgm_diag_level is not None:
            done = self._on_host(name, dcgm_diag_command(gate.dcgm_diag_level))
            said = done.stdout + done.stderr
            answer = host_answer(said, name)
            checks.append(
                dcgm_diag_check(gate.dcgm_diag_level, answer, _pyinfra_summary(said, name))
            )
        if gate.command:
            done = self._on_host(name, gate.command)
            output = _pyinfra_summary(done.stdout + done.stderr, name)
            evidence = {"command": gate.command, "output": output[-400:]}
            if done.returncode == 0:
                checks.append(
                    GateCheck("site_command", "pass", f"{gate.command}: exit 0", evidence)
                )
            else:
                checks.append(
                    GateCheck(
                        "site_command", "fail", f"{gate.command} failed on the host", evidence
                    )
                )
        return tuple(checks)

    def _on_host(self, name: str, command: str) -> subprocess.CompletedProcess[str]:
        run = self._pyinfra(name, "exec", "--", "sh", "-c", shlex.quote(command))
        return _run(run, timeout=self.settings.gate.timeout_seconds)

    def _roll_back(self, name: str, cause: str) -> bool:
        """Put the host back on the version it had, pinned as it was (a host whose pin was not
        recorded is pinned), and re-check it against the audit before the rollout; undrain it
        only when that check passes."""
        before = load_state(self.dir).host(name)
        version = before.version_before
        if not version:
            return False
        pin = "unpinned" if before.pin_before == "unpinned" else "pinned"
        self.record(name, "rollback", "started", f"{cause}; back to {version}, {pin}")
        ok, detail = self._deploy(
            name, "rollback", gpuaudit_rollback_version=version, gpuaudit_rollback_pin=pin
        )
        if not ok:
            self.record(name, "rollback", "failed", f"left drained: {detail}")
            return False
        recheck = self._recheck(name, version)
        if recheck.outcome != "pass":
            self.record(
                name,
                "rollback",
                "failed",
                f"left drained: back on {version} but {recheck.summary()}",
            )
            return False
        self.record(
            name,
            "rollback",
            "done",
            f"back on {version}, {pin}, re-checked",
            version_after=version,
        )
        self._step_once(name, "undrain", lambda: self._drain(name, undrain=True))
        return False

    def _recheck(self, name: str, version: str) -> GateResult:
        """The host after its rollback against the audit before the rollout: every GPU and
        service it had then must be back. Only new errors are counted from the audit the
        failed gate read, so that what the failed driver logged is not held against the
        version the host goes back to."""
        after = self.audit_host(name, "rollback")
        result = self._judge(name, self.before[name], after, version, self._gated.get(name))
        self.record(
            name,
            "gate",
            "done" if result.outcome == "pass" else "failed",
            f"after the rollback: {result.summary()}",
            **result.to_dict(),
        )
        return result


# The journal data key of a host found back in service (Rollout._back_in_service).
BACK_IN_SERVICE = "back_in_service"


class _HostNotBack(Exception):
    """The host did not answer in time after its reboot: neither a pass nor a failure."""


# What deploys/driver_upgrade.py's reboot step says of a host that did not come back
# (gpuaudit.operations.upgrade.reboot_and_wait).
REBOOT_NOT_BACK = "did not come back within"

# The steps whose failure the controller answers with a rollback.
_ROLLED_BACK_AFTER = frozenset({*DEPLOY_STEPS, "gate"})


def _begun(state: HostState) -> bool:
    """Whether this rollout began the host's upgrade (its own ``rollout`` event is no skip)."""
    own = state.latest("rollout")
    return own is not None and own.status is not EventStatus.SKIPPED


def _rollback_due(state: HostState) -> str | None:
    """Why the host is to be rolled back now, where the journal says it was to be and the
    rollback did not end: a rollback begun (its latest event ``started``), or a deploy step
    or the gate failed with no rollback after it. None otherwise."""
    rollback = state.latest("rollback")
    if rollback is not None:
        if rollback.status is not EventStatus.STARTED:
            return None
        return rollback.detail.partition("; back to")[0] or "rollback in progress"
    failed = state.failed_step
    if state.outcome is HostOutcome.FAILED and failed is not None:
        return state.reason if failed.value in _ROLLED_BACK_AFTER else None
    return None


def _run(
    command: str | list[str], timeout: float | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a command on the controller (a string through the shell), its output captured.

    A command still running after ``timeout`` seconds is stopped and answers exit status 124
    (as timeout(1) does) with what it had printed and a line saying so: a drain hook or a gate
    check that hangs fails its step instead of ending the controller."""
    try:
        return subprocess.run(
            command,
            shell=isinstance(command, str),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired as stopped:
        said = [_text(stopped.stdout), _text(stopped.stderr)]
        said.append(f"stopped after {timeout:g} s (the step's time limit)")
        return subprocess.CompletedProcess(command, 124, said[0], "\n".join(said[1:]))


def _json_text(value: str) -> str:
    """A string as pyinfra's ``--data`` reads one back (a JSON string): a version the host
    reported reaches the deploy as it was, whatever quotes it holds, never as a number."""
    return json.dumps(value)


def _text(output: str | bytes | None) -> str:
    if isinstance(output, bytes):
        return output.decode("utf-8", "replace")
    return output or ""


def _pin(host: HostPlan) -> str | None:
    return None if host.pinned is None else ("pinned" if host.pinned else "unpinned")


_INVENTORY_HOSTS = """
import json, sys
from pyinfra.api import State
from pyinfra.context import ctx_state
from pyinfra_cli.inventory import make_inventory
with ctx_state.use(State()):
    inventory = make_inventory(sys.argv[1])
    hosts = [
        {"name": host.name, "groups": list(host.groups), "data": host.data.dict()}
        for host in inventory
    ]
json.dump(hosts, sys.stdout, default=repr)
"""


@dataclass(frozen=True)
class InventoryEntry:
    """One host as the inventory file declares it: name, groups, merged host data."""

    name: str
    groups: tuple[str, ...]
    data: Mapping[str, Any]


def inventory_hosts(inventory: str) -> list[InventoryEntry]:
    """The inventory's hosts in its own order, read by pyinfra's loader in a child process
    (loading pyinfra's CLI patches the interpreter for gevent)."""
    done = _run([sys.executable, "-c", _INVENTORY_HOSTS, inventory])
    if done.returncode != 0:
        raise RuntimeError(f"cannot read the inventory {inventory}: {_tail(done.stderr)}")
    return [
        InventoryEntry(
            name=str(entry["name"]),
            groups=tuple(str(g) for g in entry.get("groups") or ()),
            data=dict(entry.get("data") or {}),
        )
        for entry in json.loads(done.stdout)
    ]


def in_limit(entry: InventoryEntry, limit: Sequence[str]) -> bool:
    """Whether ``--limit`` keeps the host: pyinfra's rule, a glob on its name or a group's."""
    from fnmatch import fnmatch

    if not limit:
        return True
    return any(fnmatch(name, pattern) for pattern in limit for name in (entry.name, *entry.groups))


def _unused(path: Path) -> Path:
    """``path``, or ``path-2``, ``path-3``…: the first that does not exist."""
    candidate, n = path, 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}-{n}")
    return candidate


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def _pyinfra_summary(output: str, name: str) -> str:
    """What pyinfra said about the host's operations (its changes, no-ops and errors)."""
    prefix = f"[{name}]"
    said = [
        line.strip()
        for line in output.splitlines()
        if prefix in line
        and not line.rstrip().endswith(("Connected", ".py"))
        and "Operation" not in line
    ]
    errors = [
        line.strip()
        for line in output.splitlines()
        if ("Error:" in line or "error:" in line) and prefix not in line
    ]
    return _tail("\n".join(said + errors[-3:]))


def _tail(text: str, limit: int = 800) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return "\n".join(lines)[-limit:]


def print_plan(plan: RolloutPlan, opts: Options) -> None:
    settings = plan.settings
    deploy = shlex.quote(str(opts.deploy))
    print(
        f"gpuaudit upgrade plan: driver {plan.target_version} "
        f"({len(plan.to_upgrade)} to upgrade, {len(plan.skipped)} skipped)"
    )
    budget = plan.unavailable_budget
    print(f"  max unavailable {budget}; already out of service: {plan.out_of_service() or 'none'}")
    for stage in plan.stages:
        print(f"stage {stage.name}:")
        for host in stage.hosts:
            if host.action == "skip":
                print(f"  {host.name}: skipped — {host.reason}")
                continue
            print(f"  {host.name}: {host.current_version} → {plan.target_version} ({host.reason})")
            drain = drain_commands(settings.drain, host.name, plan.target_version, undrain=False)
            print(f"      drain: {'; '.join(drain) or 'none (no drain hook configured)'}")
            for step in DEPLOY_STEPS:
                print(
                    f"      {step}: pyinfra -y --limit {shlex.quote(host.name)} "
                    f"{shlex.quote(opts.inventory)} {deploy} --data gpuaudit_step={step}"
                )
            print("      gate: fresh audit of the host against the one before; undrain")


def upgrade(opts: Options) -> int:
    policy = load_policy(opts.policy) if opts.policy else None
    if opts.resume is not None:
        directory = opts.resume
        if not (directory / "audit-before").is_dir():
            print(f"gpuaudit upgrade: {directory} is not a rollout", file=sys.stderr)
            return 2
    else:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        directory = opts.reports_dir / "upgrades" / (opts.rollout_id or stamp)
        directory.mkdir(parents=True, exist_ok=opts.rollout_id is not None)
    rollout = Rollout(opts, policy, directory)
    plan = rollout.prepare()
    if opts.dry:
        print_plan(plan, opts)
        return 0
    print(f"gpuaudit rollout: {directory}")
    code = rollout.run()
    state = load_state(directory)
    print(
        f"gpuaudit rollout: {state.status.value}" + (f" — {state.reason}" if state.reason else "")
    )
    print(f"gpuaudit rollout report: {directory / 'index.html'}")
    return code if state.status is not RolloutStatus.COMPLETED else 0
