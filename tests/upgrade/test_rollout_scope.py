"""Which hosts a rollout plans: every inventory host in its scope, whether or not the audit
before it wrote a snapshot for it (pyinfra's inventory loader in a child process; no host is
contacted: the audit before the rollout is given)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuaudit.upgrade.runner import Options, Rollout, in_limit, inventory_hosts

INVENTORY = """
canary = [("@sim/sc-canary-01", {"rollout_stage": "canary", "expected_gpu_count": 1})]
waves = [
    ("@sim/sc-wave1-01", {"rollout_stage": "wave1"}),
    ("@sim/sc-wave1-02", {"rollout_stage": "wave1"}),
]
"""


def rollout(tmp_path: Path, *limit: str) -> Rollout:
    inventory = tmp_path / "inventory.py"
    inventory.write_text(INVENTORY)
    directory = tmp_path / "rollout"
    (directory / "audit-before" / "hosts").mkdir(parents=True)  # an audit that wrote nothing
    opts = Options(inventory=str(inventory), target="535.161.08", limit=tuple(limit))
    return Rollout(opts, None, directory)


def test_hosts_the_audit_wrote_nothing_for_are_planned_as_skipped(tmp_path: Path) -> None:
    plan = rollout(tmp_path).prepare()
    planned = {host.name: host for stage in plan.stages for host in stage.hosts}
    assert list(planned) == ["@sim/sc-canary-01", "@sim/sc-wave1-01", "@sim/sc-wave1-02"]
    assert {host.action for host in planned.values()} == {"skip"}
    assert all("no audit snapshot" in host.reason for host in planned.values())
    assert [stage.name for stage in plan.stages if stage.hosts][:2] == ["canary", "wave1"]
    assert json.dumps([h.to_dict() for h in planned.values()])  # the plan is reportable


def test_the_limit_keeps_hosts_by_name_or_group(tmp_path: Path) -> None:
    plan = rollout(tmp_path, "waves").prepare()
    planned = [host.name for stage in plan.stages for host in stage.hosts]
    assert planned == ["@sim/sc-wave1-01", "@sim/sc-wave1-02"]
    entries = inventory_hosts(str(tmp_path / "inventory.py"))
    assert [in_limit(e, ["*canary*"]) for e in entries] == [True, False, False]
    assert entries[0].data["rollout_stage"] == "canary"


def test_a_limit_that_matches_nothing_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match=r"no host of the inventory .* matches --limit nothing"):
        rollout(tmp_path, "nothing").prepare()
