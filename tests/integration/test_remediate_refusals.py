"""A remediation run where one host is refused: real pyinfra, the real deploy, simulated hosts.

A step that refuses a host fails that host's step with the reason and leaves the other hosts
to go on; ``--dry`` says the reason and changes nothing. The MIG layout goes in before
persistence mode and the DCGM units start, which would hold an A100's GPUs against the reset
its mode change needs.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from gpuaudit.parsers.mig import parse_mig_instances
from gpuaudit.sim.host import SimHost, materialize

REPO = Path(__file__).resolve().parents[2]
HALF = {"half": [{"devices": [0, 1], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}]}

pytestmark = pytest.mark.slow


def on(sim: SimHost, command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", "-c", command], env={**os.environ, **sim.env()}, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip


def pyinfra(env: dict[str, str], *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pyinfra", *arguments], cwd=REPO, env=env, input="\n\n",
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


def test_a_refused_host_fails_alone_and_mig_goes_in_before_the_daemons(tmp_path: Path) -> None:
    sim_dir = tmp_path / "sim"
    a100 = materialize("a100-hgx-01", "a100-hgx-01", sim_dir)
    # The daemons that hold an A100's GPUs are off, and persistence mode with them: what the
    # deploy turns on must wait until the MIG mode change and its reset are done.
    prep = on(
        a100,
        "systemctl stop dcgm-exporter nvidia-dcgm nvidia-persistenced && "
        "systemctl disable nvidia-persistenced && nvidia-smi -pm 0",
    )
    assert prep.returncode == 0, prep.stdout + prep.stderr
    inventory = tmp_path / "inventory.py"
    inventory.write_text(
        f"data = {dict(mig_config_name='half', mig_configs=HALF, monitoring_required=False)!r}\n"
        "hosts = [('@sim/t4-01', data), ('@sim/a100-hgx-01', data)]\n"
    )
    env = {**os.environ, "GPUAUDIT_SIM_DIR": str(sim_dir)}
    env.pop("GPUAUDIT_POLICY", None)
    refusal = "refused: MIG config half cannot be applied: GPU 0 (Tesla T4) does not support MIG"

    state_before = json.loads(a100.state_file.read_text())
    dry = pyinfra(env, "--dry", str(inventory), "deploys/remediate.py")
    dry_output = dry.stdout + dry.stderr
    assert dry.returncode == 0, dry_output
    assert f"@sim/t4-01: {refusal}" in dry_output
    assert json.loads(a100.state_file.read_text()) == state_before

    done = pyinfra(env, "-y", str(inventory), "deploys/remediate.py")
    output = done.stdout + done.stderr
    # The T4's step failed with the reason; the run went on for the A100 and after the step.
    assert done.returncode == 1, output
    assert re.search(rf"^\s*\[@sim/t4-01\]\s+{re.escape(refusal)}", output, re.M), output
    layout = Counter(
        gi.profile_name for gi in parse_mig_instances(on(a100, "nvidia-smi mig -lgi").stdout)
    )
    assert layout == {"3g.40gb": 4}
    assert on(a100, "systemctl is-active nvidia-persistenced").stdout == "active\n"
    assert on(a100, "systemctl is-enabled nvidia-persistenced").stdout == "enabled\n"
    # The steps before the refused one ran on the T4 too: its sysctl baseline is in place.
    t4 = materialize("t4-01", "t4-01", sim_dir)
    assert (t4.root_dir / "etc/sysctl.d/90-gpuaudit.conf").is_file()
