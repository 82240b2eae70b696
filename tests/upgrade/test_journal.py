"""The rollout journal: durable events, torn and corrupt lines, resume rules, rollout.json."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from gpuaudit.upgrade.journal import (
    JOURNAL_FILE,
    ROLLOUT_JSON_FILE,
    ROLLOUT_SCHEMA_VERSION,
    Event,
    EventStatus,
    HostOutcome,
    Journal,
    JournalError,
    RolloutMeta,
    RolloutStatus,
    Step,
    build_state,
    load_state,
    read_journal,
    rollout_document,
    write_rollout_json,
)

START = datetime(2025, 1, 31, 10, 0, tzinfo=timezone.utc)
GATE_PASS = {
    "outcome": "pass",
    "checks": [
        {"name": "driver", "outcome": "pass", "detail": "550.127.05 loaded", "evidence": {}},
        {"name": "xid", "outcome": "pass", "detail": "no new XID", "evidence": {"new": []}},
    ],
}
GATE_FAIL = {
    "outcome": "fail",
    "checks": [
        {
            "name": "xid",
            "outcome": "fail",
            "detail": "XID 79 on GPU 3",
            "evidence": {"lines": ["NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus"]},
        }
    ],
}
UPGRADE_STEPS = ("drain", "stop_services", "unpin", "install", "pin", "reload", "wait")


class Clock:
    """A clock that moves one second per reading, so timestamps are known and ordered."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


def journal(tmp_path: Path) -> Journal:
    return Journal.open(tmp_path, clock=Clock())


def lines(tmp_path: Path) -> list[str]:
    return (tmp_path / JOURNAL_FILE).read_text(encoding="utf-8").splitlines()


def run_step(j: Journal, host: str, step: str, **done_data: Any) -> None:
    j.record(host, step, "started")
    j.record(host, step, "done", **done_data)


def upgrade_host(j: Journal, host: str, before: str = "535.161.08") -> None:
    j.record(host, "rollout", "started")
    j.record(host, "precheck", "started")
    j.record(host, "precheck", "done", version_before=before, pin_before=before)
    for step in UPGRADE_STEPS:
        run_step(j, host, step)
    j.record(host, "gate", "started")
    j.record(host, "gate", "done", "pass", version_after="550.127.05", **GATE_PASS)
    run_step(j, host, "start_services")
    run_step(j, host, "undrain")
    j.record(host, "rollout", "done")


# --- writing and reading back -----------------------------------------------------------------


def test_round_trip_keeps_every_field(tmp_path: Path) -> None:
    j = journal(tmp_path)
    first = j.record(None, Step.ROLLOUT, EventStatus.STARTED, "to 550.127.05", stages=["canary"])
    second = j.record("gpu-01", "install", "done", "apt", version_after="550.127.05")

    assert [json.loads(line) for line in lines(tmp_path)] == [
        {
            "seq": 1,
            "at": "2025-01-31T10:00:01.000Z",
            "host": None,
            "step": "rollout",
            "status": "started",
            "detail": "to 550.127.05",
            "data": {"stages": ["canary"]},
        },
        {
            "seq": 2,
            "at": "2025-01-31T10:00:02.000Z",
            "host": "gpu-01",
            "step": "install",
            "status": "done",
            "detail": "apt",
            "data": {"version_after": "550.127.05"},
        },
    ]
    assert read_journal(tmp_path).events == (first, second)
    assert Journal.open(tmp_path).next_seq == 3


def test_every_event_is_fsynced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    j = journal(tmp_path)
    synced: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.fstat(fd).st_size)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    j.record("gpu-01", "drain", "started")
    j.record("gpu-01", "drain", "done")
    size = (tmp_path / JOURNAL_FILE).stat().st_size
    assert len(synced) == 2 and synced[-1] == size


def test_a_killed_writer_loses_nothing_it_recorded(tmp_path: Path) -> None:
    script = (
        "import os, sys\n"
        "from gpuaudit.upgrade.journal import Journal\n"
        "j = Journal.open(sys.argv[1])\n"
        "j.record('gpu-01', 'drain', 'started')\n"
        "j.record('gpu-01', 'drain', 'done')\n"
        "os._exit(9)  # no interpreter shutdown, no buffers flushed on the way out\n"
    )
    subprocess.run([sys.executable, "-c", script, str(tmp_path)], check=False)
    state = load_state(tmp_path)
    assert state.host("gpu-01").finished_steps == (Step.DRAIN,)


def test_record_rejects_what_a_reader_would_reject(tmp_path: Path) -> None:
    j = journal(tmp_path)
    with pytest.raises(ValueError, match="step 'reimage' is not one of"):
        j.record("gpu-01", "reimage", "started")
    with pytest.raises(ValueError, match="eventstatus 'ok' is not one of"):
        j.record("gpu-01", "drain", "ok")
    with pytest.raises(ValueError, match="Out of range float"):
        j.record("gpu-01", "wait", "done", seconds=math.nan)
    with pytest.raises(ValueError, match="version_before must be a string"):
        j.record("gpu-01", "precheck", "done", version_before=550)
    with pytest.raises(ValueError, match="host must be"):
        j.record("", "drain", "started")
    assert not (tmp_path / JOURNAL_FILE).read_bytes()


# --- torn and corrupt lines ------------------------------------------------------------------


def test_torn_last_line_is_ignored_with_a_warning(tmp_path: Path) -> None:
    j = journal(tmp_path)
    run_step(j, "gpu-01", "drain")
    whole = (tmp_path / JOURNAL_FILE).read_bytes()
    torn = b'{"seq":3,"at":"2025-01-31T10:00:03.000Z","host":"gpu-01","st'
    (tmp_path / JOURNAL_FILE).write_bytes(whole + torn)

    state = load_state(tmp_path)
    assert [e.seq for e in state.events] == [1, 2]
    assert state.host("gpu-01").finished_steps == (Step.DRAIN,)
    assert len(state.warnings) == 1
    assert "line 3" in state.warnings[0] and "torn" in state.warnings[0]


def test_open_cuts_a_torn_tail_and_says_so(tmp_path: Path) -> None:
    j = journal(tmp_path)
    run_step(j, "gpu-01", "drain")
    with open(tmp_path / JOURNAL_FILE, "ab") as handle:
        handle.write(b'{"seq":3,"at":"2025-01-31T1')

    reopened = Journal.open(tmp_path, clock=Clock())
    reopened.record("gpu-01", "stop_services", "started")

    contents = read_journal(tmp_path)
    assert contents.warnings == ()
    assert [(e.seq, e.step, e.status) for e in contents.events] == [
        (1, Step.DRAIN, EventStatus.STARTED),
        (2, Step.DRAIN, EventStatus.DONE),
        (3, Step.ROLLOUT, EventStatus.INFO),
        (4, Step.STOP_SERVICES, EventStatus.STARTED),
    ]
    assert contents.events[2].host is None
    assert contents.events[2].data == {"torn_bytes": 27}


def test_a_whole_last_event_missing_its_newline_is_kept(tmp_path: Path) -> None:
    j = journal(tmp_path)
    run_step(j, "gpu-01", "drain")
    path = tmp_path / JOURNAL_FILE
    path.write_bytes(path.read_bytes().rstrip(b"\n"))

    assert read_journal(tmp_path).needs_newline
    Journal.open(tmp_path, clock=Clock()).record("gpu-01", "unpin", "started")
    assert [e.seq for e in read_journal(tmp_path).events] == [1, 2, 3]


def test_nul_padding_after_a_crash_is_ignored(tmp_path: Path) -> None:
    j = journal(tmp_path)
    run_step(j, "gpu-01", "drain")
    with open(tmp_path / JOURNAL_FILE, "ab") as handle:
        handle.write(b"\x00" * 64)
    assert [e.seq for e in load_state(tmp_path).events] == [1, 2]
    assert "64 blank or NUL bytes" in load_state(tmp_path).warnings[0]
    Journal.open(tmp_path, clock=Clock()).record("gpu-01", "unpin", "started")
    assert [e.seq for e in read_journal(tmp_path).events] == [1, 2, 3, 4]


def test_corrupt_middle_line_names_its_line(tmp_path: Path) -> None:
    j = journal(tmp_path)
    run_step(j, "gpu-01", "drain")
    run_step(j, "gpu-01", "stop_services")
    text = lines(tmp_path)
    text[1] = text[1][:-10]  # cut short, and followed by whole lines: not a torn tail
    (tmp_path / JOURNAL_FILE).write_text("\n".join(text) + "\n", encoding="utf-8")

    with pytest.raises(JournalError, match=r"journal\.jsonl: line 2: not a JSON event") as error:
        load_state(tmp_path)
    assert error.value.line == 2
    with pytest.raises(JournalError):
        Journal.open(tmp_path)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"step": "reimage"}, "step 'reimage' is not one of"),
        ({"status": "ok"}, "eventstatus 'ok' is not one of"),
        ({"at": "2025-01-31 10:00:00"}, "not an ISO-8601 UTC timestamp"),
        ({"seq": 7}, "seq 7 where 2 was expected"),
        ({"data": []}, "data must be an object"),
        ({"extra": 1}, "unknown fields \\['extra'\\]"),
        ({"data": {"outcome": "fail", "checks": [{"name": "x"}]}, "step": "gate"}, "checks\\[0\\]"),
    ],
)
def test_invalid_event_fields_are_errors_with_the_line(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    j = journal(tmp_path)
    run_step(j, "gpu-01", "drain")
    j.record("gpu-01", "stop_services", "started")
    text = lines(tmp_path)
    event = json.loads(text[1])
    event.update(change)
    text[1] = json.dumps(event)
    (tmp_path / JOURNAL_FILE).write_text("\n".join(text) + "\n", encoding="utf-8")

    with pytest.raises(JournalError, match=f"line 2: .*{message}"):
        read_journal(tmp_path)


def test_nan_in_a_line_is_an_error(tmp_path: Path) -> None:
    j = journal(tmp_path)
    j.record("gpu-01", "wait", "done", seconds=3)
    j.record("gpu-01", "gate", "started")
    text = lines(tmp_path)
    text[0] = text[0].replace('"seconds":3', '"seconds":NaN')
    (tmp_path / JOURNAL_FILE).write_text("\n".join(text) + "\n", encoding="utf-8")
    with pytest.raises(JournalError, match=r"line 1: .*NaN is not allowed"):
        read_journal(tmp_path)


def test_an_absent_journal_is_an_empty_running_rollout(tmp_path: Path) -> None:
    state = load_state(tmp_path / "not-yet")
    assert state.events == () and state.status is RolloutStatus.RUNNING
    assert state.host("gpu-01").outcome is HostOutcome.UNTOUCHED


# --- resume ----------------------------------------------------------------------------------


def test_resume_repeats_the_started_step_and_not_the_done_ones(tmp_path: Path) -> None:
    j = journal(tmp_path)
    j.record("gpu-01", "rollout", "started")
    run_step(j, "gpu-01", "drain")
    run_step(j, "gpu-01", "stop_services")
    j.record("gpu-01", "unpin", "started")  # the controller died here

    Journal.open(tmp_path)  # the next controller opens the same journal
    host = load_state(tmp_path).host("gpu-01")
    assert host.in_progress is Step.UNPIN
    assert host.finished_steps == (Step.DRAIN, Step.STOP_SERVICES)
    assert host.is_finished("drain") and host.is_finished(Step.STOP_SERVICES)
    assert not host.is_finished("unpin") and not host.is_finished("install")
    assert host.outcome is HostOutcome.RUNNING
    assert host.reason == "unpin in progress"


def test_a_skipped_step_is_finished(tmp_path: Path) -> None:
    j = journal(tmp_path)
    j.record("gpu-01", "reboot", "skipped", "module reload was enough")
    assert load_state(tmp_path).host("gpu-01").is_finished("reboot")


def test_a_failed_step_started_again_is_a_retry(tmp_path: Path) -> None:
    j = journal(tmp_path)
    j.record("gpu-01", "wait", "started")
    j.record("gpu-01", "wait", "failed", "no answer after 300s")
    assert load_state(tmp_path).host("gpu-01").outcome is HostOutcome.FAILED
    j.record("gpu-01", "wait", "started")
    retrying = load_state(tmp_path).host("gpu-01")
    assert retrying.in_progress is Step.WAIT and retrying.outcome is HostOutcome.RUNNING
    j.record("gpu-01", "wait", "done")
    after = load_state(tmp_path).host("gpu-01")
    assert after.failed_step is None and after.is_finished("wait")


def test_between_steps_nothing_is_in_progress(tmp_path: Path) -> None:
    j = journal(tmp_path)
    j.record("gpu-01", "rollout", "started")
    run_step(j, "gpu-01", "drain")
    host = load_state(tmp_path).host("gpu-01")
    assert host.in_progress is None and host.outcome is HostOutcome.RUNNING


# --- state for each outcome --------------------------------------------------------------------


def test_upgraded_host(tmp_path: Path) -> None:
    j = journal(tmp_path)
    upgrade_host(j, "gpu-01")
    host = load_state(tmp_path).host("gpu-01")
    assert host.outcome is HostOutcome.UPGRADED and host.reason == ""
    assert (host.version_before, host.pin_before, host.version_after) == (
        "535.161.08",
        "535.161.08",
        "550.127.05",
    )
    assert [g.outcome for g in host.gates] == ["pass"]
    assert [(c.name, c.outcome, c.evidence) for c in host.gates[0].checks] == [
        ("driver", "pass", {}),
        ("xid", "pass", {"new": []}),
    ]
    assert host.in_progress is None and host.failed_step is None


def test_rolled_back_host_names_the_failure(tmp_path: Path) -> None:
    j = journal(tmp_path)
    j.record("gpu-02", "precheck", "done", version_before="535.161.08")
    run_step(j, "gpu-02", "install", version_after="550.127.05")
    j.record("gpu-02", "gate", "started")
    j.record("gpu-02", "gate", "failed", "fail: xid: XID 79 on GPU 3", **GATE_FAIL)
    j.record("gpu-02", "rollback", "started")
    assert load_state(tmp_path).host("gpu-02").outcome is HostOutcome.RUNNING
    j.record("gpu-02", "rollback", "done", "535.161.08 reinstalled", version_after="535.161.08")

    host = load_state(tmp_path).host("gpu-02")
    assert host.outcome is HostOutcome.ROLLED_BACK
    assert host.reason == "gate failed: fail: xid: XID 79 on GPU 3"
    assert host.failed_step is Step.GATE
    assert host.version_after == "535.161.08"
    assert host.gates[0].checks[0].evidence == GATE_FAIL["checks"][0]["evidence"]


def test_failed_host_and_a_failed_rollback(tmp_path: Path) -> None:
    j = journal(tmp_path)
    j.record("gpu-03", "install", "started")
    j.record("gpu-03", "install", "failed", "dpkg: error processing package")
    host = load_state(tmp_path).host("gpu-03")
    assert host.outcome is HostOutcome.FAILED
    assert host.reason == "install failed: dpkg: error processing package"

    j.record("gpu-03", "rollback", "started")
    j.record("gpu-03", "rollback", "failed", "old package gone from the mirror")
    host = load_state(tmp_path).host("gpu-03")
    assert host.outcome is HostOutcome.FAILED
    assert host.reason == "rollback failed: old package gone from the mirror"


def test_skipped_and_untouched_hosts(tmp_path: Path) -> None:
    j = journal(tmp_path)
    j.record("gpu-04", "rollout", "skipped", "already on 550.127.05")
    j.record("gpu-05", "precheck", "info", "noted before start")
    state = load_state(tmp_path)
    assert state.host("gpu-04").outcome is HostOutcome.SKIPPED
    assert state.host("gpu-04").reason == "already on 550.127.05"
    assert state.host("gpu-05").outcome is HostOutcome.UNTOUCHED
    assert state.host("never-seen").outcome is HostOutcome.UNTOUCHED


def test_undrain_done_without_a_host_rollout_event_is_upgraded(tmp_path: Path) -> None:
    j = journal(tmp_path)
    run_step(j, "gpu-06", "install")
    assert load_state(tmp_path).host("gpu-06").outcome is HostOutcome.RUNNING
    run_step(j, "gpu-06", "undrain")
    assert load_state(tmp_path).host("gpu-06").outcome is HostOutcome.UPGRADED


@pytest.mark.parametrize(
    ("events", "status", "reason"),
    [
        ([], RolloutStatus.RUNNING, ""),
        ([("rollout", "started", "")], RolloutStatus.RUNNING, ""),
        ([("rollout", "started", ""), ("rollout", "done", "")], RolloutStatus.COMPLETED, ""),
        ([("halt", "info", "gpu-02: gate failed")], RolloutStatus.HALTED, "gpu-02: gate failed"),
        ([("rollout", "failed", "budget spent")], RolloutStatus.HALTED, "budget spent"),
        ([("pause", "info", "gate inconclusive")], RolloutStatus.PAUSED, "gate inconclusive"),
        ([("pause", "info", "x"), ("rollout", "started", "resumed")], RolloutStatus.RUNNING, ""),
        ([("pause", "info", "x"), ("rollout", "info", "note")], RolloutStatus.PAUSED, "x"),
    ],
)
def test_rollout_status(
    tmp_path: Path, events: list[tuple[str, str, str]], status: RolloutStatus, reason: str
) -> None:
    j = journal(tmp_path)
    for step, event_status, detail in events:
        j.record(None, step, event_status, detail)
    state = load_state(tmp_path)
    assert (state.status, state.reason) == (status, reason)


def test_build_state_is_the_same_from_memory_and_from_disk(tmp_path: Path) -> None:
    j = journal(tmp_path)
    upgrade_host(j, "gpu-01")
    assert build_state(j.events) == load_state(tmp_path)


# --- rollout.json ------------------------------------------------------------------------------

META = RolloutMeta(
    rollout_id="r-2025-01-31",
    target_version="550.127.05",
    stages={"canary": ("gpu-01",), "wave1": ("gpu-02", "gpu-03", "gpu-04")},
)


def _halted_rollout(tmp_path: Path) -> None:
    j = journal(tmp_path)
    j.record(None, "rollout", "started", "to 550.127.05")
    upgrade_host(j, "gpu-01")
    j.record("gpu-02", "precheck", "done", version_before="535.161.08")
    j.record("gpu-02", "gate", "failed", "xid", **GATE_FAIL)
    j.record("gpu-02", "rollback", "done", version_after="535.161.08")
    j.record(None, "halt", "info", "gpu-02 failed its gate")


def test_rollout_json_shape(tmp_path: Path) -> None:
    _halted_rollout(tmp_path)
    state = load_state(tmp_path)
    path = write_rollout_json(tmp_path, state, META)
    assert path == tmp_path / ROLLOUT_JSON_FILE
    doc = json.loads(path.read_text(encoding="utf-8"))

    assert list(doc) == [
        "schema_version",
        "rollout_id",
        "target_version",
        "status",
        "reason",
        "started_at",
        "updated_at",
        "hosts",
    ]
    assert doc["schema_version"] == ROLLOUT_SCHEMA_VERSION == 1
    assert doc["rollout_id"] == "r-2025-01-31"
    assert doc["target_version"] == "550.127.05"
    assert doc["status"] == "halted"
    assert doc["reason"] == "gpu-02 failed its gate"
    assert doc["started_at"] == state.events[0].at == "2025-01-31T10:00:01.000Z"
    assert doc["updated_at"] == state.events[-1].at
    assert [h["name"] for h in doc["hosts"]] == ["gpu-01", "gpu-02", "gpu-03", "gpu-04"]
    for host in doc["hosts"]:
        assert list(host) == [
            "name",
            "stage",
            "outcome",
            "before",
            "after",
            "reason",
            "gates",
            "events",
        ]

    canary, failed, untouched, _ = doc["hosts"]
    assert canary["stage"] == "canary" and canary["outcome"] == "upgraded"
    assert (canary["before"], canary["after"]) == ("535.161.08", "550.127.05")
    assert canary["gates"] == [GATE_PASS]
    assert canary["events"][0] == {
        "at": "2025-01-31T10:00:02.000Z",
        "step": "rollout",
        "status": "started",
        "detail": "",
    }
    assert len(canary["events"]) == len(state.host("gpu-01").events)
    assert failed["stage"] == "wave1" and failed["outcome"] == "rolled_back"
    assert failed["reason"] == "gate failed: xid"
    assert failed["gates"] == [GATE_FAIL]
    assert (failed["before"], failed["after"]) == ("535.161.08", "535.161.08")
    assert untouched == {
        "name": "gpu-03",
        "stage": "wave1",
        "outcome": "untouched",
        "before": None,
        "after": None,
        "reason": "not started: the rollout is halted",
        "gates": [],
        "events": [],
    }


def test_rollout_json_lists_journal_hosts_outside_the_stages_last(tmp_path: Path) -> None:
    j = journal(tmp_path)
    j.record("gpu-99", "rollout", "skipped", "not in inventory any more")
    doc = rollout_document(load_state(tmp_path), META)
    assert doc["hosts"][-1]["name"] == "gpu-99" and doc["hosts"][-1]["stage"] is None
    assert doc["status"] == "running" and doc["started_at"] is not None


def test_rollout_json_accepts_a_plain_mapping_and_rejects_a_host_in_two_stages(
    tmp_path: Path,
) -> None:
    state = load_state(tmp_path)
    meta = {"rollout_id": "r", "target_version": "550", "stages": {"canary": ["a"], "w": ["b"]}}
    doc = rollout_document(state, meta)
    assert [(h["name"], h["stage"], h["outcome"]) for h in doc["hosts"]] == [
        ("a", "canary", "untouched"),
        ("b", "w", "untouched"),
    ]
    assert doc["started_at"] is None and doc["updated_at"] is None
    with pytest.raises(ValueError, match="'a' is in stages 'canary' and 'w'"):
        RolloutMeta("r", "550", {"canary": ("a",), "w": ("a",)})


def test_rollout_json_is_replaced_atomically_and_has_no_nan(tmp_path: Path) -> None:
    j = journal(tmp_path)
    j.record("gpu-01", "gate", "done", outcome="pass", checks=[])
    write_rollout_json(tmp_path, load_state(tmp_path), META)
    before = (tmp_path / ROLLOUT_JSON_FILE).read_text(encoding="utf-8")

    check = {"name": "power", "outcome": "pass", "detail": "", "evidence": {"watts": math.nan}}
    event = Event(
        1, "2025-01-31T11:00:00Z", "gpu-01", Step.GATE, EventStatus.DONE, "", {
            "outcome": "pass", "checks": [check]}
    )  # fmt: skip
    with pytest.raises(ValueError, match="Out of range float"):
        write_rollout_json(tmp_path, build_state([event]), META)
    assert (tmp_path / ROLLOUT_JSON_FILE).read_text(encoding="utf-8") == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [JOURNAL_FILE, ROLLOUT_JSON_FILE]
