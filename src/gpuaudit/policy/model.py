"""The site policy as the audit uses it: per-host settings, severity overrides and waivers.

Precedence of settings, later wins: the built-in defaults (``policy.defaults``), the
policy's ``defaults:``, each of the policy's ``groups:`` the host belongs to *in the order the
file lists them*, then the host's own inventory data (pyinfra host and group data copied into
``snapshot.host_data``). The inventory wins because it is the most specific statement about a
host and is what an operator edits for the one host being repaired (e.g. a host with 6 of 8
GPUs until an RMA returns); the policy is the site-wide rule. Nested maps (``sysctl_baseline``)
merge key by key; a layer pinning ``desired_driver_version`` clears a branch pinned by an
earlier layer and the other way round.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import yaml

from gpuaudit.model.findings import Finding, Severity
from gpuaudit.policy.defaults import DEFAULT_POLICY, host_overrides, merge_policy
from gpuaudit.policy.upgrade import UpgradeSettings

if TYPE_CHECKING:
    from gpuaudit.model.snapshot import HostSnapshot

__all__ = [
    "MIG_PARTED_COPY",
    "POLICY_FILE",
    "POLICY_FILE_VERSION",
    "XID_RULE",
    "Policy",
    "SeverityOverride",
    "Waiver",
    "WaiverStatus",
]

POLICY_FILE_VERSION = 1
# Names of the policy's copy inside a run directory (``gpuaudit report`` reads them back).
POLICY_FILE = "policy.yaml"
MIG_PARTED_COPY = "policy-mig-parted.yaml"
# Where alert rules files named outside the policy's folder are copied.
ALERT_RULES_COPY_DIR = "alert-rules"
# The XID rule's findings carry the XID code in evidence.actual["code"]; rule codes are
# stable, so naming it here cannot drift.
XID_RULE = "GA301"

WaiverStatus = Literal["open", "waived", "waiver_expired"]


class SeverityOverride(NamedTuple):
    """A site's severity for a rule or an XID code, and why it departs from the catalogue."""

    severity: Severity
    reason: str


def _day(on: date) -> date:
    # datetime is a date subclass but does not compare with one.
    return on.date() if isinstance(on, datetime) else on


@dataclass(frozen=True)
class Waiver:
    """An accepted risk: one rule on matching hosts (and GPUs), until a date, with an owner."""

    rule: str
    hosts: tuple[str, ...]
    reason: str
    expires: date  # the last day the waiver holds
    owner: str
    gpus: tuple[int, ...] | None = None  # None: every GPU and host-wide findings
    # "policies/site.yaml:42", so the register can point at it; where, not what: not compared
    location: str = field(default="", compare=False)

    def matches(self, finding: Finding) -> bool:
        if finding.rule != self.rule:
            return False
        if self.gpus is not None and finding.gpu not in self.gpus:
            return False
        return self.covers_host(finding.host)

    def covers_host(self, host: str) -> bool:
        return any(_host_matches(host, pattern) for pattern in self.hosts)

    def expired(self, on: date) -> bool:
        return _day(on) > self.expires

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "hosts": list(self.hosts),
            "gpus": None if self.gpus is None else list(self.gpus),
            "reason": self.reason,
            "expires": self.expires.isoformat(),
            "owner": self.owner,
            "location": self.location,
        }


def _host_matches(host: str, pattern: str) -> bool:
    """fnmatch, case-insensitive (DNS names are); "@sim/t4-02" also matches as "t4-02"."""
    names = (
        {host.lower(), host.rpartition("/")[2].lower()} if host.startswith("@") else {host.lower()}
    )
    return any(fnmatch.fnmatchcase(name, pattern.lower()) for name in names)


@dataclass(frozen=True)
class Policy:
    """A loaded site policy. Build one with :func:`load_policy` or :meth:`from_text`."""

    version: int = POLICY_FILE_VERSION
    defaults: Mapping[str, Any] = field(default_factory=dict)
    groups: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    mig_configs: Mapping[str, list[dict[str, Any]]] = field(default_factory=dict)
    rule_overrides: Mapping[str, SeverityOverride] = field(default_factory=dict)
    xid_overrides: Mapping[int, SeverityOverride] = field(default_factory=dict)
    waivers: tuple[Waiver, ...] = ()
    # How a staged driver upgrade may proceed (the top-level upgrade: section).
    upgrade: UpgradeSettings = field(default_factory=UpgradeSettings)
    source: str = field(default="<string>", compare=False)
    # What copy_to() needs to write a self-contained copy of the file into a run directory.
    text: str = field(default="", repr=False, compare=False)
    mig_parted_text: str | None = field(default=None, repr=False, compare=False)
    mig_parted_span: tuple[int, int] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_text(
        cls, text: str, source: str = "<string>", base_dir: str | Path | None = None
    ) -> Policy:
        """Parse policy text; ``base_dir`` resolves ``mig_parted_file`` (default: cwd)."""
        from gpuaudit.policy.loader import parse_policy  # the loader builds this class

        return parse_policy(text, source, Path(base_dir) if base_dir is not None else Path())

    # --- settings -----------------------------------------------------------------------------

    def groups_for(self, host_groups: Iterable[str]) -> list[str]:
        """The policy groups that apply to a host in these inventory groups, in file order."""
        member = set(host_groups)
        return [name for name, _ in self.groups if name in member]

    def layer_for(self, host_groups: Iterable[str] = ()) -> dict[str, Any]:
        """The policy's own settings for these groups (defaults + groups), without host data."""
        member = set(host_groups)
        layers = [settings for name, settings in self.groups if name in member]
        return merge_policy({"mig_configs": self.mig_configs}, self.defaults, *layers)

    def settings_for(self, target: HostSnapshot | Mapping[str, Any]) -> dict[str, Any]:
        """Every setting the rules read for one host (a snapshot or its host_data)."""
        # A snapshot is no mapping: its host_data is.
        host_data = target if isinstance(target, Mapping) else target.host_data
        groups = host_data.get("groups") or ()
        if isinstance(groups, str):
            groups = (groups,)
        return merge_policy(DEFAULT_POLICY, self.layer_for(groups), host_overrides(host_data))

    @property
    def disabled_rules(self) -> tuple[str, ...]:
        """Rules the policy turns off for every host (groups may turn off more)."""
        return tuple(self.defaults.get("disabled_rules") or ())

    # --- severity -----------------------------------------------------------------------------

    def override_for(self, finding: Finding) -> SeverityOverride | None:
        """The site's severity for a finding: by XID code for XID findings, else by rule."""
        if finding.rule == XID_RULE and isinstance(finding.evidence.actual, Mapping):
            code = finding.evidence.actual.get("code")
            if isinstance(code, int) and code in self.xid_overrides:
                return self.xid_overrides[code]
        return self.rule_overrides.get(finding.rule)

    # --- waivers ------------------------------------------------------------------------------

    def waiver_for(self, finding: Finding, on: date) -> Waiver | None:
        """The first waiver in force on ``on`` that covers the finding (None: not waived)."""
        return next((w for w in self.waivers if w.matches(finding) and not w.expired(on)), None)

    def waiver_status(self, finding: Finding, on: date) -> tuple[WaiverStatus, Waiver | None]:
        """("waived", waiver) | ("waiver_expired", the latest lapsed waiver) | ("open", None).

        An expired waiver never hides a risk: the register shows it open again and says when
        the waiver ran out, so nobody mistakes a lapsed acceptance for a fixed host.
        """
        active = self.waiver_for(finding, on)
        if active is not None:
            return "waived", active
        lapsed = [w for w in self.waivers if w.matches(finding)]
        if lapsed:
            return "waiver_expired", max(lapsed, key=lambda w: w.expires)
        return "open", None

    def expired_waivers(self, on: date) -> list[Waiver]:
        return [w for w in self.waivers if w.expired(on)]

    # --- the copy kept with a run -------------------------------------------------------------

    def copy_to(self, directory: str | Path) -> Path:
        """Write the policy text as ``policy.yaml`` in ``directory`` and return its path.

        The text is kept byte for byte (comments included). A ``mig_parted_file`` is copied
        beside it and the reference rewritten, so the run directory alone rebuilds the report.
        """
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        # (start, end, replacement) in the policy text, applied from the end backwards.
        edits: list[tuple[int, int, str]] = []
        if self.mig_parted_text is not None and self.mig_parted_span is not None:
            start, end = self.mig_parted_span
            edits.append((start, end, MIG_PARTED_COPY))
            (directory / MIG_PARTED_COPY).write_text(self.mig_parted_text, encoding="utf-8")
        copies: dict[Path, str] = {}
        spans = _alert_rules_spans(self.text)
        for written, resolved in self._alert_rule_files():
            if not resolved.is_file():
                continue  # read where it is named; GA924 says so when it is gone
            relative = Path(written)
            if not (relative.is_absolute() or ".." in relative.parts or written.startswith("~")):
                # Below the policy's folder: copied to the same place below the run's, so the
                # copy's reference resolves unchanged.
                target = directory / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(resolved.read_bytes())
                continue
            # Elsewhere (an absolute path, or one going up with ..): copied into the run's
            # alert-rules/ folder and the copy of the policy names it there.
            name = copies.get(resolved)
            if name is None:
                name = _unused_name(resolved.name, copies)
                copies[resolved] = name
                (directory / ALERT_RULES_COPY_DIR).mkdir(exist_ok=True)
                (directory / ALERT_RULES_COPY_DIR / name).write_bytes(resolved.read_bytes())
            reference = json.dumps(f"{ALERT_RULES_COPY_DIR}/{name}")
            edits.extend((start, end, reference) for start, end in spans.get(written, ()))
        text = self.text
        for start, end, replacement in sorted(set(edits), reverse=True):
            text = text[:start] + replacement + text[end:]
        (directory / POLICY_FILE).write_text(text, encoding="utf-8")
        return directory / POLICY_FILE

    def _alert_rule_files(self) -> list[tuple[str, Path]]:
        """(as written, resolved) for each alert rules file the defaults and groups name."""
        layers = [self.defaults, *(settings for _name, settings in self.groups)]
        found = []
        for layer in layers:
            monitoring = layer.get("monitoring")
            if not isinstance(monitoring, Mapping):
                continue
            written, resolved = monitoring.get("alert_rules"), monitoring.get("alert_rules_path")
            if isinstance(written, str) and isinstance(resolved, str):
                found.append((written, Path(resolved)))
        return found


def _alert_rules_spans(text: str) -> dict[str, list[tuple[int, int]]]:
    """Where the policy text writes each ``monitoring: alert_rules:`` value (under
    ``defaults:`` and each group), keyed by the value as written."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return {}
    spans: dict[str, list[tuple[int, int]]] = {}

    def child(node: yaml.Node | None, key: str) -> yaml.Node | None:
        if not isinstance(node, yaml.MappingNode):
            return None
        for key_node, value in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.value == key:
                return value
        return None

    layers = [child(root, "defaults")]
    groups = child(root, "groups")
    if isinstance(groups, yaml.MappingNode):
        layers.extend(value for _key, value in groups.value)
    for layer in layers:
        node = child(child(layer, "monitoring"), "alert_rules")
        if isinstance(node, yaml.ScalarNode):
            spans.setdefault(node.value, []).append((node.start_mark.index, node.end_mark.index))
    return spans


def _unused_name(name: str, taken: Mapping[Path, str]) -> str:
    """``name``, or ``name`` with a number before its suffix when another file took it."""
    used = set(taken.values())
    stem, suffix = Path(name).stem, Path(name).suffix
    candidate, number = name, 1
    while candidate in used:
        number += 1
        candidate = f"{stem}-{number}{suffix}"
    return candidate
