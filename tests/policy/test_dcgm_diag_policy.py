"""The policy's dcgm_diag setting: checked when the file is read, resolved per host."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuaudit.policy import Policy, PolicyError
from gpuaudit.policy.diag import TIMEOUT_S, DiagRequest, diag_request
from gpuaudit.policy.settings import resolve_settings

ROOT = Path(__file__).resolve().parents[2]


def _policy(body: str) -> Policy:
    return Policy.from_text("version: 1\n" + body, "site.yaml")


def test_default_is_off() -> None:
    settings = resolve_settings(None, "h", {})
    assert settings.get("dcgm_diag") == {"level": 0, "allow_long": False}
    assert diag_request(settings.values) == DiagRequest()


def test_level_1_needs_no_opt_in() -> None:
    policy = _policy("defaults:\n  dcgm_diag: {level: 1}\n")
    request = diag_request(resolve_settings(policy, "h", {}).values)
    assert (request.level, request.timeout_s) == (1, 120)


def test_long_levels_need_allow_long_beside_them() -> None:
    with pytest.raises(PolicyError) as error:
        _policy("defaults:\n  dcgm_diag: {level: 3}\n")
    assert str(error.value) == (
        "site.yaml:3:22: defaults.dcgm_diag.level 3 keeps every GPU busy for up to 45 minutes: "
        "set allow_long: true beside it to opt in"
    )
    policy = _policy("groups:\n  burn_in: {dcgm_diag: {level: 3, allow_long: true}}\n")
    request = diag_request(resolve_settings(policy, "h", {"groups": ["burn_in"]}).values)
    assert (request.level, request.timeout_s) == (3, 2700)
    other = diag_request(resolve_settings(policy, "h", {"groups": ["prod"]}).values)
    assert other.level == 0


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("{level: 5}", "3:22: defaults.dcgm_diag.level must be 0 (off), 1, 2 or 3, not 5"),
        ("{level: -1}", "defaults.dcgm_diag.level must be at least 0, not -1"),
        ("{level: one}", "defaults.dcgm_diag.level must be an integer"),
        ("{level: 2, allow_long: maybe}", "defaults.dcgm_diag.allow_long must be true or false"),
        ("{lvl: 1}", "unknown key 'lvl' in defaults.dcgm_diag"),
        ("1", "defaults.dcgm_diag must be a mapping"),
    ],
)
def test_mistakes_are_refused_with_their_position(body: str, message: str) -> None:
    with pytest.raises(PolicyError, match=re.escape(message)):
        _policy(f"defaults:\n  dcgm_diag: {body}\n")


def test_a_long_level_from_host_data_is_not_run() -> None:
    """Inventory data is not checked by the policy file: the request says why it is refused."""
    request = diag_request(resolve_settings(None, "h", {"dcgm_diag": {"level": 2}}).values)
    assert (request.level, request.asked) == (0, 2)
    assert "allow_long" in request.refused


def test_collector_bounds_match_the_policy() -> None:
    script = (ROOT / "src/gpuaudit/collect/collector.sh").read_text()
    bounds = re.search(r"case \$1 in 1\) echo (\d+) ;; 2\) echo (\d+) ;; \*\) echo (\d+)", script)
    assert bounds is not None
    assert tuple(int(b) for b in bounds.groups()) == (TIMEOUT_S[1], TIMEOUT_S[2], TIMEOUT_S[3])
