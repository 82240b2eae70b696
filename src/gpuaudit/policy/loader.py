"""Parse and check a policy file (see the package docstring for the format)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from yaml.nodes import Node, ScalarNode

from gpuaudit.model.findings import Severity
from gpuaudit.policy.migparted import read_mig_configs, read_mig_parted_file
from gpuaudit.policy.model import POLICY_FILE_VERSION, Policy, SeverityOverride, Waiver
from gpuaudit.policy.nodes import Invalid, PolicyError, Reader, describe
from gpuaudit.policy.schema import check_rule_code, read_settings, read_upgrade
from gpuaudit.policy.upgrade import UpgradeSettings

__all__ = ["load_policy", "parse_policy"]

_TOP = (
    "version",
    "defaults",
    "groups",
    "mig-configs",
    "mig_parted_file",
    "severity_overrides",
    "waivers",
    "upgrade",
)
_TOP_HINTS = {
    "mig_configs": "mig-parted's spelling is mig-configs:",
    "thresholds": "set thresholds under defaults: or a group",
    "rollout": "the staged upgrade's settings go under upgrade:",
}
_WAIVER_KEYS = ("rule", "hosts", "reason", "expires", "owner", "gpu")
_WAIVER_REQUIRED = ("rule", "hosts", "reason", "expires", "owner")
_SEVERITIES = tuple(s.value for s in Severity)


def load_policy(path: str | Path) -> Policy:
    """Read and check a policy file; raise PolicyError listing every problem."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise PolicyError(f"{path}: cannot read the policy: {error}") from None
    return parse_policy(text, str(path), path.parent)


def parse_policy(text: str, source: str, base_dir: Path) -> Policy:
    reader = Reader(source)
    root = reader.compose(text)
    if root is None and not reader.problems:
        reader.note(None, f"the policy is empty: it needs 'version: {POLICY_FILE_VERSION}'")
    if root is None:
        raise PolicyError(reader.problems)
    try:
        policy = _read_policy(reader, root, text, base_dir)
    except Invalid:
        policy = None
    if reader.problems or policy is None:
        raise PolicyError(sorted(reader.problems, key=lambda p: (p.source, p.line, p.column)))
    return policy


def _read_policy(reader: Reader, root: Node, text: str, base_dir: Path) -> Policy:
    entries = reader.mapping(root, "the policy")
    _check_version(reader, root, entries)
    reader.check_keys(root, entries, "the policy", _TOP, hints=_TOP_HINTS)

    def part(key: str, read: Any, default: Any) -> Any:
        if key not in entries:
            return default
        try:
            return read(reader, entries[key][1])
        except Invalid:
            return default

    mig_configs, mig_text, span = _read_mig(reader, entries, base_dir)
    defaults = part("defaults", lambda r, n: read_settings(r, n, "defaults", mig_configs), {})
    groups = part("groups", lambda r, n: _read_groups(r, n, mig_configs), ())
    rule_overrides, xid_overrides = part("severity_overrides", _read_overrides, ({}, {}))
    waivers = part("waivers", _read_waivers, ())
    upgrade = part("upgrade", read_upgrade, UpgradeSettings())
    return Policy(
        version=POLICY_FILE_VERSION,
        defaults=defaults,
        groups=groups,
        mig_configs=mig_configs,
        rule_overrides=rule_overrides,
        xid_overrides=xid_overrides,
        waivers=waivers,
        upgrade=upgrade,
        source=reader.source,
        text=text,
        mig_parted_text=mig_text,
        mig_parted_span=span,
    )


def _check_version(reader: Reader, root: Node, entries: dict[str, tuple[Node, Node]]) -> None:
    if "version" not in entries:
        raise reader.fail(root, f"the policy needs 'version: {POLICY_FILE_VERSION}' at the top")
    node = entries["version"][1]
    value = reader.scalar(node, "version")
    if value == "v1":
        raise reader.fail(
            node,
            "version v1 is a mig-parted file: give it as mig_parted_file: or put its "
            f"mig-configs: in a policy with version: {POLICY_FILE_VERSION}",
        )
    if type(value) is not int or value != POLICY_FILE_VERSION:
        raise reader.fail(
            node,
            f"unsupported policy version ({describe(node)}): this gpuaudit reads "
            f"version: {POLICY_FILE_VERSION}",
        )


def _read_groups(
    reader: Reader, node: Node, mig_configs: dict[str, Any]
) -> tuple[tuple[str, dict[str, Any]], ...]:
    groups = []
    for name, key_node, value in reader.items(node, "groups"):
        if name == "all":
            # pyinfra's implicit group is not copied into snapshots: it would never match.
            reader.note(key_node, "groups.all: use defaults: for settings of every host")
            continue
        try:
            groups.append((name, read_settings(reader, value, f"groups.{name}", mig_configs)))
        except Invalid:
            continue
    return tuple(groups)


def _read_mig(
    reader: Reader, entries: dict[str, tuple[Node, Node]], base_dir: Path
) -> tuple[dict[str, list[dict[str, Any]]], str | None, tuple[int, int] | None]:
    """The MIG configurations, inline or from a mig-parted file, with what copy_to needs."""
    if "mig-configs" in entries and "mig_parted_file" in entries:
        reader.note(entries["mig_parted_file"][0], "use mig-configs: or mig_parted_file:, not both")
        return {}, None, None
    try:
        if "mig-configs" in entries:
            return read_mig_configs(reader, entries["mig-configs"][1]), None, None
        if "mig_parted_file" in entries:
            node = entries["mig_parted_file"][1]
            name = reader.string(node, "mig_parted_file")
            path = base_dir / name
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as error:
                raise reader.fail(node, f"cannot read mig_parted_file {path}: {error}") from None
            configs = read_mig_parted_file(text, str(path), reader)
            return configs, text, (node.start_mark.index, node.end_mark.index)
    except Invalid:
        pass
    return {}, None, None


def _read_overrides(
    reader: Reader, node: Node
) -> tuple[dict[str, SeverityOverride], dict[int, SeverityOverride]]:
    entries = reader.mapping(node, "severity_overrides")
    reader.check_keys(node, entries, "severity_overrides", ("rules", "xid"))
    rules: dict[str, SeverityOverride] = {}
    xids: dict[int, SeverityOverride] = {}
    if "rules" in entries:
        for key, key_node, value in reader.items(entries["rules"][1], "severity_overrides.rules"):
            try:
                code = check_rule_code(reader, key_node, f"severity_overrides.rules.{key}")
                rules[code] = _read_override(reader, value, f"severity_overrides.rules.{key}")
            except Invalid:
                continue
    if "xid" in entries:
        for key, key_node, value in reader.items(entries["xid"][1], "severity_overrides.xid"):
            try:
                if not key.isdigit() or int(key) <= 0:
                    raise reader.fail(
                        key_node,
                        f"severity_overrides.xid: {key!r} is not an XID code (a positive number)",
                    )
                xids[int(key)] = _read_override(reader, value, f"severity_overrides.xid.{key}")
            except Invalid:
                continue
    return rules, xids


def _read_override(reader: Reader, node: Node, what: str) -> SeverityOverride:
    entries = reader.mapping(node, what)
    reader.check_keys(node, entries, what, ("severity", "reason"), required=("severity", "reason"))
    if "severity" not in entries or "reason" not in entries:
        raise Invalid(what)
    severity = reader.choice(entries["severity"][1], f"{what}.severity", _SEVERITIES)
    reason = reader.string(entries["reason"][1], f"{what}.reason")
    return SeverityOverride(Severity(severity), reason.strip())


def _read_waivers(reader: Reader, node: Node) -> tuple[Waiver, ...]:
    waivers = []
    for i, item in enumerate(reader.sequence(node, "waivers")):
        try:
            waivers.append(_read_waiver(reader, item, f"waivers[{i}]"))
        except Invalid:
            continue
    return tuple(waivers)


def _read_waiver(reader: Reader, node: Node, what: str) -> Waiver:
    entries = reader.mapping(node, what)
    reader.check_keys(node, entries, what, _WAIVER_KEYS, required=_WAIVER_REQUIRED)
    reads = {
        "rule": lambda n: check_rule_code(reader, n, f"{what}.rule"),
        "hosts": lambda n: tuple(
            h.strip() for h in _one_or_many(reader, n, f"{what}.hosts", reader.string)
        ),
        "reason": lambda n: reader.string(n, f"{what}.reason").strip(),
        "expires": lambda n: reader.date(n, f"{what}.expires"),
        "owner": lambda n: reader.string(n, f"{what}.owner").strip(),
        "gpu": lambda n: tuple(_one_or_many(reader, n, f"{what}.gpu", reader.integer)),
    }
    # Every field is checked, so one pass reports all of a waiver's mistakes.
    values: dict[str, Any] = {}
    for key, read in reads.items():
        if key in entries:
            try:
                values[key] = read(entries[key][1])
            except Invalid:
                continue
    if any(key not in values for key in _WAIVER_REQUIRED):
        raise Invalid(what)
    return Waiver(
        rule=values["rule"],
        hosts=values["hosts"],
        reason=values["reason"],
        expires=values["expires"],
        owner=values["owner"],
        gpus=values.get("gpu"),
        location=f"{reader.source}:{node.start_mark.line + 1}",
    )


def _one_or_many(reader: Reader, node: Node, what: str, read: Any) -> list[Any]:
    if isinstance(node, ScalarNode):
        return [read(node, what)]
    items = reader.sequence(node, what)
    if not items:
        raise reader.fail(node, f"{what} must not be empty")
    return [read(n, f"{what}[{i}]") for i, n in enumerate(items)]
