"""Helpers for the policy tests: policy text, expected errors and the rule tests' host factories.

The healthy-host factories live in tests/rules/conftest.py; they are loaded from there (under
another module name, so pytest's own conftest stays untouched) rather than copied.
"""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

from gpuaudit.policy import Policy, PolicyError

ROOT = Path(__file__).resolve().parents[2]


def _rule_factories() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "rules_test_factories", ROOT / "tests" / "rules" / "conftest.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FACTORIES = _rule_factories()


def policy_text(body: str) -> str:
    """Dedented policy text; ``version: 1`` is prepended unless the body sets a version."""
    text = textwrap.dedent(body).lstrip("\n")
    return text if text.startswith("version") else "version: 1\n" + text


def parse(body: str, source: str = "site.yaml", base_dir: Path | None = None) -> Policy:
    return Policy.from_text(policy_text(body), source, base_dir=base_dir)


def problems(body: str, source: str = "site.yaml") -> list[str]:
    """The error lines a policy body produces (fails the test when it loads)."""
    with pytest.raises(PolicyError) as caught:
        Policy.from_text(textwrap.dedent(body).lstrip("\n"), source)
    return str(caught.value).splitlines()
