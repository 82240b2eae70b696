"""A host whose NVIDIA driver was installed by a container: the NVIDIA GPU Operator's driver
container keeps the driver's root at /run/nvidia/driver on the node, and the node's own root
has no nvidia-smi. The collector then runs the nvidia-smi of that root inside it (chroot), as
the Operator's own validator does, and the host is audited like any other.

The simulated host's tools are on PATH without its nvidia-smi, which is placed in the host's
/run/nvidia/driver/usr/bin instead (under GPUAUDIT_ROOT, as every file the collector reads).
``chroot`` is a stand-in first on PATH: it checks the root it is asked for, logs the command
and runs ROOT/usr/bin/TOOL, which is what a real chroot into the driver's root finds there. A
real one needs a complete root file system, and this machine's own root must not be touched.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

from simhelpers import collector_output

from gpuaudit.assemble.build import build_snapshot
from gpuaudit.model.snapshot import HostSnapshot, HostStatus
from gpuaudit.parsers.bundle import parse_bundle_text
from gpuaudit.sim.host import SimHost

DRIVER_ROOT = "/run/nvidia/driver"


def _executable(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _operator_node(host: SimHost, work: Path, nvidia_smi: str | None = None) -> dict[str, str]:
    """The host as a GPU Operator node: its environment, with nvidia-smi only in the driver
    root (``nvidia_smi``: that tool's script instead of the host's)."""
    tools, sysbin = host.env()["PATH"].split(os.pathsep)
    bin_dir = work / "bin"
    bin_dir.mkdir()
    for tool in Path(tools).iterdir():
        if tool.name != "nvidia-smi":
            (bin_dir / tool.name).symlink_to(tool)
    root = Path(host.env()["GPUAUDIT_ROOT"])
    in_root = root / DRIVER_ROOT.lstrip("/") / "usr" / "bin" / "nvidia-smi"
    if nvidia_smi is None:
        in_root.parent.mkdir(parents=True, exist_ok=True)
        in_root.symlink_to(Path(tools) / "nvidia-smi")
    else:
        _executable(in_root, nvidia_smi)
    _executable(
        bin_dir / "chroot",
        "#!/bin/sh\n"
        f'[ "$1" = "{root}{DRIVER_ROOT}" ] || '
        '{ echo "chroot stand-in: asked for $1" >&2; exit 125; }\n'
        "root=$1; shift\n"
        f'echo "$*" >>"{work / "chroot.log"}"\n'
        "tool=$1; shift\n"
        'exec "$root/usr/bin/$tool" "$@"\n',
    )
    return {"PATH": f"{bin_dir}{os.pathsep}{sysbin}"}


def _snapshot(host: SimHost, **env: str) -> tuple[HostSnapshot, str]:
    text = collector_output(host, **env)
    return build_snapshot(host.name, parse_bundle_text(text)), text


def _assert_no_driver_root(node: HostSnapshot, work: Path) -> None:
    assert "driver_root=" not in node.sections["meta"].stdout
    assert not (work / "chroot.log").exists()  # chroot was never run


def test_the_driver_containers_nvidia_smi_audits_the_host(
    make_host: Callable[..., SimHost], tmp_path: Path
) -> None:
    host = make_host("a100-hgx-01")
    plain, _ = _snapshot(host)
    node, _ = _snapshot(host, **_operator_node(host, tmp_path))
    assert len(node.gpus) == 8
    assert node.status == plain.status
    assert node.driver_version == plain.driver_version
    assert [g.uuid for g in node.gpus] == [g.uuid for g in plain.gpus]
    assert node.topology == plain.topology
    assert node.tools["nvidia-smi"] is True
    assert f"driver_root={DRIVER_ROOT}" in node.sections["meta"].stdout
    asked = (tmp_path / "chroot.log").read_text().splitlines()
    assert {"nvidia-smi -q -x", "nvidia-smi topo -m", "nvidia-smi nvlink -e"} <= set(asked)


def test_without_a_driver_root_the_host_has_no_gpu_tooling(
    make_host: Callable[..., SimHost], tmp_path: Path
) -> None:
    host = make_host("a100-hgx-01")
    env = _operator_node(host, tmp_path)
    # GPUAUDIT_DRIVER_ROOT empty: no driver root is looked for.
    node, _ = _snapshot(host, **env, GPUAUDIT_DRIVER_ROOT="")
    assert node.status is HostStatus.NO_GPU_TOOLING
    assert "command not found" in node.sections["nvidia_smi_xml"].stderr
    _assert_no_driver_root(node, tmp_path)


def test_a_host_with_its_own_nvidia_smi_never_uses_the_driver_root(
    make_host: Callable[..., SimHost], tmp_path: Path
) -> None:
    host = make_host("a100-hgx-01")
    env = _operator_node(host, tmp_path)
    tools = host.env()["PATH"].split(os.pathsep)[0]
    os.symlink(Path(tools) / "nvidia-smi", Path(env["PATH"].split(os.pathsep)[0]) / "nvidia-smi")
    node, _ = _snapshot(host, **env)
    assert len(node.gpus) == 8
    _assert_no_driver_root(node, tmp_path)


def test_a_hung_nvidia_smi_in_the_driver_root_is_named_as_the_tool_that_hung(
    make_host: Callable[..., SimHost], tmp_path: Path
) -> None:
    host = make_host("a100-hgx-01")
    env = _operator_node(host, tmp_path, nvidia_smi="#!/bin/sh\nexec sleep 30\n")
    node, _ = _snapshot(host, **env, GPUAUDIT_TIMEOUT="1")
    assert node.sections["nvidia_smi_xml"].rc == 124
    # Every later nvidia-smi call is skipped, and says which tool hung (not "chroot").
    assert node.sections["nvidia_topo"].rc == 124
    assert "skipped: nvidia-smi timed out" in node.sections["nvidia_topo"].stderr
    assert node.status is HostStatus.DRIVER_NOT_RESPONDING
