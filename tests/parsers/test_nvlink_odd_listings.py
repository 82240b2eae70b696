"""`nvidia-smi nvlink -s` listings with all-inactive GPUs, inactive links and odd lines."""

from __future__ import annotations

from pathlib import Path

from gpuaudit.parsers.nvlink import parse_nvlink
from gpuaudit.parsers.warnings import collecting

NVLINK = Path(__file__).parents[1] / "fixtures" / "nvlink"


def read(name: str) -> str:
    return (NVLINK / name).read_text(encoding="utf-8")


def test_two_linked_a6000s_and_a_third_all_inactive() -> None:
    with collecting() as warnings:
        gpus = parse_nvlink(read("siboehm-3x-rtx-a6000-nvlink-s-gpu2-all-inactive.txt"))
    assert [g.gpu for g in gpus] == [0, 1, 2]
    assert gpus[0].uuid == "GPU-5baec991-de63-c196-1766-04c38407e133"
    assert gpus[1].uuid == "GPU-39fc2446-cb50-2067-2867-d95efd470a2c"
    assert gpus[2].uuid == "GPU-02c05ee3-bdb5-aac7-f9e8-a4c8f3f725b3"
    for gpu in gpus[:2]:
        assert [(x.link, x.active, x.speed_gb_s) for x in gpu.links] == [
            (n, True, 14.062) for n in range(4)
        ]
        assert not gpu.all_inactive
    assert gpus[2].links == () and gpus[2].all_inactive  # "... all links are inActive"
    assert warnings == []


def test_v100_two_inactive_links_elided_uuid_and_leading_dots() -> None:
    name = "issue-azhpc-diagnostics-73-v100-nvlink-s-two-inactive-uuid-elided.txt"
    with collecting() as warnings:
        (gpu,) = parse_nvlink(read(name))
    assert gpu.gpu == 3 and gpu.uuid is None  # printed as "(UUID: ...)"
    assert [(x.link, x.active, x.speed_gb_s) for x in gpu.links] == [
        (0, True, 25.781), (1, True, 25.781), (2, True, 25.781),
        (3, False, None), (4, True, 25.781), (5, False, None),
    ]  # fmt: skip
    assert [(w.message, w.text, w.gpu) for w in warnings] == [
        ("line before the first 'GPU N:' header", "....", None),
        ("UUID is not a GPU UUID; left out", "GPU 3: Tesla V100-SXM2-32GB (UUID: ...)", 3),
    ]


def test_an_unknown_link_state_is_kept_as_unknown_and_warned() -> None:
    # Derived: link 1 of the A6000 listing with its speed replaced by an unknown word.
    text = read("siboehm-3x-rtx-a6000-nvlink-s-gpu2-all-inactive.txt").replace(
        "Link 1: 14.062 GB/s", "Link 1: Disabled", 1
    )
    with collecting() as warnings:
        gpus = parse_nvlink(text)
    assert gpus[0].links[1].active is None and gpus[0].links[1].speed_gb_s is None
    assert [(w.message, w.text, w.gpu) for w in warnings] == [
        ("link 1: state not recognised", "Disabled", 0)
    ]
