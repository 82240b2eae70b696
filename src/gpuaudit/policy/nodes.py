"""Reading a YAML file as nodes, so that every value keeps its file, line and column.

The policy is composed (``yaml.compose`` with the safe loader), never loaded with
``yaml.load``: the composed node graph still carries each value's position, which is what lets
a mistake be reported as ``file:line:col``. Scalars are turned into Python values by PyYAML's
SafeConstructor, so YAML's own typing applies (``12.4`` is a float, ``2027-03-31`` a date).

A :class:`Reader` walks one file and collects problems instead of stopping at the first, so one
``gpuaudit policy check`` lists every mistake. An accessor that finds a problem records it and
raises :class:`Invalid`; the caller catches that where carrying on makes sense (the next key).
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

__all__ = ["Invalid", "PolicyError", "Problem", "Reader", "did_you_mean"]


@dataclass(frozen=True)
class Problem:
    source: str
    line: int  # 1-based
    column: int  # 1-based
    message: str

    def __str__(self) -> str:
        return f"{self.source}:{self.line}:{self.column}: {self.message}"


class PolicyError(ValueError):
    """A policy file that cannot be used; ``str()`` lists every problem as file:line:col."""

    def __init__(self, problems: Collection[Problem] | str) -> None:
        if isinstance(problems, str):
            problems = (Problem("<policy>", 1, 1, problems),)
        self.problems: tuple[Problem, ...] = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class Invalid(Exception):
    """Raised by a Reader accessor after it recorded a problem (never escapes the loader)."""


def did_you_mean(word: str, choices: Collection[str]) -> str:
    close = difflib.get_close_matches(word, sorted(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def describe(node: Node) -> str:
    """How a value reads in a message: 'a list', 'the string "x"', 'the number 12.4'."""
    if node.tag not in _PLAIN_TAGS:
        return f"a value tagged {node.tag}"
    if isinstance(node, MappingNode):
        return "a mapping"
    if isinstance(node, SequenceNode):
        return "a list"
    value = _construct(node)
    if value is None:
        return "empty (null)"
    if isinstance(value, bool):
        return f"the boolean {node.value}"
    if isinstance(value, (int, float)):
        return f"the number {node.value}"
    if isinstance(value, (date, datetime)):
        return f"the date {node.value}"
    return f"the string {value!r}"


# The tags plain YAML resolves to; anything else (!!python/object, !custom) was written on
# purpose to make the loader build something, and a policy never needs that.
_PLAIN_TAGS = {
    f"tag:yaml.org,2002:{name}"
    for name in ("str", "int", "float", "bool", "null", "timestamp", "map", "seq")
}


def _construct(node: Node) -> Any:
    # A fresh constructor per scalar: it only converts text by tag, and keeps no state we need.
    if node.tag not in _PLAIN_TAGS:
        return str(node.value)  # never built: the accessors refuse such nodes
    try:
        return SafeConstructor().construct_object(node, deep=True)
    except ValueError:
        # Text that looks like a date but is not one (2027-02-30): keep the text, so the date
        # check reports it with its position instead of the loader crashing.
        return str(node.value)


class Reader:
    """Typed access to the nodes of one YAML file, recording problems with their position."""

    def __init__(self, source: str, problems: list[Problem] | None = None) -> None:
        self.source = source
        self.problems: list[Problem] = [] if problems is None else problems

    # --- problems ---------------------------------------------------------------------------

    def note(self, node: Node | None, message: str) -> None:
        mark = node.start_mark if node is not None else None
        line = mark.line + 1 if mark else 1
        column = mark.column + 1 if mark else 1
        self.problems.append(Problem(self.source, line, column, message))

    def fail(self, node: Node | None, message: str) -> Invalid:
        """Record a problem; return the exception for the caller to raise."""
        self.note(node, message)
        return Invalid(message)

    def _plain(self, node: Node, what: str) -> None:
        if node.tag not in _PLAIN_TAGS:
            raise self.fail(node, f"{what}: the YAML tag {node.tag} is not allowed in a policy")

    # --- documents ----------------------------------------------------------------------------

    def compose(self, text: str) -> Node | None:
        try:
            return yaml.compose(text, Loader=yaml.SafeLoader)
        except yaml.MarkedYAMLError as error:
            mark = error.problem_mark or error.context_mark
            line, column = (mark.line + 1, mark.column + 1) if mark else (1, 1)
            what = error.problem or error.context or "invalid YAML"
            self.problems.append(Problem(self.source, line, column, f"not valid YAML: {what}"))
        except yaml.YAMLError as error:
            self.problems.append(Problem(self.source, 1, 1, f"not valid YAML: {error}"))
        return None

    # --- containers ---------------------------------------------------------------------------

    def mapping(self, node: Node, what: str) -> dict[str, tuple[Node, Node]]:
        """A mapping's entries by key, in file order: {key: (key node, value node)}.

        Keys must be strings (or integers, returned as their text); a repeated key is an error
        because YAML would silently keep only the last one.
        """
        self._plain(node, what)
        if not isinstance(node, MappingNode):
            raise self.fail(node, f"{what} must be a mapping, not {describe(node)}")
        entries: dict[str, tuple[Node, Node]] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                self.note(key_node, "YAML merge keys (<<) are not supported in a policy")
                continue
            if (
                key_node.tag not in _PLAIN_TAGS
                or not isinstance(key_node, ScalarNode)
                or isinstance(_construct(key_node), (bool, float, date, type(None)))
            ):
                self.note(key_node, f"a key in {what} must be a name, not {describe(key_node)}")
                continue
            key = str(key_node.value)
            if key in entries:
                first = entries[key][0].start_mark.line + 1
                self.note(key_node, f"{key!r} is given twice in {what} (first on line {first})")
                continue
            entries[key] = (key_node, value_node)
        return entries

    def check_keys(
        self,
        node: Node,
        entries: Mapping[str, tuple[Node, Node]],
        what: str,
        allowed: Collection[str],
        required: Collection[str] = (),
        hints: Mapping[str, str] | None = None,
    ) -> None:
        """Record unknown keys (with a did-you-mean or a hint) and missing required ones."""
        for key, (key_node, _) in entries.items():
            if key in allowed:
                continue
            hint = (hints or {}).get(key)
            detail = f": {hint}" if hint else did_you_mean(key, allowed)
            self.note(key_node, f"unknown key {key!r} in {what}{detail}")
        for key in required:
            if key not in entries:
                self.note(node, f"{what} needs {key!r}")

    def sequence(self, node: Node, what: str) -> list[Node]:
        self._plain(node, what)
        if not isinstance(node, SequenceNode):
            raise self.fail(node, f"{what} must be a list, not {describe(node)}")
        return list(node.value)

    def items(self, node: Node, what: str) -> Iterator[tuple[str, Node, Node]]:
        """(key, key node, value node) of a mapping, in file order."""
        for key, (key_node, value_node) in self.mapping(node, what).items():
            yield key, key_node, value_node

    # --- scalars ------------------------------------------------------------------------------

    def scalar(self, node: Node, what: str) -> Any:
        self._plain(node, what)
        if not isinstance(node, ScalarNode):
            raise self.fail(node, f"{what} must be a single value, not {describe(node)}")
        return _construct(node)

    def string(self, node: Node, what: str, *, empty: bool = False) -> str:
        value = self.scalar(node, what)
        if not isinstance(value, str):
            raise self.fail(node, f"{what} must be a string, not {describe(node)}")
        if not empty and not value.strip():
            raise self.fail(node, f"{what} must not be empty")
        return value

    def version(self, node: Node, what: str) -> str:
        """A version such as "550.127.05" or "12.4"; a bare integer (a branch, "550") is fine."""
        value = self.scalar(node, what)
        if isinstance(value, float):
            # 12.10 would read as 12.1: refuse rather than guess which was meant.
            raise self.fail(node, f'{what} must be a quoted string (write "{node.value}")')
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        if not isinstance(value, str) or not value.strip():
            raise self.fail(node, f"{what} must be a version string, not {describe(node)}")
        return value.strip()

    def integer(self, node: Node, what: str, *, minimum: int | None = 0) -> int:
        value = self.scalar(node, what)
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.fail(node, f"{what} must be an integer, not {describe(node)}")
        if minimum is not None and value < minimum:
            raise self.fail(node, f"{what} must be at least {minimum}, not {value}")
        return value

    def number(self, node: Node, what: str, *, minimum: float | None = 0) -> int | float:
        value = self.scalar(node, what)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise self.fail(node, f"{what} must be a number, not {describe(node)}")
        if minimum is not None and value < minimum:
            raise self.fail(node, f"{what} must be at least {minimum}, not {value}")
        return value

    def boolean(self, node: Node, what: str) -> bool:
        value = self.scalar(node, what)
        if not isinstance(value, bool):
            raise self.fail(node, f"{what} must be true or false, not {describe(node)}")
        return value

    def date(self, node: Node, what: str) -> date:
        value = self.scalar(node, what)
        if isinstance(value, datetime):
            return value.date()
        if isinstance(value, date):
            return value
        if isinstance(value, str):
            try:
                return date.fromisoformat(value.strip())
            except ValueError:
                pass
        raise self.fail(node, f"{what} must be a date like 2027-03-31, not {describe(node)}")

    def choice(self, node: Node, what: str, choices: Collection[str]) -> str:
        value = self.scalar(node, what)
        text = value.strip().lower() if isinstance(value, str) else ""
        if text not in choices:
            listed = ", ".join(choices)
            raise self.fail(node, f"{what} must be one of {listed}, not {describe(node)}")
        return text
