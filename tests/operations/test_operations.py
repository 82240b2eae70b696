"""Data-driven operation tests in pyinfra's layout: tests/operations/<module.op>/<case>.json
holds the operation's arguments, the facts the host reports, the host's inventory data
(``host_data``, optional), and the commands it must yield, the reason it gives for changing
nothing (``noop_description``), the reason it refuses this host for (``refused``: one command
that fails this host alone) or the text of the error wrong arguments raise (``error``).

As in pyinfra's own tests/test_operations.py, the operation's inner generator runs against a
stand-in host whose ``get_fact`` answers from the JSON, so no connection is made.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
from pathlib import Path
from typing import Any

import pytest
from ophelpers import refused
from pyinfra.api import FileUploadCommand, FunctionCommand, StringCommand
from pyinfra.api.exceptions import OperationValueError
from pyinfra.context import ctx_host

from gpuaudit.operations import persistence

HERE = Path(__file__).parent
CASES = sorted(HERE.glob("*/*.json"))


def operation_named(folder: str) -> Any:
    """``driver.pin`` → gpuaudit.operations.driver.pin (the folder names the operation)."""
    module, _, name = folder.partition(".")
    op = getattr(importlib.import_module(f"gpuaudit.operations.{module}"), name, None)
    assert op is not None and hasattr(op, "_inner"), f"{folder}: no such gpuaudit operation"
    return op


class FakeHost:
    """Answers facts from a case file; a fact asked with arguments the case keys by them
    (``"server.Which": {"apt-mark": "/usr/bin/apt-mark"}``) gets the value for those."""

    def __init__(self, facts: dict[str, Any], data: dict[str, Any] | None = None) -> None:
        self.facts = facts
        self.noops: list[str] = []
        self.data: dict[str, Any] = dict(data or {})
        self.asked: list[str] = []
        self.groups: list[str] = []
        self.name = "@fake"

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


def run_operation(
    op: Any,
    facts: dict[str, Any],
    *args: Any,
    host_data: dict[str, Any] | None = None,
    **kwargs: Any,
):
    host = FakeHost(facts)
    host.data.update(host_data or {})
    with ctx_host.use(host):
        commands = list(op._inner(*args, **kwargs))
    return [rendered(c) for c in commands], host


def rendered(command: Any) -> Any:
    """A command as a case file writes it: the shell text; an upload of an in-memory file is
    ``upload <remote path>``, a newline, then the content; a Python callback is
    ``function <name>``."""
    if isinstance(command, StringCommand):
        return command.get_raw_value()
    if isinstance(command, FunctionCommand):
        return f"function {command.function.__name__}"
    if isinstance(command, FileUploadCommand) and hasattr(command.src, "getvalue"):
        return f"upload {command.dest}\n{command.src.getvalue()}"
    return command


@pytest.mark.parametrize("case", CASES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_operation_case(case: Path) -> None:
    data = json.loads(case.read_text(encoding="utf-8"))
    call = (operation_named(case.parent.name), data["facts"], *data.get("args", []))
    options = {**data.get("kwargs", {}), "host_data": data.get("host_data")}
    if "error" in data:  # the arguments are wrong for every host: the operation raises
        with pytest.raises(OperationValueError) as raised:
            run_operation(*call, **options)
        assert data["error"] in str(raised.value)
        return
    commands, host = run_operation(*call, **options)
    if "refused" in data:  # the operation refuses this host alone: its reason has the text
        assert data["refused"] in refused(commands)
        assert host.noops == []
        return
    assert commands == data["commands"]
    if data["commands"]:
        assert host.noops == []
    else:
        assert host.noops == [data["noop_description"]]


def test_every_operation_has_cases() -> None:
    import gpuaudit.operations as package

    folders = {p.parent.name for p in CASES}
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"gpuaudit.operations.{info.name}")
        for name, value in vars(module).items():
            if hasattr(value, "_inner") and getattr(value, "__module__", "") == module.__name__:
                assert f"{info.name}.{name}" in folders, f"{info.name}.{name} has no cases"


def test_daemon_being_started_skips_reading_gpu_modes() -> None:
    # The daemon turns persistence on for every GPU once it runs: no -pm command beside it.
    facts = {
        "remediation.NvidiaDriverVersion": "535.161.08",
        "remediation.SystemdUnits": {"nvidia-persistenced.service": {"active": "inactive"}},
    }
    commands, host = run_operation(persistence.enable, facts)
    assert commands == ["systemctl enable --now nvidia-persistenced.service"]
    assert "remediation.PersistenceModes" not in host.asked
