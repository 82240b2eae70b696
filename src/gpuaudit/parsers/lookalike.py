"""Outputs of other vendors' accelerator tools that look like nvidia-smi's or rocm-smi's.

Several accelerator vendors ship a management CLI modelled on nvidia-smi or rocm-smi: Iluvatar
CoreX ``ixsmi`` (the nvidia-smi table with an ``IX-ML:`` banner, ``Iluvatar BI-V150`` rows),
Kunlunxin ``xpu-smi`` (an ``XPU-SMI`` banner over nvidia-smi's very columns), MetaX ``mx-smi``,
Moore Threads ``mthreads-gmi``, Hygon DCU ``hy-smi`` and its ``rocm-smi`` fork (rocm-smi's
concise table and JSON, with ``DCU`` columns and a Haiguang card vendor), Cambricon ``cnmon``,
Enflame ``efsmi``, Huawei Ascend ``npu-smi``. Some are installed under the NVIDIA or AMD tool's
name for compatibility, so a host whose ``nvidia-smi`` or ``rocm-smi`` answers is not yet a host
with NVIDIA or AMD GPUs.

:func:`identify` names the vendor and tool from marks every output of that tool prints: its
banner (``IX-ML:``, ``mthreads-gmi:``, ``CNMON v``, ``npu-smi 23.0.3``, the "MetaX / Enflame
System Management Interface" titles, rocm-smi's title without "ROCm" over ``DCU`` columns), the
Hygon JSON keys (``DCU use (%)``) and vendor, and otherwise the product names where a listing
puts them (``Product Name :``, ``<product_name>``, a table row, a CSV cell, a JSON name field:
``Iluvatar``, ``MTT S4000``, ``MetaX C550``, ``MLU370-X8``, ``Ascend 910B``, ``Z100``,
``K100_AI``). Marks anywhere else (a process name, a kernel-log line) are not looked at. The
result is typed: vendor, tool, the format it imitates, the evidence line, and the device names
and count where the listing shows them plainly. The snapshot builder asks :func:`identify` of
every ``nvidia-smi``, ``rocm-smi`` and ``amd-smi`` section before it believes it, and
:func:`identify_name` of each GPU a device probe names.

Only the first :data:`SCAN_CHARS` characters are read; every mark shows near the top.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

SCAN_CHARS = 1024 * 1024


@dataclass(frozen=True)
class LookAlike:
    """What :func:`identify` recognised: another vendor's tool, not NVIDIA's or AMD's."""

    vendor: str  # "iluvatar", "hygon", "moorethreads", ... (lower case, no spaces)
    vendor_name: str  # as the vendor writes itself: "Iluvatar CoreX", "Hygon", ...
    tool: str  # "ixsmi", "hy-smi", "mthreads-gmi", ...
    imitates: str  # "nvidia-smi", "rocm-smi" or "" (a format of its own)
    evidence: str  # the line (or JSON member) that gave it away
    devices: tuple[str, ...] = ()  # device names in listing order, where the output shows them
    device_count: int | None = None  # devices listed; None where the output does not say
    tool_version: str | None = None
    driver_version: str | None = None

    @property
    def kind(self) -> str:
        """``lookalike:<vendor>-<tool>``, the kind ``gpuaudit inspect`` reports."""
        return f"lookalike:{self.vendor}-{self.tool}"

    def to_dict(self) -> dict[str, Any]:
        """The result as ``gpuaudit inspect`` prints it (``imitates`` is left out: the report of
        a look-alike names its own vendor only)."""
        return {
            "vendor": self.vendor,
            "vendor_name": self.vendor_name,
            "tool": self.tool,
            "evidence": self.evidence,
            "devices": list(self.devices),
            "device_count": self.device_count,
            "tool_version": self.tool_version,
            "driver_version": self.driver_version,
        }


@dataclass(frozen=True)
class _Spec:
    vendor: str
    vendor_name: str
    tool: str
    imitates: str
    # Each pattern matches one line (MULTILINE); group "tool"/"driver" where it shows versions.
    banners: tuple[re.Pattern[str], ...]
    # Product names, tried against the name fields only (see _NAME_FIELDS).
    names: re.Pattern[str]
    # A device row of the tool's own listing; group "name" where the row shows it.
    rows: tuple[re.Pattern[str], ...] = field(default=())


_M = re.MULTILINE
_BUS = r"(?:[0-9A-Fa-f]{4,8}:)?[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]"

SPECS: tuple[_Spec, ...] = (
    _Spec(
        "iluvatar",
        "Iluvatar CoreX",
        "ixsmi",
        "nvidia-smi",
        (re.compile(r"^\|?\s*IX-ML:\s*(?P<tool>\S+)\s+Driver Version:\s*(?P<driver>\S+)", _M),),
        re.compile(r"\bIluvatar\b|\b(?:BI|MR)-V\d+", re.IGNORECASE),
        (re.compile(rf"^\|\s*\d+\s+(?P<name>Iluvatar[^|]*?)\s*\|\s*{_BUS}", _M),),
    ),
    _Spec(
        "kunlunxin",
        "Kunlunxin",
        "xpu-smi",
        "nvidia-smi",
        (
            re.compile(r"^\|\s*XPU-SMI\s+Driver Version:\s*(?P<driver>\S+)\s+XPU-RT Version", _M),
            re.compile(r"^Runtime Version:\s*\S+\s*\nDriver Version:\s*(?P<driver>\S+)", _M),
        ),
        re.compile(r"\bKunlun(?:xin)?\b", re.IGNORECASE),
        (
            re.compile(rf"^\|\s*\d+\s+(?P<name>[^|]*?)\s+(?:N/A|On|Off)\s*\|\s*{_BUS}", _M),
            re.compile(
                rf"^\|\s*\d+\s*\|\s*{_BUS}\s*\|\s*(?P<name>[^|]*?)\s*\|[^|]*\|\s*/dev/xpu", _M
            ),
        ),
    ),
    _Spec(
        "metax",
        "MetaX",
        "mx-smi",
        "nvidia-smi",
        (
            re.compile(r"^=+ MetaX System Management Interface Log =+\s*$", _M),
            re.compile(
                r"^\|\s*MX-SMI\s+(?P<tool>\S+)\s+Kernel Mode Driver Version:\s*(?P<driver>\S+)", _M
            ),
        ),
        re.compile(r"\bMetaX\b|\bMXC\d+", re.IGNORECASE),
        (re.compile(rf"^\|\s*\d+\s+(?P<name>\S[^|]*?)(?:\s+(?:On|Off))?\s*\|\s*{_BUS}", _M),),
    ),
    _Spec(
        "moorethreads",
        "Moore Threads",
        "mthreads-gmi",
        "nvidia-smi",
        (re.compile(r"^\s*mthreads-gmi:\s*(?P<tool>\S+)\s+Driver Version:\s*(?P<driver>\S+)", _M),),
        re.compile(r"\bMoore Threads\b|\bMTT S\d+", re.IGNORECASE),
        (re.compile(rf"^\|?\s*\d+\s+(?P<name>MTT[^|]*?)\s*\|\s*{_BUS}", _M),),
    ),
    _Spec(
        "hygon",
        "Hygon",
        "hy-smi",
        "rocm-smi",
        (
            # hy-smi and DTK's rocm-smi: rocm-smi's title without "ROCm", DCU (HCU) columns.
            re.compile(
                r"^=+ ?(?:ROCm )?System Management Interface ?=+\s*\n=+\s*\n[DH]CU\s+Temp\b", _M
            ),
            re.compile(r'"[DH]CU (?:use|memory use) \(%\)"\s*:', _M),
            re.compile(r'"Card Vendor"\s*:\s*"[^"]*\b(?:Haiguang|Hygon)\b', _M | re.IGNORECASE),
        ),
        # Not "Hygon" alone: that is also a CPU brand, and NVIDIA GPUs run on Hygon hosts.
        re.compile(r"\bHaiguang\b|\bDCU\b|\b(?:Z100L?|K100(?:_AI)?|BW\d{3,4})\b", re.IGNORECASE),
        (
            re.compile(r"^\d+\s+[\d.]+°?[cC]\s+[\d.]+W\s", _M),
            re.compile(r'"Card [Ss]eries"\s*:\s*"(?P<name>[^"]*)"', _M),
        ),
    ),
    _Spec(
        "cambricon",
        "Cambricon",
        "cnmon",
        "",
        (re.compile(r"^\|\s*CNMON v(?P<tool>\S+)(?:\s+Driver v(?P<driver>\S+))?", _M),),
        re.compile(r"\bCambricon\b|\bMLU\d{3}", re.IGNORECASE),
        (re.compile(r"^\|\s*\d+\s+\S+\s+(?P<name>MLU\S+)\s+v[\d.]+\s*\|", _M),),
    ),
    _Spec(
        "enflame",
        "Enflame",
        "efsmi",
        "",
        (
            re.compile(r"^-+ Enflame System Management Interface -+\s*$", _M),
            re.compile(r"^\|\s*EFSMI\s+V(?P<tool>\S+)\s+Driver Ver:\s*(?P<driver>\S+)", _M),
        ),
        re.compile(r"\bEnflame\b", re.IGNORECASE),
        (re.compile(r"^\|\s*\d+\s+(?P<name>\S[^|]*?)\s*\|\s*[\d.]+\s*\|\s*[0-9a-fA-F:.]+\s", _M),),
    ),
    _Spec(
        "ascend",
        "Huawei Ascend",
        "npu-smi",
        "",
        (re.compile(r"^\|\s*npu-smi\s+(?P<tool>\S+)\s+Version:\s*(?P<driver>\S+)", _M),),
        # Not "Huawei" alone: Huawei servers carry NVIDIA GPUs too.
        re.compile(r"\bAscend\b", re.IGNORECASE),
        (re.compile(r"^\|\s*\d+\s+(?P<name>\S+)\s*\|\s*[A-Za-z]+\s*\|", _M),),
    ),
    _Spec(
        "biren",
        "Biren",
        "brsmi",
        "",
        (),  # no capture of brsmi's banner is at hand: told apart by product names only
        re.compile(r"\bBiren\b", re.IGNORECASE),
    ),
)

# Where listings put a device's name: nvidia-smi -q's "Product Name", its XML, -L, the table
# rows, rocm-smi / amd-smi JSON name fields.
_NAME_FIELDS = (
    re.compile(r"^\s*Product Name\s*:\s*(.+?)\s*$", _M),
    re.compile(r"<product_name>([^<]*)</product_name>"),
    re.compile(r"^GPU \d+: (.+?) \(UUID:", _M),
    re.compile(
        r'"(?:Card [Ss]eries|Card [Mm]odel|Card Vendor|Card SKU|Device Name|Marketing Name'
        r'|market_name|product_name|vendor_name)"\s*:\s*"([^"]*)"'
    ),
)
# A device row of a table (its first cell after the index); process rows below it are not read.
_TABLE_NAME = re.compile(r"^\|\s*\d+\s+([^|]+?)\s*\|", _M)
_PROCESSES = re.compile(r"^\|?\s*Process(?:es)?:", _M)
# ``--query-gpu=index,name,...`` CSV: the name cell after the index, on data rows of a file
# whose first line is such a header or such a row.
_CSV_START = re.compile(r"^\s*(?:index\s*,\s*name\b|name\s*,|\d+\s*,\s*\S)")
_CSV_NAME = re.compile(r"^\s*\d+\s*,\s*([^,\n]+?)\s*,", _M)


# For each banner of SPECS, in order, literals that every match of it contains, as written (the
# one banner that ignores case gets only a literal without letters): a text that lacks one of
# them cannot match, so the banner is not searched for. The cheapest (one character) comes
# first; a literal several banners need is looked for once (_Present).
_BANNER_NEEDLES: tuple[tuple[str, ...], ...] = (
    ("IX-ML:",),  # iluvatar
    ("|", "XPU-SMI"),  # kunlunxin, table
    ("Runtime Version:",),  # kunlunxin, query
    ("System Management Interface", "MetaX System Management Interface Log"),  # metax
    ("|", "MX-SMI"),  # metax, table
    ("mthreads-gmi:",),  # moorethreads
    ("System Management Interface",),  # hygon, concise table
    ("%", '(%)"'),  # hygon, JSON keys
    ('"',),  # hygon, card vendor (ignores case)
    ("|", "CNMON v"),  # cambricon
    ("System Management Interface", "Enflame System Management Interface"),  # enflame
    ("|", "EFSMI"),  # enflame, table
    ("|", "npu-smi"),  # ascend
)
_NAME_NEEDLES: tuple[tuple[str, ...], ...] = (("Product Name",), (), (" (UUID:",), ('"',))
_NEEDLES: dict[re.Pattern[str], tuple[str, ...]] = {
    **dict(zip((b for spec in SPECS for b in spec.banners), _BANNER_NEEDLES, strict=True)),
    **dict(zip(_NAME_FIELDS, _NAME_NEEDLES, strict=True)),
}


def identify(text: str) -> LookAlike | None:
    """The look-alike tool whose output ``text`` is, or None; never raises on host text."""
    head = (text or "")[:SCAN_CHARS]
    if not head or head.isspace():
        return None
    present = _Present(head)
    for spec in SPECS:
        for banner in spec.banners:
            if not present.all(_NEEDLES[banner]):
                continue
            match = banner.search(head)
            if match:
                return _result(spec, head, _lines_of(head, match), match)
    checked: set[str] = set()
    for start, name in _name_starts(head, present):
        if name in checked:
            continue
        checked.add(name)
        for spec in SPECS:
            if spec.names.search(name):
                return _result(spec, head, _line_at(head, start), None)
    return None


def identify_name(name: str) -> LookAlike | None:
    """The look-alike vendor a single device name belongs to (``"Iluvatar BI-V150"``,
    ``"MTT S4000"``), or None: for names that come without their tool's output, such as the
    GPUs a device probe listed through an NVML-compatible library."""
    name = (name or "").strip()[:200]
    for spec in SPECS:
        if name and spec.names.search(name):
            return LookAlike(
                spec.vendor, spec.vendor_name, spec.tool, spec.imitates, name, (name,), 1
            )
    return None


def _name_starts(head: str, present: _Present) -> list[tuple[int, str]]:
    """``(where it starts, device name)`` for every name field in ``head``, in text order."""
    found: list[tuple[int, str]] = []
    for pattern in _NAME_FIELDS:
        if present.all(_NEEDLES[pattern]):
            found.extend((m.start(1), m.group(1)) for m in pattern.finditer(head))
    if "|" in head:
        processes = _PROCESSES.search(head)
        table = head[: processes.start()] if processes else head
        found.extend((m.start(1), m.group(1)) for m in _TABLE_NAME.finditer(table))
    if _CSV_START.match(head.lstrip()):
        found.extend((m.start(1), m.group(1)) for m in _CSV_NAME.finditer(head))
    found.sort()
    return found


class _Present:
    """Which literal strings ``head`` holds, each looked for once: a pattern is only searched
    for where the literals every match of it contains are all there (see _NEEDLES), so that
    the usual output (nvidia-smi's XML, rocm-smi's JSON) costs a few substring scans, not a
    regular-expression search per mark."""

    def __init__(self, head: str) -> None:
        self.head = head
        self.seen: dict[str, bool] = {}

    def all(self, needles: tuple[str, ...]) -> bool:
        for needle in needles:
            found = self.seen.get(needle)
            if found is None:
                found = self.seen[needle] = needle in self.head
            if not found:
                return False
        return True


def _result(spec: _Spec, head: str, evidence: str, banner: re.Match[str] | None) -> LookAlike:
    groups = banner.groupdict() if banner else {}
    devices, count = _devices(spec, head)
    return LookAlike(
        vendor=spec.vendor,
        vendor_name=spec.vendor_name,
        tool=spec.tool,
        imitates=spec.imitates,
        evidence=evidence[:400],
        devices=devices,
        device_count=count,
        tool_version=groups.get("tool") or _version(spec, head, "tool"),
        driver_version=groups.get("driver") or _version(spec, head, "driver"),
    )


def _version(spec: _Spec, head: str, group: str) -> str | None:
    for banner in spec.banners:
        match = banner.search(head)
        if match and group in banner.groupindex and match.group(group):
            return match.group(group)
    return None


def _devices(spec: _Spec, head: str) -> tuple[tuple[str, ...], int | None]:
    for row in spec.rows:
        matches = list(row.finditer(head))
        if not matches:
            continue
        if "name" in row.groupindex:
            return tuple(m.group("name").strip() for m in matches), len(matches)
        return (), len(matches)
    return (), None


def _lines_of(text: str, match: re.Match[str]) -> str:
    """The lines a banner match covers, each stripped (a title over its column header)."""
    first = _line_at(text, match.start())
    last = _line_at(text, max(match.start(), match.end() - 1))
    if first == last or match.group().count("\n") == 0:
        return first
    start = text.rfind("\n", 0, match.start()) + 1
    end = text.find("\n", match.end() - 1)
    lines = text[start : end if end >= 0 else len(text)].splitlines()
    return "\n".join(line.strip() for line in lines if line.strip())


def _line_at(text: str, position: int) -> str:
    start = text.rfind("\n", 0, position) + 1
    end = text.find("\n", position)
    return text[start : end if end >= 0 else len(text)].strip()
