"""The operation order gpuaudit's deploy gives pyinfra is pyinfra's own, read from the frames.

pyinfra orders the operations of a CLI run by the line numbers of the calls that led to each
(``pyinfra.api.util.get_operation_order_from_stack``, through ``inspect.stack()``);
``gpuaudit.deploy.operation_order`` reads the same numbers from the frames alone. Both are
called here from the same frames: one call expression on one line, so the caller's line is the
same for both.
"""

from __future__ import annotations

import importlib
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyinfra
import pytest
from pyinfra.api import util

from gpuaudit import deploy


def _both(state: Any) -> tuple[list[int], list[int]]:
    return util.get_operation_order_from_stack(state), deploy.operation_order(state)


def _nested(depth: int, state: Any) -> tuple[list[int], list[int]]:
    if depth:
        return _nested(depth - 1, state)
    return (
        # A call that spans lines: each frame's line is where its call starts, for both.
        _both(
            state,
        )
    )


DEPLOY = """
def queue(nested, state):
    return nested(
        2,
        state,
    )

def outer(nested, state):
    return queue(nested, state)

result = outer(nested, state)
"""


def _run_deploy_file(path: Path, state: Any) -> tuple[list[int], list[int]]:
    """The two orders as seen from inside a deploy file (code compiled under its path)."""
    path.write_text(textwrap.dedent(DEPLOY))
    scope: dict[str, Any] = {"nested": _nested, "state": state}
    exec(compile(path.read_text(), str(path), "exec"), scope)
    result: tuple[list[int], list[int]] = scope["result"]
    return result


@pytest.mark.parametrize("is_cli", [True, False])
def test_the_same_order_as_pyinfra_from_a_deploy_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, is_cli: bool
) -> None:
    monkeypatch.setattr(pyinfra, "is_cli", is_cli)
    path = tmp_path / "deploy.py"
    state = SimpleNamespace(current_deploy_filename=str(path), current_op_file_number=3)
    theirs, ours = _run_deploy_file(path, state)
    assert ours == theirs
    # From the deploy file's outermost frame on: its lines first (after the op file's number).
    head = [3] if is_cli else []
    assert ours[: len(head) + 3] == [*head, 11, 9, 3]
    assert len(ours) == len(head) + 3 + 4  # _nested three times, then _both


def test_the_same_order_without_a_deploy_file_or_outside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pyinfra, "is_cli", True)
    # No deploy file: every frame outside pyinfra, from the outermost.
    state = SimpleNamespace(current_deploy_filename=None, current_op_file_number=0)
    theirs, ours = _nested(4, state)
    assert ours == theirs and len(ours) > 6
    # A deploy file no frame comes from: no frame is counted.
    state.current_deploy_filename = str(tmp_path / "elsewhere.py")
    theirs, ours = _nested(1, state)
    assert ours == theirs == [0]


def test_the_audit_deploy_has_pyinfra_use_it(monkeypatch: pytest.MonkeyPatch) -> None:
    module = importlib.import_module("pyinfra.api.operation")
    original = util.get_operation_order_from_stack
    monkeypatch.setattr(module, "get_operation_order_from_stack", original)
    deploy.use_quick_operation_order()
    assert module.get_operation_order_from_stack is deploy.operation_order


def test_the_cached_global_arguments_are_pyinfras_own(monkeypatch: pytest.MonkeyPatch) -> None:
    from typing import get_type_hints

    from pyinfra.api import arguments, facts

    pyinfras = list(get_type_hints(arguments.AllArguments).items())
    cached = deploy.global_arguments()
    assert cached == pyinfras and len(cached) > 10
    # A new list each call: a caller that changes one does not change the next.
    cached.clear()
    assert deploy.global_arguments() == pyinfras
    for module in (arguments, facts):  # as pyinfra left them, whatever ran before
        monkeypatch.setattr(module, "all_global_arguments", lambda: list(pyinfras))
    deploy.use_cached_global_arguments()
    assert arguments.all_global_arguments is facts.all_global_arguments is deploy.global_arguments
