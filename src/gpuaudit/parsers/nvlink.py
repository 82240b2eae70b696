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
    # Link values repeat ("Replay Errors: 0" on every link of every GPU): each is read once.
    counters_of: dict[str, dict[str, int]] = {}
    for line in lines:
        header = split_gpu_header(line) if line.startswith("GPU ") else None
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
            current.add(int(link.group(1)), link.group(2).strip(), counters_of)
        else:
            warn(WHAT, "unrecognised line in a GPU's listing", text=line, gpu=current.index)
    if not gpus:
        raise ParseError(WHAT, "no 'GPU N:' line", text)
    return tuple(g.build() for g in gpus.values())


def _counters(value: str) -> dict[str, int]:
    """``"Replay Errors: 0, Recovery Errors: 1"`` → {"Replay": 0, "Recovery": 1}."""
    counters: dict[str, int] = {}
    if ":" not in value:  # every counter is "<name> Errors: N"
        return counters
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
                builder.merge(link.link, link.active, link.speed_gb_s, link.counters)
    return tuple(merged[index].build() for index in sorted(merged))


@dataclasses.dataclass
class _LinkState:
    """What is known of one link so far: the later listing's state, speed and counters win."""

    active: bool | None = None
    speed_gb_s: float | None = None
    counters: dict[str, int] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class _GpuBuilder:
    index: int
    uuid: str | None = None
    all_inactive: bool = False
    links: dict[int, _LinkState] = dataclasses.field(default_factory=dict)

    def add(self, number: int, value: str, counters_of: dict[str, dict[str, int]]) -> None:
        counters = counters_of.get(value)
        if counters is None:
            counters = counters_of[value] = _counters(value)  # read, never changed
        if counters:
            self.merge(number, counters=counters)
        elif "inactive" in value.lower():
            self.merge(number, active=False)
        elif speed := _SPEED.match(value):
            self.merge(number, active=True, speed_gb_s=parse_float(speed.group(1)))
        else:
            warn(WHAT, f"link {number}: state not recognised", text=value, gpu=self.index)
            self.merge(number)

    def merge(
        self,
        number: int,
        active: bool | None = None,
        speed_gb_s: float | None = None,
        counters: dict[str, int] | None = None,
    ) -> None:
        state = self.links.get(number)
        if state is None:
            state = self.links[number] = _LinkState()
        if active is not None:
            state.active = active
        if speed_gb_s is not None:
            state.speed_gb_s = speed_gb_s
        if counters:
            state.counters.update(counters)

    def build(self) -> GpuNvLink:
        links = tuple(_link(n, self.links[n]) for n in sorted(self.links))
        return GpuNvLink(self.index, self.uuid, links, self.all_inactive)


def _link(number: int, state: _LinkState) -> NvLinkLink:
    """The link with the common counters (every name starting so, any case) summed."""
    replay = recovery = crc = None
    for name, value in state.counters.items():
        low = name.lower()
        if low.startswith("replay"):
            replay = value if replay is None else replay + value
        elif low.startswith("recovery"):
            recovery = value if recovery is None else recovery + value
        elif low.startswith("crc"):
            crc = value if crc is None else crc + value
    return NvLinkLink(
        number,
        active=state.active,
        speed_gb_s=state.speed_gb_s,
        replay_errors=replay,
        recovery_errors=recovery,
        crc_errors=crc,
        counters=dict(state.counters),
    )
