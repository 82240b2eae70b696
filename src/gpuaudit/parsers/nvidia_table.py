"""The default ``nvidia-smi`` table: what an operator pastes into a ticket.

The table has a version line (``NVIDIA-SMI 550.90.07  Driver Version: 550.90.07  CUDA Version:
12.4``) and one box per GPU, each box two or three lines of three ``|``-separated cells:

    |   0  NVIDIA H100 80GB HBM3          On  |   00000000:19:00.0 Off |                    0 |
    | N/A   27C    P0             72W /  700W |       1MiB /  81559MiB |      0%      Default |
    |                                         |                        |             Disabled |

i.e. index, name, persistence | bus id, display active | volatile uncorrectable ECC count (or
``Off`` / ``On`` when ECC is disabled / counted per MIG instance); fan, temperature, performance
state, power draw / cap | memory used / total | utilisation, compute mode; and, since driver 450,
the MIG mode. Windows drivers print the driver model (``WDDM`` / ``TCC``) where Linux prints
persistence, under a ``Driver-Model`` title; 610 drivers title the versions ``KMD Version`` and
``CUDA UMD Version``. Warning lines printed around the table (``WARNING: infoROM is corrupted at
gpu …``) are attached to the GPU they name. Box widths differ between drivers, so cells are
split on ``|`` and read by pattern. Names longer than the cell are cut by nvidia-smi (``NVIDIA
RTX 6000 Ada Gene...``) and are kept as printed. A ``MIG devices:`` table that follows is read by
:func:`gpuaudit.parsers.mig.parse_mig_table_devices`.
"""

from __future__ import annotations

import dataclasses
import re

from gpuaudit.model.snapshot import EccCounts, Gpu, MigDevice, bus_key
from gpuaudit.parsers.errors import ParseError
from gpuaudit.parsers.mig import parse_mig_table_devices
from gpuaudit.parsers.nvidia_common import NvidiaSmiLog, attach_notices, gpu_status, notice
from gpuaudit.parsers.values import FieldReader, parse_flag

WHAT = "nvidia-smi (default table)"

# Drivers before 610 print "Driver Version:" and "CUDA Version:"; 610 and later print "KMD
# Version:" and "CUDA UMD Version:" in their place.
_VERSIONS = re.compile(
    r"NVIDIA-SMI\s+\S+\s+(?:Driver|KMD) Version:\s*(?P<driver>\S+)"
    r"(?:\s+CUDA(?: UMD)? Version:\s*(?P<cuda>\S+))?"
)
_COLUMN_TITLES = re.compile(r"^\|\s*GPU\s+Name\b")
_HEADER_END = re.compile(r"^\|=+(?:\+=+)*\|$")
_IDENTITY = re.compile(r"^(?P<index>\d+)\s+(?P<name>.*\S)\s+(?P<persistence>\S+)$")
_BUS = re.compile(r"^(?P<bus>[0-9A-Fa-f]+:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s+\S+$")
_SENSORS = re.compile(
    r"^(?P<fan>\S+)\s+(?P<temp>\S+)\s+(?P<perf>\S+)\s+(?P<draw>\S+)\s*/\s*(?P<cap>\S+)$"
)
_MEMORY = re.compile(r"^(?P<used>\S+)\s*/\s*(?P<total>\S+)$")
# The compute mode may be two words: "E. Process", "E. Thread".
_UTILISATION = re.compile(r"^(?P<util>\S+)\s+(?P<mode>\S(?:.*\S)?)$")


def parse_nvidia_smi_table(text: str) -> NvidiaSmiLog:
    """Parse the default ``nvidia-smi`` output. Raises :class:`ParseError` otherwise."""
    if not text or not text.strip():
        raise ParseError(WHAT, "empty output")
    versions = _VERSIONS.search(text)
    if versions is None:
        raise ParseError(WHAT, "no 'NVIDIA-SMI … Driver Version:' (or KMD Version:) line", text)
    driver, cuda = versions["driver"], versions["cuda"]
    lines = text.splitlines()
    boxes = _gpu_boxes(lines)
    # On Windows the column after the name is the driver model (WDDM / TCC), not persistence.
    driver_model = any(_COLUMN_TITLES.match(x.strip()) and "Driver-Model" in x for x in lines)
    if not boxes:
        raise ParseError(WHAT, "no GPU rows under the column titles", text)
    mig = parse_mig_table_devices(text) if "MIG devices:" in text else {}
    gpus = tuple(
        _with_mig(_gpu(i, box, driver, cuda, driver_model), mig) for i, box in enumerate(boxes)
    )
    notices = [n for line in text.splitlines() if (n := notice(line)) is not None]
    gpus = attach_notices(gpus, notices, WHAT)
    first = text.strip().splitlines()[0].strip()
    return NvidiaSmiLog(
        driver_version=driver,
        cuda_version=cuda,
        timestamp=None if first.startswith(("+", "|")) else first,
        attached_gpus=None,
        gpus=gpus,
    )


def _gpu_boxes(lines: list[str]) -> list[list[list[str]]]:
    """The GPU boxes of the first table with GPU column titles: lines of cell texts."""
    start = next((i for i, line in enumerate(lines) if _COLUMN_TITLES.match(line.strip())), None)
    if start is None:
        return []
    boxes: list[list[list[str]]] = []
    box: list[list[str]] = []
    in_body = False
    for raw in lines[start + 1 :]:
        line = raw.strip()
        if not in_body:
            in_body = bool(_HEADER_END.match(line))
            continue
        if line.startswith("|"):
            box.append([cell.strip() for cell in line.strip("|").split("|")])
            continue
        if box:
            boxes.append(box)
            box = []
        if not line.startswith("+"):  # the blank line that ends the GPU table
            break
    if box:
        boxes.append(box)
    return boxes


def _gpu(
    position: int, box: list[list[str]], driver: str, cuda: str | None, driver_model: bool
) -> Gpu:
    first = box[0] + ["", "", ""]
    identity = _IDENTITY.match(first[0])
    if identity is None or len(box[0]) != 3 or len(box) < 2:
        return Gpu(
            index=position,
            status="error",
            status_detail=f"unreadable row: {' | '.join(' '.join(c) for c in box)[:200]}",
        )
    second = box[1] + ["", "", ""]
    third = (box[2] if len(box) > 2 else []) + ["", "", ""]
    bus = _BUS.match(first[1])
    sensors = _SENSORS.match(second[0])
    memory = _MEMORY.match(second[1])
    utilisation = _UTILISATION.match(second[2])
    r = FieldReader()
    status, detail = gpu_status(
        {
            "name": identity["name"],
            "bus id": first[1],
            "memory": second[1],
            "temperature": sensors["temp"] if sensors else second[0],
        },
        [*first, *second, *third],
    )
    ecc_cell = first[2]
    ecc_count = r.as_int("ecc_volatile.uncorrected", ecc_cell if ecc_cell[:1].isdigit() else None)
    ecc_mode = parse_flag(ecc_cell) if ecc_count is None else True
    if ecc_count is None and ecc_mode is None:
        r.note("ecc_mode_current", ecc_cell, None)
    return Gpu(
        index=int(identity["index"]),
        vendor="nvidia",
        status=status,
        status_detail=detail,
        name=identity["name"],
        pci_bus_id=bus_key(bus["bus"]) if bus else None,
        driver_version=driver,
        cuda_version=cuda,
        persistence_mode=None
        if driver_model
        else r.as_flag("persistence_mode", identity["persistence"]),
        ecc_mode_current=None if ecc_mode is None else ("Enabled" if ecc_mode else "Disabled"),
        ecc_volatile=EccCounts(uncorrected=ecc_count),
        temperature_c=r.as_float("temperature_c", sensors["temp"] if sensors else None),
        power_draw_w=r.as_float("power_draw_w", sensors["draw"] if sensors else None),
        power_limit_w=r.as_float("power_limit_w", sensors["cap"] if sensors else None),
        memory_used_mib=r.as_int("memory_used_mib", memory["used"] if memory else None),
        memory_total_mib=r.as_int("memory_total_mib", memory["total"] if memory else None),
        utilization_gpu_pct=r.as_float(
            "utilization_gpu_pct", utilisation["util"] if utilisation else None
        ),
        mig_mode_current=r.as_text("mig_mode_current", third[2]),
        unavailable=dict(r.unavailable),
    )


def _with_mig(gpu: Gpu, mig: dict[int, tuple[MigDevice, ...]]) -> Gpu:
    devices = mig.get(gpu.index)
    return dataclasses.replace(gpu, mig_devices=devices) if devices else gpu
