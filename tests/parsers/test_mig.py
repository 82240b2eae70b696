from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuaudit.parsers.errors import ParseError
from gpuaudit.parsers.mig import (
    parse_mig_created,
    parse_mig_failures,
    parse_mig_instances,
    parse_mig_list_devices,
    parse_mig_placements,
    parse_mig_profiles,
    parse_mig_table_devices,
)

FIXTURES = Path(__file__).parents[1] / "fixtures"
MIG = FIXTURES / "mig"

# Which parser reads which capture: every file in fixtures/mig/ must be listed.
PARSER_FOR: dict[str, Callable[[str], Any]] = {
    "jear-a100-pcie-40gb-driver460-mig-lgip-all-free.txt": parse_mig_profiles,
    "jear-a100-pcie-40gb-mig-cgi-7x-1g.5gb-created.txt": parse_mig_created,
    "jear-a100-pcie-40gb-mig-lcip-7-gis.txt": parse_mig_profiles,
    "jear-a100-pcie-40gb-nvidia-smi-table-7-mig-devices.txt": parse_mig_table_devices,
    "summerlo-a30-class-mig-lgi-4x-1g.6gb.txt": parse_mig_instances,
    "summerlo-a30-class-mig-lgip-all-used.txt": parse_mig_profiles,
    "utk-8x-h100-80gb-hbm3-all-7x-1g.10gb-nvidia-smi-L.txt": parse_mig_list_devices,
    "utk-h100-80gb-hbm3-mig-nvidia-smi-L-3g40-2g20-2x1g10-driver590.txt": parse_mig_list_devices,
    "utk-h100-mig-nvidia-smi-table-mig-devices-driver590.txt": parse_mig_table_devices,
    "alizeechen-h100-nvl-94gb-mig-lgip-all-free.txt": parse_mig_profiles,
    "alizeechen-h100-nvl-mig-lgipp.txt": parse_mig_placements,
    "cuanschutz-gh200-96gb-mig-lgip-all-free.txt": parse_mig_profiles,
    "cuanschutz-gh200-mig-cgi-C-3x-1g.24gb-gi-and-ci-created.txt": parse_mig_created,
    "cuanschutz-gh200-mig-cgi-in-use-by-another-client.txt": parse_mig_failures,
    "cuanschutz-gh200-mig-cgi-insufficient-resources.txt": parse_mig_failures,
    "cuanschutz-gh200-mig-disable-in-use.txt": parse_mig_failures,
    "issue-dcgm-95-h100-mig-dci-in-use-lowercase.txt": parse_mig_failures,
    "jear-a100-pcie-40gb-mig-dci-gi7-in-use.txt": parse_mig_failures,
}

# `nvidia-smi mig -lci` layouts as printed in NVIDIA's MIG user guide (none in the capture set):
# current drivers add a Placement column, older ones do not.
LCI_WITH_PLACEMENT = """\
+--------------------------------------------------------------------+
| Compute instances:                                                 |
| GPU     GPU       Name             Profile   Instance   Placement  |
|       Instance                       ID        ID       Start:Size |
|         ID                                                         |
|====================================================================|
|   0      9       MIG 1g.5gb           0         0          0:1     |
+--------------------------------------------------------------------+
|   0      3       MIG 1c.2g.10gb       0         0          0:1     |
+--------------------------------------------------------------------+
|   0      3       MIG 1c.2g.10gb       0         1          1:1     |
+--------------------------------------------------------------------+
"""
LCI_OLD = """\
+-------------------------------------------------------+
| Compute instances:                                    |
| GPU     GPU       Name             Profile   Instance |
|       Instance                       ID        ID     |
|         ID                                            |
|=======================================================|
|   0      1       MIG 1c.3g.20gb       0         0     |
+-------------------------------------------------------+
|   0      1       MIG 1c.3g.20gb       0         1     |
+-------------------------------------------------------+
"""


def read(name: str) -> str:
    return (MIG / name).read_text(encoding="utf-8")


def test_every_fixture_has_a_parser() -> None:
    assert {p.name for p in MIG.glob("*.txt")} == set(PARSER_FOR)


@pytest.mark.parametrize("name", sorted(PARSER_FOR))
def test_every_capture_parses(name: str) -> None:
    assert PARSER_FOR[name](read(name))


def test_lgi_four_1g6gb_instances() -> None:
    instances = parse_mig_instances(read("summerlo-a30-class-mig-lgi-4x-1g.6gb.txt"))
    assert len(instances) == 4
    assert {i.profile_name for i in instances} == {"1g.6gb"}
    assert {i.profile_id for i in instances} == {14}
    assert [i.instance_id for i in instances] == [3, 4, 5, 6]
    assert [i.placement for i in instances] == ["0:1", "1:1", "2:1", "3:1"]
    assert all(i.gpu == 0 and i.gpu_instance_id is None for i in instances)


def test_lci_with_placement() -> None:
    instances = parse_mig_instances(LCI_WITH_PLACEMENT)
    assert [(i.gpu_instance_id, i.instance_id, i.profile_name) for i in instances] == [
        (9, 0, "1g.5gb"),
        (3, 0, "1c.2g.10gb"),
        (3, 1, "1c.2g.10gb"),
    ]
    assert instances[2].placement == "1:1"


def test_lci_without_placement() -> None:
    instances = parse_mig_instances(LCI_OLD)
    assert [(i.gpu_instance_id, i.instance_id, i.placement) for i in instances] == [
        (1, 0, None),
        (1, 1, None),
    ]


@pytest.mark.parametrize(
    "text",
    [
        "",
        "No MIG-enabled devices found.",
        "No GPU instances found: Not Found",
        "No compute instances found: Not Found",
    ],
)
def test_nothing_found_means_empty(text: str) -> None:
    assert parse_mig_instances(text) == ()


@pytest.mark.parametrize(
    "text",
    [
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
        "Insufficient Permissions",
        read("summerlo-a30-class-mig-lgi-4x-1g.6gb.txt").replace("  14  ", "  xx  ", 1),
    ],
)
def test_unreadable_instances_raise(text: str) -> None:
    with pytest.raises(ParseError):
        parse_mig_instances(text)


def test_lgip_all_free_a100_40gb() -> None:
    profiles = parse_mig_profiles(read("jear-a100-pcie-40gb-driver460-mig-lgip-all-free.txt"))
    assert [(p.name, p.profile_id) for p in profiles] == [
        ("1g.5gb", 19), ("2g.10gb", 14), ("3g.20gb", 9), ("4g.20gb", 5), ("7g.40gb", 0)
    ]  # fmt: skip
    assert [(p.free, p.total) for p in profiles] == [(7, 7), (3, 3), (2, 2), (1, 1), (1, 1)]
    assert profiles[-1].memory_gib == 39.5 and profiles[-1].multiprocessor_count == 98


def test_lgip_all_used_includes_media_extension_profile() -> None:
    profiles = parse_mig_profiles(read("summerlo-a30-class-mig-lgip-all-used.txt"))
    assert [p.name for p in profiles] == ["1g.6gb", "1g.6gb+me", "2g.12gb", "4g.24gb"]
    assert all(p.free == 0 for p in profiles)
    assert profiles[0].total == 4


def test_lcip_default_profile_per_gpu_instance() -> None:
    profiles = parse_mig_profiles(read("jear-a100-pcie-40gb-mig-lcip-7-gis.txt"))
    assert [p.gpu_instance_id for p in profiles] == list(range(7, 14))
    assert all(p.default and p.profile_id == 0 and p.name == "1g.5gb" for p in profiles)


def test_nvidia_smi_L_56_mig_devices() -> None:
    gpus = parse_mig_list_devices(read("utk-8x-h100-80gb-hbm3-all-7x-1g.10gb-nvidia-smi-L.txt"))
    assert len(gpus) == 8
    assert sum(len(g.mig_devices) for g in gpus) == 56
    assert {d.profile for g in gpus for d in g.mig_devices} == {"1g.10gb"}
    assert gpus[7].uuid == "GPU-882ebfab-da98-c41e-357c-47272c0d560d"
    assert gpus[0].mig_devices[0].uuid == "MIG-4d0efb7d-0970-51d9-b761-0686be6b8af3"


def test_nvidia_smi_L_mixed_profiles() -> None:
    (gpu,) = parse_mig_list_devices(
        read("utk-h100-80gb-hbm3-mig-nvidia-smi-L-3g40-2g20-2x1g10-driver590.txt")
    )
    assert gpu.name == "NVIDIA H100 80GB HBM3"
    assert [d.profile for d in gpu.mig_devices] == ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]


def test_table_mig_devices_sections() -> None:
    old = parse_mig_table_devices(read("jear-a100-pcie-40gb-nvidia-smi-table-7-mig-devices.txt"))
    assert [d.gpu_instance_id for d in old[0]] == list(range(7, 14))
    assert {d.memory_total_mib for d in old[0]} == {4864}
    new = parse_mig_table_devices(read("utk-h100-mig-nvidia-smi-table-mig-devices-driver590.txt"))
    assert [(d.gpu_instance_id, d.memory_total_mib, d.multiprocessor_count) for d in new[0]] == [
        (2, 40448, 60), (3, 20096, 32), (9, 9984, 16), (10, 9984, 16)
    ]  # fmt: skip


def test_cgi_confirmations_keep_creation_order() -> None:
    created = parse_mig_created(read("jear-a100-pcie-40gb-mig-cgi-7x-1g.5gb-created.txt"))
    assert [c.instance_id for c in created] == [13, 11, 12, 7, 8, 9, 10]
    assert {(c.profile_name, c.profile_id) for c in created} == {("1g.5gb", 19)}
