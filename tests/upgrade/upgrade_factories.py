"""Builders for the upgrade tests: healthy hosts from the rule tests' factories, inventory hosts
from inventory/prod.py, XID events, and snapshots built from real captured sections.

The healthy-host factories live in tests/rules/conftest.py; they are loaded from there under
another module name (as tests/policy/policy_helpers.py does) rather than copied.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

from gpuaudit.assemble.build import build_snapshot
from gpuaudit.model.snapshot import Gpu, HostSnapshot, Section, XidEvent
from gpuaudit.parsers.bundle import Bundle
from gpuaudit.rules.base import Evidence, Finding, Owner, Severity
from gpuaudit.upgrade.plan import InventoryHost

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
TARGET = "560.35.03"
OLD = "550.127.05"  # the factories' driver


def _policy_helpers() -> ModuleType:
    # tests/policy/policy_helpers.py already loads the rules' snapshot factories.
    spec = importlib.util.spec_from_file_location(
        "upgrade_policy_helpers", ROOT / "tests" / "policy" / "policy_helpers.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_FACTORIES = _policy_helpers().FACTORIES


def gpu(index: int = 0, **changes: Any) -> Gpu:
    """A healthy GPU (persistence on, ECC on with zero counts, no remap pending)."""
    made: Gpu = _FACTORIES._gpu(index, **changes)
    return made


def host(name: str = "gpu-01", gpus: Any = 2, **changes: Any) -> HostSnapshot:
    """A healthy host at driver 550.127.05, its driver packages held; no rule finds anything."""
    made: HostSnapshot = _FACTORIES._host(name, gpus, **changes)
    return made


def inventory_host(
    name: str,
    groups: tuple[str, ...] = (),
    snapshot: HostSnapshot | bool | None = True,
    **host_data: Any,
) -> InventoryHost:
    """An inventory host; ``snapshot=True`` gives it a healthy snapshot of its own name."""
    snap = host(name) if snapshot is True else snapshot or None
    return InventoryHost(name, groups, host_data, snap)


def xid(code: int, timestamp: str, gpu_index: int = 0, message: str = "error") -> XidEvent:
    bus = f"0000:{0x18 + gpu_index:02X}:00.0"
    raw = f"[{timestamp}] NVRM: Xid (PCI:{bus}): {code}, pid=1, {message}"
    return XidEvent("xid", code, bus, message, raw, f"[{timestamp}]", gpu_index)


def finding(rule: str, host_name: str, severity: Severity = Severity.CRITICAL) -> Finding:
    return Finding(
        rule=rule,
        title=f"{rule} title",
        severity=severity,
        category="test",
        owner=Owner.INFRA,
        host=host_name,
        message="m",
        evidence=Evidence("f", 1, 0),
        remediation="r",
    )


def replace_gpus(snapshot: HostSnapshot, **changes: Any) -> HostSnapshot:
    """The snapshot with ``changes`` applied to every GPU."""
    gpus = tuple(dataclasses.replace(g, **changes) for g in snapshot.gpus)
    return dataclasses.replace(snapshot, gpus=gpus)


def replace_gpu(snapshot: HostSnapshot, index: int, **changes: Any) -> HostSnapshot:
    gpus = tuple(
        dataclasses.replace(g, **changes) if g.index == index else g for g in snapshot.gpus
    )
    return dataclasses.replace(snapshot, gpus=gpus)


# --- the example production inventory ----------------------------------------------------------


def _module_values(path: Path) -> dict[str, Any]:
    values: dict[str, Any] = {}
    exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), values)
    return {k: v for k, v in values.items() if not k.startswith("_")}


def prod_inventory() -> list[tuple[str, tuple[str, ...], dict[str, Any]]]:
    """(name, groups, host data) of inventory/prod.py's hosts, in inventory order, with
    group_data merged as pyinfra merges it (all, then each group, then the host's own)."""
    groups = {
        name: value
        for name, value in _module_values(ROOT / "inventory" / "prod.py").items()
        if isinstance(value, list)
    }
    group_data = {
        path.stem: _module_values(path) for path in (ROOT / "inventory" / "group_data").glob("*.py")
    }
    hosts: dict[str, tuple[list[str], dict[str, Any]]] = {}
    for group, members in groups.items():
        for member in members:
            name, data = member if isinstance(member, tuple) else (member, {})
            entry = hosts.setdefault(name, ([], {}))
            entry[0].append(group)
            entry[1].update(data)
    result = []
    for name, (member_of, own) in hosts.items():
        data: dict[str, Any] = dict(group_data.get("all", {}))
        for group in member_of:
            data.update(group_data.get(group, {}))
        data.update(own)
        result.append((name, tuple(member_of), data))
    return result


# --- snapshots from real captured sections ------------------------------------------------------


def _fixture(path: str) -> str:
    return (FIXTURES / path).read_text(encoding="utf-8")


def _ok(stdout: str, stderr: str = "") -> Section:
    return Section(rc=0, stdout=stdout, stderr=stderr)


def captured_a100(kernel_log: str = "", driver_proc: str = "535.54.03", **sections: Section):
    """A host built by gpuaudit.assemble.build from a real A100 nvidia-smi XML capture (driver
    535.54.03, one GPU listed), with the given kernel log and /proc/driver/nvidia/version."""
    tools = (
        "nvidia-smi=1\nrocm-smi=0\namd-smi=0\ndmesg=1\njournalctl=1\nsystemctl=1\n"
        "dpkg-query=1\napt-mark=1\nrpm=0\nlspci=1\ntimeout=1\npython3=1\n"
    )
    captured = {
        "meta": _ok("hostname=gpu-a01\nkernel=5.15.0-119-generic\ndate=2024-11-15T12:00:00Z\n"),
        "tools": _ok(tools),
        "os_release": _ok('PRETTY_NAME="Ubuntu 22.04.4 LTS"\nID=ubuntu\nVERSION_ID="22.04"\n'),
        "driver_proc": _ok(
            f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {driver_proc}  "
            "Tue Jun  6 22:20:39 UTC 2023\n"
        ),
        "packages": _ok("nvidia-driver-535\t535.54.03-0ubuntu1\tinstall ok installed\n"),
        "package_holds": _ok("nvidia-driver-535\n"),
        "services": _ok("nvidia-persistenced\tactive\tenabled\n"),
        "lspci": _ok("0000:01:00.0 0302: 10de:20b2 (rev a1)\n"),
        "nvidia_smi_xml": _ok(
            _fixture("nvidia-smi-xml/telegraf-a100-sxm4-80gb-mig-enabled-driver535.xml")
        ),
        "kernel_log": _ok(kernel_log, "source=dmesg lines=1 max=5000\n"),
    }
    captured.update(sections)
    return build_snapshot(
        "gpu-a01", Bundle(sections=captured, complete=True), host_data={"expected_gpu_count": 1}
    )


def xid63_log() -> str:
    return _fixture("kernel-log/mleng-xid63-row-remapper-a100.log")
