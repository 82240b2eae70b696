"""NVIDIA report parsers on what real hosts print: MIG devices in ``-q`` text, 610-branch
renames, Windows layouts, warning lines, failing readings, unknown fields.

Every test reads a real capture; where a test needs a variant (a warning line inserted, a value
replaced), the variant is derived in the test from a real capture and says so.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuaudit.parsers.nvidia_table import parse_nvidia_smi_table
from gpuaudit.parsers.nvidia_text import Entry, field_status, parse_nvidia_smi_text, read_tree
from gpuaudit.parsers.nvidia_xml import parse_nvidia_smi_xml
from gpuaudit.parsers.warnings import collecting

FIXTURES = Path(__file__).parents[1] / "fixtures"
Q = FIXTURES / "nvidia-smi-q"
TABLE = FIXTURES / "nvidia-smi-table"
XML = FIXTURES / "nvidia-smi-xml"


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


# --- MIG devices in -q text ------------------------------------------------------------------


def test_h100_mig_devices_from_q_text() -> None:
    gpu = parse_nvidia_smi_text(read(Q / "utk-h100-mig-driver590-load.nvidia-smi-q.txt")).gpus[0]
    assert gpu.mig_mode_current == "Enabled"
    # Four "MIG Device" blocks: Index / GPU Instance ID / Compute Instance ID, "Shared FB
    # Memory Usage / Total", "Device Attributes / Shared / Multiprocessor count".
    assert [(d.index, d.gpu_instance_id, d.compute_instance_id) for d in gpu.mig_devices] == [
        (0, 2, 0),
        (1, 3, 0),
        (2, 9, 0),
        (3, 10, 0),
    ]
    assert [d.memory_total_mib for d in gpu.mig_devices] == [40448, 20096, 9984, 9984]
    assert [d.multiprocessor_count for d in gpu.mig_devices] == [60, 32, 16, 16]
    # In MIG mode the whole-GPU utilisation reads N/A.
    assert gpu.utilization_gpu_pct is None
    assert gpu.unavailable["utilization_gpu_pct"] == "not_applicable"


def test_h200_mig_text_and_table_agree() -> None:
    text = parse_nvidia_smi_text(read(Q / "utk-h200-mig-driver590-idle.nvidia-smi-q.txt")).gpus[0]
    table = parse_nvidia_smi_table(read(TABLE / "utk-h200-mig-driver590-idle-table.txt")).gpus[0]
    assert len(text.mig_devices) == len(table.mig_devices) == 5
    assert [d.gpu_instance_id for d in text.mig_devices] == [
        d.gpu_instance_id for d in table.mig_devices
    ]
    assert [d.multiprocessor_count for d in text.mig_devices] == [
        d.multiprocessor_count for d in table.mig_devices
    ]


def test_mig_devices_under_a_heading() -> None:
    # Derived from the real H100 MIG capture: the MIG Device blocks indented under a
    # "MIG Devices" heading, as older drivers print them.
    lines = read(Q / "utk-h100-mig-driver590-load.nvidia-smi-q.txt").splitlines()
    start = lines.index("    MIG Device")
    end = lines.index("    Accounting Mode                                    : Disabled")
    block = ["    MIG Devices", *("    " + line for line in lines[start:end])]
    gpu = parse_nvidia_smi_text("\n".join(lines[:start] + block + lines[end:])).gpus[0]
    assert [d.gpu_instance_id for d in gpu.mig_devices] == [2, 3, 9, 10]


# --- 610 renames, Blackwell, Windows ---------------------------------------------------------


def test_610_kmd_and_cuda_umd_versions_in_text() -> None:
    # 610 prints "Driver Version : 610.57.04 [Deprecated; ...]" and "KMD Version : 610.57.04".
    log = parse_nvidia_smi_text(
        read(Q / "utk-rtx2080super-driver610.57.04-kmd-version-idle.nvidia-smi-q.txt")
    )
    assert (log.driver_version, log.cuda_version) == ("610.57.04", "13.3")
    gpu = log.gpus[0]
    assert (gpu.driver_version, gpu.cuda_version) == ("610.57.04", "13.3")
    # 610 moved the limits under "GPU Ceiling Power Limit".
    assert gpu.power_limit_w == 250.0


def test_610_windows_q_ceiling_power_limit() -> None:
    gpu = parse_nvidia_smi_text(
        read(Q / "utk-rtx2080super-windows-wddm-driver610.62-load.nvidia-smi-q.txt")
    ).gpus[0]
    assert (gpu.driver_version, gpu.power_limit_w, gpu.power_draw_w) == ("610.62", 250.0, 97.99)


@pytest.mark.parametrize(
    ("name", "driver", "gpus", "first"),
    [
        ("issue-sglang-27487-8x-b200-driver610.43.02-kmd-version-truncated.txt", "610.43.02", 2,
         ("NVIDIA B200", "0000:63:00.0", 26.0, 139.0, 1000.0, 183359, "Disabled")),
        ("issue-finpilot-160-rtx3080-laptop-driver610.43.03-kmd-version.txt", "610.43.03", 1,
         ("NVIDIA GeForce RTX 3080 ...", "0000:01:00.0", 40.0, 751.0, 80.0, 16384, None)),
        ("utk-rtx2080super-driver610.57.04-kmd-version-idle-table.txt", "610.57.04", 1,
         ("NVIDIA GeForce RTX 2080 ...", "0000:0C:00.0", 33.0, 38.0, 250.0, 8192, None)),
    ],
)  # fmt: skip
def test_610_table_header(name: str, driver: str, gpus: int, first: tuple[object, ...]) -> None:
    log = parse_nvidia_smi_table(read(TABLE / name))
    assert (log.driver_version, log.cuda_version, len(log.gpus)) == (driver, "13.3", gpus)
    g = log.gpus[0]
    got = (g.name, g.pci_bus_id, g.temperature_c, g.power_draw_w, g.power_limit_w)
    assert (*got, g.memory_total_mib, g.mig_mode_current) == first


def test_windows_table_driver_model_column_is_not_persistence() -> None:
    gpu = parse_nvidia_smi_table(
        read(TABLE / "utk-rtx2080super-windows-wddm-driver610.62-load-table.txt")
    ).gpus[0]
    assert gpu.persistence_mode is None and "persistence_mode" not in gpu.unavailable
    assert (gpu.name, gpu.pci_bus_id, gpu.memory_used_mib) == (
        "NVIDIA GeForce RTX 2080 ...",
        "0000:0C:00.0",
        1366,
    )


def test_narrow_384_table_without_mig_row() -> None:
    log = parse_nvidia_smi_table(
        read(TABLE / "issue-gpu-operator-20-quadro-p4000-driver384.130-narrow-no-mig-row.txt")
    )
    assert (log.driver_version, log.cuda_version) == ("384.130", None)
    gpu = log.gpus[0]
    assert (gpu.name, gpu.persistence_mode, gpu.pci_bus_id) == (
        "Quadro P4000",
        False,
        "0000:B3:00.0",
    )
    assert (gpu.temperature_c, gpu.power_draw_w, gpu.power_limit_w) == (35.0, 6.0, 105.0)
    assert (gpu.memory_used_mib, gpu.memory_total_mib, gpu.utilization_gpu_pct) == (701, 8105, 0.0)
    assert gpu.ecc_mode_current is None and gpu.unavailable["ecc_mode_current"] == "not_applicable"
    assert gpu.mig_mode_current is None and "mig_mode_current" not in gpu.unavailable


def test_two_word_compute_mode_does_not_shift_columns() -> None:
    # Derived from the real H100 table: "E. Process" in the compute mode cell of GPU 0, the
    # spelling nvidia-smi prints for Exclusive_Process.
    text = read(TABLE / "gpud-nvidia-smi-table-8x-h100-driver550.90.07.txt")
    row = "|      0%      Default |"
    assert row in text
    gpu = parse_nvidia_smi_table(text.replace(row, "|      0%   E. Process |", 1)).gpus[0]
    assert gpu.utilization_gpu_pct == 0.0 and "utilization_gpu_pct" not in gpu.unavailable
    assert gpu.mig_mode_current == "Disabled"


def test_cuda_not_found_and_vgpu_capability_block() -> None:
    log = parse_nvidia_smi_text(
        read(
            Q / "issue-cubecos-312-4x-rtx-pro-6000-blackwell-driver580.105.06-q-d-memory-"
            "performance-truncated.txt"
        )
    )
    # "CUDA Version : Not Found" is no version; the excerpt names one GPU of four.
    assert (log.driver_version, log.cuda_version, log.attached_gpus) == ("580.105.06", None, 4)
    assert [g.pci_bus_id for g in log.gpus] == ["0000:42:00.0"]
    assert log.gpus[0].clock_event_reasons == ()


# --- warning and error lines -----------------------------------------------------------------


def test_unable_to_determine_device_handle_is_a_failed_gpu() -> None:
    with collecting() as warnings:
        log = parse_nvidia_smi_text(
            read(
                Q / "issue-nvidia-docker-1553-nvidia-smi-a-i0-unable-to-determine-device-handle.txt"
            )
        )
    (gpu,) = log.gpus
    assert (gpu.status, gpu.pci_bus_id) == ("error", "0000:09:00.0")
    assert "Unable to determine the device handle" in gpu.status_detail
    assert [w.gpu for w in warnings] == [0]


def test_infoROM_warning_in_q_text_is_attached_to_its_gpu() -> None:
    # Derived from the real 8x H100 capture: nvidia-smi's infoROM warning line inserted
    # between two GPU blocks, naming the second GPU.
    text = read(Q / "gpud-8x-h100-80gb-hbm3-driver535.161.08-hw-slowdown.nvidia-smi-q.txt")
    text = text.replace(
        "GPU 00000000:3B:00.0\n",
        "WARNING: infoROM is corrupted at gpu 0000:3B:00.0\nGPU 00000000:3B:00.0\n",
    )
    with collecting() as warnings:
        log = parse_nvidia_smi_text(text)
    assert len(log.gpus) == 8
    gpu = log.gpus[1]
    assert gpu.pci_bus_id == "0000:3B:00.0" and gpu.status == "ok"
    assert "infoROM is corrupted" in gpu.status_detail
    # The block after the warning is read as before.
    assert gpu.name == "NVIDIA H100 80GB HBM3" and gpu.pcie_replay_count == 63
    assert [(w.gpu, w.text) for w in warnings] == [
        (1, "WARNING: infoROM is corrupted at gpu 0000:3B:00.0")
    ]


def test_device_handle_error_in_a_table_adds_the_missing_gpu() -> None:
    # Derived from the real 1-GPU H200 table: the line nvidia-smi prints for a GPU it cannot
    # reach, appended after the table.
    text = read(TABLE / "utk-h200-driver590-load-table.txt")
    text += "Unable to determine the device handle for GPU0000:65:00.0: Unknown Error\n"
    log = parse_nvidia_smi_table(text)
    assert [(g.pci_bus_id, g.status) for g in log.gpus] == [
        ("0000:83:00.0", "ok"),
        ("0000:65:00.0", "error"),
    ]


def test_warning_before_xml_is_attached() -> None:
    # Derived from a real XML capture: the warning line nvidia-smi prints to the same stream
    # before the document.
    text = read(XML / "telegraf-a10g-driver515.xml")
    bus = parse_nvidia_smi_xml(text).gpus[0].pci_bus_id
    assert bus is not None
    with collecting() as warnings:
        log = parse_nvidia_smi_xml(f"WARNING: infoROM is corrupted at gpu {bus}\n{text}")
    assert "infoROM is corrupted" in log.gpus[0].status_detail
    assert [w.gpu for w in warnings] == [0]


# --- failing readings vs not supported -------------------------------------------------------


@pytest.mark.parametrize("printed", ["ERR!", "Unknown Error", "[Unknown Error]"])
def test_failing_core_reading_marks_the_gpu(printed: str) -> None:
    # Derived from the real L4 capture: the temperature reading replaced.
    text = read(Q / "thamada-l4-driver550.90.07.nvidia-smi-q.txt")
    line = next(x for x in text.splitlines() if x.strip().startswith("GPU Current Temp"))
    gpu = parse_nvidia_smi_text(text.replace(line, line.split(":")[0] + f": {printed}")).gpus[0]
    assert gpu.status == "error" and printed in gpu.status_detail
    assert gpu.temperature_c is None and gpu.unavailable["temperature_c"] == "unreadable"


@pytest.mark.parametrize(
    ("printed", "reason"),
    [("N/A", "not_applicable"), ("[N/A]", "not_applicable"), ("[Not Supported]", "not_supported")],
)
def test_absent_core_reading_is_not_a_failure(printed: str, reason: str) -> None:
    text = read(Q / "thamada-l4-driver550.90.07.nvidia-smi-q.txt")
    line = next(x for x in text.splitlines() if x.strip().startswith("GPU Current Temp"))
    gpu = parse_nvidia_smi_text(text.replace(line, line.split(":")[0] + f": {printed}")).gpus[0]
    assert gpu.status == "ok" and gpu.unavailable["temperature_c"] == reason


# --- unknown fields --------------------------------------------------------------------------


def test_unknown_q_field_warns_once_per_file() -> None:
    # Derived from the real 8x H100 capture: one field renamed on every GPU.
    text = read(Q / "thamada-8x-h100-80gb-hbm3-driver565.57.01.nvidia-smi-q.txt")
    assert text.count("    Serial Number ") == 8
    text = text.replace("    Serial Number ", "    Board Serial  ")
    with collecting() as warnings:
        log = parse_nvidia_smi_text(text)
    assert {g.serial for g in log.gpus} == {None}
    assert [w.message for w in warnings] == ["unknown field 'Board Serial': its value is not read"]


def test_unknown_xml_element_warns_once_per_document() -> None:
    # Derived from the real 2-GPU RTX 2070 capture: an element no driver printed, on both GPUs.
    text = read(XML / "telegraf-2x-rtx2070-driver590-v13.xml")
    assert text.count("<product_brand>") == 2
    text = text.replace("<product_brand>", "<kmd_branch>r610</kmd_branch><product_brand>")
    with collecting() as warnings:
        parse_nvidia_smi_xml(text)
    assert [w.text for w in warnings] == ["<kmd_branch>r610</kmd_branch>"]


def test_an_element_on_one_gpu_only_is_warned() -> None:
    # The same capture: GPUs alike are walked once, a GPU unlike the first is still walked.
    text = read(XML / "telegraf-2x-rtx2070-driver590-v13.xml")
    element = "<kmd_branch>r610</kmd_branch>"
    for before, path in (("<product_brand>", "kmd_branch"), ("<pci_bus>", "pci/kmd_branch")):
        second = text.index(before, text.index(before) + 1)
        with collecting() as warnings:
            parse_nvidia_smi_xml(text[:second] + element + text[second:])
        assert [(w.message, w.text) for w in warnings] == [
            (f"unknown element <gpu>/{path}: its value is not read", element)
        ]


# --- every line placed or warned -------------------------------------------------------------

_FIELD_LINE = re.compile(r"^(?P<indent>\s*)(?P<label>\S.*?)\s+:(?:\s|$)")
Q_CAPTURES = sorted(Q.glob("*.txt"))


@pytest.mark.parametrize("path", Q_CAPTURES, ids=lambda p: p.name)
def test_every_q_field_line_is_placed_or_warned(path: Path) -> None:
    """Every ``Label : value`` line of the capture is read, recognised, inside a block read as
    a whole or not at all, or named by a parse warning."""
    text = read(path)
    with collecting() as warnings:
        parse_nvidia_smi_text(text)
    warned = {w.message.split("'")[1] for w in warnings if w.message.startswith("unknown field")}
    tree = read_tree(text)
    paths: dict[int, str] = {}

    def visit(entry: Entry, prefix: str) -> None:
        for child in entry.children:
            if not prefix and re.match(r"^GPU [0-9A-Fa-f]+:", child.label):
                paths[child.line] = ""
                visit(child, "GPU")
                continue
            path_ = f"{prefix}/{child.label}" if prefix else f"ROOT/{child.label}"
            paths[child.line] = path_
            visit(child, path_)

    visit(tree, "")
    # Report-level fields and blocks (vGPU Driver Capability is recognised as a whole).
    root_fields = {"timestamp", "driver version", "cuda version", "kmd version",
                   "cuda umd version", "attached gpus", "vgpu driver capability"}  # fmt: skip
    unplaced = []
    for number, line in enumerate(text.splitlines(), start=1):
        if _FIELD_LINE.match(line) is None:
            continue
        assert number in paths, f"line {number} not in the tree: {line!r}"
        top, _, path_ = paths[number].partition("/")
        if top == "ROOT" and path_.split("/")[0].lower() in root_fields:
            continue
        shown = " / ".join(p.strip() for p in path_.split("/"))
        if field_status(path_) == "unknown" and shown not in warned:
            unplaced.append(line)
    assert unplaced == []
