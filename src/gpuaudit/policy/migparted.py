"""NVIDIA mig-parted configurations, checked the way mig-parted checks them.

A policy carries the site's MIG layouts in mig-parted's own format, so the same text serves
``nvidia-mig-parted apply`` and the audit. Either inline::

    mig-configs:
      all-1g.10gb:
        - devices: all
          mig-enabled: true
          mig-devices: {"1g.10gb": 7}

or as ``mig_parted_file: path/to/config.yaml`` (a complete mig-parted file: ``version: v1`` and
``mig-configs:``), relative to the policy file. The rules follow mig-parted's
``api/spec/v1/spec.go``: a file needs ``version`` (only "v1" is known) and no other field than
``mig-configs``, which needs at least one configuration, each with at least one entry; an entry
needs ``devices`` ("all" or a list of GPU indexes) and ``mig-enabled``, may have
``device-filter`` (a PCI device id or a list of them) and ``mig-devices`` (profile → count),
and nothing else; ``mig-devices`` is required when MIG is enabled and must be empty when it is
not. Profile names are checked for shape (``[Cc.]Gg.MMgb[+attr]``, slice counts 1-4, 6, 7, 8),
not against a GPU model: which profiles a GPU offers is only known on the host.

The result is plain data shaped like the YAML (``{name: [ {devices, mig-enabled, ...} ]}``);
the rules read it into typed entries with :mod:`gpuaudit.model.mig_spec`, which also owns the
profile-name grammar both use. This module checks the YAML itself so that every problem can
name its file, line and column.
"""

from __future__ import annotations

from typing import Any

from yaml.nodes import Node, ScalarNode

from gpuaudit.model.mig_spec import profile_problem
from gpuaudit.policy.nodes import Invalid, Reader

__all__ = ["MIG_PARTED_VERSION", "read_mig_configs", "read_mig_parted_file"]

MIG_PARTED_VERSION = "v1"

_SPEC_FIELDS = ("device-filter", "devices", "mig-enabled", "mig-devices")


def read_mig_parted_file(text: str, source: str, reader: Reader) -> dict[str, list[dict[str, Any]]]:
    """Read a complete mig-parted config file; problems are recorded under its own name."""
    file_reader = Reader(source, reader.problems)
    root = file_reader.compose(text)
    if root is None:
        raise Invalid("unreadable mig-parted file")
    entries = file_reader.mapping(root, "a mig-parted file")
    if entries and "version" not in entries:
        raise file_reader.fail(root, "unable to parse with missing 'version' field")
    version = file_reader.scalar(entries["version"][1], "version") if entries else None
    if version != MIG_PARTED_VERSION:
        raise file_reader.fail(
            entries["version"][1] if entries else root,
            f"unknown version: {version} (mig-parted knows {MIG_PARTED_VERSION})",
        )
    for key, (key_node, _) in entries.items():
        if key not in ("version", "mig-configs"):
            file_reader.note(key_node, f"unexpected field: {key}")
    if "mig-configs" not in entries:
        return {}
    return read_mig_configs(file_reader, entries["mig-configs"][1])


def read_mig_configs(reader: Reader, node: Node) -> dict[str, list[dict[str, Any]]]:
    """The ``mig-configs`` map: configuration name → list of device specs."""
    configs: dict[str, list[dict[str, Any]]] = {}
    entries = reader.mapping(node, "mig-configs")
    if not entries:
        raise reader.fail(node, "at least one entry in 'mig-configs' is required")
    for name, (key_node, value) in entries.items():
        specs = reader.sequence(value, f"mig-configs.{name}")
        if not specs:
            reader.note(key_node, f"at least one entry in '{name}' is required")
        read = []
        for i, spec in enumerate(specs):
            try:
                read.append(_read_spec(reader, spec, f"mig-configs.{name}[{i}]"))
            except Invalid:
                continue
        configs[name] = read
    return configs


def _read_spec(reader: Reader, node: Node, what: str) -> dict[str, Any]:
    entries = reader.mapping(node, what)
    for key, (key_node, _) in entries.items():
        if key not in _SPEC_FIELDS:
            reader.note(key_node, f"{what}: unexpected field: {key}")
    for key in ("devices", "mig-enabled"):
        if key not in entries:
            reader.note(node, f"{what}: missing required field: {key}")
    reads = {
        "device-filter": _device_filter,
        "devices": _devices,
        "mig-enabled": lambda r, n, w: r.boolean(n, f"{w}.mig-enabled"),
        "mig-devices": _mig_devices,
    }
    spec: dict[str, Any] = {}
    for key, read in reads.items():
        if key in entries:
            try:
                spec[key] = read(reader, entries[key][1], what)
            except Invalid:
                continue
    failed = any(key in entries and key not in spec for key in _SPEC_FIELDS)
    if failed or "devices" not in entries or "mig-enabled" not in entries:
        raise Invalid(what)
    enabled = spec.get("mig-enabled")
    if enabled and "mig-devices" not in spec:
        raise reader.fail(
            node, f"{what}: missing required field 'mig-devices' when 'mig-enabled' is true"
        )
    if enabled is False and spec.get("mig-devices"):
        raise reader.fail(
            entries["mig-devices"][1], f"{what}: MIG devices included when 'mig-enabled' is false"
        )
    return spec


def _device_filter(reader: Reader, node: Node, what: str) -> str | list[str]:
    what = f"{what}.device-filter"
    if isinstance(node, ScalarNode):
        return reader.string(node, what)
    return [reader.string(n, f"{what}[{i}]") for i, n in enumerate(reader.sequence(node, what))]


def _devices(reader: Reader, node: Node, what: str) -> str | list[int]:
    what = f"{what}.devices"
    if isinstance(node, ScalarNode):
        value = reader.scalar(node, what)
        if value != "all":
            raise reader.fail(node, f"invalid string input for '{what}': {value}")
        return "all"
    items = reader.sequence(node, what)
    return [reader.integer(n, f"{what}[{i}]") for i, n in enumerate(items)]


def _mig_devices(reader: Reader, node: Node, what: str) -> dict[str, int]:
    devices: dict[str, int] = {}
    valid = True
    for profile, key_node, value in reader.items(node, f"{what}.mig-devices"):
        problem = profile_problem(profile)
        try:
            if problem:
                raise reader.fail(
                    key_node,
                    f"{what}: error validating values in 'mig-devices' "
                    f"field: invalid format for '{profile}': {problem}",
                )
            devices[profile] = reader.integer(value, f"{what}.mig-devices.{profile}")
        except Invalid:
            valid = False
    if not valid:
        raise Invalid(what)
    return devices
