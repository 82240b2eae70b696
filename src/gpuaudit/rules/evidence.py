"""Helpers that cut raw excerpts out of a snapshot's sections for a finding's evidence.

A finding should quote what the host printed, not only the parsed value, so a reader can check
the parser as well as the rule. These helpers never raise on odd host output: an excerpt they
cannot find is an empty string.
"""

from __future__ import annotations

import re

from gpuaudit.model.snapshot import Gpu, HostSnapshot, bus_key

MAX_EXCERPT_LINES = 20
_GPU_OPEN = re.compile(r'<gpu\s+id="([^"]+)"\s*>')


def section_excerpt(snap: HostSnapshot, name: str, max_lines: int = MAX_EXCERPT_LINES) -> str:
    """The first lines of a section's stdout and stderr (stderr says why a tool failed)."""
    section = snap.sections.get(name)
    if section is None:
        return ""
    parts = [section.stdout.strip(), section.stderr.strip()]
    lines = "\n".join(p for p in parts if p).splitlines()
    return _clip(lines, max_lines)


def gpu_xml_excerpt(
    snap: HostSnapshot, gpu: Gpu, element: str, max_lines: int = MAX_EXCERPT_LINES
) -> str:
    """The raw ``<element>…</element>`` block of one GPU in ``nvidia-smi -q -x`` output.

    The GPU is found by its PCI bus id (the ``<gpu id="…">`` attribute), whatever domain width
    the driver printed.
    """
    section = snap.sections.get("nvidia_smi_xml")
    if section is None or not gpu.pci_bus_id:
        return ""
    block = _gpu_block(section.stdout, gpu.pci_bus_id)
    start = block.find(f"<{element}>")
    if start < 0:
        return ""
    end_tag = f"</{element}>"
    end = block.find(end_tag, start)
    text = block[start:] if end < 0 else block[start : end + len(end_tag)]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return _clip(lines, max_lines)


def _gpu_block(xml_text: str, pci_bus_id: str) -> str:
    for match in _GPU_OPEN.finditer(xml_text):
        if bus_key(match.group(1)) == pci_bus_id:
            end = xml_text.find("</gpu>", match.end())
            return xml_text[match.start() : None if end < 0 else end]
    return ""


def _clip(lines: list[str], max_lines: int) -> str:
    if len(lines) <= max_lines:
        return "\n".join(lines)
    return "\n".join([*lines[:max_lines], f"… ({len(lines) - max_lines} more lines)"])


def gpu_label(gpu: Gpu) -> str:
    """How a message names a GPU: index, model and bus id when known."""
    bits = [f"GPU {gpu.index}"]
    if gpu.name:
        bits.append(f"({gpu.name}")
        bits[-1] += f", {gpu.pci_bus_id})" if gpu.pci_bus_id else ")"
    elif gpu.pci_bus_id:
        bits.append(f"({gpu.pci_bus_id})")
    return " ".join(bits)
