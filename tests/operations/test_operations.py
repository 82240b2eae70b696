"""Data-driven operation tests in pyinfra's layout: tests/operations/<module.op>/<case>.json
holds the operation's arguments, the facts the host reports, and the commands it must yield or
the reason it gives for changing nothing (``noop_description``).

As in pyinfra's own tests/test_operations.py, the operation's inner generator runs against a
stand-in host whose ``get_fact`` answers from the JSON, so no connection is made.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyinfra.api import StringCommand
from pyinfra.context import ctx_host

from gpuaudit.operations import driver, persistence, services

HERE = Path(__file__).parent
OPERATIONS: dict[str, Any] = {
    "persistence.enable": persistence.enable,
    "driver.pin": driver.pin,
    "services.enable": services.enable,
}
CASES = sorted(HERE.glob("*/*.json"))


class FakeHost:
    """Answers facts from a case file; a fact asked with arguments the case keys by them
    (``"server.Which": {"apt-mark": "/usr/bin/apt-mark"}``) gets the value for those."""

    def __init__(self, facts: dict[str, Any]) -> None:
        self.facts = facts
        self.noops: list[str] = []
        self.data: dict[str, Any] = {}
        self.asked: list[str] = []

    def get_fact(self, cls: type, *args: Any, **kwargs: Any) -> Any:
        name = f"{cls.__module__.rsplit('.', 1)[-1]}.{cls.__name__}"
        self.asked.append(name)
        if name not in self.facts:
            raise AssertionError(f"operation asked for fact {name}, which the case lacks")
        value = self.facts[name]
        if args and isinstance(value, dict) and str(args[0]) in value:
            return value[str(args[0])]
        return value

    def noop(self, description: str) -> None:
        self.noops.append(description)


def run_operation(op: Any, facts: dict[str, Any], *args: Any, **kwargs: Any):
    host = FakeHost(facts)
    with ctx_host.use(host):
        commands = list(op._inner(*args, **kwargs))
    return [c.get_raw_value() if isinstance(c, StringCommand) else c for c in commands], host


@pytest.mark.parametrize("case", CASES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_operation_case(case: Path) -> None:
    data = json.loads(case.read_text(encoding="utf-8"))
    commands, host = run_operation(
        OPERATIONS[case.parent.name], data["facts"], *data.get("args", []), **data.get("kwargs", {})
    )
    assert commands == data["commands"]
    if data["commands"]:
        assert host.noops == []
    else:
        assert host.noops == [data["noop_description"]]


def test_every_case_folder_names_a_known_operation() -> None:
    assert {p.parent.name for p in CASES} == set(OPERATIONS)


def test_daemon_being_started_skips_reading_gpu_modes() -> None:
    # The daemon turns persistence on for every GPU once it runs: no -pm command beside it.
    facts = {"remediation.SystemdUnits": {"nvidia-persistenced.service": {"active": "inactive"}}}
    commands, host = run_operation(persistence.enable, facts)
    assert commands == ["systemctl enable --now nvidia-persistenced.service"]
    assert "remediation.PersistenceModes" not in host.asked
