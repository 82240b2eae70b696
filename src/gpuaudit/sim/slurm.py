"""Simulated Slurm on a simulated host: ``scontrol`` and ``slurmd`` answering from real captures.

A profile's ``slurm`` entry names the captures (``sim/data/slurm/``) and the values this host
changes in them::

    "slurm": {
        "node": {"fixture": "<scontrol show node capture>", "set": {"Gres": "gpu:a100:8"},
                 "drop": ["Reason"]},
        "gres_conf": {"fixture": "<gres.conf capture>", "replace": {"h100": "a100"}},
        "slurmd_c": {"fixture": "<slurmd -C capture>"},
        "slurmd_g": {"fixture": "<slurmd -G capture>"},
    }

The node record keeps the capture's fields in their order, with the host's name in NodeName=,
NodeAddr= and NodeHostName=; ``scontrol show node -o`` prints it on one line as ``-o`` does.
``slurmd -G`` prints one line per device file of gres.conf's ``Name=gpu File=`` lines, each
the capture's first GRES line with Type=, Index= and File= changed. Everything is rendered
when the host is built (``build_slurm``); the tools only print it.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

SPEC_KEYS = {"node", "gres_conf", "slurmd_c", "slurmd_g"}
_FIELD = re.compile(r"^([A-Z][A-Za-z0-9_]*)=(.*)$")


def _fields(text: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    last = None
    for word in text.split():
        match = _FIELD.match(word)
        if match and match.group(1) not in fields:
            last = match.group(1)
            fields[last] = match.group(2)
        elif last is not None:
            fields[last] += " " + word
    return fields


def _one_line(fields: dict[str, str]) -> str:
    return " ".join(f"{key}={value}" for key, value in fields.items())


def build_slurm(host: str, spec: dict[str, Any]) -> dict[str, Any]:
    """The state's ``slurm`` entry: every answer rendered from the profile's captures."""
    from gpuaudit.sim.fixtures import read_fixture

    unknown = sorted(set(spec) - SPEC_KEYS)
    if unknown:
        raise ValueError(f"{host}: unknown slurm key(s): {', '.join(unknown)}")
    state: dict[str, Any] = {"node_name": host}
    node = spec.get("node")
    if node:
        fields = _fields(read_fixture("slurm", node["fixture"]))
        for key in ("NodeName", "NodeAddr", "NodeHostName"):
            if key in fields:
                fields[key] = host
        for key in node.get("drop", ()):
            fields.pop(key, None)
        fields.update(node.get("set", {}))
        state["scontrol"] = _one_line(fields) + "\n"
    conf = spec.get("gres_conf")
    if conf:
        text = read_fixture("slurm", conf["fixture"])
        for old, new in conf.get("replace", {}).items():
            text = text.replace(old, new)
        state["gres_conf"] = text
    hardware = spec.get("slurmd_c")
    if hardware:
        text = read_fixture("slurm", hardware["fixture"])
        state["slurmd_c"] = re.sub(r"^NodeName=\S+", f"NodeName={host}", text)
    reported = spec.get("slurmd_g")
    if reported and "gres_conf" in state:
        state["slurmd_g"] = _slurmd_g(host, read_fixture("slurm", reported["fixture"]), state)
    return state


def _slurmd_g(host: str, capture: str, state: dict[str, Any]) -> str:
    """One line per GPU device file in gres.conf, in the capture's first GRES line's form."""
    lines = capture.splitlines()
    first = lines[0]
    for more in lines[1:]:
        if re.match(r"^(?:[^\s:]+:\s+)?Gres\s+Name=", more):
            break
        first += more.strip()
    template = re.sub(r"^[^\s:]+:", f"slurmd-{host}:", first)
    out = []
    index = 0
    for line in state["gres_conf"].splitlines():
        words = dict(w.partition("=")[::2] for w in line.split() if "=" in w)
        if words.get("Name") != "gpu" or "File" not in words:
            continue
        for file in _files(words["File"]):
            entry = re.sub(r"Type=\S+", f"Type={words.get('Type', '(null)')}", template)
            entry = re.sub(r"Index=\S+", f"Index={index}", entry)
            out.append(re.sub(r"File=\S+", f"File={file}", entry))
            index += 1
    return "".join(f"{line}\n" for line in out)


def _files(spec: str) -> list[str]:
    match = re.fullmatch(r"(.*)\[(\d+)-(\d+)\](.*)", spec)
    if not match:
        return spec.split(",")
    head, low, high, tail = match.groups()
    return [f"{head}{i}{tail}" for i in range(int(low), int(high) + 1)]


def write_slurm_files(state: dict[str, Any], root: Path) -> None:
    """The host's /etc/slurm/gres.conf, where its profile has one."""
    text = (state.get("slurm") or {}).get("gres_conf")
    if text is None:
        return
    path = root / "etc/slurm/gres.conf"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _slurm(state_path: Path) -> dict[str, Any]:
    from gpuaudit.sim.state import load_state

    slurm: dict[str, Any] = load_state(state_path).get("slurm") or {}
    return slurm


def run_scontrol(argv: list[str], state_path: Path) -> int:
    slurm = _slurm(state_path)
    words = [a for a in argv if a not in ("-o", "--oneliner")]
    if words[:1] == ["ping"]:
        print(f"Slurmctld(primary) at {slurm.get('node_name', 'localhost')} is UP")
        return 0
    if words[:2] != ["show", "node"] or len(words) > 3:
        print(
            f"scontrol (gpuaudit simulator): {' '.join(argv)!r} is not simulated", file=sys.stderr
        )
        return 1
    if len(words) == 3 and words[2] != slurm.get("node_name"):
        print(f"Node {words[2]} not found", file=sys.stderr)
        return 1
    if "scontrol" not in slurm:
        print(
            "slurm_load_node error: Unable to contact slurm controller (connect failure)",
            file=sys.stderr,
        )
        return 1
    sys.stdout.write(slurm["scontrol"])
    return 0


def run_slurmd(argv: list[str], state_path: Path) -> int:
    slurm = _slurm(state_path)
    if argv == ["-C"] and "slurmd_c" in slurm:
        sys.stdout.write(slurm["slurmd_c"])
        return 0
    if argv == ["-G"]:
        sys.stderr.write(slurm.get("slurmd_g", ""))
        return 0
    print(f"slurmd (gpuaudit simulator): {' '.join(argv)!r} is not simulated", file=sys.stderr)
    return 1
