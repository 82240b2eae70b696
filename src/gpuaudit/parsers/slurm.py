"""Slurm's view of a host: ``scontrol show node -o``, gres.conf, slurm.conf's GRES lines,
``slurmd -C`` and ``slurmd -G``.

Formats, as Slurm prints them (see docs/field-guide/slurm.md):

- ``scontrol show node`` prints ``Key=Value`` fields, one record per node; ``-o`` puts a record
  on one line, without it the fields of a record continue on indented lines. Values hold no
  spaces except ``OS=`` (the kernel's uname) and ``Reason=`` (free text followed by
  ``[user@time]``), so a word that is not ``Key=…`` continues the field before it.
- GRES lists (``Gres=``, ``GresUsed=``, slurmd -C's ``Gres=``): comma-separated
  ``name[:type][:count][(detail)]``; ``(null)`` or ``N/A`` means none, a type ``(null)``
  means untyped.
- gres.conf: ``Key=Value`` lines (keys in any case), ``#`` comments; ``File=`` may name
  device files with a bracket range (``/dev/nvidia[0-3]``).
- ``slurmd -G``: one ``[prefix: ]Gres Name=… Type=… Count=… Index=… File=… Flags=…`` line per
  GRES, printed to stderr (the collector merges it into stdout). Terminal captures wrap long
  lines; a line that does not start a GRES continues the one before it.

The parsers are pure and never raise on odd host text: what they cannot place is a parse
warning.
"""

from __future__ import annotations

import re

from gpuaudit.model.snapshot import (
    GresConf,
    GresLine,
    GresSpec,
    SlurmdGres,
    SlurmdHardware,
    SlurmNode,
)
from gpuaudit.parsers.warnings import warn

SCONTROL = "scontrol show node"
GRES_CONF = "gres.conf"
SLURMD_C = "slurmd -C"
SLURMD_G = "slurmd -G"

_FIELD = re.compile(r"^([A-Z][A-Za-z0-9_]*)=(.*)$")
_REASON_TAIL = re.compile(r"\s*\[([^@\]\s]*)@([^\]\s]*)\]\s*$")
_NONE = ("", "(null)", "N/A", "n/a", "None")
_SUFFIX = {"K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
_GRES_CONF_KEYS = {
    "name": "name",
    "type": "type",
    "file": "file",
    "count": "count",
    "nodename": "node_name",
    "autodetect": "auto_detect",
    "flags": "flags",
    "cores": "cores",
    "cpus": "cores",
    "links": "links",
    "multiplefiles": "multiple_files",
}
_SLURMD_G_START = re.compile(r"^(?:[^\s:]+:\s+)?Gres\s+Name=")
_RANGE = re.compile(r"\[([^\]]*)\]")


def _fields(words: list[str]) -> dict[str, str]:
    """``Key=Value`` words to a mapping; a word that starts no field continues the last one."""
    fields: dict[str, str] = {}
    last: str | None = None
    for word in words:
        match = _FIELD.match(word)
        if match and match.group(1) not in fields:
            last = match.group(1)
            fields[last] = match.group(2)
        elif last is not None:
            fields[last] = f"{fields[last]} {word}".strip()
    return fields


def parse_gres_list(text: str, source: str = SCONTROL) -> tuple[GresSpec, ...]:
    """``gpu:a100:4(S:0-1),gpu:a100_3g.20gb:2`` → one :class:`GresSpec` per entry."""
    text = text.strip()
    if text in _NONE:
        return ()
    entries = _split_top(text, "()")
    return tuple(spec for entry in entries if (spec := _gres_entry(entry, source)))


def _gres_entry(entry: str, source: str) -> GresSpec | None:
    if not entry:
        return None
    detail = ""
    body = entry
    # A "(null)" type sits inside the entry: only a trailing group is the detail.
    match = re.match(r"^(.*?)\(([^()]*)\)$", entry)
    if match and not match.group(1).endswith(":") and match.group(1):
        body, detail = match.group(1), match.group(2)
    parts = body.split(":")
    name = parts[0]
    if not re.fullmatch(r"[A-Za-z0-9_./-]+", name):
        warn(source, "a GRES entry whose name cannot be read", entry)
        return None
    rest = [p for p in parts[1:] if p != "no_consume"]
    count: int | None = None
    if rest and (number := _count(rest[-1])) is not None:
        count = number
        rest = rest[:-1]
    gres_type = ":".join(rest) if rest else None
    if gres_type in ("(null)", ""):
        gres_type = None
    return GresSpec(name=name, type=gres_type, count=count, detail=detail, raw=entry)


def _count(text: str) -> int | None:
    match = re.fullmatch(r"(\d+)([KMGT]?)", text.strip())
    if not match:
        return None
    return int(match.group(1)) * _SUFFIX.get(match.group(2), 1)


def _tres(text: str) -> dict[str, str]:
    """``cpu=8,mem=1M,gres/gpu=1`` → {"cpu": "8", "mem": "1M", "gres/gpu": "1"}."""
    result: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if sep and key.strip():
            result[key.strip()] = value.strip()
    return result


def parse_scontrol_nodes(text: str) -> tuple[SlurmNode, ...]:
    """Every node record of ``scontrol show node [-o]`` output, in order."""
    records: list[list[str]] = []
    for word in text.split():
        if word.startswith("NodeName="):
            records.append([word])
        elif records:
            records[-1].append(word)
        else:
            warn(SCONTROL, "text before the first NodeName= record", word)
    return tuple(_node(_fields(words)) for words in records)


def _node(fields: dict[str, str]) -> SlurmNode:
    reason = fields.get("Reason")
    user = when = None
    if reason is not None:
        tail = _REASON_TAIL.search(reason)
        if tail:
            user, when = tail.group(1) or None, tail.group(2) or None
            reason = reason[: tail.start()].strip()
        if reason in _NONE:
            reason = None
    return SlurmNode(
        name=fields.get("NodeName", ""),
        state=fields.get("State", ""),
        gres=parse_gres_list(fields.get("Gres", "")),
        gres_used=parse_gres_list(fields.get("GresUsed", "")),
        cfg_tres=_tres(fields.get("CfgTRES", "")),
        alloc_tres=_tres(fields.get("AllocTRES", "")),
        reason=reason,
        reason_user=user,
        reason_time=when,
        version=fields.get("Version") or None,
        fields=fields,
    )


def parse_scontrol_node(text: str, node_name: str | None = None) -> SlurmNode | None:
    """The record of ``node_name`` (or the only/first one) in ``scontrol show node`` output."""
    nodes = parse_scontrol_nodes(text)
    if node_name:
        named = next((n for n in nodes if n.name == node_name), None)
        if named is not None:
            return named
    return nodes[0] if nodes else None


def expand_files(spec: str) -> int:
    """How many device files a gres.conf ``File=`` names: ``/dev/nvidia[0-3,5]`` is 5,
    ``/dev/nvidia0,/dev/nvidia1`` is 2."""
    total = 0
    for piece in _split_top(spec):
        count = 1
        for group in _RANGE.findall(piece):
            count *= _range_size(group)
        total += count if piece else 0
    return total


def _split_top(text: str, brackets: str = "[]") -> list[str]:
    """``text`` split at the commas outside ``brackets`` (an opening and a closing character:
    ``gpu:a100:4(S:0-1),gpu:2`` with "()", ``nvidia[0-3],nvidia7`` with "[]"), each piece
    stripped, empty ones left out."""
    opening, closing = brackets[0], brackets[1]
    pieces, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == opening:
            depth += 1
        elif char == closing:
            depth = max(0, depth - 1)
        elif char == "," and depth == 0:
            pieces.append(text[start:i].strip())
            start = i + 1
    pieces.append(text[start:].strip())
    return [p for p in pieces if p]


def _range_size(group: str) -> int:
    size = 0
    for part in group.split(","):
        low, sep, high = part.partition("-")
        if sep and low.strip().isdigit() and high.strip().isdigit():
            size += max(0, int(high) - int(low) + 1)
        elif part.strip():
            size += 1
    return size


def parse_gres_conf(text: str, path: str | None = None) -> GresConf:
    """gres.conf, line by line."""
    lines: list[GresLine] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        body = raw.split("#", 1)[0].strip()
        if not body:
            continue
        values: dict[str, str] = {}
        for word in body.split():
            key, sep, value = word.partition("=")
            attr = _GRES_CONF_KEYS.get(key.lower()) if sep else None
            if attr is None:
                warn(GRES_CONF, f"line {number}: a word gpuaudit does not read", word)
                continue
            values[attr] = value
        if not values:
            continue
        auto = values.pop("auto_detect", None)
        file = values.get("file")
        lines.append(
            GresLine(
                line=number,
                raw=raw.strip(),
                auto_detect=auto.lower() if auto is not None else None,
                file_count=expand_files(file) if file else None,
                **values,
            )
        )
    return GresConf(lines=tuple(lines), path=path)


def parse_slurmd_hardware(text: str) -> SlurmdHardware:
    """``slurmd -C``: ``NodeName=… CPUs=… RealMemory=… [Gres=…]`` and ``UpTime=…``; other
    lines (AutoDetect's "Found gpu:… with Autodetect=nvml") are parse warnings."""
    words: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if _FIELD.match(stripped.split()[0]):
            words.extend(stripped.split())
        else:
            warn(SLURMD_C, "a line that holds no Key=Value field", stripped)
    fields = _fields(words)
    return SlurmdHardware(
        node_name=fields.get("NodeName") or None,
        cpus=_count(fields.get("CPUs", "")),
        real_memory_mib=_count(fields.get("RealMemory", "")),
        gres=parse_gres_list(fields.get("Gres", ""), SLURMD_C),
        uptime=fields.get("UpTime") or None,
        fields=fields,
    )


def parse_slurmd_gres(text: str) -> tuple[SlurmdGres, ...]:
    """``slurmd -G``: one entry per ``Gres Name=…`` line, wrapped lines joined back."""
    joined: list[str] = []
    for line in text.splitlines():
        if _SLURMD_G_START.match(line):
            joined.append(line.rstrip())
        elif joined and line.strip():
            joined[-1] += line.strip()
        elif line.strip():
            warn(SLURMD_G, "a line before the first GRES", line)
    entries = []
    for line in joined:
        body = line[line.index("Gres") + len("Gres") :].split()
        fields = {k: v for k, sep, v in (w.partition("=") for w in body) if sep}
        flags = fields.get("Flags", "")
        entries.append(
            SlurmdGres(
                name=fields.get("Name", ""),
                raw=line,
                type=None if fields.get("Type") in (None, *_NONE) else fields["Type"],
                count=_count(fields.get("Count", "")),
                index=_count(fields.get("Index", "")),
                file=None if fields.get("File") in (None, *_NONE) else fields["File"],
                links=None if fields.get("Links") in (None, *_NONE) else fields["Links"],
                flags=tuple(f for f in flags.split(",") if f),
            )
        )
    return tuple(entries)


_SLURM_CONF_KEYS = re.compile(
    r"^\s*(GresTypes|AccountingStorageTRES|SelectType|SelectTypeParameters|NodeName)\s*=",
    re.IGNORECASE,
)


def parse_slurm_conf_lines(text: str) -> tuple[str, ...]:
    """The GRES-related lines of slurm.conf the collector kept, comments dropped."""
    kept = []
    for raw in text.splitlines():
        body = raw.split("#", 1)[0].strip()
        if body and _SLURM_CONF_KEYS.match(body):
            kept.append(body)
    return tuple(kept)
