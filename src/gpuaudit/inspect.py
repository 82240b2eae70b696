"""``gpuaudit inspect FILE...``: what gpuaudit reads in a captured output, and how.

A capture pasted into a ticket or saved by hand rarely says which command produced it. Each
file is recognised by the marks its format always prints (the ``NVSMI LOG`` banner, a
``--query-gpu`` header, the ``GPU instances:`` title, ...), then handed to the parser for that
kind; the result is the parser's own data as JSON. Another vendor's tool that imitates
nvidia-smi or rocm-smi (Iluvatar ``ixsmi``, Hygon ``hy-smi``, MetaX ``mx-smi``, ...) is told
apart first and reported as its own vendor's (kind ``lookalike:<vendor>-<tool>``,
:mod:`gpuaudit.parsers.lookalike`), never as NVIDIA's or AMD's. A file of no kind gpuaudit
reads is refused with what it looks like (binary data, JSON or XML of another schema, a table
of an unknown tool). Files are read as bytes and decoded as UTF-8
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
from gpuaudit.parsers.dcgm_diag import parse_dcgm_diag_output
from gpuaudit.parsers.errors import ParseError
from gpuaudit.parsers.kernel_log import parse_kernel_log
from gpuaudit.parsers.kube import parse_nodes
from gpuaudit.parsers.limits import INPUT_BYTES, read_start
from gpuaudit.parsers.lookalike import SPECS as LOOKALIKE_SPECS
from gpuaudit.parsers.lookalike import identify
from gpuaudit.parsers.mig import (
    parse_mig_created,
    parse_mig_failures,
    parse_mig_instances,
    parse_mig_list_devices,
    parse_mig_placements,
    parse_mig_profiles,
)
from gpuaudit.parsers.monitoring import parse_counters_csv
from gpuaudit.parsers.nvidia_table import parse_nvidia_smi_table
from gpuaudit.parsers.nvidia_text import parse_nvidia_smi_text
from gpuaudit.parsers.nvidia_xml import parse_nvidia_smi_xml
from gpuaudit.parsers.nvlink import parse_nvlink
from gpuaudit.parsers.prometheus_rules import parse_prometheus_rules
from gpuaudit.parsers.query_csv import (
    parse_query_gpu_csv,
    parse_query_help,
    parse_retired_pages_csv,
)
from gpuaudit.parsers.rocm_smi import (
    parse_rocm_smi_concise,
    parse_rocm_smi_json,
    parse_rocm_smi_showallinfo,
)
from gpuaudit.parsers.slurm import (
    parse_gres_conf,
    parse_scontrol_nodes,
    parse_slurm_conf_lines,
    parse_slurmd_gres,
    parse_slurmd_hardware,
)
from gpuaudit.parsers.topo import parse_p2p_matrix, parse_topo_matrix

UNKNOWN = "unknown"

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_BUNDLE = re.compile(r"^@@gpuaudit-collector \d+ \S+@@\s*$", re.MULTILINE)
_HELP = re.compile(r'^List of valid properties to query for the switch "--query-', re.MULTILINE)
# "KMD Version:" in place of "Driver Version:" from driver 610 on.
_TABLE = re.compile(r"NVIDIA-SMI\s+\S+\s+(?:Driver|KMD) Version:")
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
# A header whose names run together (GPU0GPU1…, GPU0mlx5_0…) is a topology header too.
_TOPO_HEADER = re.compile(r"^\s*GPU0(?:\s|$|GPU1|NIC0|mlx)")
_DIAG_TABLE = re.compile(r"^\|\s*Diagnostic\s*\|\s*Result\s*\|", re.MULTILINE)
_COUNTERS = re.compile(r"^#?\s*DCGM_(?:FI|EXP)_[A-Z0-9_]+\s*,\s*\w+\s*,", re.MULTILINE)
_RULES_YAML = re.compile(r"^\ufeff?\s*(?:groups|spec)\s*:", re.MULTILINE)
_RULE_ITEM = re.compile(r"^\s*-?\s*(?:alert|record)\s*:", re.MULTILINE)
_SLURMD_GRES = re.compile(r"^\S*\s*Gres Name=\S+ ", re.MULTILINE)
_SLURMD_C = re.compile(r"^NodeName=\S+ CPUs=\d+ .*\bRealMemory=", re.MULTILINE)
_SCONTROL_NODE = re.compile(r"^NodeName=\S+ .*\bState=|^\s+State=\S+", re.MULTILINE)
_GRES_CONF = re.compile(r"^\s*(?:NodeName=\S+\s+)?(?:Name=gpu\b|AutoDetect=)", re.MULTILINE)
_SLURM_CONF = re.compile(r"^(?:GresTypes=|NodeName=\S+ .*\b[Gg]res=)", re.MULTILINE)
_ROCM_GPU_LINE = re.compile(r"^GPU\[\d+\]\s*:", re.MULTILINE)
_NO_HANDLE = re.compile(
    r"(?:\s*Unable to (?:determine|detect) the device handle[^\n]*(?:\n|$))+", re.IGNORECASE
)
_MIG_FAILURE = re.compile(
    r"^(?:Unable to (?:create|destroy|enable|disable) "
    r"|Failed to (?:create|destroy) (?:GPU|compute) instances:)",
    re.MULTILINE | re.IGNORECASE,
)
_MIG_PLACEMENTS = re.compile(r"^GPU\s+\d+\s+Profile ID\s+\d+\s+Placements?\s*:", re.MULTILINE)
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


def _lookalike(text: str) -> dict[str, Any]:
    found = identify(_ANSI.sub("", text))
    if found is None:
        raise ParseError("look-alike tool output", "no mark of a known tool", text)
    return found.to_dict()


def _gfd_labels(text: str) -> Any:
    """A node's labels alone (``kubectl get node -o json | jq .metadata.labels``): read as the
    labels of one unnamed node, so their driver, CUDA, product and MIG strategy show."""
    try:
        labels = json.loads(text)
    except ValueError as exc:
        raise ParseError("node labels", str(exc), text) from exc
    if not isinstance(labels, dict):
        raise ParseError("node labels", "not a JSON object of labels", text)
    node = {"kind": "Node", "metadata": {"name": "(labels only)", "labels": labels}}
    return parse_nodes(json.dumps(node), source="node labels")


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
    "mig-lgipp": parse_mig_placements,
    "mig-failure": parse_mig_failures,
    "mig-list": parse_mig_list_devices,
    "kernel-log": parse_kernel_log,
    "rocm-smi-json": parse_rocm_smi_json,
    "rocm-smi-concise": parse_rocm_smi_concise,
    "rocm-smi-showallinfo": parse_rocm_smi_showallinfo,
    "dcgm-diag": parse_dcgm_diag_output,
    "dcgm-exporter-counters": parse_counters_csv,
    "prometheus-rules": parse_prometheus_rules,
    "kubernetes-nodes": parse_nodes,
    "kubernetes-node-labels": _gfd_labels,
    "slurm-node": parse_scontrol_nodes,
    "slurmd-hardware": parse_slurmd_hardware,
    "slurmd-gres": parse_slurmd_gres,
    "slurm-gres-conf": parse_gres_conf,
    "slurm-conf": parse_slurm_conf_lines,
    "amd-smi-json": parse_amd_smi_json,
}
# Other vendors' tools, read as their own: never as one of the NVIDIA or AMD kinds above.
PARSERS.update({f"lookalike:{spec.vendor}-{spec.tool}": _lookalike for spec in LOOKALIKE_SPECS})


def detect_kind(text: str) -> str:
    """The kind of captured output ``text`` is (a key of :data:`PARSERS`), or ``"unknown"``."""
    text = _ANSI.sub("", (text or "").lstrip("\ufeff"))
    stripped = text.strip()
    if not stripped:
        return UNKNOWN
    if _BUNDLE.search(text):
        return "gpuaudit-bundle"
    json_kind = _json_kind(stripped) if stripped.startswith(("{", "[")) else UNKNOWN
    if json_kind == "gpuaudit-snapshot":
        return json_kind
    # Before any NVIDIA or AMD kind: an ixsmi table or a Hygon rocm-smi JSON would pass for one.
    lookalike = identify(stripped)
    if lookalike is not None:
        return lookalike.kind
    if stripped.startswith("{"):
        return json_kind if json_kind != UNKNOWN else _other_json_kind(stripped)
    # amd-smi prints a list; a kernel log line also opens with "[" and goes on below.
    if stripped.startswith("[") and json_kind != UNKNOWN:
        return "amd-smi-json"
    if stripped.startswith("<") and "<nvidia_smi_log" in stripped[:4096]:
        return "nvidia-smi-xml"
    if _HELP.search(text):
        return "query-gpu-help"
    other = _other_text_kind(text)
    if other != UNKNOWN:
        return other
    if "ROCm System Management Interface" in text:
        if "Concise Info" in text or not _ROCM_GPU_LINE.search(text):
            return "rocm-smi-concise"
        return "rocm-smi-showallinfo"
    if _TABLE.search(text):
        return "nvidia-smi-table"
    if _Q_BANNER.search(text) or (_Q_BLOCK.search(text) and _Q_VALUE.search(text)):
        return "nvidia-smi-q"
    if _NO_HANDLE.fullmatch(stripped):
        return "nvidia-smi-q"  # every GPU nvidia-smi could not reach: GPUs in error
    # Before the listings' titles: "Failed to create GPU instances: ..." holds one of them.
    if _MIG_FAILURE.search(text):
        return "mig-failure"
    if _MIG_PLACEMENTS.search(text):
        return "mig-lgipp"
    for title, kind in _MIG_TITLES:
        if title in text:
            return kind
    if (
        "Successfully created GPU instance" in text
        or "Successfully created compute instance" in text
    ):
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


def _other_json_kind(text: str) -> str:
    """JSON of the scheduler's or DCGM's: dcgmi diag, a Kubernetes node list, node labels."""
    try:
        data, _ = json.JSONDecoder().raw_decode(text)
    except (ValueError, RecursionError):
        return UNKNOWN
    if not isinstance(data, dict):
        return UNKNOWN
    if "DCGM GPU Diagnostic" in data or "DCGM Diagnostic" in data:
        return "dcgm-diag"
    if data.get("kind") in ("List", "NodeList", "Node") and (
        "items" in data or data.get("kind") == "Node"
    ):
        return "kubernetes-nodes"
    if data and all(isinstance(k, str) and "/" in k for k in data):
        return "kubernetes-node-labels"
    return UNKNOWN


def _other_text_kind(text: str) -> str:
    """Text of the scheduler's, the monitoring's or DCGM's, by the marks each always prints."""
    if _DIAG_TABLE.search(text):
        return "dcgm-diag"
    if _COUNTERS.search(text):
        return "dcgm-exporter-counters"
    if _RULES_YAML.search(text) and _RULE_ITEM.search(text):
        return "prometheus-rules"
    if _SLURMD_GRES.search(text):
        return "slurmd-gres"
    if _SLURMD_C.search(text):
        return "slurmd-hardware"
    if _SCONTROL_NODE.search(text):
        return "slurm-node"
    if _GRES_CONF.search(text):
        return "slurm-gres-conf"
    if _SLURM_CONF.search(text):
        return "slurm-conf"
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
        reason = f"not a format gpuaudit reads: {looks_like(text)}"
        raise ParseError("captured output", reason, text)
    return kind, to_jsonable(PARSERS[kind](text))


# What the refusal of an unknown file says it looks like.
_HEAD = 64 * 1024
_XML_ROOT = re.compile(r"<(?![?!])([A-Za-z_][\w.:-]*)")
_BOX_TOP = re.compile(r"^\+[-=+]{20,}\+?\s*$", re.MULTILINE)
_BOX_ROW = re.compile(r"^\|.*\|\s*$", re.MULTILINE)
_SMI_TITLE = re.compile(r"System Management Interface|\b[A-Z]+-SMI\b")


def looks_like(text: str) -> str:
    """What a file of no known kind looks like, in words, for the message that refuses it."""
    head = (text or "")[:_HEAD]
    if not head.strip():
        return "the file is empty"
    odd = sum(1 for ch in head if (ch < " " and ch not in "\t\n\r") or ch == "\ufffd")
    if "\x00" in head or odd * 20 > len(head):
        return "binary data, not a tool's text output"
    stripped = _ANSI.sub("", head.lstrip("\ufeff")).strip()
    if stripped.startswith(("{", "[")):
        return _json_looks_like((text or "").lstrip("\ufeff").strip())
    if stripped.startswith("<"):
        root = _XML_ROOT.search(stripped)
        name = f"<{root.group(1)}>" if root else "no element"
        return f"looks like XML of another schema (root {name}), not nvidia-smi -q -x"
    title = _SMI_TITLE.search(stripped)
    if title:
        start = stripped.rfind("\n", 0, title.start()) + 1
        end = stripped.find("\n", title.start())
        line = stripped[start : end if end >= 0 else None].strip()[:100]
        if "NVIDIA-SMI" in line or "ROCm System Management Interface" in line:
            return f"has the banner of nvidia-smi or rocm-smi, but in a layout not read: {line!r}"
        return f"looks like the output of a management tool gpuaudit does not know: {line!r}"
    if _BOX_TOP.search(stripped) and _BOX_ROW.search(stripped):
        return "looks like a boxed table like nvidia-smi's, but without its banner or a GPU row"
    return "plain text that matches none of the formats gpuaudit reads"


def _json_looks_like(text: str) -> str:
    try:
        data, _ = json.JSONDecoder().raw_decode(text)
    except (ValueError, RecursionError) as exc:
        return f"looks like JSON but does not parse (cut short?): {exc}"
    if isinstance(data, dict):
        keys = ", ".join(repr(str(key)) for key in list(data)[:5]) or "none"
        shape = f"an object with keys {keys}"
    else:
        shape = f"a {type(data).__name__}"
    return f"looks like JSON but not rocm-smi, amd-smi or a gpuaudit snapshot ({shape})"


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
