"""The settings a policy's ``defaults:`` and ``groups:`` may set, and how each is checked.

The settings are exactly the keys the rules read (``policy.defaults.DEFAULT_POLICY``),
read at load time, so a rule that adds a key makes it settable without touching this module.
Keys with a numeric default are *thresholds* and live under ``thresholds:``; the others are set
directly. Keys listed in ``_TYPES`` get a precise check; any other key is checked against the
type of its default value.

The top-level ``upgrade:`` section (:func:`read_upgrade`) has a fixed set of keys instead: the
fields of :class:`gpuaudit.policy.upgrade.UpgradeSettings`, checked by the same functions the
dataclasses use, so a mistake is reported with its position here and as a ValueError in code.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeVar

from yaml.nodes import MappingNode, Node, ScalarNode

from gpuaudit.policy.alert_rules import load_alert_rules
from gpuaudit.policy.defaults import DEFAULT_POLICY, PCIE_WIDTHS
from gpuaudit.policy.nodes import Invalid, Reader, describe
from gpuaudit.policy.upgrade import (
    DRAIN_KINDS,
    REBOOT_MODES,
    DrainSettings,
    GateSettings,
    UpgradeSettings,
    drain_problems,
    gate_problems,
    max_unavailable_problem,
    stages_problem,
)

__all__ = [
    "check_rule_code",
    "read_settings",
    "read_upgrade",
    "setting_names",
    "threshold_names",
]

Check = Callable[[Reader, Node, str], Any]

# Keys of DEFAULT_POLICY a policy file sets elsewhere, with where to set them instead.
ELSEWHERE = {
    "policy_version": "the file's top-level version: is the policy version",
    "severity_overrides": "use the top-level severity_overrides: rules: {GA123: {...}}",
    "xid_overrides": "use the top-level severity_overrides: xid: {63: {...}}",
    "mig_configs": "use the top-level mig-configs: (or mig_parted_file:)",
}


def check_rule_code(reader: Reader, node: Node, what: str) -> str:
    """A rule code that exists now; an unknown one is listed against the known codes."""
    # The catalogue is loaded here, by the first policy that names a rule: reading a policy
    # (or none) in a process that judges nothing does not load every rule.
    from gpuaudit.rules.base import REGISTRY

    code = reader.string(node, what).strip().upper()
    if code not in REGISTRY:
        known = ", ".join(sorted(REGISTRY))
        raise reader.fail(node, f"{what}: unknown rule {code!r}; known rules: {known}")
    return code


def _strings(reader: Reader, node: Node, what: str) -> list[str]:
    return [reader.string(n, f"{what}[{i}]") for i, n in enumerate(reader.sequence(node, what))]


def _versions(reader: Reader, node: Node, what: str) -> list[str]:
    return [reader.version(n, f"{what}[{i}]") for i, n in enumerate(reader.sequence(node, what))]


def _branch(reader: Reader, node: Node, what: str) -> str:
    branch = reader.version(node, what)
    if not branch.isdigit():
        raise reader.fail(node, f'{what} must be a driver branch such as "550", not {branch!r}')
    return branch


def _regexes(reader: Reader, node: Node, what: str) -> list[str]:
    patterns = []
    for i, item in enumerate(reader.sequence(node, what)):
        pattern = reader.string(item, f"{what}[{i}]")
        try:
            re.compile(pattern)
        except re.error as error:
            raise reader.fail(item, f"{what}[{i}] is not a regular expression: {error}") from None
        patterns.append(pattern)
    return patterns


def _rule_codes(reader: Reader, node: Node, what: str) -> list[str]:
    items = reader.sequence(node, what)
    return [check_rule_code(reader, n, f"{what}[{i}]") for i, n in enumerate(items)]


def _sysctls(reader: Reader, node: Node, what: str) -> dict[str, int]:
    # The sysctl rule compares numbers: a minimum that is not one could never be met.
    return {
        key: reader.integer(value, f"{what}.{key}") for key, _, value in reader.items(node, what)
    }


def _numbers(reader: Reader, node: Node, what: str) -> list[int | float]:
    return [reader.number(n, f"{what}[{i}]") for i, n in enumerate(reader.sequence(node, what))]


def _number_map(reader: Reader, node: Node, what: str) -> dict[str, int | float]:
    return {
        key: reader.number(value, f"{what}.{key}") for key, _, value in reader.items(node, what)
    }


def _optional_boolean(reader: Reader, node: Node, what: str) -> bool | None:
    return None if _is_null(node) else reader.boolean(node, what)


_PCI_BUS_ID = re.compile(r"^[0-9A-F]{4}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]$")


def _pcie_width(reader: Reader, node: Node, what: str) -> int | dict[str, int] | None:
    """``pcie_expected_width``: null, one width, or a width per PCI bus id (normalised)."""
    if _is_null(node):
        return None

    def width(value: Node, where: str) -> int:
        number = reader.integer(value, where)
        if number not in PCIE_WIDTHS:
            raise reader.fail(
                value, f"{where} must be a PCIe link width ({', '.join(map(str, PCIE_WIDTHS))})"
            )
        return number

    if isinstance(node, MappingNode):
        from gpuaudit.model.snapshot import bus_key  # only a policy that names bus ids needs it

        widths: dict[str, int] = {}
        for key, key_node, value in reader.items(node, what):
            bus = bus_key(key)
            if bus is None or not _PCI_BUS_ID.match(bus):
                raise reader.fail(
                    key_node, f"{what}: {key!r} is not a PCI bus id (such as 0000:41:00.0)"
                )
            widths[bus] = width(value, f"{what}.{key}")
        return widths
    return width(node, what)


def _required_models(reader: Reader, node: Node, what: str) -> list[dict[str, Any]]:
    """Models a host group must serve (rule GA802); the keys are the capacity rule's."""
    from gpuaudit.rules.capacity import ARCHITECTURE_FIELDS, MODEL_FIELDS, PLACEMENTS

    models = []
    for i, item in enumerate(reader.sequence(node, what)):
        where = f"{what}[{i}]"
        entry = reader.mapping(item, where)
        reader.check_keys(item, entry, where, MODEL_FIELDS, required=("params_b",))
        model: dict[str, Any] = {}
        for key, (_key_node, value) in entry.items():
            if key in ("name", "precision"):
                model[key] = reader.string(value, f"{where}.{key}")
            elif key == "placement":
                model[key] = reader.choice(value, f"{where}.{key}", PLACEMENTS)
            elif key in (*ARCHITECTURE_FIELDS, "concurrent_requests"):
                model[key] = reader.integer(value, f"{where}.{key}")
            else:
                model[key] = reader.number(value, f"{where}.{key}")
        models.append(model)
    return models


def _dcgm_diag(reader: Reader, node: Node, what: str) -> dict[str, Any]:
    """The audit's dcgmi diag (policy/diag.py): level 0-3; 2 and 3 need ``allow_long: true``
    in the same mapping, so that a long diagnostic is never one edited number away."""
    from gpuaudit.policy.diag import LONG_LEVELS, level_problem

    entries = reader.mapping(node, what)
    reader.check_keys(
        node, entries, what, ("level", "allow_long"), hints={"dcgm_diag_level": "use level:"}
    )
    value: dict[str, Any] = {}
    if "allow_long" in entries:
        value["allow_long"] = reader.boolean(entries["allow_long"][1], f"{what}.allow_long")
    if "level" in entries:
        level_node = entries["level"][1]
        level = reader.integer(level_node, f"{what}.level")
        problem = level_problem(level, value.get("allow_long", level not in LONG_LEVELS))
        if problem:
            raise reader.fail(level_node, f"{what}.{problem}")
        value["level"] = level
    return value


_MONITORING_KEYS = ("alert_rules", "require_alerts", "textfile_scrape")


def _monitoring(reader: Reader, node: Node, what: str) -> dict[str, Any]:
    """The monitoring coverage settings; ``alert_rules`` (relative to the policy file) is
    read here, so the rules stay free of I/O: its rules go into ``alert_rules_loaded``, or
    why it could not be read into ``alert_rules_error`` (GA924 is then not evaluated)."""
    entries = reader.mapping(node, what)
    reader.check_keys(node, entries, what, _MONITORING_KEYS)
    settings: dict[str, Any] = {}
    for key, (_, value) in entries.items():
        if key == "alert_rules":
            path = None if _is_null(value) else reader.string(value, f"{what}.{key}").strip()
            settings.update(load_alert_rules(path, reader.source))
        elif key in _MONITORING_KEYS:
            settings[key] = reader.boolean(value, f"{what}.{key}")
    return settings


_TYPES: dict[str, Check] = {
    "monitoring": _monitoring,
    "dcgm_diag": _dcgm_diag,
    "desired_driver_version": Reader.version,
    "desired_driver_branch": _branch,
    "required_cuda_versions": _versions,
    "expected_gpu_count": Reader.integer,
    "gpu_vendor": lambda r, n, w: r.choice(n, w, ("nvidia", "amd")),
    "mig_config_name": Reader.string,
    "kubernetes_node": Reader.string,
    "sysctl_baseline": _sysctls,
    "driver_package_patterns": _regexes,
    "disabled_rules": _rule_codes,
    "capacity_model_sizes_b": _numbers,
    "capacity_precisions": _number_map,
    "nvlink_error_limits": _number_map,
    "nvlink_expected": _optional_boolean,
    "pcie_expected_width": _pcie_width,
    "required_models": _required_models,
    "datacenter_gpu_name_patterns": _regexes,
    "datacenter_gpu_name_exclusions": _regexes,
    "nvswitch_gpu_name_patterns": _regexes,
    "nvswitch_gpu_name_exclusions": _regexes,
}


def _by_default(default: Any) -> Check:
    """The check for a key that only has a default value to go by."""
    if isinstance(default, bool):
        return Reader.boolean
    if isinstance(default, int):
        return Reader.integer
    if isinstance(default, float):
        return Reader.number
    if isinstance(default, str):
        return Reader.string
    if isinstance(default, (list, tuple)):
        return _strings
    if isinstance(default, Mapping):
        return lambda r, n, w: {k: r.scalar(v, f"{w}.{k}") for k, _, v in r.items(n, w)}
    return Reader.scalar  # None: no type to go by, any single value


def threshold_names() -> list[str]:
    return sorted(
        key
        for key, value in DEFAULT_POLICY.items()
        if isinstance(value, (int, float))
        and not isinstance(value, bool)
        and key not in _TYPES
        and key not in ELSEWHERE
    )


def setting_names() -> list[str]:
    thresholds = set(threshold_names())
    return sorted(k for k in DEFAULT_POLICY if k not in thresholds and k not in ELSEWHERE)


def _check_for(key: str) -> Check:
    return _TYPES.get(key) or _by_default(DEFAULT_POLICY.get(key))


def read_settings(
    reader: Reader, node: Node, what: str, mig_configs: Collection[str] = ()
) -> dict[str, Any]:
    """One layer of settings (``defaults:`` or a group), thresholds flattened into it.

    ``mig_configs``: the policy's MIG configuration names; when it has any, a
    ``mig_config_name`` must be one of them.
    """
    settings: dict[str, Any] = {}
    entries = reader.mapping(node, what)
    names, thresholds = setting_names(), threshold_names()
    hints = dict(ELSEWHERE)
    hints.update({t: f"{t} is a threshold: set it under thresholds:" for t in thresholds})
    reader.check_keys(node, entries, what, [*names, "thresholds"], hints=hints)
    for key, (_, value) in entries.items():
        try:
            if key == "thresholds":
                settings.update(_read_thresholds(reader, value, f"{what}.thresholds", names))
            elif key in names and _is_null(value) and DEFAULT_POLICY.get(key) is None:
                # null restores "no opinion" (e.g. no driver pin for an AMD group)
                settings[key] = None
            elif key in names:
                settings[key] = _check_for(key)(reader, value, f"{what}.{key}")
        except Invalid:
            continue
    name = settings.get("mig_config_name")
    if mig_configs and name is not None and name not in mig_configs:
        reader.note(
            entries["mig_config_name"][1],
            f"{what}.mig_config_name {name!r} is not "
            f"in the policy's mig-configs ({', '.join(mig_configs)})",
        )
    pinned = [k for k in ("desired_driver_version", "desired_driver_branch") if k in entries]
    if len(pinned) == 2:
        reader.note(
            entries[pinned[1]][0],
            f"{what} sets both {pinned[0]} and {pinned[1]}: give the exact version or the branch",
        )
    return settings


def _is_null(node: Node) -> bool:
    return isinstance(node, ScalarNode) and node.tag == "tag:yaml.org,2002:null"


def _read_thresholds(
    reader: Reader, node: Node, what: str, settings: list[str]
) -> dict[str, int | float]:
    entries = reader.mapping(node, what)
    names = threshold_names()
    hints = {s: f"{s} is not a threshold: set it beside thresholds:, not in it" for s in settings}
    reader.check_keys(node, entries, what, names, hints=hints)
    values: dict[str, int | float] = {}
    for key, (_, value) in entries.items():
        if key not in names:
            continue
        try:
            if isinstance(DEFAULT_POLICY[key], int):
                values[key] = reader.integer(value, f"{what}.{key}")
            else:
                values[key] = reader.number(value, f"{what}.{key}")
        except Invalid:
            continue
    return values


# --- the upgrade: section (gpuaudit.policy.upgrade) -------------------------------------------

_UPGRADE_KEYS = (
    "max_parallel",
    "max_unavailable",
    "failure_budget",
    "canary_failure_budget",
    "soak_seconds",
    "drain",
    "gate",
    "reboot",
    "stages",
)
_UPGRADE_HINTS = {
    "maxParallelUpgrades": "gpuaudit's spelling is max_parallel:",
    "maxUnavailable": "gpuaudit's spelling is max_unavailable:",
    "canary": "stages come from the inventory: list the group names in stages:",
    "waves": "stages come from the inventory: list the group names in stages:",
}
_DRAIN_KEYS = ("kind", "command", "undrain_command", "timeout_seconds", "kubectl_context")
_GATE_KEYS = ("dcgm_diag_level", "command", "timeout_seconds", "wait_for_host_seconds")


def read_upgrade(reader: Reader, node: Node) -> UpgradeSettings:
    """The ``upgrade:`` section; every problem is recorded with its position before raising."""
    what = "upgrade"
    entries = reader.mapping(node, what)
    reader.check_keys(node, entries, what, _UPGRADE_KEYS, hints=_UPGRADE_HINTS)
    reads: dict[str, Check] = {
        "max_parallel": lambda r, n, w: r.integer(n, w, minimum=1),
        "max_unavailable": _max_unavailable,
        "failure_budget": Reader.integer,
        "canary_failure_budget": Reader.integer,
        "soak_seconds": Reader.integer,
        "drain": _drain,
        "gate": _gate,
        "reboot": lambda r, n, w: r.choice(n, w, REBOOT_MODES),
        "stages": _stages,
    }
    values = _read_fields(reader, entries, what, reads)
    if len(values) < len([k for k in entries if k in reads]):
        raise Invalid(what)
    return _build(reader, node, UpgradeSettings, values)


def _read_fields(
    reader: Reader, entries: dict[str, tuple[Node, Node]], what: str, reads: dict[str, Check]
) -> dict[str, Any]:
    """Every known field read and checked, so one pass reports all of a section's mistakes."""
    values: dict[str, Any] = {}
    for key, read in reads.items():
        if key in entries:
            try:
                values[key] = read(reader, entries[key][1], f"{what}.{key}")
            except Invalid:
                continue
    return values


def _max_unavailable(reader: Reader, node: Node, what: str) -> int | str:
    value = reader.scalar(node, what)
    problem = max_unavailable_problem(value)
    if problem is None:
        return value
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        problem += f", not {describe(node)}"  # the message quotes counts and strings itself
    raise reader.fail(node, f"{what} {problem}")


def _stages(reader: Reader, node: Node, what: str) -> tuple[str, ...]:
    items = reader.sequence(node, what)
    if not items:
        raise reader.fail(node, f"{what} must name at least one stage")
    stages: list[str] = []
    for i, item in enumerate(items):
        name = reader.string(item, f"{what}[{i}]").strip()
        problem = stages_problem([*stages, name])
        if problem:
            raise reader.fail(item, f"{what}[{i}]: {problem}")
        stages.append(name)
    return tuple(stages)


def _optional_string(reader: Reader, node: Node, what: str) -> str | None:
    return None if _is_null(node) else reader.string(node, what).strip()


def _drain(reader: Reader, node: Node, what: str) -> DrainSettings:
    entries = reader.mapping(node, what)
    reader.check_keys(node, entries, what, _DRAIN_KEYS)
    reads: dict[str, Check] = {
        "kind": lambda r, n, w: r.choice(n, w, DRAIN_KINDS),
        "command": _optional_string,
        "undrain_command": _optional_string,
        "timeout_seconds": lambda r, n, w: r.integer(n, w, minimum=1),
        "kubectl_context": _optional_string,
    }
    values = _read_fields(reader, entries, what, reads)
    if len(values) < len([k for k in entries if k in reads]):
        raise Invalid(what)
    problems = drain_problems(
        values.get("kind", "none"),
        values.get("command"),
        values.get("undrain_command"),
        values.get("kubectl_context"),
    )
    for name, why in problems:
        # A missing key is pointed at by the kind that needs it; a needless one by itself.
        if name in entries:
            at = entries[name][0]
        else:
            at = entries["kind"][0] if "kind" in entries else node
        reader.note(at, f"{what}.{name} {why}")
    if problems:
        raise Invalid(what)
    return _build(reader, node, DrainSettings, values)


def _gate(reader: Reader, node: Node, what: str) -> GateSettings:
    entries = reader.mapping(node, what)
    reader.check_keys(node, entries, what, _GATE_KEYS)
    reads: dict[str, Check] = {
        "dcgm_diag_level": _diag_level,
        "command": _optional_string,
        "timeout_seconds": lambda r, n, w: r.integer(n, w, minimum=1),
        "wait_for_host_seconds": lambda r, n, w: r.integer(n, w, minimum=1),
    }
    values = _read_fields(reader, entries, what, reads)
    if len(values) < len([k for k in entries if k in reads]):
        raise Invalid(what)
    return _build(reader, node, GateSettings, values)


_Built = TypeVar("_Built")


def _build(
    reader: Reader, node: Node, kind: Callable[..., _Built], values: dict[str, Any]
) -> _Built:
    # The reads above check what the dataclasses check; this keeps a missed case a located
    # problem instead of a crash.
    try:
        return kind(**values)
    except ValueError as error:
        raise reader.fail(node, str(error)) from None


def _diag_level(reader: Reader, node: Node, what: str) -> int | None:
    if _is_null(node):
        return None  # no dcgmi diag in the gate
    level = reader.integer(node, what)
    problems = gate_problems(level, None)
    if problems:
        raise reader.fail(node, f"{what} {problems[0][1]}")
    return level
