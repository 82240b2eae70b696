"""Which steps deploys/remediate.py runs on a host, and with what, for the settings the site
policy resolves for it: the deploy file runs against a stand-in host whose operations only
record how they were called, so no pyinfra state or connection is needed."""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import pytest
from pyinfra.context import ctx_host

from gpuaudit.operations import driver, mig, persistence, plan, services, settings, sysctl
from gpuaudit.policy import Policy

DEPLOY = Path(__file__).resolve().parents[2] / "deploys" / "remediate.py"


class DeployHost:
    def __init__(self, data: dict[str, Any], groups: list[str]) -> None:
        self.name = "gpu-k8s-001"
        self.data = data
        self.groups = groups


def run_deploy(
    monkeypatch: pytest.MonkeyPatch,
    policy_text: str | None,
    data: dict[str, Any] | None = None,
    groups: list[str] | None = None,
) -> dict[str, dict[str, Any]]:
    """The steps the deploy calls on one host: step name → the operation and its arguments."""
    calls: dict[str, dict[str, Any]] = {}

    def recorder(operation: str) -> Any:
        def record(name: str, **arguments: Any) -> None:
            calls[name] = {"operation": operation, **arguments}

        return record

    for module in (driver, mig, persistence, plan, services, sysctl):
        for attribute in ("pin", "apply", "enable", "skipped", "baseline"):
            if hasattr(module, attribute):
                short = module.__name__.rsplit(".", 1)[-1]
                monkeypatch.setattr(module, attribute, recorder(f"{short}.{attribute}"))
    policy = Policy.from_text(policy_text) if policy_text is not None else None
    monkeypatch.setattr(settings, "site_policy", lambda: policy)
    with ctx_host.use(DeployHost(data or {}, groups or [])):
        runpy.run_path(str(DEPLOY))
    return calls


POLICY = """\
version: 1
groups:
  k8s:
    monitoring_required: false
    persistence_mode_required: false
"""


@pytest.mark.parametrize(
    ("step_name", "rule", "setting"),
    [
        # Sites whose DCGM runs as a Kubernetes DaemonSet say so in the policy, for a group:
        # the deploy must not start a second host engine beside it.
        ("Run the DCGM monitoring units", "GA403", "monitoring_required"),
        ("Enable GPU persistence mode", "GA401", "persistence_mode_required"),
    ],
)
def test_a_policy_group_that_needs_no_step_leaves_it_alone(
    monkeypatch: pytest.MonkeyPatch, step_name: str, rule: str, setting: str
) -> None:
    step = run_deploy(monkeypatch, POLICY, groups=["k8s"])[step_name]
    assert step["operation"] == "plan.skipped"
    assert step["rule"] == rule
    assert setting in step["reason"]


def test_host_data_still_turns_monitoring_off(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = run_deploy(monkeypatch, None, data={"monitoring_required": False})
    assert calls["Run the DCGM monitoring units"]["operation"] == "plan.skipped"
    assert calls["Enable GPU persistence mode"]["operation"] == "persistence.enable"


def test_dcgm_units_are_the_policys_monitoring_services(monkeypatch: pytest.MonkeyPatch) -> None:
    # GA403 passes when one of monitoring_services runs; the deploy starts those same units.
    calls = run_deploy(monkeypatch, None)
    step = calls["Run the DCGM monitoring units"]
    assert step["operation"] == "services.enable"
    assert step["names"] == ["nvidia-dcgm", "dcgm", "dcgm-exporter"]
    assert step["needs_driver"] is True
    assert step["one_of"] == ("nvidia-dcgm", "dcgm")  # one host engine, never two
    site = "version: 1\ndefaults:\n  monitoring_services: [dcgm-exporter]\n"
    step = run_deploy(monkeypatch, site)["Run the DCGM monitoring units"]
    assert step["names"] == ["dcgm-exporter"]


def test_every_step_runs_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = run_deploy(monkeypatch, None)
    assert {name: call["operation"] for name, call in calls.items()} == {
        "Pin and hold the NVIDIA driver packages": "driver.pin",
        "Apply the sysctl baseline": "sysctl.baseline",
        "Enable GPU persistence mode": "persistence.enable",
        "Run the DCGM monitoring units": "services.enable",
    }
