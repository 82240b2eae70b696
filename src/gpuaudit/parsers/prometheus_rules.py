"""A Prometheus rules file (``groups: [{name, rules: [{alert|record, expr, …}]}]``), or the
same groups inside a Kubernetes ``PrometheusRule`` (``spec.groups``), read with
``yaml.safe_load``: the alerting and recording rules it holds, for the alert coverage check
(rules/monitoring_coverage.py).

Format: https://prometheus.io/docs/prometheus/latest/configuration/recording_rules/ and
https://prometheus-operator.dev/docs/api-reference/api/#monitoring.coreos.com/v1.PrometheusRule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from gpuaudit.parsers.errors import ParseError
from gpuaudit.parsers.warnings import warn

SOURCE = "prometheus rules"


@dataclass(frozen=True)
class PromRule:
    """One rule of a rules file: an alert (``alert`` set) or a recording rule (``record``)."""

    group: str
    expr: str
    alert: str | None = None
    record: str | None = None
    for_: str | None = None
    labels: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"group": self.group, "expr": self.expr}
        if self.alert is not None:
            entry["alert"] = self.alert
        if self.record is not None:
            entry["record"] = self.record
        return entry

    @classmethod
    def from_dict(cls, data: Any) -> PromRule | None:
        """A rule as :meth:`to_dict` wrote it; None for anything else."""
        if not isinstance(data, dict) or not isinstance(data.get("expr"), str):
            return None
        alert, record = data.get("alert"), data.get("record")
        return cls(
            group=str(data.get("group") or ""),
            expr=data["expr"],
            alert=str(alert) if alert is not None else None,
            record=str(record) if record is not None else None,
        )


def parse_prometheus_rules(text: str) -> tuple[PromRule, ...]:
    """Every rule of a rules file or PrometheusRule; ParseError when it is neither (not YAML,
    no ``groups``). A group or rule of the wrong shape is skipped with a parse warning."""
    try:
        data = yaml.safe_load(text or "")
    except yaml.YAMLError as error:
        raise ParseError("a Prometheus rules file", f"not valid YAML: {error}") from None
    if isinstance(data, dict) and data.get("kind") == "PrometheusRule":
        data = data.get("spec")
    groups = data.get("groups") if isinstance(data, dict) else None
    if not isinstance(groups, list):
        raise ParseError("a Prometheus rules file", "no 'groups' list (nor spec.groups)", text)
    rules: list[PromRule] = []
    for index, group in enumerate(groups):
        if not isinstance(group, dict) or not isinstance(group.get("rules", []), list):
            warn(SOURCE, f"group {index} is not a mapping with a rules list", repr(group)[:200])
            continue
        name = str(group.get("name") or f"group {index}")
        for item in group.get("rules") or []:
            found = _rule(name, item)
            if found is None:
                warn(SOURCE, f"a rule of group {name!r} has no alert/record and expr", repr(item))
                continue
            rules.append(found)
    return tuple(rules)


def _rule(group: str, item: Any) -> PromRule | None:
    if not isinstance(item, dict):
        return None
    expr = item.get("expr")
    alert, record = item.get("alert"), item.get("record")
    if expr is None or (alert is None) == (record is None):
        return None
    labels = item.get("labels")
    duration = item.get("for")
    return PromRule(
        group=group,
        expr=str(expr),
        alert=str(alert) if alert is not None else None,
        record=str(record) if record is not None else None,
        for_=str(duration) if duration is not None else None,
        labels={str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {},
    )
