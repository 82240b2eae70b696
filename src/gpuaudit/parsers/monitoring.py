"""The ``monitoring`` section and dcgm-exporter's counters (collectors) file.

The section (``s_monitoring`` in collect/collector.sh) is one TAB-separated record a line,
its kind first:

    unit      NAME  STATE               systemctl is-active of a monitoring unit
    scan      proc  N                   how many /proc/PID entries were visible
    process   PID   NAME                an exporter process (/proc/PID/comm)
    arg       PID   VALUE               one argv entry of it, in order
    env       PID   [DCGM_EXPORTER_COLLECTORS=PATH]   the variable, empty when unset
    environ   PID   unreadable          /proc/PID/environ could not be read
    counters  PID   SOURCE  PATH  BYTES|unreadable|missing  process-root|host
    csv       LINE                      a line of the counters file named just before
    textfile  PID   DIR  exists|missing  writable|readonly

The counters file is what dcgm-exporter reads with Go's encoding/csv (``Comment = '#'``):
a line whose first character is ``#`` is a comment, an empty line is skipped, and every other
line must hold exactly three fields, ``DCGM FIELD, Prometheus metric type, help message``,
each trimmed of spaces; a line that does not is refused and dcgm-exporter does not start
(internal/pkg/counters/counter_config.go, ``ExtractCounters``).
"""

from __future__ import annotations

import csv
import dataclasses
import re

from gpuaudit.model.snapshot import CounterField, CountersFile, ExporterProcess, MonitoringView
from gpuaudit.parsers.warnings import warn

SOURCE = "monitoring"
COUNTERS_SOURCE = "dcgm-exporter counters"
# What the collector reads of a counters file; a larger file is cut there.
COUNTERS_MAX_BYTES = 65536
# The Prometheus metric types dcgm-exporter accepts (internal/pkg/counters/variables.go).
METRIC_TYPES = frozenset({"gauge", "counter", "histogram", "summary", "label"})
_COMMENTED_FIELD = re.compile(r"^#\s*(DCGM_(?:FI|EXP)_[A-Z0-9_]+)\s*(?:,|$)")
_FIELD_NAME = re.compile(r"^DCGM_(?:FI|EXP)_[A-Z0-9_]+$")


def parse_counters_csv(text: str, path: str = "", source: str = "default") -> CountersFile:
    """A dcgm-exporter counters file: the fields it exports, those it has commented out, and
    the lines dcgm-exporter would refuse. Never raises on the file's text."""
    fields: list[CounterField] = []
    commented: list[str] = []
    malformed: list[str] = []
    for number, raw in enumerate((text or "").split("\n"), start=1):
        line = raw.removesuffix("\r")
        if not line:
            continue
        if line.startswith("#"):
            found = _COMMENTED_FIELD.match(line)
            if found and found.group(1) not in commented:
                commented.append(found.group(1))
            continue
        record = _record(line)
        if record is None or len(record) != 3:
            count = "unreadable CSV" if record is None else f"{len(record)} field(s)"
            malformed.append(f"line {number}: {count}, dcgm-exporter expects 3")
            warn(COUNTERS_SOURCE, f"line {number} is not a 3-field counter record", line)
            continue
        name, metric_type, help_text = record
        if metric_type not in METRIC_TYPES:
            malformed.append(f"line {number}: unknown metric type {metric_type!r}")
            warn(COUNTERS_SOURCE, f"line {number}: unknown metric type {metric_type!r}", line)
            continue
        if not _FIELD_NAME.match(name):
            # dcgm-exporter looks the name up and stops on one it does not know.
            malformed.append(f"line {number}: {name!r} is not a DCGM field")
            warn(COUNTERS_SOURCE, f"line {number}: {name!r} is not a DCGM field name", line)
            continue
        fields.append(CounterField(name, metric_type, help_text, number))
    exported = {f.field for f in fields}
    return CountersFile(
        path=path,
        source=source,
        fields=tuple(fields),
        commented=tuple(c for c in commented if c not in exported),
        malformed=tuple(malformed),
    )


def _record(line: str) -> list[str] | None:
    try:
        row = next(csv.reader([line], strict=True))
    except (csv.Error, StopIteration):
        return None
    return [cell.strip(" ") for cell in row]


def parse_monitoring(text: str) -> MonitoringView:
    """The ``monitoring`` section (module docstring). Never raises on host text; a record of
    an unknown kind or shape is kept as a parse warning."""
    units: dict[str, str] = {}
    proc_entries: int | None = None
    names: dict[int, str] = {}
    argv: dict[int, list[str]] = {}
    env: dict[int, str | None] = {}
    unreadable_env: set[int] = set()
    counters: list[CountersFile] = []
    csv_lines: list[str] | None = None
    pending: tuple[str, str, str | None, int | None] | None = None
    textfile: tuple[str, bool, bool] | None = None

    def close_counters() -> None:
        nonlocal csv_lines, pending
        if pending is not None:
            counters.append(_counters(pending, csv_lines or []))
        pending, csv_lines = None, None

    for line in (text or "").splitlines():
        kind, _, rest = line.partition("\t")
        if kind == "csv" and csv_lines is not None:
            csv_lines.append(rest)
            continue
        close_counters()  # its csv lines end at the next record of another kind
        parts = rest.split("\t")
        if kind == "csv":
            warn(SOURCE, "a counters-file line with no file before it", line)
        elif kind == "unit" and len(parts) == 2:
            units[parts[0]] = parts[1].strip()
        elif kind == "scan" and len(parts) == 2 and parts[1].isdigit():
            proc_entries = int(parts[1])
        elif kind in ("process", "arg", "env", "environ") and len(parts) == 2:
            pid = _pid(parts[0])
            if pid is None:
                warn(SOURCE, f"{kind} record without a process id", line)
            elif kind == "process":
                names[pid] = parts[1].strip()
            elif kind == "arg":
                argv.setdefault(pid, []).append(parts[1])
            elif kind == "env":
                value = parts[1]
                env[pid] = value.partition("=")[2] if value.startswith("DCGM_") else None
            else:
                unreadable_env.add(pid)
        elif kind == "counters" and len(parts) == 5:
            state = parts[3]
            size = int(state) if state.isdigit() else None
            error = None if size is not None else f"{parts[2]}: {state}"
            pending = (parts[2], parts[1], error, size)
            csv_lines = [] if size is not None else None
            if size is None:
                close_counters()
        elif kind == "textfile" and len(parts) == 4:
            textfile = (parts[1], parts[2] == "exists", parts[3] == "writable")
        elif line.strip():
            warn(SOURCE, "record of an unknown kind or shape", line)
    close_counters()
    processes = tuple(
        ExporterProcess(
            pid=pid,
            name=name,
            argv=tuple(argv.get(pid, ())),
            collectors_env=env.get(pid),
            environ_readable=pid not in unreadable_env,
        )
        for pid, name in names.items()
    )
    return MonitoringView(
        units=units,
        proc_entries=proc_entries,
        processes=processes,
        counters=tuple(counters),
        textfile_directory=textfile[0] if textfile else None,
        textfile_directory_exists=textfile[1] if textfile else None,
        textfile_directory_writable=textfile[2] if textfile else None,
    )


def _pid(text: str) -> int | None:
    return int(text) if text.strip().isdigit() else None


def _counters(pending: tuple[str, str, str | None, int | None], lines: list[str]) -> CountersFile:
    path, source, error, size = pending
    if error is not None:
        return CountersFile(path=path, source=source, error=error)
    truncated = size is not None and size > COUNTERS_MAX_BYTES
    if truncated and lines:
        lines = lines[:-1]  # the cut may have split the last line
    parsed = parse_counters_csv("\n".join(lines), path, source)
    if truncated:
        warn(COUNTERS_SOURCE, f"{path} is {size} bytes: only its first 64 KiB were read")
        return dataclasses.replace(parsed, truncated=True)
    return parsed
