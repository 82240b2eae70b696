"""``gpuaudit inspect FILE...``: what gpuaudit reads in a captured output, and how.

A capture pasted into a ticket or saved by hand rarely says which command produced it. Each
file is recognised by the marks its format always prints (the ``NVSMI LOG`` banner, a
``--query-gpu`` header, the ``GPU instances:`` title, ...), then handed to the parser for that
kind; the result is the parser's own data as JSON. Files are read as bytes and decoded as UTF-8
with replacement, since host output is not always valid UTF-8, and every failure becomes an
``error`` entry rather than an exception. At most :data:`~gpuaudit.parsers.limits.INPUT_BYTES`
of a file are read (``/dev/zero`` and a runaway log included): the entry of a longer file says
where it was cut (``truncated_at``), and its parse or its error is of that first part.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuaudit.assemble.build import build_snapshot
from gpuaudit.model.jsonable import to_jsonable as model_to_jsonable
from gpuaudit.model.snapshot import HostSnapshot
from gpuaudit.parsers.amd_smi import parse_amd_smi_json
from gpuaudit.parsers.bundle import parse_bundle_text
from gpuaudit.parsers.errors import ParseError
from gpuaudit.parsers.kernel_log import parse_kernel_log
from gpuaudit.parsers.limits import INPUT_BYTES, read_start
from gpuaudit.parsers.mig import (
    parse_mig_created,
    parse_mig_instances,
    parse_mig_list_devices,
    parse_mig_profiles,
)
from gpuaudit.parsers.nvidia_table import parse_nvidia_smi_table
from gpuaudit.parsers.nvidia_text import parse_nvidia_smi_text
from gpuaudit.parsers.nvidia_xml import parse_nvidia_smi_xml
from gpuaudit.parsers.nvlink import parse_nvlink
from gpuaudit.parsers.query_csv import (
    parse_query_gpu_csv,
    parse_query_help,
    parse_retired_pages_csv,
)
from gpuaudit.parsers.rocm_smi import parse_rocm_smi_concise, parse_rocm_smi_json
from gpuaudit.parsers.topo import parse_p2p_matrix, parse_topo_matrix

UNKNOWN = "unknown"

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_BUNDLE = re.compile(r"^@@gpuaudit-collector \d+ \S+@@\s*$", re.MULTILINE)
_HELP = re.compile(r'^List of valid properties to query for the switch "--query-', re.MULTILINE)
_TABLE = re.compile(r"NVIDIA-SMI\s+\S+\s+Driver Version:")
_Q_BANNER = re.compile(r"^=+\s*NVSMI LOG\s*=+\s*$", re.MULTILINE)
_Q_BLOCK = re.compile(
    r"^\s*(?:Product Name|ECC Errors|Retired Pages|Remapped Rows|FB Memory Usage)\s*(?::|$)",
    re.MULTILINE,
)
_Q_VALUE = re.compile(r"^[ \t]+\S[^\n]*?\s:\s", re.MULTILINE)
_LIST_GPU = re.compile(r"^GPU \d+: [^\n]*\(UUID: ", re.MULTILINE)
_NVLINK = re.compile(r"^\s*Link \d+:|NVML: Unable to retrieve NVLink", re.MULTILINE)
_CSV_FIELD = re.compile(r"^[a-z][A-Za-z0-9_.]*(?:\s*\[[^\]]*\])?$")
_CSV_KNOWN = frozenset({"name", "gpu_name", "uuid", "gpu_uuid", "pci.bus_id", "gpu_bus_id"})
_TOPO_HEADER = re.compile(r"^\s*GPU0(?:\s|$)")
_KERNEL = re.compile(r"NVRM: |\bX[iI][dD] \(|\bSXid \(|fallen off the bus")
# Plain substrings one of which every _KERNEL match holds: a fast test first, since that
# regex crawls through tens of MiB of text that is no log.
_KERNEL_HINTS = ("NVRM: ", "d (", "D (", "fallen off the bus")
# Titles of the MIG listings, checked in this order ("GPU instance profiles:" before
# "GPU instances:" would not matter, but compute listings name their GPU instances too).
_MIG_TITLES = (
    ("Compute instance profiles:", "mig-lcip"),
    ("GPU instance profiles:", "mig-lgip"),
    ("Compute instances:", "mig-lci"),
    ("GPU instances:", "mig-lgi"),
)


def _bundle_snapshot(text: str) -> dict[str, Any]:
    bundle = parse_bundle_text(text)
    snapshot = build_snapshot("inspect", bundle).to_dict()
    # The raw sections are the file itself; the parse is what is worth showing.
    snapshot.pop("sections", None)
    return {"complete": bundle.complete, "problems": list(bundle.problems), "snapshot": snapshot}


def _snapshot(text: str) -> dict[str, Any]:
    try:
        return HostSnapshot.from_json(text).to_dict()
    except (ValueError, TypeError, KeyError) as exc:
        raise ParseError("gpuaudit snapshot", str(exc), text) from exc


# Every kind inspect recognises, with the parser that reads it.
PARSERS: dict[str, Callable[[str], Any]] = {
    "gpuaudit-bundle": _bundle_snapshot,
    "gpuaudit-snapshot": _snapshot,
    "nvidia-smi-xml": parse_nvidia_smi_xml,
    "nvidia-smi-q": parse_nvidia_smi_text,
    "nvidia-smi-table": parse_nvidia_smi_table,
    "query-gpu-csv": parse_query_gpu_csv,
    "query-retired-pages-csv": parse_retired_pages_csv,
    "query-gpu-help": parse_query_help,
    "topo-matrix": parse_topo_matrix,
    "topo-p2p": parse_p2p_matrix,
    "nvlink-status": parse_nvlink,
    "mig-lgi": parse_mig_instances,
    "mig-lci": parse_mig_instances,
    "mig-lgip": parse_mig_profiles,
    "mig-lcip": parse_mig_profiles,
    "mig-cgi": parse_mig_created,
    "mig-list": parse_mig_list_devices,
    "kernel-log": parse_kernel_log,
    "rocm-smi-json": parse_rocm_smi_json,
    "rocm-smi-concise": parse_rocm_smi_concise,
    "amd-smi-json": parse_amd_smi_json,
}


def detect_kind(text: str) -> str:
    """The kind of captured output ``text`` is (a key of :data:`PARSERS`), or ``"unknown"``."""
    text = _ANSI.sub("", (text or "").lstrip("\ufeff"))
    stripped = text.strip()
    if not stripped:
        return UNKNOWN
    if _BUNDLE.search(text):
        return "gpuaudit-bundle"
    if stripped.startswith("{"):
        return _json_kind(stripped)
    # amd-smi prints a list; a kernel log line also opens with "[" and goes on below.
    if stripped.startswith("[") and _json_kind(stripped) != UNKNOWN:
        return "amd-smi-json"
    if stripped.startswith("<") and "<nvidia_smi_log" in stripped[:4096]:
        return "nvidia-smi-xml"
    if _HELP.search(text):
        return "query-gpu-help"
    if "ROCm System Management Interface" in text:
        return "rocm-smi-concise"
    if _TABLE.search(text):
        return "nvidia-smi-table"
    if _Q_BANNER.search(text) or (_Q_BLOCK.search(text) and _Q_VALUE.search(text)):
        return "nvidia-smi-q"
    for title, kind in _MIG_TITLES:
        if title in text:
            return kind
    if "Successfully created GPU instance" in text:
        return "mig-cgi"
    if _LIST_GPU.search(text):
        return "nvlink-status" if _NVLINK.search(text) else "mig-list"
    return _line_kind(stripped)


def _json_kind(text: str) -> str:
    try:
        # The first document: the collector's amd-smi section holds two, static then metric.
        data, _ = json.JSONDecoder().raw_decode(text)
    except (ValueError, RecursionError):
        return UNKNOWN
    if _is_amd_smi(data):
        return "amd-smi-json"
    if not isinstance(data, dict):
        return UNKNOWN
    if "schema_version" in data and "host" in data:
        return "gpuaudit-snapshot"
    if any(re.fullmatch(r"card\d+", str(key)) for key in data):
        return "rocm-smi-json"
    return UNKNOWN


def _is_amd_smi(data: Any) -> bool:
    """A list of per-GPU objects keyed "gpu" (amd-smi up to 25), or that list under "gpu_data"."""
    if isinstance(data, dict) and isinstance(data.get("gpu_data"), list):
        data = data["gpu_data"]
    return (
        isinstance(data, list)
        and bool(data)
        and all(isinstance(entry, dict) and "gpu" in entry for entry in data)
    )


def _line_kind(text: str) -> str:
    """Kinds told apart by their first line: CSV headers and topology matrices."""
    first = text.splitlines()[0]
    cells = [cell.strip() for cell in first.split(",")]
    if all(_CSV_FIELD.match(cell) for cell in cells) and (len(cells) > 1 or cells[0] in _CSV_KNOWN):
        return "query-retired-pages-csv" if "retired_pages.address" in cells else "query-gpu-csv"
    if _TOPO_HEADER.match(first):
        for kind, parser in (("topo-matrix", parse_topo_matrix), ("topo-p2p", parse_p2p_matrix)):
            try:
                parser(text)
            except ParseError:
                continue
            return kind
    if any(hint in text for hint in _KERNEL_HINTS) and _KERNEL.search(text):
        return "kernel-log"
    return UNKNOWN


def inspect_text(text: str) -> tuple[str, Any]:
    """``(kind, JSON-able parse)``; raises :class:`ParseError` when ``text`` cannot be read."""
    kind = detect_kind(text)
    if kind == UNKNOWN:
        raise ParseError("captured output", "not a format gpuaudit reads", text)
    return kind, to_jsonable(PARSERS[kind](text))


def inspect_file(path: str | Path, max_bytes: int = INPUT_BYTES) -> dict[str, Any]:
    """``{"file", "kind", "parsed"}``, or ``{"file", "kind": "unknown", "error"}``; with
    ``truncated_at`` (bytes) where the file is longer than ``max_bytes`` and only its start
    was read."""
    name = str(path)
    try:
        raw, cut = read_start(Path(path), max_bytes)
    except OSError as exc:
        return {"file": name, "kind": UNKNOWN, "error": f"cannot read: {exc.strerror or exc}"}
    text = raw.decode("utf-8", errors="replace")
    del raw
    result: dict[str, Any] = {"file": name, "truncated_at": cut} if cut else {"file": name}
    try:
        kind, parsed = inspect_text(text)
    except ParseError as exc:
        return {**result, "kind": UNKNOWN, "error": _with_cut(str(exc), cut)}
    except Exception as exc:  # a parser bug must cost one file, not the whole listing
        return {**result, "kind": UNKNOWN, "error": _with_cut(f"{type(exc).__name__}: {exc}", cut)}
    return {**result, "kind": kind, "parsed": parsed}


def _with_cut(error: str, cut: int) -> str:
    if not cut:
        return error
    return f"{error} (the file is larger than {cut} bytes: only its first {cut} bytes were read)"


def to_jsonable(value: Any) -> Any:
    """Parser results (dataclasses, tuples, dicts with int keys) as plain JSON values."""
    if hasattr(value, "to_dict"):
        return value.to_dict()
    return model_to_jsonable(value)
