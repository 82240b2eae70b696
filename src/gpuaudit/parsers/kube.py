"""``kubectl get nodes -o json``: the cluster's nodes as the API server reports them.

kubectl prints the nodes as a ``List`` (``{"apiVersion": "v1", "kind": "List", "items":
[...]}``); the API itself answers ``GET /api/v1/nodes`` with a ``NodeList``; ``kubectl get
node NAME -o json`` prints one ``Node``. All three are read. Anything else (a PodList, a
label map cut out with jq, an error message, YAML) is refused with :class:`ParseError`: the
audit must not judge a cluster from a document that is not its node list.

Per node the parser keeps what the scheduler rules read (see gpuaudit.model.cluster): name,
labels, GPU resources of capacity and allocatable, ``spec.unschedulable``, ``spec.taints``,
``status.conditions`` and the node's host names. A GPU resource whose quantity is not a whole
number, a taint or condition that is not an object, a node without a name: each becomes a parse
warning and is left out, never a crash.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from gpuaudit.model.cluster import ClusterView, KubeNode, NodeCondition, Taint, is_gpu_resource
from gpuaudit.parsers.errors import ParseError
from gpuaudit.parsers.warnings import warn

SOURCE = "kubectl get nodes -o json"
_LIST_KINDS = ("NodeList", "List")
_COUNT = re.compile(r"^\d+$")


def parse_nodes(text: str, source: str = "") -> ClusterView:
    """The cluster view of a ``kubectl get nodes -o json`` output (or a NodeList / one Node)."""
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise ParseError(SOURCE, f"not JSON ({error})", text) from None
    if not isinstance(document, Mapping):
        raise ParseError(SOURCE, "not a JSON object", text)
    kind = document.get("kind")
    if kind == "Node":
        items: list[Any] = [document]
    elif kind in _LIST_KINDS:
        raw_items = document.get("items")
        if not isinstance(raw_items, list):
            raise ParseError(SOURCE, f"a {kind} without an items list", text)
        items = raw_items
    else:
        raise ParseError(SOURCE, f"kind {kind!r} is not a NodeList, List or Node", text)
    nodes: list[KubeNode] = []
    for position, item in enumerate(items):
        if not isinstance(item, Mapping) or item.get("kind", "Node") != "Node":
            what = item.get("kind") if isinstance(item, Mapping) else type(item).__name__
            warn(SOURCE, f"item {position} is not a Node ({what}); left out", _clip(item))
            continue
        node = _node(item, position)
        if node is not None:
            nodes.append(node)
    if items and not nodes:
        raise ParseError(SOURCE, f"a {kind} that holds no Node", text)
    return ClusterView(nodes=tuple(nodes), source=source)


def _node(item: Mapping[str, Any], position: int) -> KubeNode | None:
    metadata = _mapping(item.get("metadata"))
    spec = _mapping(item.get("spec"))
    status = _mapping(item.get("status"))
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        warn(SOURCE, f"node {position} has no name; left out", _clip(metadata))
        return None
    labels = {
        str(k): str(v)
        for k, v in _mapping(metadata.get("labels")).items()
        if isinstance(v, (str, int, float, bool))
    }
    hostnames = [labels["kubernetes.io/hostname"]] if "kubernetes.io/hostname" in labels else []
    for address in status.get("addresses") or ():
        if isinstance(address, Mapping) and address.get("type") == "Hostname":
            value = address.get("address")
            if isinstance(value, str) and value and value not in hostnames:
                hostnames.append(value)
    return KubeNode(
        name=name,
        labels=labels,
        capacity=_gpu_counts(name, "capacity", status.get("capacity")),
        allocatable=_gpu_counts(name, "allocatable", status.get("allocatable")),
        unschedulable=spec.get("unschedulable") is True,
        taints=tuple(_taints(name, spec.get("taints"))),
        conditions=tuple(_conditions(name, status.get("conditions"))),
        hostnames=tuple(hostnames),
    )


def _gpu_counts(node: str, what: str, value: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for resource, quantity in _mapping(value).items():
        if not is_gpu_resource(str(resource)):
            continue
        text = str(quantity).strip()
        if _COUNT.match(text):
            counts[str(resource)] = int(text)
        else:
            warn(SOURCE, f"node {node}: {what} {resource} is not a count", f"{resource}: {text}")
    return counts


def _taints(node: str, value: Any) -> list[Taint]:
    taints = []
    for entry in value if isinstance(value, list) else ():
        if isinstance(entry, Mapping) and isinstance(entry.get("key"), str):
            taints.append(
                Taint(str(entry["key"]), str(entry.get("value") or ""), str(entry.get("effect")))
            )
        else:
            warn(SOURCE, f"node {node}: a taint without a key", _clip(entry))
    return taints


def _conditions(node: str, value: Any) -> list[NodeCondition]:
    conditions = []
    for entry in value if isinstance(value, list) else ():
        if isinstance(entry, Mapping) and isinstance(entry.get("type"), str):
            conditions.append(
                NodeCondition(
                    type=entry["type"],
                    status=str(entry.get("status") or "Unknown"),
                    reason=str(entry.get("reason") or ""),
                    message=str(entry.get("message") or ""),
                )
            )
        else:
            warn(SOURCE, f"node {node}: a condition without a type", _clip(entry))
    return conditions


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _clip(value: Any) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else value
    return text[:200]
