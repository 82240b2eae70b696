"""`nvidia-smi nvlink -s` (link state and speed) and `nvidia-smi nvlink -e` (error counters).

Both listings share one shape, so one reader takes either, or both concatenated:

    GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-…)
         Link 0: 25 GB/s                     # -s, active link
         Link 1: <inactive>                  # -s, inactive link
         Link 0: Replay Errors: 0            # -e, one counter per line
         Link 0: Recovery Errors: 0
         Link 0: CRC Errors: 0

A GPU whose links are all down is reported by NVML in one sentence instead of a listing:
"NVML: Unable to retrieve NVLink information as all links are inactive" (the spelling of
"inactive" varies between drivers: "inActive"). A GPU without NVLink prints its header and no
link lines. Counter names differ between drivers and generations (CRC, CRC Flit, CRC Data), so
every "<name> Errors: N" pair is kept under its printed name and the common ones are also
summed into named fields.

Lines the reader cannot place (text before the first ``GPU N:`` header, a link value that is
neither a speed, ``<inactive>`` nor counters, anything else inside a GPU's block) become parse
warnings; a UUID printed as something other than ``GPU-…`` (an elided ``...`` in a ticket) is
dropped with a warning.

``nvidia-smi -q -x`` carries no per-link NVLink state in the schemas the project's fixtures cover
(v10 to v13), so this module reads only the text listings.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

from gpuaudit.model.snapshot import GpuNvLink, NvLinkLink
from gpuaudit.parsers.errors import ParseError
from gpuaudit.parsers.values import parse_float, split_gpu_header
from gpuaudit.parsers.warnings import warn

WHAT = "nvidia-smi nvlink -s / -e"

_LINK = re.compile(r"^Link (\d+):\s*(.*)$")
_SPEED = re.compile(r"^([\d.]+)\s*GB/s", re.IGNORECASE)
# "<name> Errors: N": found by its "Errors:" first, then the name just before it. A pattern that
# starts at the name would try every letter of a babbling host's long line as one (quadratic).
_COUNT = re.compile(r"(?<=\s)Errors?:\s*(\d+)", re.IGNORECASE)
_COUNTER_NAME = re.compile(r"([A-Za-z][A-Za-z /-]*?)\s+$")
_NAME_WINDOW = 128
_ALL_INACTIVE = re.compile(r"all links are inactive", re.IGNORECASE)


def parse_nvlink(text: str) -> tuple[GpuNvLink, ...]:
    """Every GPU of an `nvidia-smi nvlink -s` and/or `-e` listing, in the order listed.

    Empty output means no GPU has NVLink (empty tuple). Output with lines but no
    ``GPU N:`` header is not a listing (ParseError).
    """
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ()
    gpus: dict[int, _GpuBuilder] = {}
    current: _GpuBuilder | None = None
    for line in lines:
        header = split_gpu_header(line)
        if header:
            index, _name, uuid = header
            if uuid is not None and not uuid.startswith("GPU-"):
                warn(WHAT, "UUID is not a GPU UUID; left out", text=line, gpu=index)
                uuid = None
            current = gpus.setdefault(index, _GpuBuilder(index))
            current.uuid = current.uuid or uuid
            continue
        if current is None:
            warn(WHAT, "line before the first 'GPU N:' header", text=line)
            continue
        if _ALL_INACTIVE.search(line):
            current.all_inactive = True
            continue
        link = _LINK.match(line)
        if link:
            current.add(int(link.group(1)), link.group(2).strip())
        else:
            warn(WHAT, "unrecognised line in a GPU's listing", text=line, gpu=current.index)
    if not gpus:
        raise ParseError(WHAT, "no 'GPU N:' line", text)
    return tuple(g.build() for g in gpus.values())


def _counters(value: str) -> dict[str, int]:
    """``"Replay Errors: 0, Recovery Errors: 1"`` → {"Replay": 0, "Recovery": 1}."""
    counters: dict[str, int] = {}
    start = 0
    for match in _COUNT.finditer(value):
        window = value[max(start, match.start() - _NAME_WINDOW) : match.start()]
        name = _COUNTER_NAME.search(window)
        if name:
            counters[name.group(1).strip()] = int(match.group(1))
        start = match.end()
    return counters


def merge_nvlink(*listings: Iterable[GpuNvLink]) -> tuple[GpuNvLink, ...]:
    """One entry per GPU from separate -s and -e listings (state from one, counters from other)."""
    merged: dict[int, _GpuBuilder] = {}
    for listing in listings:
        for gpu in listing:
            builder = merged.setdefault(gpu.gpu, _GpuBuilder(gpu.gpu))
            builder.uuid = builder.uuid or gpu.uuid
            builder.all_inactive = builder.all_inactive or gpu.all_inactive
            for link in gpu.links:
                builder.merge(link)
    return tuple(merged[index].build() for index in sorted(merged))


@dataclasses.dataclass
class _GpuBuilder:
    index: int
    uuid: str | None = None
    all_inactive: bool = False
    links: dict[int, NvLinkLink] = dataclasses.field(default_factory=dict)

    def add(self, number: int, value: str) -> None:
        counters = _counters(value)
        speed = _SPEED.match(value)
        if counters:
            self.merge(NvLinkLink(number, counters=counters))
        elif "inactive" in value.lower():
            self.merge(NvLinkLink(number, active=False))
        elif speed:
            self.merge(NvLinkLink(number, active=True, speed_gb_s=parse_float(speed.group(1))))
        else:
            warn(WHAT, f"link {number}: state not recognised", text=value, gpu=self.index)
            self.merge(NvLinkLink(number))

    def merge(self, link: NvLinkLink) -> None:
        known = self.links.get(link.link, NvLinkLink(link.link))
        self.links[link.link] = dataclasses.replace(
            known,
            active=link.active if link.active is not None else known.active,
            speed_gb_s=link.speed_gb_s if link.speed_gb_s is not None else known.speed_gb_s,
            counters={**known.counters, **link.counters},
        )

    def build(self) -> GpuNvLink:
        links = tuple(_with_named_counters(self.links[n]) for n in sorted(self.links))
        return GpuNvLink(self.index, self.uuid, links, self.all_inactive)


def _with_named_counters(link: NvLinkLink) -> NvLinkLink:
    def total(*prefixes: str) -> int | None:
        values = [v for k, v in link.counters.items() if k.lower().startswith(prefixes)]
        return sum(values) if values else None

    return dataclasses.replace(
        link,
        replay_errors=total("replay"),
        recovery_errors=total("recovery"),
        crc_errors=total("crc"),
    )
