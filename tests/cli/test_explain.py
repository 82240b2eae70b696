from __future__ import annotations

import pytest

from gpuaudit.cli import explain_text, main
from gpuaudit.rules import all_rules
from gpuaudit.rules.base import REGISTRY


def test_explain_prints_one_rule_in_full(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "GA401"]) == 0
    out = capsys.readouterr().out
    rule = REGISTRY["GA401"]
    assert out.startswith(f"GA401  {rule.title}\n")
    for part in (
        "category:   services",
        "owner:      infra",
        "severity:   medium",
        f"likelihood {rule.likelihood} × impact {rule.impact} = {rule.likelihood * rule.impact}",
        "operation:  gpuaudit.operations.persistence.enable",
        rule.doc,
        f"Remediation: {rule.remediation}",
        *(f"  - {ref}" for ref in rule.references),
    ):
        assert part in out, part


def test_explain_accepts_lower_case_and_says_when_no_operation(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["explain", "ga301"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("GA301  XID errors in the kernel log")
    assert "operation:  (none" in out


def test_every_rule_can_be_explained() -> None:
    for rule in all_rules():
        text = explain_text(rule.code)
        assert text is not None and rule.doc in text


def test_unknown_code_exits_2_with_a_clear_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "GA999"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "no rule 'GA999'" in captured.err and "gpuaudit rules" in captured.err
