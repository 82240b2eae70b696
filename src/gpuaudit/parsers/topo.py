"""`nvidia-smi topo -m` (the connection matrix) and `topo -p2p` (the P2P capability matrices).

`nvidia-smi nvlink -s` / `-e` listings are read by :mod:`gpuaudit.parsers.nvlink`.

nvidia-smi prints the matrix with tabs, but captures often arrive with the tabs expanded to
spaces (pasted into tickets, passed through `column`, ...), and newer drivers wrap the header in
ANSI underline codes. Two quirks shape the parser:

- the affinity cells can be empty (containers, Windows), so whitespace splitting loses columns;
- nvidia-smi emits one empty cell *more* than the header announces before ``GPU NUMA ID``
  (``0-63<TAB>0<TAB><TAB>N/A`` under ``CPU Affinity<TAB>NUMA Affinity<TAB>GPU NUMA ID``).

Space-expanded rows are turned back into cells by counting the 8-column tab stops between tokens,
and the trailing (affinity) cells are matched to their columns from both ends: the first columns
take the first cells, the last column takes the last cell.

Headers are not always clean either. A terminal copy of an underlined header loses the tabs
between the names (``GPU0GPU1GPU2...mlx5_0``, ``CPU AffinityNUMA AffinityGPU NUMA ID``), and
drivers before 2018 name NICs by their device (``mlx5_0``) and print ``SOC`` for the socket link.
A header part is split into device and column names where it is a run of them (with a parse
warning), and every row is checked after reading: each device's own cell must be ``X``, matrix
cells must be link values and affinity cells must look like CPU lists or NUMA ids. A row that
fails those checks is misaligned and raises :class:`ParseError` rather than moving an affinity
or NIC value into the wrong column.
"""

from __future__ import annotations

import re

from gpuaudit.model.snapshot import Topology
from gpuaudit.parsers.errors import ParseError
from gpuaudit.parsers.values import split_gpu_header
from gpuaudit.parsers.warnings import warn

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_DEVICE = re.compile(r"^(?:GPU|NIC|NVS|CPU|DPU)\d+$")
_DEVICE_IN_HEADER = re.compile(r"(?:GPU|NIC|NVS|CPU|DPU)\d")
# One name of a header that lost its separators: the affinity titles, a device (GPU0, NIC3) or
# an RDMA device name as old drivers printed it (mlx5_0, mlx4_1).
_HEADER_NAME = re.compile(
    r"CPU Affinity|NUMA Affinity|GPU NUMA ID|(?:GPU|NIC|NVS|CPU|DPU)\d+|[a-z][a-z0-9]*?\d*_\d+"
)
# Cells of the connection matrix (SOC: drivers before 2018; NV#: bonded NVLinks).
_LINK = re.compile(r"^(?:X|SYS|SOC|NODE|PHB|PXB|PIX|PSB|NV\d+|N/A)$")
_CPU_LIST = re.compile(r"^(?:\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*|N/A)?$")
_NUMA_ID = re.compile(r"^(?:-?\d+(?:[-,]\d+)*|N/A)?$")
_AFFINITY_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_P2P_STATUSES = frozenset({"OK", "CNS", "GNS", "TNS", "NS", "U", "DR"})
_LEGEND_ENTRY = re.compile(r"^\s*(\S+)\s*=\s*(.*\S)\s*$")
_NIC_LEGEND_ENTRY = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")
_TAB = 8


def parse_topo_matrix(text: str) -> Topology:
    """Parse `nvidia-smi topo -m`. Raises :class:`ParseError` for `topo -p2p`/`nvlink -s` text."""
    what = "nvidia-smi topo -m"
    header, rows, legend = _split(text, what)
    columns = _header_columns(header)
    trailing = [c for c in columns if c in _AFFINITY_COLUMNS]
    matrix_columns = [c for c in columns if c not in _AFFINITY_COLUMNS]
    if not matrix_columns:
        raise ParseError(what, "the header names no GPU or NIC columns", text)

    devices: list[str] = []
    matrix: list[tuple[str, ...]] = []
    cpu: dict[str, str] = {}
    numa: dict[str, str] = {}
    gpu_numa: dict[str, str] = {}
    for line in rows:
        label, cells = _row_cells(line)
        if not _DEVICE.match(label) and label not in matrix_columns:
            raise ParseError(what, f"unexpected row label {label!r}", text)
        values = [c for c in cells if c]
        if len(values) < len(matrix_columns):
            raise ParseError(
                what,
                f"row {label} has {len(values)} cells, the header names {len(matrix_columns)}",
                text,
            )
        cut = _after_nth_value(cells, len(matrix_columns))
        row = tuple(values[: len(matrix_columns)])
        _check_matrix_row(label, row, matrix_columns, text)
        devices.append(label)
        matrix.append(row)
        rest = cells[cut:]
        if not trailing and any(rest):
            raise ParseError(
                what, f"row {label} has cells past the matrix and the header names none", text
            )
        for column, value in _match_trailing(trailing, rest).items():
            _check_affinity(label, column, value, text)
            target = {"CPU Affinity": cpu, "NUMA Affinity": numa, "GPU NUMA ID": gpu_numa}[column]
            target[label] = value

    if not trailing and _looks_like_p2p(matrix):
        raise ParseError(what, "this is `nvidia-smi topo -p2p` output, not `topo -m`", text)
    return Topology(
        devices=tuple(devices),
        columns=tuple(matrix_columns),
        matrix=tuple(matrix),
        cpu_affinity=cpu,
        numa_affinity=numa,
        legend=legend,
        gpu_numa_id=gpu_numa,
    )


def parse_p2p_matrix(text: str) -> Topology:
    """Parse `nvidia-smi topo -p2p r|w|n|a|p` into a Topology (matrix and legend only)."""
    what = "nvidia-smi topo -p2p"
    header, rows, legend = _split(text, what)
    columns = _header_columns(header)
    devices: list[str] = []
    matrix: list[tuple[str, ...]] = []
    for line in rows:
        label, cells = _row_cells(line)
        values = [c for c in cells if c]
        if not (_DEVICE.match(label) or label in columns) or len(values) != len(columns):
            raise ParseError(what, f"malformed row {line.strip()!r}", text)
        devices.append(label)
        matrix.append(tuple(values))
    if not _looks_like_p2p(matrix):
        raise ParseError(what, "cells are not P2P statuses (OK/CNS/GNS/TNS/NS/U)", text)
    return Topology(
        devices=tuple(devices), columns=tuple(columns), matrix=tuple(matrix), legend=legend
    )


# --- helpers ------------------------------------------------------------------------------------


def _clean_lines(text: str) -> list[str]:
    return [_ANSI.sub("", line).rstrip("\r\n") for line in text.splitlines()]


def _split(text: str, what: str) -> tuple[str, list[str], dict[str, str]]:
    """Header line, matrix rows, and the legend entries of a topo-style table."""
    lines = _clean_lines(text or "")
    nonblank = [i for i, line in enumerate(lines) if line.strip()]
    if not nonblank:
        raise ParseError(what, "empty output")
    first = lines[nonblank[0]]
    if split_gpu_header(first):
        raise ParseError(what, "this is `nvidia-smi nvlink -s` output", text)
    if not _DEVICE_IN_HEADER.search(first):
        raise ParseError(what, "no GPU/NIC column header", text)

    rows: list[str] = []
    index = nonblank[0] + 1
    while index < len(lines) and lines[index].strip() and not _is_legend_title(lines[index]):
        rows.append(lines[index])
        index += 1
    if not rows:
        raise ParseError(what, "header without rows", text)
    return first, rows, _legend(lines[index:])


def _is_legend_title(line: str) -> bool:
    return line.strip().endswith("Legend:")


def _legend(lines: list[str]) -> dict[str, str]:
    legend: dict[str, str] = {}
    for line in lines:
        nic = _NIC_LEGEND_ENTRY.match(line)
        entry = nic or _LEGEND_ENTRY.match(line)
        if entry:
            legend[entry.group(1)] = entry.group(2)
    return legend


def _header_columns(header: str) -> list[str]:
    parts = header.split("\t") if "\t" in header else re.split(r"\s{2,}", header)
    columns: list[str] = []
    for part in (p.strip() for p in parts):
        if not part:
            continue
        names = _run_of_names(part)
        if len(names) > 1:
            warn(
                "nvidia-smi topo -m",
                f"header names run together; read as {len(names)} columns",
                text=part,
            )
        columns.extend(names)
    return columns


def _run_of_names(part: str) -> list[str]:
    """``"GPU0GPU1mlx5_0"`` → ["GPU0", "GPU1", "mlx5_0"]; a part that is not wholly a run of
    known names (one unknown title) stays one column."""
    names: list[str] = []
    position = 0
    while position < len(part):
        match = _HEADER_NAME.match(part, position)
        if not match:
            return [part]
        names.append(match.group())
        position = match.end()
    return names


def _check_matrix_row(label: str, row: tuple[str, ...], columns: list[str], text: str) -> None:
    """A misaligned row shows as a non-link value in the matrix or a missing ``X`` on the
    device's own column; unknown but plausible link names are only warned about."""
    what = "nvidia-smi topo -m"
    if label in columns and row[columns.index(label)] != "X":
        raise ParseError(what, f"row {label} is misaligned: its own column is not X", text)
    for column, cell in zip(columns, row, strict=True):
        if _LINK.match(cell) or cell in _P2P_STATUSES:
            continue
        if re.search(r"\d[-,]\d|^\d+$", cell):
            raise ParseError(
                what, f"row {label} is misaligned: {cell!r} under {column} is not a link", text
            )
        warn(what, f"unknown link type under {column}", text=cell)


def _check_affinity(label: str, column: str, value: str, text: str) -> None:
    pattern = _CPU_LIST if column == "CPU Affinity" else _NUMA_ID
    if pattern.match(value):
        return
    if _LINK.match(value):
        raise ParseError(
            "nvidia-smi topo -m",
            f"row {label} is misaligned: link value {value!r} under {column}",
            text,
        )
    warn("nvidia-smi topo -m", f"unexpected {column} value of {label}", text=value)


def _row_cells(line: str) -> tuple[str, list[str]]:
    """The row label and its cells, empty cells included."""
    if "\t" in line:
        parts = [p.strip() for p in line.split("\t")]
        # p2p rows start with a space before the label; a leading empty part is that space.
        while parts and not parts[0]:
            parts.pop(0)
        return (parts[0] if parts else ""), parts[1:]
    tokens = [(m.start(), m.end(), m.group()) for m in re.finditer(r"\S+", line)]
    if not tokens:
        return "", []
    cells: list[str] = []
    previous_end = tokens[0][1]
    for start, end, token in tokens[1:]:
        # Each tab stop crossed between two tokens is one tab, so one cell boundary.
        stops = start // _TAB - previous_end // _TAB
        cells.extend([""] * max(0, stops - 1))
        cells.append(token)
        previous_end = end
    return tokens[0][2], cells


def _after_nth_value(cells: list[str], n: int) -> int:
    """Index just past the n-th non-empty cell (matrix cells are never empty)."""
    seen = 0
    for index, cell in enumerate(cells):
        seen += bool(cell)
        if seen == n:
            return index + 1
    return len(cells)


def _match_trailing(columns: list[str], cells: list[str]) -> dict[str, str]:
    while cells and not cells[-1]:
        cells = cells[:-1]
    if not columns or not cells:
        return {}
    if len(cells) <= len(columns):
        return {column: cells[i] if i < len(cells) else "" for i, column in enumerate(columns)}
    matched = {column: cells[i] for i, column in enumerate(columns[:-1])}
    matched[columns[-1]] = cells[-1]
    return matched


def _looks_like_p2p(matrix: list[tuple[str, ...]]) -> bool:
    values = {cell for row in matrix for cell in row if cell != "X"}
    return bool(values) and values <= _P2P_STATUSES
