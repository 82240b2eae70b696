"""The MIG state of a host, as :func:`gpuaudit.operations.mig.apply` needs it, in one command.

One shell script reads every section the operation decides on and frames each between two
marker lines that carry a per-call nonce (so that a process name or an error message cannot
pass for a marker), with its exit status:

- ``gpus``: ``nvidia-smi --query-gpu=index,name,pci.bus_id,pci.device_id,mig.mode.current,
  mig.mode.pending,persistence_mode --format=csv,noheader``
- ``gi`` / ``ci``: ``nvidia-smi mig -lgi`` / ``-lci`` (read with :mod:`gpuaudit.parsers.mig`)
- ``apps``: ``nvidia-smi --query-compute-apps=gpu_bus_id,pid,process_name --format=csv,noheader``
- ``modules``: the loaded kernel modules' names (``/proc/modules``, else ``lsmod``)

``process`` is pure and returns plain data (a pyinfra fact value, and what the data-driven
operation tests write), which :mod:`gpuaudit.operations.mig_plan` reads into typed values.
"""

from __future__ import annotations

import csv
import re
from typing import Any

from pyinfra.api import FactBase

from gpuaudit.collect import new_nonce
from gpuaudit.model.snapshot import MigInstance, bus_key
from gpuaudit.parsers.errors import ParseError
from gpuaudit.parsers.mig import parse_mig_instances, says_none_found
from gpuaudit.parsers.values import clean

QUERY_FIELDS = (
    "index", "name", "pci.bus_id", "pci.device_id", "mig.mode.current", "mig.mode.pending",
    "persistence_mode",
)  # fmt: skip
APPS_FIELDS = ("gpu_bus_id", "pid", "process_name")
# Seconds each nvidia-smi call may take: a hung driver must not hang the remediation run.
TOOL_TIMEOUT = 60
_NONCE = re.compile(r"^[A-Za-z0-9]{4,64}$")
_SECTIONS = ("gpus", "gi", "ci", "apps", "modules")

# The module list: on a simulated host (GPUAUDIT_ROOT set, as SimHost.env() does) the host's
# /proc lives under that root, and the PATH it is given links this machine's own lsmod, which
# would read this machine's modules instead of the host's; so there only the root's file counts.
_SCRIPT = r"""LANG=C; LC_ALL=C; export LANG LC_ALL
ga_t() { if command -v timeout >/dev/null 2>&1; then timeout @TIMEOUT@ "$@"; else "$@"; fi; }
ga_modules() {
  if [ -n "${GPUAUDIT_ROOT:-}" ]; then awk '{ print $1 }' "$GPUAUDIT_ROOT/proc/modules"
  elif [ -r /proc/modules ]; then awk '{ print $1 }' /proc/modules
  elif command -v lsmod >/dev/null 2>&1; then
    ga_lsmod=$(lsmod) || return 1; printf '%s\n' "$ga_lsmod" | awk 'NR > 1 { print $1 }'
  else echo "neither /proc/modules nor lsmod" >&2; return 1; fi
}
ga_mig() {
  ga_s=$1; shift
  ga_out=$("$@" 2>&1); ga_rc=$?
  printf '@@%s begin %s@@\n%s\n@@%s end %s rc=%s@@\n' @N@ "$ga_s" "$ga_out" @N@ "$ga_s" "$ga_rc"
}
ga_mig gpus ga_t nvidia-smi --query-gpu=@QUERY@ --format=csv,noheader
ga_mig gi ga_t nvidia-smi mig -lgi
ga_mig ci ga_t nvidia-smi mig -lci
ga_mig apps ga_t nvidia-smi --query-compute-apps=@APPS@ --format=csv,noheader
ga_mig modules ga_modules
"""


class MigState(FactBase[dict[str, Any]]):
    """
    MIG mode, GPU / compute instances and compute processes of each NVIDIA GPU, and whether
    ``nvidia_drm`` is loaded.

    .. code:: python

        {"answered": True, "problem": None,
         "gpus": [{"index": 0, "name": "NVIDIA A100-SXM4-80GB", "bus_id": "00000000:07:00.0",
                   "pci_id": "0x20B210DE", "mig_current": "Enabled", "mig_pending": "Enabled",
                   "persistence_mode": "Enabled",
                   "gpu_instances": [{"id": 1, "profile": "3g.40gb"}],
                   "compute_instances": [{"gpu_instance": 1, "id": 0}],
                   "processes": [{"pid": 4242, "name": "python3"}]}],
         "instances_known": True, "processes_known": True, "nvidia_drm": False,
         "problems": []}

    ``answered`` is False (with ``problem``, nvidia-smi's own words) when nvidia-smi lists no
    GPU: driver not loaded, library mismatch, a hung call. ``mig_current`` is None for a GPU
    without MIG (``[N/A]``). ``instances_known`` / ``processes_known`` / ``nvidia_drm`` are
    False / False / None where that part could not be read, and ``problems`` says why.
    """

    @staticmethod
    def default() -> dict[str, Any]:
        return {
            "answered": False,
            "problem": "nvidia-smi is not installed",
            "gpus": [],
            "instances_known": False,
            "processes_known": False,
            "nvidia_drm": None,
            "problems": [],
        }

    def requires_command(self, nonce: str | None = None) -> str:
        return "nvidia-smi"

    def command(self, nonce: str | None = None) -> str:
        nonce = nonce or new_nonce()
        if not _NONCE.match(nonce):
            raise ValueError(f"nonce must be 4-64 letters or digits, got {nonce!r}")
        return (
            _SCRIPT.replace("@N@", nonce)
            .replace("@TIMEOUT@", str(TOOL_TIMEOUT))
            .replace("@QUERY@", ",".join(QUERY_FIELDS))
            .replace("@APPS@", ",".join(APPS_FIELDS))
        )

    def process(self, output: list[str]) -> dict[str, Any]:
        return read_mig_state(output)


def read_mig_state(output: list[str]) -> dict[str, Any]:
    sections = _unframe(output)
    problems: list[str] = []
    for name in _SECTIONS:
        if name not in sections:
            problems.append(f"section {name} missing from the output")
    gpus_rc, gpus_text = sections.get("gpus", (None, ""))
    gpus = _gpu_rows(gpus_text) if gpus_rc == 0 else []
    state: dict[str, Any] = {
        "answered": bool(gpus),
        "problem": None if gpus else (_first_line(gpus_text) or "nvidia-smi listed no GPU"),
        "gpus": gpus,
        "instances_known": False,
        "processes_known": False,
        "nvidia_drm": None,
        "problems": problems,
    }
    if not gpus:
        return state
    by_index = {gpu["index"]: gpu for gpu in gpus}
    state["instances_known"] = _read_instances(sections, by_index, problems)
    state["processes_known"] = _read_processes(sections, gpus, problems)
    modules_rc, modules_text = sections.get("modules", (None, ""))
    if modules_rc == 0:
        state["nvidia_drm"] = "nvidia_drm" in modules_text.split()
    else:
        problems.append(f"loaded kernel modules unreadable: {_first_line(modules_text)}")
    return state


def _unframe(output: list[str]) -> dict[str, tuple[int | None, str]]:
    """Section name → (exit status, text), from the lines between a section's two markers."""
    begin = re.compile(r"^@@([A-Za-z0-9]+) begin (\w+)@@$")
    sections: dict[str, tuple[int | None, str]] = {}
    nonce = name = None
    lines: list[str] = []
    for line in output:
        line = line.rstrip("\r\n")
        if name is None:
            match = begin.match(line)
            if match and (nonce is None or match.group(1) == nonce):
                nonce, name, lines = match.group(1), match.group(2), []
            continue
        end = re.match(rf"^@@{nonce} end {name} rc=(\d+)@@$", line)
        if end:
            sections[name] = (int(end.group(1)), "\n".join(lines).strip("\n"))
            name = None
        else:
            lines.append(line)
    return sections


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in next(csv.reader([line], skipinitialspace=True), [])]


def _gpu_rows(text: str) -> list[dict[str, Any]]:
    gpus = []
    for line in text.splitlines():
        cells = _cells(line)
        if len(cells) != len(QUERY_FIELDS) or not cells[0].isdigit():
            continue
        index, name, bus_id, pci_id, current, pending, persistence = cells
        gpus.append(
            {
                "index": int(index),
                "name": name,
                "bus_id": bus_id,
                "pci_id": (clean(pci_id) or "").upper().replace("0X", "0x") or None,
                "mig_current": clean(current),
                "mig_pending": clean(pending),
                "persistence_mode": clean(persistence),
                "gpu_instances": [],
                "compute_instances": [],
                "processes": [],
            }
        )
    return gpus


def _read_instances(
    sections: dict[str, tuple[int | None, str]],
    by_index: dict[int, dict[str, Any]],
    problems: list[str],
) -> bool:
    """GPU and compute instances into each GPU; False when either listing is unreadable.

    A listing counts only when nvidia-smi finished it: exit status 0 with a table, or its
    sentence for "nothing to list" ("No GPU instances found: Not Found", which it prints with
    a non-zero status). A call that failed, timed out (124) or printed nothing leaves the
    instances unknown: read as "no instances", it would have the operation create a second
    set beside the ones that exist.
    """
    read: dict[str, tuple[MigInstance, ...]] = {}
    for name in ("gi", "ci"):
        if name not in sections:
            return False
        rc, text = sections[name]
        if says_none_found(text):
            read[name] = ()
            continue
        if rc != 0 or not text.strip():
            said = _first_line(text) or "no output"
            problems.append(f"nvidia-smi mig -l{name} did not finish (exit {rc}): {said}")
            return False
        try:
            read[name] = parse_mig_instances(text)
        except ParseError as exc:
            problems.append(f"nvidia-smi mig -l{name}: {exc}")
            return False
    for gi in read["gi"]:
        if gi.gpu in by_index:
            by_index[gi.gpu]["gpu_instances"].append(
                {"id": gi.instance_id, "profile": gi.profile_name}
            )
    for ci in read["ci"]:
        if ci.gpu in by_index:
            by_index[ci.gpu]["compute_instances"].append(
                {"gpu_instance": ci.gpu_instance_id, "id": ci.instance_id}
            )
    return True


def _read_processes(
    sections: dict[str, tuple[int | None, str]], gpus: list[dict[str, Any]], problems: list[str]
) -> bool:
    """Compute processes into each GPU; False when the listing failed or holds a line that
    cannot be placed on a GPU (a process the operation cannot see might hold the GPU it
    would reset)."""
    rc, text = sections.get("apps", (None, ""))
    if rc != 0:
        problems.append(f"compute processes unreadable: {_first_line(text) or 'no answer'}")
        return False
    by_bus = {bus_key(gpu["bus_id"]): gpu for gpu in gpus}
    known = True
    for line in text.splitlines():
        if not line.strip() or line.startswith("No running processes found"):
            continue
        # The process name comes last and may hold commas: split off the first two cells only.
        bus_id, _, rest = line.partition(",")
        pid, _, process_name = rest.partition(",")
        gpu = by_bus.get(bus_key(bus_id.strip()))
        if gpu is None or not pid.strip().isdigit():
            problems.append(f"compute process line not understood: {line.strip()!r}")
            known = False
            continue
        gpu["processes"].append({"pid": int(pid), "name": process_name.strip()})
    return known


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")
