"""`mig -lgipp` placements, `-cgi ... -C` confirmations and refused MIG operations."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuaudit.parsers.errors import ParseError
from gpuaudit.parsers.mig import (
    MigFailure,
    MigPlacement,
    parse_mig_created,
    parse_mig_failures,
    parse_mig_placements,
    parse_mig_profiles,
)
from gpuaudit.parsers.warnings import collecting

MIG = Path(__file__).parents[1] / "fixtures" / "mig"
BUSY = "In use by another client"


def read(name: str) -> str:
    return (MIG / name).read_text(encoding="utf-8")


def test_lgipp_h100_nvl_placements() -> None:
    with collecting() as warnings:
        placements = parse_mig_placements(read("alizeechen-h100-nvl-mig-lgipp.txt"))
    assert placements == (
        MigPlacement(0, 19, (0, 1, 2, 3, 4, 5, 6), 1),
        MigPlacement(0, 20, (0, 1, 2, 3, 4, 5, 6), 1),
        MigPlacement(0, 15, (0, 2, 4, 6), 2),
        MigPlacement(0, 14, (0, 2, 4), 2),
        MigPlacement(0, 9, (0, 4), 4),
        MigPlacement(0, 5, (0,), 4),  # "Placement : {0}:4"
        MigPlacement(0, 0, (0,), 8),
    )
    assert warnings == []


def test_lgipp_profile_ids_match_lgip_of_the_same_host() -> None:
    profiles = parse_mig_profiles(read("alizeechen-h100-nvl-94gb-mig-lgip-all-free.txt"))
    placements = parse_mig_placements(read("alizeechen-h100-nvl-mig-lgipp.txt"))
    assert [p.profile_id for p in profiles] == [p.profile_id for p in placements]
    # Free/Total of each profile equals its number of possible starts, except 1g.12gb+me (1/1).
    by_id = {p.profile_id: p for p in profiles}
    assert by_id[19].total == len(placements[0].starts) == 7
    assert by_id[15].total == 4 and by_id[9].total == 2


@pytest.mark.parametrize(
    ("name", "memory", "names"),
    [
        (
            "alizeechen-h100-nvl-94gb-mig-lgip-all-free.txt",
            [10.75, 10.75, 21.62, 21.62, 46.38, 46.38, 93.12],
            ["1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"],
        ),
        (
            "cuanschutz-gh200-96gb-mig-lgip-all-free.txt",
            [11.0, 11.0, 23.0, 23.0, 46.5, 46.5, 93.0],
            ["1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb"],
        ),
    ],
)
def test_lgip_hopper_96gb_class(name: str, memory: list[float], names: list[str]) -> None:
    profiles = parse_mig_profiles(read(name))
    assert [p.name for p in profiles] == names
    assert [p.profile_id for p in profiles] == [19, 20, 15, 14, 9, 5, 0]
    assert [(p.free, p.total) for p in profiles] == [
        (7, 7), (1, 1), (4, 4), (3, 3), (2, 2), (1, 1), (1, 1)
    ]  # fmt: skip
    assert [p.memory_gib for p in profiles] == memory
    assert [p.multiprocessor_count for p in profiles] == [16, 16, 26, 32, 60, 64, 132]


def test_cgi_with_C_creates_gpu_and_compute_instances() -> None:
    created = parse_mig_created(read("cuanschutz-gh200-mig-cgi-C-3x-1g.24gb-gi-and-ci-created.txt"))
    gis = [c for c in created if c.gpu_instance_id is None]
    cis = [c for c in created if c.gpu_instance_id is not None]
    assert [(c.instance_id, c.profile_name, c.profile_id) for c in gis] == [
        (5, "1g.24gb", 15), (3, "1g.24gb", 15), (4, "1g.24gb", 15)
    ]  # fmt: skip
    assert [(c.gpu_instance_id, c.instance_id, c.profile_id) for c in cis] == [
        (5, 0, 7), (3, 0, 7), (4, 0, 7)
    ]  # fmt: skip
    assert {c.gpu for c in created} == {0}


def test_cgi_refused_in_use_by_another_client() -> None:
    (failure,) = parse_mig_failures(read("cuanschutz-gh200-mig-cgi-in-use-by-another-client.txt"))
    assert failure == MigFailure("create gpu instance", BUSY, gpu=0, profile="20")
    assert failure.busy


def test_cgi_refused_insufficient_resources() -> None:
    (failure,) = parse_mig_failures(read("cuanschutz-gh200-mig-cgi-insufficient-resources.txt"))
    assert failure == MigFailure("create gpu instance", "Insufficient Resources", 0, profile="20")
    assert not failure.busy


def test_dci_one_of_seven_refused() -> None:
    with collecting() as warnings:
        failures = parse_mig_failures(read("jear-a100-pcie-40gb-mig-dci-gi7-in-use.txt"))
    # The "Failed to destroy compute instances" summary repeats the line before it.
    assert failures == (
        MigFailure(
            "destroy compute instance", BUSY, gpu=0, gpu_instance_id=7, compute_instance_id=0
        ),
    )
    assert warnings == []  # the six "Successfully destroyed" lines are known


def test_dci_refused_lowercase_as_quoted_in_dcgm_issue() -> None:
    (failure,) = parse_mig_failures(read("issue-dcgm-95-h100-mig-dci-in-use-lowercase.txt"))
    assert (failure.operation, failure.gpu, failure.gpu_instance_id) == (
        "destroy compute instance", 0, 3
    )  # fmt: skip
    assert failure.compute_instance_id == 0 and failure.busy


def test_mig_mode_disable_refused_names_the_bus_id() -> None:
    (failure,) = parse_mig_failures(read("cuanschutz-gh200-mig-disable-in-use.txt"))
    assert failure == MigFailure("disable mig mode", BUSY, pci_bus_id="00000009:01:00.0")
    assert failure.gpu is None and failure.busy


def test_summary_line_alone_is_a_failure_without_gpu() -> None:
    # Derived: the second line of the cuanschutz -cgi capture on its own.
    summary = read("cuanschutz-gh200-mig-cgi-insufficient-resources.txt").splitlines()[1]
    assert summary == "Failed to create GPU instances: Insufficient Resources"
    assert parse_mig_failures(summary) == (
        MigFailure("create gpu instance", "Insufficient Resources"),
    )


def test_confirmations_have_no_failures_and_unknown_lines_warn() -> None:
    text = read("cuanschutz-gh200-mig-cgi-C-3x-1g.24gb-gi-and-ci-created.txt")
    assert parse_mig_failures(text) == ()
    with collecting() as warnings:
        assert parse_mig_failures("NVIDIA-SMI has failed because it couldn't communicate") == ()
    assert [w.message for w in warnings] == ["line is neither a refusal nor a confirmation"]


@pytest.mark.parametrize("text", ["", "No MIG-enabled devices found."])
def test_lgipp_without_mig_is_empty(text: str) -> None:
    assert parse_mig_placements(text) == ()


def test_lgipp_garbage_raises_and_stray_lines_warn() -> None:
    with pytest.raises(ParseError):
        parse_mig_placements("Insufficient Permissions")
    # Derived: a placement capture with a line appended.
    with collecting() as warnings:
        placements = parse_mig_placements(read("alizeechen-h100-nvl-mig-lgipp.txt") + "bogus\n")
    assert len(placements) == 7 and [w.text for w in warnings] == ["bogus"]
