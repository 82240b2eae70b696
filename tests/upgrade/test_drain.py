"""The drain hooks' commands: what runs on the controller to take a host out and give it back."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

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
    assert '*"Reason=gpuaudit:"*) scontrol update nodename=gpu-01 state=resume' in resume


def _slurm_shims(tmp_path: Path, squeue: str, show: str, resume_rc: int) -> dict[str, str]:
    """scontrol and squeue stand-ins: squeue runs ``squeue``; ``scontrol show node`` prints
    ``show``; ``scontrol update`` logs its arguments and exits ``resume_rc``."""
    tools = tmp_path / "bin"
    tools.mkdir(exist_ok=True)
    (tools / "squeue").write_text(f"#!/bin/sh\n{squeue}\n")
    (tools / "scontrol").write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = show ]; then printf "%s\\n" {shlex.quote(show)}; exit 0; fi\n'
        f'echo "$@" >> {tmp_path}/updates; exit {resume_rc}\n'
    )
    for tool in ("squeue", "scontrol"):
        (tools / tool).chmod(0o755)
    return {**os.environ, "PATH": f"{tools}:/usr/bin:/bin"}


def _sh(command: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", "-c", command], env=env, capture_output=True, text=True)


def test_slurm_hooks_fail_when_slurm_cannot_be_asked(tmp_path: Path) -> None:
    settings = DrainSettings(kind="slurm", timeout_seconds=2)
    _, wait = drain_commands(settings, "gpu-01", "550.127.05", undrain=False)
    (resume,) = drain_commands(settings, "gpu-01", "550.127.05", undrain=True)
    ours = "NodeName=gpu-01 State=IDLE+DRAIN Reason=gpuaudit: driver upgrade to 550.127.05"
    # squeue errs (slurmctld not answering): the jobs on the node are unknown, so the drain
    # has not been shown to be done.
    down = _sh(wait, _slurm_shims(tmp_path, "echo 'slurm_load_jobs error' >&2; exit 1", ours, 0))
    assert down.returncode == 1 and "squeue failed" in down.stderr
    busy = _sh(wait, _slurm_shims(tmp_path, "echo 4242", ours, 0))
    assert busy.returncode == 1 and "still runs jobs: 4242" in busy.stderr
    assert _sh(wait, _slurm_shims(tmp_path, "exit 0", ours, 0)).returncode == 0
    # A resume that errs leaves the node drained: the undrain fails.
    assert _sh(resume, _slurm_shims(tmp_path, "exit 0", ours, 1)).returncode == 1
    assert _sh(resume, _slurm_shims(tmp_path, "exit 0", ours, 0)).returncode == 0
    updates = (tmp_path / "updates").read_text().splitlines()
    assert updates == ["update nodename=gpu-01 state=resume"] * 2
    # A node drained for another reason is left as it is.
    theirs = ours.replace("gpuaudit: driver upgrade to 550.127.05", "bad DIMM")
    kept = _sh(resume, _slurm_shims(tmp_path, "exit 0", theirs, 0))
    assert kept.returncode == 0 and "left as it is" in kept.stdout
    assert len((tmp_path / "updates").read_text().splitlines()) == 2


def test_a_site_command_gets_quoted_values() -> None:
    settings = DrainSettings(
        kind="command", command="drain-node {host} --for {version}", undrain_command="back {host}"
    )
    (command,) = drain_commands(settings, "@sim/gpu-01; rm -rf /", "550.127.05", undrain=False)
    assert command == "drain-node 'gpu-01; rm -rf /' --for 550.127.05"
    assert drain_commands(settings, "gpu-01", "550.127.05", undrain=True) == ["back gpu-01"]


def test_none_drains_nothing() -> None:
    assert drain_commands(DrainSettings(), "gpu-01", "550.127.05", undrain=False) == []
