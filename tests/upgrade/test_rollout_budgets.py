"""The controller keeps to ``max_unavailable`` and the failure budgets while it runs: hosts the
rollout left out of service count against ``max_unavailable``, and the waves' failures are
counted together, a resumed controller counting those before it (read from the journal).

Each host's upgrade is replaced by a stand-in that records what the journal would hold for a
host upgraded, rolled back, or failed and left drained; the plan, the scheduling, the journal and
the halt are the controller's own.
"""

from __future__ import annotations

import threading
import time
from datetime import date
from pathlib import Path

from upgrade_factories import TARGET, inventory_host

from gpuaudit.policy.upgrade import UpgradeSettings
from gpuaudit.upgrade.journal import RolloutMeta, RolloutStatus, load_state
from gpuaudit.upgrade.lease import acquire
from gpuaudit.upgrade.plan import HostPlan, plan_rollout
from gpuaudit.upgrade.runner import Options, Rollout

STAGES = ("canary", "wave1", "wave2")


class Fleet:
    """A rollout over ``hosts`` (name → stage) whose upgrades are stand-ins: a host in
    ``left_drained`` fails and stays out of service, one in ``rolled_back`` fails and is
    restored, every other host is upgraded."""

    def __init__(
        self,
        directory: Path,
        hosts: dict[str, str],
        settings: UpgradeSettings,
        *,
        left_drained: frozenset[str] = frozenset(),
        rolled_back: frozenset[str] = frozenset(),
    ) -> None:
        self.left_drained, self.rolled_back = left_drained, rolled_back
        planned = [
            inventory_host(name, (), True, rollout_stage=stage) for name, stage in hosts.items()
        ]
        self.rollout = Rollout(Options(inventory="unused.py", target=TARGET), None, directory)
        self.rollout.settings = settings
        self.rollout.plan = plan_rollout(planned, TARGET, settings, date.today())
        stages = {s.name: tuple(h.name for h in s.hosts) for s in self.rollout.plan.stages}
        self.rollout.meta = RolloutMeta(directory.name, TARGET, stages)
        self.rollout._upgrade_host = self._upgrade  # type: ignore[method-assign]
        self.lock = threading.Lock()
        self.active: set[str] = set()
        # At each start: the hosts out of service, the one starting included.
        self.out_at_start: list[set[str]] = []
        self.started: list[str] = []

    def _upgrade(self, host: HostPlan) -> bool:
        name, record = host.name, self.rollout.record
        with self.lock:
            self.active.add(name)
            self.started.append(name)
            hosts = load_state(self.rollout.dir).hosts.values()
            left_out = {h.name for h in hosts if h.outcome.value == "failed"}
            self.out_at_start.append(self.active | left_out)
        record(name, "rollout", "started", "")
        record(name, "install", "started")
        time.sleep(0.05)  # long enough for another host to start beside it, were it allowed
        try:
            if name in self.left_drained:
                record(name, "install", "failed", "the package would not install")
                record(name, "rollback", "failed", "left drained")
                return False
            record(name, "install", "done")
            if name in self.rolled_back:
                record(name, "gate", "failed", "XID 79 after the upgrade")
                record(name, "rollback", "done", "back on the old driver")
                record(name, "undrain", "done")
                return False
            record(name, "undrain", "done")
            record(name, "rollout", "done", "upgraded", version_after=TARGET)
            return True
        finally:
            with self.lock:
                self.active.discard(name)

    def run(self) -> int:
        return run_leased(self.rollout)


def run_leased(rollout: Rollout) -> int:
    """The rollout's run under a lease of its own, as ``Rollout.run`` takes one."""
    lease = acquire(rollout.dir, "test", 600)
    try:
        return rollout._run(lease)
    finally:
        lease.release()


def test_a_host_left_out_of_service_counts_against_max_unavailable(tmp_path: Path) -> None:
    hosts = {"c1": "canary", "w1": "wave1", "w2": "wave1", "w3": "wave1", "w4": "wave1"}
    settings = UpgradeSettings(stages=STAGES, max_parallel=2, max_unavailable=2, failure_budget=1)
    fleet = Fleet(tmp_path / "r", hosts, settings, left_drained=frozenset({"w1"}))
    assert fleet.run() == 0
    budget = fleet.rollout.plan.unavailable_budget
    assert budget == 2
    # Never more than two hosts out of service, w1 (left drained) counted once it failed.
    assert max(len(out) for out in fleet.out_at_start) <= budget, fleet.out_at_start
    after_w1 = fleet.out_at_start[fleet.started.index("w1") + 1 :]
    assert after_w1 and all("w1" in out and len(out) == 2 for out in after_w1)
    outcomes = {n: h.outcome.value for n, h in load_state(fleet.rollout.dir).hosts.items()}
    assert outcomes == {"c1": "upgraded", "w1": "failed", "w2": "upgraded", "w3": "upgraded",
                        "w4": "upgraded"}  # fmt: skip


def test_when_the_hosts_left_out_use_up_max_unavailable_the_rollout_halts(
    tmp_path: Path,
) -> None:
    hosts = {"c1": "canary", "w1": "wave1", "w2": "wave1", "v1": "wave2"}
    settings = UpgradeSettings(stages=STAGES, max_parallel=1, max_unavailable=2, failure_budget=5)
    fleet = Fleet(tmp_path / "r", hosts, settings, left_drained=frozenset({"w1", "w2"}))
    assert fleet.run() == 1
    state = load_state(fleet.rollout.dir)
    assert state.status is RolloutStatus.HALTED
    assert state.reason.startswith("max_unavailable (2) is used up by hosts out of service: w1 (")
    assert state.host("v1").outcome.value == "untouched"


def test_the_waves_failures_are_counted_together(tmp_path: Path) -> None:
    hosts = {"c1": "canary", "w1": "wave1", "w2": "wave1", "v1": "wave2", "v2": "wave2"}
    settings = UpgradeSettings(stages=STAGES, max_unavailable=5, failure_budget=1)
    fleet = Fleet(tmp_path / "r", hosts, settings, rolled_back=frozenset({"w1", "v1"}))
    assert fleet.run() == 1
    state = load_state(fleet.rollout.dir)
    assert state.status is RolloutStatus.HALTED
    assert state.reason.startswith("2 hosts failed in the waves (v1, w1); failure_budget is 1")
    assert fleet.started == ["c1", "w1", "w2", "v1"]  # v2 is never started
    assert state.host("v2").outcome.value == "untouched"


def test_a_resumed_controller_counts_the_failures_before_it(tmp_path: Path) -> None:
    hosts = {"c1": "canary", "w1": "wave1", "w2": "wave1", "v1": "wave2", "v2": "wave2"}
    settings = UpgradeSettings(stages=STAGES, max_unavailable=5, failure_budget=1)
    directory = tmp_path / "r"
    # A first controller got as far as the canary (upgraded) and w1 (rolled back).
    first = Fleet(directory, {"c1": "canary", "w1": "wave1"}, settings,
                  rolled_back=frozenset({"w1"}))  # fmt: skip
    assert first.run() == 0
    resumed = Fleet(directory, hosts, settings, rolled_back=frozenset({"w1", "v1"}))
    assert resumed.run() == 1
    assert resumed.started == ["w2", "v1"]  # c1 and w1 were finished
    state = load_state(directory)
    assert state.reason.startswith("2 hosts failed in the waves (v1, w1)")
    assert state.host("v2").outcome.value == "untouched"
