"""Offline audits: collector bundles give the register a live audit of the same hosts gives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from gpuaudit.sim.host import materialize

REPO = Path(__file__).resolve().parents[2]
PROFILES = ("a100-hgx-02", "v100-02", "t4-02", "p100-01")


def _gpuaudit(*args: str, env: dict[str, str] | None = None, cwd: Path = REPO):
    return subprocess.run(
        [sys.executable, "-m", "gpuaudit.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _findings(register: dict) -> set[tuple[str, str, int | None, str]]:
    return {(f["rule"], f["host"], f["gpu"], f["message"]) for f in register["findings"]}


def test_bundles_give_the_same_register_as_a_live_audit(tmp_path: Path) -> None:
    sims = tmp_path / "sim"
    script = _gpuaudit("collect-script")
    assert script.returncode == 0
    collect = tmp_path / "collect.sh"
    collect.write_text(script.stdout)

    # Offline: each host runs the collector by itself and sends the file.
    bundles = []
    for name in PROFILES:
        host = materialize(name, name, sims)
        bundle = tmp_path / f"@sim_{name}.bundle"
        with bundle.open("wb") as out:
            subprocess.run(["sh", str(collect)], env=host.env(), stdout=out, check=True)
        bundles.append(str(bundle))
    offline = _gpuaudit("report", "--bundle", *bundles, "--reports-dir", str(tmp_path / "off"),
                        "--run-id", "offline")  # fmt: skip
    assert offline.returncode == 0, offline.stderr
    offline_register = json.loads((tmp_path / "off/offline/register.json").read_text())

    # Live: the same hosts through pyinfra.
    inventory = tmp_path / "inventory.py"
    inventory.write_text(f"hosts = {[f'@sim/{name}' for name in PROFILES]!r}\n")
    env = dict(os.environ, GPUAUDIT_SIM_DIR=str(sims))
    live = _gpuaudit("audit", str(inventory), "--reports-dir", str(tmp_path / "live"),
                     "--run-id", "live", env=env, cwd=tmp_path)  # fmt: skip
    assert live.returncode == 0, live.stderr[-3000:]
    live_register = json.loads((tmp_path / "live/live/register.json").read_text())

    # Host names differ only in how a file name can spell "@sim/…".
    renamed = {
        (rule, host.replace("@sim_", "@sim/"), gpu, message)
        for rule, host, gpu, message in _findings(offline_register)
    }
    assert renamed == _findings(live_register)
    assert {"GA304", "GA101", "GA401", "GA602"} <= {f[0] for f in renamed}
    statuses = {h["name"]: h["status"] for h in offline_register["hosts"]}
    assert statuses["@sim_v100-02"] == "driver_not_responding"


def test_a_file_that_is_not_a_bundle_is_a_failed_host(tmp_path: Path) -> None:
    junk = tmp_path / "gpu-07.bundle"
    junk.write_bytes(b"\xff\xfe not collector output\n")
    result = _gpuaudit("report", "--bundle", str(junk), "--reports-dir", str(tmp_path / "r"),
                       "--run-id", "junk")  # fmt: skip
    assert result.returncode == 0, result.stderr
    register = json.loads((tmp_path / "r/junk/register.json").read_text())
    assert [(h["name"], h["status"]) for h in register["hosts"]] == [
        ("gpu-07", "collection_failed")
    ]
    assert [f["rule"] for f in register["findings"]] == ["GA001"]


def test_report_needs_a_run_dir_or_bundles() -> None:
    result = _gpuaudit("report")
    assert result.returncode == 2
    assert "either a run directory or --bundle" in result.stderr


def test_a_bundle_file_larger_than_any_collector_writes_is_read_only_in_part(
    tmp_path: Path,
) -> None:
    from gpuaudit.offline import snapshot_from_bundle
    from gpuaudit.parsers.limits import INPUT_BYTES

    script = _gpuaudit("collect-script")
    collect = tmp_path / "collect.sh"
    collect.write_text(script.stdout)
    host = materialize("t4-02", "t4-02", tmp_path / "sim")
    real = subprocess.run(
        ["sh", str(collect)], env=host.env(), capture_output=True, check=True
    ).stdout
    # The real bundle, then gigabytes of nothing (a sparse file: no disk is spent on them).
    huge = tmp_path / "t4-02.bundle"
    with huge.open("wb") as out:
        out.write(real[: len(real) // 2])
        out.truncate(4 * 1024**3)
    snapshot = snapshot_from_bundle(huge)
    assert snapshot.host == "t4-02"
    said = json.dumps(snapshot.to_dict())
    assert f"only its first {INPUT_BYTES} bytes were read" in said
