"""Commands that change a simulated host, and what the next query shows."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable

from simhelpers import run_on

from gpuaudit.sim.host import SimHost


def _gpus(host: SimHost, rc: int = 0) -> list[ET.Element]:
    done = run_on(host, "nvidia-smi", "-q", "-x")
    assert done.returncode == rc, done.stderr
    return ET.fromstring(done.stdout).findall("gpu")


def test_persistence_mode_on_then_kept(make_host: Callable[..., SimHost]) -> None:
    host = make_host("t4-02")
    assert _gpus(host)[0].findtext("persistence_mode") == "Disabled"
    done = run_on(host, "nvidia-smi", "-pm", "1")
    assert done.returncode == 0
    assert done.stdout == "Enabled persistence mode for GPU 00000000:00:1E.0.\nAll done.\n"
    assert _gpus(host)[0].findtext("persistence_mode") == "Enabled"
    # Materialising the host again keeps what commands changed; reset starts afresh.
    assert _gpus(make_host("t4-02"))[0].findtext("persistence_mode") == "Enabled"
    assert _gpus(make_host("t4-02", reset=True))[0].findtext("persistence_mode") == "Disabled"


def test_persistence_follows_nvidia_persistenced(make_host: Callable[..., SimHost]) -> None:
    host = make_host("t4-02")
    assert run_on(host, "systemctl", "is-active", "nvidia-persistenced").stdout == "inactive\n"
    assert run_on(host, "systemctl", "enable", "--now", "nvidia-persistenced").returncode == 0
    assert run_on(host, "systemctl", "is-enabled", "nvidia-persistenced").stdout == "enabled\n"
    assert _gpus(host)[0].findtext("persistence_mode") == "Enabled"
    assert run_on(host, "systemctl", "stop", "nvidia-persistenced").returncode == 0
    assert _gpus(host)[0].findtext("persistence_mode") == "Disabled"


def test_mig_enable_is_pending_while_daemons_hold_the_gpu(
    make_host: Callable[..., SimHost],
) -> None:
    # Ampere applies a MIG mode change through a GPU reset, which DCGM and nvidia-persistenced
    # make fail (the MIG user guide's "Driver Clients" output, NVIDIA/gpu-operator#118).
    host = make_host("a100-hgx-01")
    done = run_on(host, "nvidia-smi", "-i", "0", "-mig", "1")
    assert done.returncode == 0
    assert done.stdout.splitlines()[0] == (
        "Warning: MIG mode is in pending enable state for GPU 00000000:07:00.0:"
        "In use by another client"
    )
    assert done.stdout.endswith("to make MIG mode effective.\nAll done.\n")
    gpu0 = _gpus(host)[0]
    assert gpu0.findtext("mig_mode/current_mig") == "Disabled"
    assert gpu0.findtext("mig_mode/pending_mig") == "Enabled"
    assert run_on(host, "nvidia-smi", "-r", "-i", "0").returncode != 0  # still held
    assert run_on(host, "systemctl", "stop", "nvidia-dcgm").returncode == 0
    held = run_on(host, "nvidia-smi", "-r", "-i", "0")  # persistence mode still holds it
    assert held.returncode == 255
    assert held.stdout.startswith("GPU 00000000:07:00.0 is currently in use by another process.")
    assert run_on(host, "systemctl", "stop", "nvidia-persistenced").returncode == 0
    reset = run_on(host, "nvidia-smi", "-r", "-i", "0")
    assert reset.stdout == "GPU 00000000:07:00.0 was successfully reset.\nAll done.\n"
    assert _gpus(host)[0].findtext("mig_mode/current_mig") == "Enabled"
    assert _gpus(host)[1].findtext("mig_mode/current_mig") == "Disabled"


def test_mig_instances_create_list_destroy(make_host: Callable[..., SimHost]) -> None:
    host = make_host("a100-hgx-01")
    run_on(host, "systemctl", "stop", "nvidia-dcgm", "nvidia-persistenced")
    enabled = run_on(host, "nvidia-smi", "-i", "0", "-mig", "1")
    # Nothing holds the GPU: the driver's own reset applies the mode at once.
    assert enabled.stdout == "Enabled MIG Mode for GPU 00000000:07:00.0\nAll done.\n"
    empty = run_on(host, "nvidia-smi", "mig", "-lgi")
    assert (empty.returncode, empty.stdout) == (6, "No GPU instances found: Not Found\n")
    created = run_on(host, "nvidia-smi", "mig", "-i", "0", "-cgi", "9,3g.40gb", "-C")
    assert created.returncode == 0, created.stdout
    assert created.stdout.splitlines() == [
        "Successfully created GPU instance ID  1 on GPU  0 using profile MIG 3g.40gb (ID  9)",
        "Successfully created compute instance ID  0 on GPU  0 GPU instance ID  1 "
        "using profile MIG 3g.40gb (ID  2)",
        "Successfully created GPU instance ID  2 on GPU  0 using profile MIG 3g.40gb (ID  9)",
        "Successfully created compute instance ID  0 on GPU  0 GPU instance ID  2 "
        "using profile MIG 3g.40gb (ID  2)",
    ]
    listing = run_on(host, "nvidia-smi", "mig", "-lgi").stdout
    assert "|   0  MIG 3g.40gb          9        1          0:4     |" in listing
    assert "|   0  MIG 3g.40gb          9        2          4:4     |" in listing
    gpu0 = _gpus(host)[0]
    devices = gpu0.findall("mig_devices/mig_device")
    assert [d.findtext("gpu_instance_id") for d in devices] == ["1", "2"]
    assert devices[0].findtext("device_attributes/shared/multiprocessor_count") == "42"
    full = run_on(host, "nvidia-smi", "mig", "-i", "0", "-cgi", "19")
    assert full.returncode != 0 and "Insufficient Resources" in full.stdout
    # A GPU instance with a compute instance cannot go; -dci then -dgi clears the GPU.
    assert run_on(host, "nvidia-smi", "mig", "-dgi").returncode != 0
    assert run_on(host, "nvidia-smi", "mig", "-dci").returncode == 0
    assert run_on(host, "nvidia-smi", "mig", "-dgi").returncode == 0
    assert run_on(host, "nvidia-smi", "mig", "-lgi").returncode == 6
    assert run_on(host, "nvidia-smi", "-i", "0", "-mig", "0").returncode == 0
    assert _gpus(host)[0].findtext("mig_mode/current_mig") == "Disabled"


def test_mig_on_a_gpu_without_mig(make_host: Callable[..., SimHost]) -> None:
    done = run_on(make_host("t4-01"), "nvidia-smi", "-i", "0", "-mig", "1")
    assert done.returncode == 3
    assert "Not Supported" in done.stdout


def test_driver_upgrade_without_reboot_then_reboot(make_host: Callable[..., SimHost]) -> None:
    from gpuaudit.sim.state import edit_state

    host = make_host("a100-hgx-03")
    with edit_state(host.state_file) as state:
        state["nvidia"]["driver"]["installed"] = "535.161.08"
    mismatch = run_on(host, "nvidia-smi", "-L")
    assert mismatch.returncode == 18
    assert mismatch.stdout.splitlines() == [
        "Failed to initialize NVML: Driver/library version mismatch",
        "NVML library version: 535.161",
    ]
    assert run_on(host, "reboot").returncode == 0
    assert run_on(host, "nvidia-smi", "-L").returncode == 0
    proc = (host.root_dir / "proc/driver/nvidia/version").read_text()
    assert "535.161.08" in proc


def test_reboot_brings_back_a_gpu_that_fell_off_the_bus(make_host: Callable[..., SimHost]) -> None:
    host = make_host("a100-hgx-05")
    assert len(_gpus(host, rc=15)) == 7
    run_on(host, "reboot")
    assert len(_gpus(host)) == 8
    assert run_on(host, "dmesg").stdout.splitlines() == [  # only the new boot's first line
        "[    0.000000] Linux version 5.15.0-105-generic (buildd@lcy02-amd64-001)"
    ]


def test_holds_and_sysctl(make_host: Callable[..., SimHost]) -> None:
    host = make_host("p100-01")
    assert run_on(host, "apt-mark", "showhold").stdout == ""
    held = run_on(host, "apt-mark", "hold", "nvidia-driver-510")
    assert held.stdout == "nvidia-driver-510 set on hold.\n"
    assert run_on(host, "apt-mark", "showhold").stdout == "nvidia-driver-510\n"
    status = run_on(host, "dpkg-query", "-W", "-f=${Status}", "nvidia-driver-510").stdout
    assert status == "hold ok installed"
    assert run_on(host, "apt-mark", "hold", "no-such-package").returncode == 100
    assert run_on(host, "sysctl", "-w", "net.core.rmem_max=1048576").returncode == 0
    assert run_on(host, "sysctl", "-n", "net.core.rmem_max").stdout == "1048576\n"
    rmem = host.root_dir / "proc/sys/net/core/rmem_max"
    assert rmem.read_text() == "1048576\n"


def test_unknown_invocations_fail_loudly(make_host: Callable[..., SimHost]) -> None:
    host = make_host("t4-01")
    bad = run_on(host, "nvidia-smi", "--no-such-option")
    assert bad.returncode == 2 and "Invalid combination of input arguments" in bad.stderr
    unsimulated = run_on(host, "nvidia-smi", "-q")
    assert unsimulated.returncode == 2 and "not simulated" in unsimulated.stderr
    assert run_on(host, "journalctl", "-u", "ssh").returncode != 0
    assert run_on(host, "dmesg", "--bogus").returncode == 1


def test_real_system_tools_are_out_of_reach(make_host: Callable[..., SimHost]) -> None:
    # A simulated host lacks what its profile lacks, even where this machine has it.
    host = make_host("t4-03")
    for tool in ("nvidia-smi", "dnf", "rocm-smi", "insmod"):
        assert run_on(host, "sh", "-c", f"command -v {tool}").returncode != 0, tool
    assert run_on(host, "sh", "-c", "command -v grep").returncode == 0
    assert run_on(host, "uname", "-n").stdout == "t4-03\n"
    assert run_on(host, "stat", "-c", "%n", "/").stdout == "/\n"


def test_query_gpu_csv(make_host: Callable[..., SimHost]) -> None:
    host = make_host("rtx3090-01")
    done = run_on(
        host,
        "nvidia-smi",
        "--query-gpu=index,name,pci.bus_id,pcie.link.width.current,memory.total",
        "--format=csv,nounits",
    )
    assert done.returncode == 0
    assert done.stdout.splitlines() == [
        "index, name, pci.bus_id, pcie.link.width.current, memory.total",
        "0, NVIDIA GeForce RTX 3090, 00000000:01:00.0, 16, 24576",
        "1, NVIDIA GeForce RTX 3090, 00000000:21:00.0, 8, 24576",
    ]
    assert run_on(host, "nvidia-smi", "--query-gpu=bogus", "--format=csv").returncode == 2


def _with(profile_name: str, **changes: object) -> dict:
    from gpuaudit.sim.profiles import get_profile

    profile = get_profile(profile_name)
    profile.update(changes)
    return profile


def test_compute_processes_are_listed_and_hold_their_gpu(make_host: Callable[..., SimHost]) -> None:
    busy = {0: {"processes": [{"pid": 4242, "name": "python3", "gpu_instance": 3}]}}
    profile = _with("a100-hgx-04")
    profile["gpus"] = {**profile["gpus"], 0: {**profile["gpus"][0], **busy[0]}}
    host = make_host("a100-busy", profile)
    fields = "--query-compute-apps=gpu_bus_id,pid,process_name"
    listed = run_on(host, "nvidia-smi", fields, "--format=csv,noheader")
    assert listed.stdout == "00000000:07:00.0, 4242, python3\n"
    header = run_on(host, "nvidia-smi", fields + ",used_memory", "--format=csv")
    assert header.stdout.splitlines()[0] == "gpu_bus_id, pid, process_name, used_memory [MiB]"
    busy_ci = run_on(host, "nvidia-smi", "mig", "-dci", "-i", "0", "-gi", "3")
    assert busy_ci.returncode == 255
    assert busy_ci.stdout.splitlines() == [
        "Unable to destroy compute instance ID  0 from GPU  0 GPU instance ID  3: "
        "In use by another client",
        "Failed to destroy compute instances: In use by another client",
    ]
    # The process runs in GPU instance 3 only; the others can go, and new ones can be made.
    assert run_on(host, "nvidia-smi", "mig", "-dci", "-i", "0", "-gi", "4").returncode == 0
    assert run_on(host, "nvidia-smi", "mig", "-dgi", "-i", "0", "-gi", "4").returncode == 0
    assert run_on(host, "nvidia-smi", "mig", "-i", "0", "-cgi", "1g.10gb", "-C").returncode == 0
    run_on(host, "systemctl", "stop", "nvidia-dcgm", "nvidia-persistenced")
    reset = run_on(host, "nvidia-smi", "-r", "-i", "0")
    assert reset.returncode == 255
    assert reset.stdout.splitlines()[0] == (
        "GPU 00000000:07:00.0 is currently in use by another process."
    )
    assert run_on(host, "nvidia-smi", "-r", "-i", "1").returncode == 0


def test_nvidia_drm_holds_every_gpu(make_host: Callable[..., SimHost]) -> None:
    from gpuaudit.sim.modules import proc_modules

    host = make_host("a100-drm", _with("a100-hgx-01", faults={"nvidia_drm_loaded": {}}))
    assert proc_modules(host.state()).splitlines()[0] == "nvidia_drm 0 0 - Live 0x0000000000000000"
    assert "nvidia_drm" not in proc_modules(make_host("a100-hgx-01").state())
    run_on(host, "systemctl", "stop", "nvidia-dcgm", "nvidia-persistenced")
    pending = run_on(host, "nvidia-smi", "-i", "0", "-mig", "1")
    assert "pending enable state for GPU 00000000:07:00.0:In use by another client" in (
        pending.stdout
    )
    reset = run_on(host, "nvidia-smi", "-r", "-i", "0,1")
    assert reset.returncode == 255
    assert reset.stdout.splitlines()[-1].startswith(
        "2 devices are currently being used by one or more other processes (e.g., Fabric Manager"
    )
    assert reset.stdout.rstrip().endswith(
        "Please first kill all processes using these devices and all compute applications "
        "running in the system."
    )


def test_hopper_applies_a_mig_mode_change_without_a_reset(
    make_host: Callable[..., SimHost],
) -> None:
    host = make_host("h100-01")
    done = run_on(host, "nvidia-smi", "-i", "0", "-mig", "1")  # daemons running: no matter
    assert done.stdout == "Enabled MIG Mode for GPU 00000000:19:00.0\nAll done.\n"
    assert _gpus(host)[0].findtext("mig_mode/current_mig") == "Enabled"
    profile = _with("h100-01", gpus={1: {"processes": [{"pid": 7, "name": "vllm"}]}})
    busy = make_host("h100-busy", profile)
    held = run_on(busy, "nvidia-smi", "-i", "1", "-mig", "1")
    assert "pending enable state for GPU 00000000:3B:00.0:In use by another client" in held.stdout
    assert _gpus(busy)[1].findtext("mig_mode/current_mig") == "Disabled"


def test_h100_host_shows_the_h100_capture(make_host: Callable[..., SimHost]) -> None:
    from pathlib import Path

    from gpuaudit.parsers.nvidia_text import parse_nvidia_smi_text
    from gpuaudit.parsers.nvidia_xml import parse_nvidia_smi_xml

    capture = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi-q"
    text = capture / "gpud-8x-h100-80gb-hbm3-driver535.161.08-hw-slowdown.nvidia-smi-q.txt"
    real = parse_nvidia_smi_text(text.read_text())
    sim = parse_nvidia_smi_xml(run_on(make_host("h100-01"), "nvidia-smi", "-q", "-x").stdout)
    assert (sim.driver_version, sim.cuda_version) == (real.driver_version, real.cuda_version)
    fields = ("name", "architecture", "vbios_version", "inforom_image", "memory_total_mib",
              "pcie_gen_max", "power_limit_w", "pci_bus_id", "mig_mode_current")  # fmt: skip
    for simulated, captured in zip(sim.gpus, real.gpus, strict=True):
        for name in fields:
            assert getattr(simulated, name) == getattr(captured, name), name
