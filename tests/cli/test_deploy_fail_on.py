"""GPUAUDIT_FAIL_ON as plain pyinfra reads it (deploys/audit.py): a severity in any case, and
any other value refused before a host is collected, never a register write that crashes."""

from __future__ import annotations

import pytest
from pyinfra.api.exceptions import PyinfraError

from gpuaudit import deploy


@pytest.mark.parametrize(
    ("given", "threshold"),
    [("high", "high"), ("HIGH", "high"), (" Critical ", "critical"), ("", None)],
)
def test_fail_on_is_read_in_any_case(
    monkeypatch: pytest.MonkeyPatch, given: str, threshold: str | None
) -> None:
    monkeypatch.setenv("GPUAUDIT_FAIL_ON", given)
    assert deploy.fail_on_threshold() == threshold


def test_unset_fail_on_is_no_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUAUDIT_FAIL_ON", raising=False)
    assert deploy.fail_on_threshold() is None


@pytest.mark.parametrize("given", ["bad", "severe", "3"])
def test_unknown_fail_on_stops_the_run_before_any_host_is_collected(
    monkeypatch: pytest.MonkeyPatch, given: str
) -> None:
    monkeypatch.setenv("GPUAUDIT_FAIL_ON", given)

    def not_reached() -> None:
        raise AssertionError("the run went on past an unusable GPUAUDIT_FAIL_ON")

    monkeypatch.setattr(deploy, "current_policy", not_reached)
    monkeypatch.setattr(deploy, "current_run", not_reached)
    with pytest.raises(PyinfraError) as raised:
        deploy.audit()
    message = str(raised.value)
    assert f"GPUAUDIT_FAIL_ON={given!r} is no severity" in message
    assert "critical, high, medium, low, info" in message
    assert "\n" not in message
