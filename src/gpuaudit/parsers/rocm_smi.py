"""`rocm-smi --showallinfo` (text or ``--json``) and the default concise table → AMD :class:`Gpu`.

rocm-smi's JSON is one object per ``cardN`` plus a ``system`` object, keyed by the human labels
of the text output, and those labels were renamed between ROCm releases (``GPU ID`` → ``Device
ID``, ``Card series`` → ``Card Series``, ``Device Name`` appearing in 6.1). Each field is
looked up under all known labels, case-insensitively. Values are strings, with ``N/A`` (or
``N/A (Secondary die)``) where the card cannot say.

The text of ``--showallinfo`` (``rocm-smi -a``) carries the same labels, one value a line:
``GPU[0]\t\t: VBIOS version: 113-MI3SRIOV-001`` under ``==== VBIOS ====`` banners, with the
driver version on a line of its own. :func:`parse_rocm_smi_showallinfo` gathers each GPU's
``label: value`` pairs into the shape of a JSON card object and reads them as the JSON is
read. A query the card cannot answer prints ``get_power_profiles, Not supported on the given
system`` (kept as "not supported", not a warning); a line of any other shape outside the
process listings is a parse warning.
"""

from __future__ import annotations

import json
import re
from typing import Any

from gpuaudit.model.snapshot import Gpu, bus_key
from gpuaudit.parsers.errors import ParseError
from gpuaudit.parsers.nvidia_xml import clean, parse_float, parse_int
from gpuaudit.parsers.values import load_host_json
from gpuaudit.parsers.warnings import warn

WHAT = "rocm-smi --json"
_CARD = re.compile(r"^card(\d+)$")
_HEX_ONLY = re.compile(r"^0x[0-9a-fA-F]+$")
_PCIE_LEVEL = re.compile(r"([\d.]+)\s*GT/s\s*x(\d+)")
# PCIe transfer rate per lane → generation.
_GEN_BY_RATE = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}
_MIB = 1024 * 1024


def parse_rocm_smi_json(text: str) -> tuple[Gpu, ...]:
    """One :class:`Gpu` (vendor ``"amd"``) per ``cardN`` object, ordered by card number."""
    if not text or not text.strip():
        raise ParseError(WHAT, "empty output")
    try:
        data, end = load_host_json(text, len(text) - len(text.lstrip()))
        if text[end:].strip():
            raise json.JSONDecodeError("Extra data", text, end)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ParseError(WHAT, f"not JSON: {exc}", text) from exc
    if not isinstance(data, dict):
        raise ParseError(WHAT, "top level is not an object", text)
    system = data.get("system")
    system = system if isinstance(system, dict) else {}
    driver = _get(_by_label(system), "Driver version")
    cards = sorted(
        (int(m.group(1)), value)
        for key, value in data.items()
        if (m := _CARD.match(key)) and isinstance(value, dict)
    )
    if not cards:
        raise ParseError(WHAT, "no cardN objects", text)
    return tuple(_gpu(number, card, driver) for number, card in cards)


def _gpu(number: int, raw_card: dict[str, Any], driver: str | None) -> Gpu:
    card = _by_label(raw_card)
    memory_total = parse_int(_get(card, "VRAM Total Memory (B)"))
    memory_used = parse_int(_get(card, "VRAM Total Used Memory (B)"))
    gen, width = _pcie(_get(card, "pcie clock level"))
    return Gpu(
        index=number,
        vendor="amd",
        name=_name(card),
        uuid=_get(card, "Unique ID"),
        serial=_get(card, "Serial Number"),
        pci_bus_id=bus_key(_get(card, "PCI Bus")),
        architecture=_get(card, "GFX Version"),
        vbios_version=_get(card, "VBIOS version"),
        driver_version=driver,
        memory_total_mib=memory_total // _MIB if memory_total is not None else None,
        memory_used_mib=memory_used // _MIB if memory_used is not None else None,
        temperature_c=parse_float(
            _get(card, "Temperature (Sensor edge) (C)", "Temperature (Sensor junction) (C)")
        ),
        power_draw_w=parse_float(
            _get(
                card,
                "Average Graphics Package Power (W)",
                "Current Socket Graphics Package Power (W)",
            )
        ),
        power_limit_w=parse_float(_get(card, "Max Graphics Package Power (W)")),
        utilization_gpu_pct=parse_float(_get(card, "GPU use (%)")),
        pcie_gen_current=gen,
        pcie_width_current=width,
        pcie_replay_count=parse_int(_get(card, "PCIe Replay Count")),
    )


def _by_label(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` keyed by its labels trimmed and in lower case (rocm-smi's spelling varies), made
    once per object for every :func:`_get` of it."""
    return {str(k).strip().lower(): v for k, v in obj.items()}


def _get(labelled: dict[str, Any], *labels: str) -> str | None:
    """The first of ``labels`` that has a value in ``labelled`` (a :func:`_by_label` map)."""
    for label in labels:
        value = labelled.get(label.lower())
        if value is None:
            continue
        text = clean(str(value))
        # "N/A (Secondary die)" and similar annotated no-values.
        if text is None or text.lower().startswith("n/a"):
            continue
        return text
    return None


def _name(card: dict[str, Any]) -> str | None:
    # ROCm 4.x put the PCI vendor id ("0x1002") in "Card series"; a bare hex id is not a name.
    for label in ("Card Series", "Device Name", "Card Model"):
        value = _get(card, label)
        if value and not _HEX_ONLY.match(value):
            return value
    return None


def _pcie(level: str | None) -> tuple[int | None, int | None]:
    """``"1 (16.0GT/s x16)"`` → (4, 16): the active PCIe level's generation and width."""
    match = _PCIE_LEVEL.search(level or "")
    if not match:
        return None, None
    rate = parse_float(match.group(1))
    return (_GEN_BY_RATE.get(rate) if rate is not None else None), int(match.group(2))


_TEXT_GPU_LINE = re.compile(r"^GPU\[(\d+)\]\s*:\s?(.*)$")
_TEXT_PAIR = re.compile(r"^(.+?):\s*(.*)$")
_BANNER = re.compile(r"^=+(?:\s*(.*?)\s*=+)?$")
_NOT_SUPPORTED = re.compile(r"^(?:[^,]*, )?Not supported(?: on the given system)?$", re.IGNORECASE)
# Lines that only structure the listing: a sub-heading of the clock tables, a rule of dashes.
_LAYOUT = re.compile(r"^(?:Supported \w+ frequencies on GPU\d+|-+)?$")
# Sections that list processes rather than per-GPU values.
_PROCESS_SECTIONS = frozenset({"KFD Processes", "GPUs Indexed by PID"})
# The labels the record is built from; a value under one of them that does not read as a
# number is warned about.
_NUMERIC_LABELS = (
    "Temperature (Sensor edge) (C)",
    "Temperature (Sensor junction) (C)",
    "Average Graphics Package Power (W)",
    "Current Socket Graphics Package Power (W)",
    "Max Graphics Package Power (W)",
    "GPU use (%)",
    "PCIe Replay Count",
    "VRAM Total Memory (B)",
    "VRAM Total Used Memory (B)",
)


def parse_rocm_smi_showallinfo(text: str) -> tuple[Gpu, ...]:
    """The text of `rocm-smi --showallinfo` (``-a``): one :class:`Gpu` per ``GPU[N]``."""
    what = "rocm-smi --showallinfo"
    lines = (text or "").splitlines()
    if not any("ROCm System Management Interface" in line for line in lines):
        raise ParseError(what, "no 'ROCm System Management Interface' banner", text)
    cards: dict[int, dict[str, str]] = {}
    driver: str | None = None
    section = ""
    for raw in lines:
        line = raw.strip()
        if not line:
            continue
        banner = _BANNER.match(line)
        if banner:
            section = banner.group(1) or ""
            continue
        gpu_line = _TEXT_GPU_LINE.match(line)
        if gpu_line:
            number, rest = int(gpu_line.group(1)), gpu_line.group(2).strip()
            card = cards.setdefault(number, {})
            pair = _TEXT_PAIR.match(rest)
            if _NOT_SUPPORTED.match(rest) or _LAYOUT.match(rest):
                continue
            if pair:
                # Values are padded with tabs ("Card series: \t\tAMD Instinct MI300X OAM").
                card.setdefault(pair.group(1).strip(), pair.group(2).strip())
            else:
                warn(what, "GPU line without a 'label: value' pair", text=line, gpu=number)
            continue
        driver_line = re.match(r"^Driver version:\s*(\S.*)$", line)
        if driver_line:
            driver = driver_line.group(1).strip()
        elif not (
            section in _PROCESS_SECTIONS or _NOT_SUPPORTED.match(line) or _LAYOUT.match(line)
        ):
            warn(what, f"line outside a GPU entry (section {section or 'none'!r})", text=line)
    if not cards:
        raise ParseError(what, "no GPU[N] lines", text)
    for number, card in cards.items():
        for label in _NUMERIC_LABELS:
            value = card.get(label)
            if value and parse_float(value) is None and not value.lower().startswith("n/a"):
                warn(what, f"{label} is not a number", text=value, gpu=number)
    return tuple(_gpu(number, cards[number], driver) for number in sorted(cards))


def parse_rocm_smi_concise(text: str) -> tuple[Gpu, ...]:
    """The default `rocm-smi` table: index, temperature, power, power cap, GPU% and the name.

    Each device takes two lines; the second holds the (20-character) name.
    """
    what = "rocm-smi (concise table)"
    rows: list[Gpu] = []
    lines = (text or "").splitlines()
    if not any("Concise Info" in line for line in lines):
        raise ParseError(what, "no 'Concise Info' title", text)
    for i, line in enumerate(lines):
        match = re.match(r"^(\d+)\s+\[(0x[0-9a-fA-F]+)\s*:\s*(0x[0-9a-fA-F]+)\]\s+(.*)$", line)
        if not match:
            continue
        cells = match.group(4).split()
        name = lines[i + 1].strip() if i + 1 < len(lines) else ""
        watts = [c for c in cells if c.endswith("W")]
        percents = [c for c in cells if c.endswith("%")]
        rows.append(
            Gpu(
                index=int(match.group(1)),
                vendor="amd",
                name=name if name and not name.startswith("=") else None,
                temperature_c=parse_float(cells[0]) if cells else None,
                power_draw_w=parse_float(watts[0]) if watts else None,
                power_limit_w=parse_float(watts[1]) if len(watts) > 1 else None,
                utilization_gpu_pct=parse_float(percents[-1]) if percents else None,
            )
        )
    if not rows:
        raise ParseError(what, "no device rows", text)
    return tuple(rows)
