"""Inventory host data is Python, and a Python inventory says ``required_models = {"H100"}``
or ``disabled_rules = ("GA106",)``: the audit keeps each value in the form JSON gives back, so
that the host's snapshot can always be written (a set would make it unwritable, and the
register with it), and the register judges the same value whether it is made at the end of the
audit or rebuilt from the files."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from pyinfra.api.host import Host, HostData

import gpuaudit.rules
from gpuaudit.deploy import host_data_for_snapshot
from gpuaudit.model.jsonable import as_given_json, to_json_text
from gpuaudit.report.run import RunDir, load_snapshot_file

EXAMPLE_HOSTS = Path(__file__).resolve().parents[2] / "reports" / "example" / "hosts"


def _Data(*layers: dict[str, Any]) -> HostData:
    """pyinfra's own host data over ``layers``, the first winning (host, then its groups); its
    host is only named in pyinfra's error for a key no layer has."""
    return HostData(cast(Host, "inventory-host"), *layers)


INVENTORY = {
    "required_models": {"NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"},
    "disabled_rules": ("GA106",),
    "expected_gpu_count": 2,
    "sysctl_baseline": {"vm.swappiness": 10, "net.core.rmem_max": (1, 2)},
    "site": float("nan"),
    "rack": Path("/racks/r12"),
}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"b", "a"}, ["a", "b"]),
        (frozenset({3, 1}), [1, 3]),
        ({1, "a"}, ["a", 1]),  # items of no one order: by their repr
        (("a", ("b",)), ["a", ["b"]]),
        ({1: (2,)}, {"1": [2]}),
        (float("inf"), "inf"),
        (Path("/x"), "/x"),
        ({"k": [1.5, None, True]}, {"k": [1.5, None, True]}),
    ],
)
def test_values_take_the_form_json_gives_back(value: Any, expected: Any) -> None:
    assert as_given_json(value) == expected


def test_a_hosts_inventory_data_is_kept_as_json_gives_it_back() -> None:
    host = SimpleNamespace(data=_Data(INVENTORY), groups=["all", "h100_sxm"])
    data = host_data_for_snapshot(host)  # type: ignore[arg-type]
    assert data["required_models"] == ["NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"]
    assert data["disabled_rules"] == ["GA106"]
    assert data["sysctl_baseline"] == {"vm.swappiness": 10, "net.core.rmem_max": [1, 2]}
    assert data["site"] == "nan" and data["rack"] == "/racks/r12"
    assert data["groups"] == ["h100_sxm"]
    to_json_text(data)  # writable: no set, no NaN
    assert not any(isinstance(v, float) and math.isnan(v) for v in data.values())


def test_the_data_layers_are_read_as_pyinfra_reads_them() -> None:
    """The host's own data wins over its groups', and a key the host sets to None is unset
    there whatever a group says, as pyinfra's host.data gives them."""
    own = {"expected_gpu_count": 4, "ssh_user": "audit", "site": None}
    group = {"expected_gpu_count": 8, "disabled_rules": ["GA106"], "site": "eu-1"}
    layers = _Data(own, group)
    host = SimpleNamespace(data=layers, groups=["all", "gpu", "h100"])
    data = host_data_for_snapshot(host)  # type: ignore[arg-type]
    assert data["expected_gpu_count"] == layers.get("expected_gpu_count") == 4
    assert data["disabled_rules"] == ["GA106"]
    assert "site" not in data and layers.get("site") is None
    assert "ssh_user" not in data  # a connection setting, not audit data
    assert data["groups"] == ["gpu", "h100"]


def test_the_register_judges_the_same_values_before_and_after_a_rebuild(tmp_path: Path) -> None:
    host = SimpleNamespace(data=_Data(INVENTORY), groups=["all"])
    example = load_snapshot_file(sorted(EXAMPLE_HOSTS.glob("*.json"))[0])
    snapshot = dataclasses.replace(
        example,
        host_data=host_data_for_snapshot(host),  # type: ignore[arg-type]
    )
    run = RunDir(tmp_path / "run", remember_written=True)
    run.hosts_dir.mkdir(parents=True)
    run.write_snapshot(snapshot)
    (kept,) = run.load_snapshots()
    assert kept is snapshot  # its data reads back the same: the audit's own is judged
    (reread,) = RunDir(run.path).load_snapshots()
    assert reread == kept
    now, rebuilt = gpuaudit.rules.assess([kept]), gpuaudit.rules.assess([reread])
    assert now.findings == rebuilt.findings and now.outcomes == rebuilt.outcomes
    # The inventory's disabled rule is honoured from the list the set became.
    assert any(o.rule == "GA106" and o.outcome.value == "disabled" for o in now.outcomes)
