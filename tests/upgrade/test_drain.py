"""The drain hooks' commands: what runs on the controller to take a host out and give it back."""

from __future__ import annotations

from gpuaudit.policy.upgrade import DrainSettings
from gpuaudit.upgrade.drain import drain_commands, node_name


def test_node_names() -> None:
    assert node_name("@sim/gpu-01") == "gpu-01"
    assert node_name("gpu-01.dc1.example.com") == "gpu-01"


def test_kubectl_cordons_drains_and_uncordons() -> None:
    settings = DrainSettings(kind="kubectl", timeout_seconds=300, kubectl_context="prod east")
    assert drain_commands(settings, "gpu-01.example.com", "550.127.05", undrain=False) == [
        "kubectl --context 'prod east' cordon gpu-01",
        "kubectl --context 'prod east' drain gpu-01 --ignore-daemonsets --delete-emptydir-data "
        "--timeout=300s",
    ]
    assert drain_commands(settings, "gpu-01", "550.127.05", undrain=True) == [
        "kubectl --context 'prod east' uncordon gpu-01"
    ]


def test_slurm_drains_with_a_gpuaudit_reason_and_resumes_only_its_own_drain() -> None:
    settings = DrainSettings(kind="slurm", timeout_seconds=60)
    drain, wait = drain_commands(settings, "gpu-01", "550.127.05", undrain=False)
    assert drain == (
        "scontrol update nodename=gpu-01 state=drain "
        "reason='gpuaudit: driver upgrade to 550.127.05'"
    )
    assert "squeue -h -w gpu-01" in wait and "-le 60" in wait
    (resume,) = drain_commands(settings, "gpu-01", "550.127.05", undrain=True)
    assert "grep -q 'Reason=gpuaudit:'" in resume and "state=resume" in resume


def test_a_site_command_gets_quoted_values() -> None:
    settings = DrainSettings(
        kind="command", command="drain-node {host} --for {version}", undrain_command="back {host}"
    )
    (command,) = drain_commands(settings, "@sim/gpu-01; rm -rf /", "550.127.05", undrain=False)
    assert command == "drain-node 'gpu-01; rm -rf /' --for 550.127.05"
    assert drain_commands(settings, "gpu-01", "550.127.05", undrain=True) == ["back gpu-01"]


def test_none_drains_nothing() -> None:
    assert drain_commands(DrainSettings(), "gpu-01", "550.127.05", undrain=False) == []
