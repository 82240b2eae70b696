"""Slurm's outputs read field by field: real captures (tests/fixtures/slurm/, provenance in
SOURCES.md), expectations written from the files themselves."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuaudit.model.snapshot import GresSpec
from gpuaudit.parsers.slurm import (
    expand_files,
    parse_gres_conf,
    parse_gres_list,
    parse_scontrol_node,
    parse_scontrol_nodes,
    parse_slurm_conf_lines,
    parse_slurmd_gres,
    parse_slurmd_hardware,
)
from gpuaudit.parsers.warnings import collecting

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


def read(kind: str, name: str) -> str:
    return (FIXTURES / kind / name).read_text(encoding="utf-8")


DRAINED = "awsome-distributed-ai-195-rtx3090-idle-drain-gres-lower.txt"


def test_scontrol_multiline_record_of_a_node_slurmctld_drained() -> None:
    with collecting() as warnings:
        node = parse_scontrol_node(read("scontrol-show-node", DRAINED))
    assert warnings == []
    assert node is not None
    assert node.name == "yigou-dev-102-68"
    assert node.state == "IDLE+DRAIN"
    assert node.gres == (GresSpec("gpu", "nvidia-rtx-3090", 1, "", "gpu:nvidia-rtx-3090:1"),)
    assert node.gres_used == ()
    assert node.cfg_tres == {"cpu": "8", "mem": "1M", "billing": "8", "gres/gpu": "1"}
    assert node.alloc_tres == {}
    assert node.reason == "gres/gpu count reported lower than configured (0 < 1)"
    assert node.reason_user == "slurm"
    assert node.reason_time == "2024-12-19T11:03:34"
    assert node.version == "24.05.0-0rc1"
    # Values with spaces stay whole; the fields after them are still fields.
    assert node.fields["OS"] == (
        "Linux 5.10.0-153.12.0.92.oe2203sp2.x86_64 #1 SMP Wed Jun 28 23:04:48 CST 2023"
    )
    assert node.fields["RealMemory"] == "1"
    assert node.fields["Partitions"] == "compute100"
    assert node.fields["NodeHostName"] == "yigou-dev-102-68"
    assert node.fields["AvailableFeatures"] == "(null)"


def test_the_one_line_form_of_the_same_record_reads_the_same() -> None:
    # Derived: the capture's fields joined on one line, as `scontrol show node -o` prints them.
    text = read("scontrol-show-node", DRAINED)
    one_line = " ".join(text.split()) + "\n"
    assert parse_scontrol_node(one_line) == parse_scontrol_node(text)


def test_records_are_picked_by_name_and_split_at_node_name() -> None:
    # Derived: the capture twice, the second copy renamed.
    text = read("scontrol-show-node", DRAINED)
    other = text.replace("yigou-dev-102-68", "gpu-02").replace("IDLE+DRAIN", "MIXED")
    nodes = parse_scontrol_nodes(text + other)
    assert [n.name for n in nodes] == ["yigou-dev-102-68", "gpu-02"]
    picked = parse_scontrol_node(text + other, "gpu-02")
    assert picked is not None and picked.state == "MIXED"
    assert parse_scontrol_node("") is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("gpu:a100:4(S:0-1)", [("gpu", "a100", 4, "S:0-1")]),
        ("gpu:(null):4(IDX:0-3)", [("gpu", None, 4, "IDX:0-3")]),
        ("gpu:2", [("gpu", None, 2, "")]),
        ("(null)", []),
        (
            "gpu:a100:1,gpu:a100_3g.20gb:2",
            [("gpu", "a100", 1, ""), ("gpu", "a100_3g.20gb", 2, "")],
        ),
        ("bandwidth:lustre:no_consume:4G", [("bandwidth", "lustre", 4 * 1024**3, "")]),
    ],
)
def test_gres_lists(text: str, expected: list[tuple[object, ...]]) -> None:
    # Forms quoted from slurm.conf(5), gres.html and the sinfo outputs in the field guide.
    got = [(g.name, g.type, g.count, g.detail) for g in parse_gres_list(text)]
    assert got == expected


def test_gres_conf_with_autodetect_and_static_lines() -> None:
    conf = parse_gres_conf(
        read("gres-conf", "schedmd-gres-shtml-autodetect-nvml-with-file-lines.conf"), "/x"
    )
    assert conf.path == "/x"
    assert [line.line for line in conf.lines] == list(range(2, 12))  # line 1 is a comment
    assert conf.lines[0].auto_detect == "nvml" and conf.lines[0].name is None
    gpus = [line for line in conf.lines if line.name == "gpu"]
    assert [(g.type, g.file, g.cores) for g in gpus] == [
        ("gp100", "/dev/nvidia0", "0,1"),
        ("gp100", "/dev/nvidia1", "0,1"),
        ("p6000", "/dev/nvidia2", "2,3"),
        ("p6000", "/dev/nvidia3", "2,3"),
    ]
    assert all(g.file_count == 1 for g in gpus)
    mps = [line for line in conf.lines if line.name == "mps"]
    assert [m.count for m in mps] == ["200", "200", "100", "100"]
    last = conf.lines[-1]
    assert (last.name, last.type, last.count, last.flags, last.file) == (
        "bandwidth",
        "lustre",
        "4G",
        "CountOnly",
        None,
    )


def test_gres_conf_indented_static_lines() -> None:
    conf = parse_gres_conf(read("gres-conf", "slinky-operator-101-8x-h100-file-lines.conf"))
    assert [(g.name, g.type) for g in conf.lines] == [("gpu", "h100")] * 8
    assert [g.file for g in conf.lines] == [f"/dev/nvidia{i}" for i in range(8)]
    assert [g.line for g in conf.lines] == list(range(1, 9))
    assert all(g.auto_detect is None and g.node_name is None for g in conf.lines)


def test_gres_conf_autodetect_only() -> None:
    conf = parse_gres_conf(read("gres-conf", "deepops-pr1157-autodetect-nvml.conf"))
    assert len(conf.lines) == 1
    assert conf.lines[0].auto_detect == "nvml"
    assert conf.lines[0].raw == "AutoDetect=nvml"


def test_gres_conf_unknown_words_are_warnings() -> None:
    # Derived: a NodeName= line (gres.conf(5)) and a word no gres.conf key names.
    with collecting() as warnings:
        conf = parse_gres_conf("NodeName=tux[0-3] Name=gpu File=/dev/nvidia[0-3] Bogus=1\n")
    assert conf.lines[0].node_name == "tux[0-3]"
    assert conf.lines[0].file_count == 4
    assert [w.text for w in warnings] == ["Bogus=1"]


@pytest.mark.parametrize(
    ("spec", "count"),
    [("/dev/nvidia0", 1), ("/dev/nvidia[0-7]", 8), ("/dev/nvidia[0-1,3]", 3), ("/a,/b", 2)],
)
def test_device_file_ranges(spec: str, count: int) -> None:
    assert expand_files(spec) == count


def test_slurmd_c() -> None:
    hardware = parse_slurmd_hardware(read("slurmd-C", "ansible-slurm-appliance-pr656-h100.txt"))
    assert hardware.node_name == "io-io-gpu-02"
    assert hardware.cpus == 96
    assert hardware.real_memory_mib == 772878
    assert hardware.uptime == "14-20:45:08"
    assert hardware.fields["CoresPerSocket"] == "96"
    assert hardware.fields["SocketsPerBoard"] == "1"
    assert hardware.gres == ()


def test_slurmd_g_wrapped_lines_with_mig_slices() -> None:
    with collecting() as warnings:
        gres = parse_slurmd_gres(
            read("slurmd-G", "ansible-slurm-appliance-docs-mig-h100-wrapped.txt")
        )
    assert warnings == []
    assert len(gres) == 10  # 20 terminal lines, each GRES wrapped onto two
    assert [g.type for g in gres[:3]] == [
        "nvidia_h100_80gb_hbm3",
        "nvidia_h100_80gb_hbm3",
        "nvidia_h100_80gb_hbm3_4g.40gb",
    ]
    assert [g.index for g in gres] == [0, 1, 291, 417, 336, 345, 354, 507, 516, 525]
    assert gres[0].file == "/dev/nvidia0"
    assert gres[2].file == "/dev/nvidia-caps/nvidia-cap291"
    assert all(g.name == "gpu" and g.count == 1 and g.links is None for g in gres)
    # The flag list is whole again after the wrap.
    assert gres[0].flags == (
        "HAS_FILE", "HAS_TYPE", "ENV_NVML", "ENV_RSMI", "ENV_ONEAPI", "ENV_OPENCL", "ENV_DEFAULT",
    )  # fmt: skip
    assert gres[9].flags == gres[0].flags
    assert sum(1 for g in gres if (g.type or "").endswith("1g.10gb")) == 6


def test_slurm_conf_gres_lines() -> None:
    lines = parse_slurm_conf_lines(read("slurm-conf", "schedmd-gres-shtml-mig-a100-3g.20gb.conf"))
    assert lines == (
        "AccountingStorageTRES=gres/gpu,gres/gpu:a100,gres/gpu:a100_3g.20gb",
        "GresTypes=gpu",
        "NodeName=tux[1-16] gres=gpu:a100:1,gpu:a100_3g.20gb:2",
    )


@pytest.mark.parametrize(
    "text", ["", "\x00\xff", "NodeName=", "Gres Name=", "=" * 50, "NodeName=a Gres=gpu:(:::"]
)
def test_odd_text_never_raises(text: str) -> None:
    parse_scontrol_nodes(text)
    parse_gres_conf(text)
    parse_slurmd_gres(text)
    parse_slurmd_hardware(text)
