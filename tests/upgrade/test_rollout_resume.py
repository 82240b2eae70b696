"""A controller that stopped anywhere (killed, a lost machine, an operator's ^C) is carried on by
``--resume`` without undoing what the journal says was decided: a failure budget spent before
it still halts, a rollback begun is finished, a passed gate is not run again, a soak is not
waited twice, a rolled-back host is undrained, and a host left mid-upgrade is carried on even
where the plan, made again, would now skip it.

The journals are written event by event as the controller writes them, up to the moment it
stopped; the controller that resumes is the real one, its host steps (pyinfra runs, audits,
drain hooks) replaced by stand-ins that record what they were asked.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from datetime import date, timedelta
from pathlib import Path

import pytest
from test_rollout_budgets import STAGES, Fleet, run_leased
from upgrade_factories import OLD, TARGET, finding, host, inventory_host, xid

import gpuaudit.upgrade.runner as runner
from gpuaudit.model.snapshot import HostSnapshot, Service
from gpuaudit.model.status import unreachable_snapshot
from gpuaudit.policy import Policy
from gpuaudit.policy.upgrade import UpgradeSettings
from gpuaudit.upgrade.journal import Journal, RolloutMeta, RolloutStatus, Step, load_state
from gpuaudit.upgrade.lease import LeaseHeld, LeaseLost, acquire
from gpuaudit.upgrade.plan import plan_rollout
from gpuaudit.upgrade.runner import Options, Rollout

DEPLOYED = ("drain", "stop_services", "unpin", "install", "pin", "reload", "start_services")


def journal_up_to(directory: Path, hosts: tuple[str, ...], *events: tuple[str, str, str]) -> None:
    """A journal as a controller left it: the rollout started, every host planned, then
    ``events`` (host, step, status) in order."""
    journal = Journal.open(directory)
    journal.record(None, "rollout", "started")
    for name in hosts:
        journal.record(name, "rollout", "info", "planned", version_before=OLD, pin_before="pinned")
    for name, step, status in events:
        journal.record(name, step, status)


def deployed(name: str) -> list[tuple[str, str, str]]:
    """The host started and every deploy step done."""
    events = [(name, "rollout", "started")]
    for step in DEPLOYED:
        events += [(name, step, "started"), (name, step, "done")]
    return events


def on_target(name: str, **changes) -> HostSnapshot:
    snap = host(name, driver_version=TARGET, driver_version_proc=TARGET, **changes)
    return dataclasses.replace(
        snap, gpus=tuple(dataclasses.replace(g, driver_version=TARGET) for g in snap.gpus)
    )


class OneHost:
    """The real controller on one canary host, ``c1``, whose steps are stand-ins: every deploy
    step answers ``deploy`` (default: it succeeds), each audit the next of ``audits``."""

    def __init__(self, directory: Path, audits: list[HostSnapshot], **settings) -> None:
        self.rollout = Rollout(Options(inventory="unused.py", target=TARGET), None, directory)
        base = UpgradeSettings(**settings)
        self.rollout.settings = dataclasses.replace(
            base, gate=dataclasses.replace(base.gate, dcgm_diag_level=None)
        )
        self.rollout.plan = plan_rollout(
            [inventory_host("c1")], TARGET, self.rollout.settings, date.today()
        )
        self.rollout.meta = RolloutMeta(directory.name, TARGET, {"canary": ("c1",)})
        self.rollout.before = {"c1": host("c1")}
        self.audits, self.audited, self.deploys, self.drains = list(audits), [], [], []
        self.rollout.audit_host = self._audit  # type: ignore[method-assign]
        self.rollout._deploy = self._deploy  # type: ignore[method-assign]
        self.rollout._drain = self._drain  # type: ignore[method-assign]
        self.answer: dict[str, tuple[bool, str]] = {}

    def _audit(self, name: str, why: str) -> HostSnapshot | None:
        self.audited.append(why)
        return self.audits.pop(0) if self.audits else None

    def _deploy(self, name: str, step: str, **data: str) -> tuple[bool, str]:
        self.deploys.append((step, data))
        return self.answer.get(step, (True, f"{step} ok"))

    def _drain(self, name: str, undrain: bool) -> tuple[bool, str]:
        self.drains.append(undrain)
        return True, "undrain" if undrain else "drain"

    def run(self) -> int:
        return run_leased(self.rollout)


# --- the failure budgets, counted before any host starts ------------------------------------


@pytest.mark.parametrize("stopped", ["before its halt", "after its halt"])
def test_a_spent_budget_halts_a_resumed_rollout_before_any_host(
    tmp_path: Path, stopped: str
) -> None:
    hosts = {"c1": "canary", "w1": "wave1", "w2": "wave1", "v1": "wave2"}
    settings = UpgradeSettings(stages=STAGES, max_unavailable=2, canary_failure_budget=0)
    directory = tmp_path / "r"
    first = Fleet(directory, hosts, settings, rolled_back=frozenset({"c1"}))
    if stopped == "before its halt":
        # Killed right after the canary's rollback was journaled, before the budget was read
        # for it (the first read is the one before the canary stage starts).
        reads = []
        count = first.rollout._over_failure_budget

        def killed() -> str | None:
            reads.append(1)
            if len(reads) > 1:
                raise KeyboardInterrupt
            return count()

        first.rollout._over_failure_budget = killed  # type: ignore[method-assign]
        with pytest.raises(KeyboardInterrupt):
            first.run()
        state = load_state(directory)
        assert state.status is RolloutStatus.RUNNING
        assert state.host("c1").outcome.value == "rolled_back"
    else:
        assert first.run() == 1
    resumed = Fleet(directory, hosts, settings, rolled_back=frozenset({"c1"}))
    assert resumed.run() == 1
    state = load_state(directory)
    assert state.status is RolloutStatus.HALTED
    assert state.reason.startswith("1 canary host failed (c1); canary_failure_budget is 0")
    assert resumed.started == []
    assert {state.host(h).outcome.value for h in ("w1", "w2", "v1")} == {"untouched"}


def test_a_failure_beside_a_paused_host_is_a_halt(tmp_path: Path) -> None:
    """Two hosts side by side: one's gate is inconclusive, the other's fails past the budget.
    The rollout is halted (recorded after the pause), not merely paused."""
    hosts = {"c1": "canary", "w1": "wave1", "w2": "wave1"}
    settings = UpgradeSettings(stages=STAGES, max_parallel=2, max_unavailable=2, failure_budget=0)
    fleet = Fleet(tmp_path / "r", hosts, settings, rolled_back=frozenset({"w2"}))
    upgrade = fleet._upgrade

    def w1_paused(plan):
        if plan.name != "w1":
            return upgrade(plan)
        fleet.rollout.record("w1", "rollout", "started")
        fleet.rollout.record("w1", "gate", "started")
        time.sleep(0.1)
        with fleet.rollout.progress.lock:
            fleet.rollout.progress.pause = "w1: health gate inconclusive"
        return True

    fleet.rollout._upgrade_host = w1_paused  # type: ignore[method-assign]
    assert fleet.run() == 1
    state = load_state(tmp_path / "r")
    assert state.status is RolloutStatus.HALTED
    assert [e.step.value for e in state.events if e.host is None][-2:] == ["pause", "halt"]


# --- one host's steps, resumed ----------------------------------------------------------------


def test_a_passed_gate_is_not_run_again(tmp_path: Path) -> None:
    """Stopped while undraining a host whose gate passed: a second audit, which may read a
    user's job's XID since, does not get to roll the host back."""
    directory = tmp_path / "r"
    events = [*deployed("c1"), ("c1", "gate", "started"), ("c1", "gate", "done")]
    journal_up_to(directory, ("c1",), *events, ("c1", "undrain", "started"))
    late = on_target("c1", xid_events=(xid(13, "120.0"),))
    one = OneHost(directory, [late])
    assert one.run() == 0
    assert one.audited == [] and one.drains == [True]
    assert load_state(directory).host("c1").outcome.value == "upgraded"


def test_a_failed_gate_not_yet_rolled_back_is_rolled_back(tmp_path: Path) -> None:
    directory = tmp_path / "r"
    journal_up_to(directory, ("c1",), *deployed("c1"), ("c1", "gate", "started"),
                  ("c1", "gate", "failed"))  # fmt: skip
    one = OneHost(directory, [host("c1")])  # the re-check's audit: healthy on the old driver
    assert one.run() == 1
    assert [step for step, _ in one.deploys] == ["rollback"]
    assert one.deploys[0][1]["gpuaudit_rollback_version"] == OLD
    assert one.audited == ["rollback"]  # the re-check only: the gate is not run again
    state = load_state(directory).host("c1")
    assert state.outcome.value == "rolled_back" and state.is_finished("undrain")


@pytest.mark.parametrize("failed", ["install", "reload"])
def test_a_rollback_begun_is_finished_not_the_failed_step_retried(
    tmp_path: Path, failed: str
) -> None:
    directory = tmp_path / "r"
    steps = DEPLOYED[: DEPLOYED.index(failed)]
    events = [("c1", "rollout", "started")]
    for step in steps:
        events += [("c1", step, "started"), ("c1", step, "done")]
    events += [("c1", failed, "started"), ("c1", failed, "failed"), ("c1", "rollback", "started")]
    journal_up_to(directory, ("c1",), *events)
    one = OneHost(directory, [host("c1")])
    assert one.run() == 1
    assert [step for step, _ in one.deploys] == ["rollback"]
    assert load_state(directory).host("c1").outcome.value == "rolled_back"


def test_a_failure_whose_rollback_never_began_is_rolled_back(tmp_path: Path) -> None:
    directory = tmp_path / "r"
    journal_up_to(directory, ("c1",), ("c1", "rollout", "started"), ("c1", "drain", "started"),
                  ("c1", "drain", "done"), ("c1", "install", "started"),
                  ("c1", "install", "failed"))  # fmt: skip
    assert load_state(directory).host("c1").outcome.value == "failed"
    one = OneHost(directory, [host("c1")])
    assert one.run() == 1
    assert [step for step, _ in one.deploys] == ["rollback"]
    # A drain that failed changed nothing: no rollback follows it.
    other = tmp_path / "o"
    journal_up_to(other, ("c1",), ("c1", "rollout", "started"), ("c1", "drain", "started"),
                  ("c1", "drain", "failed"))  # fmt: skip
    one = OneHost(other, [])
    assert one.run() == 1  # the canary's budget (0) is spent: halted, nothing run
    assert one.deploys == [] and one.drains == []


def test_a_reboot_the_controller_stopped_in_is_not_left_in_progress(tmp_path: Path) -> None:
    directory = tmp_path / "r"
    events = [("c1", "rollout", "started")]
    for step in DEPLOYED[:5]:
        events += [("c1", step, "started"), ("c1", step, "done")]
    journal_up_to(directory, ("c1",), *events, ("c1", "reload", "started"),
                  ("c1", "reboot", "started"))  # fmt: skip
    assert load_state(directory).host("c1").in_progress is Step.REBOOT
    # The host came back on the new driver: the repeated reload succeeds.
    one = OneHost(directory, [on_target("c1")])
    assert one.run() == 0
    assert [step for step, _ in one.deploys] == ["reload", "start_services"]
    state = load_state(directory).host("c1")
    assert state.outcome.value == "upgraded" and state.in_progress is None
    assert state.latest("reboot").status.value == "skipped"


def test_a_stale_reboot_does_not_hide_a_failed_host(tmp_path: Path) -> None:
    """An older journal's reboot left started, then the reload and the rollback failed: the
    host counts as failed and out of service, not as running."""
    directory = tmp_path / "r"
    journal_up_to(directory, ("c1",), ("c1", "rollout", "started"), ("c1", "reload", "started"),
                  ("c1", "reboot", "started"), ("c1", "reload", "started"),
                  ("c1", "reload", "failed"), ("c1", "rollback", "started"),
                  ("c1", "rollback", "failed"))  # fmt: skip
    state = load_state(directory).host("c1")
    assert state.outcome.value == "failed" and state.out_of_service


def test_a_host_not_back_from_its_reboot_pauses_the_rollout(tmp_path: Path) -> None:
    directory = tmp_path / "r"
    one = OneHost(directory, [on_target("c1")])
    one.rollout.settings = dataclasses.replace(
        one.rollout.settings,
        gate=dataclasses.replace(one.rollout.settings.gate, wait_for_host_seconds=120),
    )
    one.answer["reload"] = (False, "modprobe: FATAL: Module nvidia is in use")
    one.answer["reboot"] = (False, "[c1] did not come back within 120 s of the reboot")
    journal_up_to(directory, ("c1",))
    assert one.run() == runner.EXIT_PAUSED
    reboot = [data for step, data in one.deploys if step == "reboot"]
    assert reboot == [{"gpuaudit_reboot_timeout": "120"}]  # the policy's wait, passed on
    state = load_state(directory)
    assert state.status is RolloutStatus.PAUSED and "within 120 s of its reboot" in state.reason
    assert state.host("c1").outcome.value == "running"
    assert [step for step, _ in one.deploys].count("rollback") == 0
    # Back by the time a person resumes: the reload step runs again and the host is upgraded.
    resumed = OneHost(directory, [on_target("c1")])
    assert resumed.run() == 0
    assert [step for step, _ in resumed.deploys] == ["reload", "start_services"]
    assert load_state(directory).host("c1").outcome.value == "upgraded"


def test_a_rollback_is_rechecked_against_the_audit_before_the_rollout(tmp_path: Path) -> None:
    """The gate failed on a lost GPU and a stopped fabric manager; back on the old driver the
    host is still missing both: the re-check fails (against the audit before the rollout, not
    the failing gate's), and the host is left drained. The count of GPUs comes from the
    policy, not only the host's inventory data."""
    services = (Service("nvidia-fabricmanager", "active", "enabled"),)
    broken = (Service("nvidia-fabricmanager", "failed", "enabled"),)
    gated = on_target("c1", gpus=1, services=broken)
    after = host("c1", gpus=1, services=broken)
    one = OneHost(tmp_path / "r", [gated, after])
    one.rollout.before = {"c1": host("c1", services=services)}
    one.rollout.policy = Policy.from_text("version: 1\ndefaults:\n  expected_gpu_count: 2\n")
    journal_up_to(tmp_path / "r", ("c1",))
    assert one.run() == 1
    state = load_state(tmp_path / "r").host("c1")
    assert state.outcome.value == "failed"
    assert "left drained" in state.reason
    recheck = state.gates[-1]
    failed = {c.name for c in recheck.checks if c.outcome == "fail"}
    assert failed == {"gpus_present", "fabric_manager"}
    assert one.drains == [False]  # drained, never undrained


def test_a_rollback_recheck_does_not_count_the_failed_drivers_xids(tmp_path: Path) -> None:
    """The failed driver logged an XID, and a reload keeps the kernel log: the re-check counts
    errors new since the failing gate's audit, so the healthy old driver passes."""
    logged = (xid(79, "100.0"),)
    one = OneHost(
        tmp_path / "r", [on_target("c1", xid_events=logged), host("c1", xid_events=logged)]
    )
    journal_up_to(tmp_path / "r", ("c1",))
    assert one.run() == 1
    state = load_state(tmp_path / "r").host("c1")
    assert state.outcome.value == "rolled_back" and state.is_finished("undrain")
    assert state.gates[-1].outcome == "pass"


def test_a_rolled_back_host_is_undrained_on_resume(tmp_path: Path) -> None:
    directory = tmp_path / "r"
    hosts = {"c1": "canary", "w1": "wave1", "w2": "wave1"}
    journal_up_to(directory, tuple(hosts), *deployed("c1"), ("c1", "gate", "started"),
                  ("c1", "gate", "failed"), ("c1", "rollback", "started"),
                  ("c1", "rollback", "done"), ("c1", "undrain", "started"))  # fmt: skip
    assert load_state(directory).host("c1").out_of_service
    settings = UpgradeSettings(stages=STAGES, max_unavailable=1, canary_failure_budget=1)
    resumed = Fleet(directory, hosts, settings)
    undrains: list[str] = []
    resumed.rollout._drain = lambda name, undrain: (undrains.append(name), (True, ""))[1]  # type: ignore[method-assign]
    assert resumed.run() == 0
    assert undrains[0] == "c1"
    state = load_state(directory)
    assert not state.host("c1").out_of_service
    assert resumed.started == ["w1", "w2"]


def test_a_host_left_mid_upgrade_is_carried_on_though_the_plan_now_skips_it(
    tmp_path: Path,
) -> None:
    policy = Policy.from_text(
        "version: 1\nwaivers:\n  - {rule: GA101, hosts: 'w*', reason: r, expires: 2030-03-01,"
        " owner: infra}\n"
    )
    settings = UpgradeSettings(stages=STAGES, max_unavailable=2)
    hosts = {"c1": "canary", "w1": "wave1", "w2": "wave1"}
    planned = [inventory_host(n, (), True, rollout_stage=s) for n, s in hosts.items()]
    found = [finding("GA101", "w1")]
    directory = tmp_path / "r"
    journal_up_to(directory, tuple(hosts), ("c1", "rollout", "started"),
                  ("c1", "undrain", "done"), ("c1", "rollout", "done"),
                  ("w1", "rollout", "started"), ("w1", "drain", "started"),
                  ("w1", "drain", "done"), ("w1", "install", "started"))  # fmt: skip
    resumed = Fleet(directory, hosts, settings)
    # The waiver lapsed between the stop and --resume: the plan made again skips w1.
    resumed.rollout.plan = plan_rollout(
        planned, TARGET, settings, date(2030, 3, 2), policy=policy, findings=found
    )
    assert resumed.rollout.plan.host("w1").action == "skip"
    assert resumed.run() == 0
    assert resumed.started == ["w1", "w2"]
    assert load_state(directory).host("w1").outcome.value == "upgraded"


def test_the_soak_is_waited_once_and_a_resumed_one_only_for_what_is_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slept: list[float] = []
    monkeypatch.setattr(runner.time, "sleep", slept.append)
    settings = UpgradeSettings(stages=STAGES, soak_seconds=3600)
    directory = tmp_path / "r"
    Fleet(directory, {"c1": "canary", "w1": "wave1"}, settings).run()
    Fleet(directory, {"c1": "canary", "w1": "wave1", "w2": "wave1"}, settings).run()
    assert [s for s in slept if s > 1] == [3600.0]
    # A soak begun ten minutes before the controller stopped: about fifty minutes are left.
    other = tmp_path / "o"
    journal_up_to(other, ("c1", "w1"), ("c1", "rollout", "started"), ("c1", "undrain", "done"),
                  ("c1", "rollout", "done"))  # fmt: skip
    begun = runner.utc_now() - timedelta(minutes=10)
    Journal.open(other, clock=lambda: begun).record(None, "soak", "started", "3600 s")
    slept.clear()
    Fleet(other, {"c1": "canary", "w1": "wave1"}, settings).run()
    (left,) = [s for s in slept if s > 1]
    assert 2990 <= left <= 3000


def test_the_lease_is_renewed_while_the_controller_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A soak longer than the lease: a heartbeat keeps renewing it, so a second controller is
    refused throughout; a lease taken away stops further hosts."""
    monkeypatch.setattr(runner, "LEASE_TTL_S", 1)
    one = OneHost(tmp_path / "r", [])
    renewed = threading.Event()
    lease = acquire(tmp_path / "r", "ctl", 1)
    real_renew = lease.renew

    def renew() -> None:
        real_renew()
        renewed.set()

    lease.renew = renew  # type: ignore[method-assign]
    stop = threading.Event()
    beat = threading.Thread(target=one.rollout._keep_lease, args=(lease, stop))
    beat.start()
    try:
        assert renewed.wait(2)
        time.sleep(1.2)  # past the first expiry
        with pytest.raises(LeaseHeld, match="held by ctl"):
            acquire(tmp_path / "r", "second", 1)
    finally:
        stop.set()
        beat.join()
    # Lost: the heartbeat halts the rollout.
    (tmp_path / "r" / "lease.json").unlink()

    def lost() -> None:
        raise LeaseLost("released")

    lease.renew = lost  # type: ignore[method-assign]
    stop = threading.Event()
    beat = threading.Thread(target=one.rollout._keep_lease, args=(lease, stop))
    beat.start()
    beat.join(2)
    assert not beat.is_alive()
    assert one.rollout.progress.halt.startswith("the lease was lost (released)")


@pytest.mark.parametrize("repaired", [False, True])
def test_a_host_repaired_since_the_audit_before_no_longer_blocks_the_rollout(
    tmp_path: Path, repaired: bool
) -> None:
    """max_unavailable 1, and x1 was unreachable in the audit before the rollout: no host may
    start. The controller audits x1 again before it halts; found healthy, x1 no longer counts
    (it is not upgraded: the rollout was planned without it), and the waves go on."""
    hosts = {"c1": "canary", "w1": "wave1"}
    settings = UpgradeSettings(stages=STAGES, max_unavailable=1)
    fleet = Fleet(tmp_path / "r", hosts, settings)
    planned = [inventory_host(n, (), True, rollout_stage=s) for n, s in hosts.items()]
    down = inventory_host("x1", (), unreachable_snapshot("x1", "no route"), rollout_stage="wave1")
    fleet.rollout.plan = plan_rollout([*planned, down], TARGET, settings, date.today())
    assert fleet.rollout.plan.already_unavailable == {"x1"}
    audited: list[tuple[str, str]] = []

    def audit(name: str, why: str) -> HostSnapshot:
        audited.append((name, why))
        return host(name) if repaired else unreachable_snapshot(name, "no route")

    fleet.rollout.audit_host = audit  # type: ignore[method-assign]
    code = fleet.run()
    state = load_state(tmp_path / "r")
    assert audited == [("x1", "back")]  # once, though every stage would have asked
    if not repaired:
        assert code == 1 and state.status is RolloutStatus.HALTED
        assert state.reason.startswith("max_unavailable (1) is used up by hosts out of service: x1")
        assert fleet.started == []
        return
    assert code == 0 and fleet.started == ["c1", "w1"]
    assert state.host("x1").outcome.value == "skipped"
    (back,) = [e for e in state.host("x1").events if e.data.get("back_in_service")]
    assert back.detail.startswith("back in service: a fresh audit finds it healthy")
    # A resumed controller reads it from the journal: x1 is not audited again.
    audited.clear()
    assert fleet.rollout._out_of_service_now() == set()
