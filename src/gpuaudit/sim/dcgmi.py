"""The simulated ``dcgmi``: ``dcgmi diag -r LEVEL [-j]`` answered from real captures.

A simulated host has DCGM when its profile keeps the ``nvidia-dcgm`` service (the default for
NVIDIA hosts). What its diagnostic prints is the host's ``dcgm_diag`` state: per level, the
real captures of ``dcgmi diag`` (``sim/data/dcgm-diag/``, see its README): the JSON one
answers ``-j``, the table one the plain command. A host's profile names them (``dcgm_diag:
{1: [capture, ...], 3: [...]}``); a host with DCGM and no such key answers level 1 with a
passing capture of the deployment checks, and no other level. A level without a capture, or
any other dcgmi command, exits 2 with a message naming the simulator: a test that needs more
fails loudly instead of reading a made-up answer. The captures are printed as they are: the
simulator does not rewrite their GPU count or versions to the host's.

With the host engine stopped (``nvidia-dcgm`` inactive) dcgmi prints what its connection
code prints (DCGM dcgmi/Command.cpp: ``Connect`` and ``DoExecuteConnectionFailure``, with
``errorString(DCGM_ST_CONNECTION_NOT_VALID)``) and exits with that status, -21, as the shell
sees it (235). Every diagnostic run is recorded in the state's ``events``, so a test can tell
whether the audit ran one.
"""

from __future__ import annotations

import sys
from pathlib import Path

from gpuaudit.sim.state import edit_state, load_state, record_event

# Typing names for the checker only: importing typing costs each tool call milliseconds.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from gpuaudit.sim.state import State

KIND = "dcgm-diag"
SERVICE = "nvidia-dcgm"
DEFAULT_ANSWERS: dict[str, list[str]] = {"1": ["virtualclient-r1-pass.json"]}
RC_USAGE = 2
RC_CONNECTION = 256 - 21  # DCGM_ST_CONNECTION_NOT_VALID
NO_HOSTENGINE = (
    "Error: unable to establish a connection to the specified host: localhost\n"
    "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n"
)


def has_dcgm(state: State) -> bool:
    return "nvidia" in state and SERVICE in (state.get("services") or {})


def build_answers(name: str, spec: Any) -> dict[str, list[str]]:
    """A profile's ``dcgm_diag`` (level → capture or captures) as the state keeps it; each
    capture must be packaged. Raises ValueError naming the host otherwise."""
    from gpuaudit.sim.fixtures import fixture_path

    if spec is None:
        return dict(DEFAULT_ANSWERS)
    if not isinstance(spec, dict):
        raise ValueError(f"{name}: dcgm_diag must map levels to captures")
    answers: dict[str, list[str]] = {}
    for level, captures in spec.items():
        if str(level) not in ("1", "2", "3", "4"):
            raise ValueError(f"{name}: dcgm_diag level {level!r} is not 1-4")
        names = [captures] if isinstance(captures, str) else list(captures)
        for capture in names:
            if not str(capture).endswith((".json", ".txt")):
                raise ValueError(f"{name}: dcgm_diag capture {capture!r} is not .json or .txt")
            try:
                fixture_path(KIND, str(capture))
            except (FileNotFoundError, ValueError) as exc:
                raise ValueError(f"{name}: {exc}") from None
        answers[str(level)] = [str(c) for c in names]
    return answers


def run(argv: list[str], state_path: Path) -> int:
    parsed = _parse(argv)
    if isinstance(parsed, str):
        print(f"dcgmi (gpuaudit simulator): {parsed}", file=sys.stderr)
        return RC_USAGE
    level, as_json = parsed
    state = load_state(state_path)
    unit = (state.get("services") or {}).get(SERVICE) or {}
    if unit.get("active") != "active":
        sys.stdout.write(NO_HOSTENGINE)
        return RC_CONNECTION
    with edit_state(state_path) as changing:
        record_event(changing, f"dcgmi diag -r {level}{' -j' if as_json else ''}")
    answers = state.get("dcgm_diag") or DEFAULT_ANSWERS
    wanted = ".json" if as_json else ".txt"
    capture = next((c for c in answers.get(str(level), []) if c.endswith(wanted)), None)
    if capture is None:
        form = "JSON (-j)" if as_json else "table"
        print(
            f"dcgmi (gpuaudit simulator): no {form} capture of dcgmi diag -r {level} for this host",
            file=sys.stderr,
        )
        return RC_USAGE
    from gpuaudit.sim.fixtures import read_fixture

    sys.stdout.write(read_fixture(KIND, capture))
    return 0


def _parse(argv: list[str]) -> tuple[int, bool] | str:
    args = list(argv)
    if not args or args[0] != "diag":
        return "only `dcgmi diag -r LEVEL [-j]` is simulated"
    args.pop(0)
    level: int | None = None
    as_json = False
    while args:
        arg = args.pop(0)
        if arg in ("-r", "--run"):
            value = args.pop(0) if args else ""
            if not value.isdigit():
                return f"-r needs a level, not {value!r}"
            level = int(value)
        elif arg in ("-j", "--json"):
            as_json = True
        else:
            return f"dcgmi diag option {arg!r} is not simulated"
    if level is None:
        return "dcgmi diag without -r LEVEL is not simulated"
    return level, as_json
