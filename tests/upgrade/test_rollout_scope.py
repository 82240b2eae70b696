"""Which hosts a rollout plans: every inventory host in its scope, whether or not the audit
before it wrote a snapshot for it (pyinfra's inventory loader in a child process; no host is
contacted: the audit before the rollout is given)."""

from __future__ import annotations

import json
import subprocess
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
    # An audit that ran to its end (its register is written) with no snapshot.
    (directory / "audit-before" / "hosts").mkdir(parents=True)
    (directory / "audit-before" / "register.json").write_text("{}")
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


def test_an_audit_before_cut_short_is_kept_aside_and_taken_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    planned = rollout(tmp_path)
    before = planned.dir / "audit-before"
    (before / "register.json").unlink()  # a controller killed while the audit ran
    (before / "hosts" / "sc-canary-01.json").write_text("{}")
    audited: list[Path] = []

    def audit(run_dir: Path, limit: object) -> None:
        audited.append(run_dir)
        (run_dir / "hosts").mkdir(parents=True)
        (run_dir / "register.json").write_text("{}")

    monkeypatch.setattr(planned, "_audit", audit)
    planned.prepare()
    assert audited == [before]
    kept = planned.dir / "audit-before.incomplete"
    assert (kept / "hosts" / "sc-canary-01.json").read_text() == "{}"
    assert not (before / "hosts" / "sc-canary-01.json").exists()


def test_once_the_journal_exists_the_audit_before_is_never_taken_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    planned = rollout(tmp_path)
    (planned.dir / "audit-before" / "register.json").unlink()
    (planned.dir / "journal.jsonl").write_text("")  # the rollout was planned and started
    monkeypatch.setattr(planned, "_audit", lambda *_: pytest.fail("the audit before was taken"))
    plan = planned.prepare()
    planned_hosts = [h.name for stage in plan.stages for h in stage.hosts]
    assert planned_hosts == ["@sim/sc-canary-01", "@sim/sc-wave1-01", "@sim/sc-wave1-02"]


def test_a_resumed_controller_counts_its_audits_on_from_those_there(tmp_path: Path) -> None:
    planned = rollout(tmp_path)
    audits = planned.dir / "audits"
    # The killed controller's audits: the canary's gate was being audited when it died.
    for name in ("001-sc-canary-01-gate", "002-sc-wave1-01-gate"):
        (audits / name / "hosts").mkdir(parents=True)
    assert planned.audit_dir("@sim/sc-canary-01", "gate") == audits / "003-sc-canary-01-gate"
    assert planned.audit_dir("@sim/sc-wave1-02", "gate") == audits / "004-sc-wave1-02-gate"
    (tmp_path / "fresh").mkdir()
    fresh = rollout(tmp_path / "fresh")
    assert fresh.audit_dir("@sim/sc-canary-01", "gate").name == "001-sc-canary-01-gate"


def test_versions_reach_the_deploy_as_they_were_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A version the host reported goes back to it in --data: pyinfra reads each value as JSON
    # (pyinfra_cli.util.parse_cli_arg; importing pyinfra's CLI here would patch for gevent).
    from gpuaudit.upgrade import runner

    commands: list[list[str]] = []

    def run(command: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        commands.append(command)
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(runner, "_run", run)
    reported = '550.54.15"; echo not a version'
    rollout(tmp_path)._deploy("@sim/sc-wave1-01", "rollback", gpuaudit_rollback_version=reported)
    (command,) = commands
    data = dict(command[i + 1].split("=", 1) for i, arg in enumerate(command) if arg == "--data")
    read = {key: _as_pyinfra_reads(value) for key, value in data.items()}
    assert read == {
        "gpuaudit_step": "rollback",
        "gpuaudit_target": "535.161.08",
        "gpuaudit_rollback_version": reported,
    }


def _as_pyinfra_reads(value: str) -> object:
    """pyinfra_cli.util.parse_cli_arg's reading of a --data value: JSON, else the text."""
    try:
        return json.loads(value)
    except ValueError:
        return value
