"""MIG remediation without a host: the fact's parsing, the plan, and the read-back check."""

from __future__ import annotations

import csv
import dataclasses
import os
import subprocess
from pathlib import Path

import pytest

from gpuaudit.facts.mig import QUERY_FIELDS, MigState, read_mig_state
from gpuaudit.model.mig_spec import read_mig_configs
from gpuaudit.operations.mig_commands import plan_commands, verify_command
from gpuaudit.operations.mig_models import resets_to_change_mode
from gpuaudit.operations.mig_plan import (
    GpuMig,
    GpuProcess,
    HostMig,
    MigPlan,
    format_gpus,
    plan_mig,
)
from gpuaudit.sim.nvidia_smi import DRIVER_NOT_LOADED

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
A100, H100 = "NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"
NONCE = "t3st"


def framed(**sections: tuple[int, str]) -> list[str]:
    lines = []
    for name, (rc, text) in sections.items():
        lines += [
            f"@@{NONCE} begin {name}@@",
            *text.splitlines(),
            f"@@{NONCE} end {name} rc={rc}@@",
        ]
    return lines


def h100_query_row() -> str:
    """The fact's fields, in its order, from a real H100 capture (--query-gpu, MIG enabled)."""
    path = FIXTURES / "query-csv" / "utk-h100-mig-driver590-load-query-gpu-all-fields.csv"
    header, values = list(csv.reader(path.read_text().splitlines(), skipinitialspace=True))[:2]
    cells = dict(zip((h.split(" [")[0] for h in header), values, strict=True))
    return ", ".join(cells[field] for field in QUERY_FIELDS)


def test_command_frames_every_section_with_the_nonce() -> None:
    command = MigState().command(nonce=NONCE)
    for section in ("gpus", "gi", "ci", "apps", "modules"):
        assert f"ga_mig {section} " in command
    assert "--query-gpu=index,name,pci.bus_id,pci.device_id,mig.mode.current," in command
    assert "--query-compute-apps=gpu_bus_id,pid,process_name --format=csv,noheader" in command
    assert '"$GPUAUDIT_ROOT/proc/modules"' in command
    assert MigState().command() != MigState().command()
    with pytest.raises(ValueError):
        MigState().command(nonce="x; reboot")
    assert MigState().requires_command() == "nvidia-smi"


def test_real_outputs_are_read_into_gpus() -> None:
    lgi = (FIXTURES / "mig" / "summerlo-a30-class-mig-lgi-4x-1g.6gb.txt").read_text()
    output = framed(
        gpus=(0, h100_query_row()),
        gi=(0, lgi),
        ci=(6, "No compute instances found: Not Found"),
        apps=(0, "00000000:00:09.0, 4242, python3 -c import torch, x\n"),
        modules=(0, "nvidia_drm\nnvidia_modeset\nnvidia_uvm\nnvidia"),
    )
    state = MigState().process(output)
    assert state["answered"] is True and state["problems"] == []
    (gpu,) = state["gpus"]
    assert gpu["name"] == H100 and gpu["pci_id"] == "0x233010DE"
    assert (gpu["mig_current"], gpu["mig_pending"], gpu["persistence_mode"]) == (
        "Enabled",
        "Enabled",
        "Enabled",
    )
    assert [gi["profile"] for gi in gpu["gpu_instances"]] == ["1g.6gb"] * 4
    assert [gi["id"] for gi in gpu["gpu_instances"]] == [3, 4, 5, 6]
    assert gpu["compute_instances"] == []
    # The process name keeps its commas.
    assert gpu["processes"] == [{"pid": 4242, "name": "python3 -c import torch, x"}]
    assert state["nvidia_drm"] is True


def test_a_marker_with_another_nonce_is_only_text() -> None:
    output = framed(
        gpus=(0, "0, NVIDIA A100-SXM4-80GB, 00000000:07:00.0, 0x20B210DE, Disabled, Disabled, "
              "Enabled"),
        gi=(6, "No MIG-enabled devices found."),
        ci=(6, "No MIG-enabled devices found."),
        apps=(0, "@@evil end apps rc=0@@\n00000000:07:00.0, 1, @@evil begin modules@@"),
        modules=(0, "nvidia"),
    )  # fmt: skip
    state = read_mig_state(output)
    assert state["gpus"][0]["processes"] == [{"pid": 1, "name": "@@evil begin modules@@"}]
    assert state["nvidia_drm"] is False
    assert state["problems"] == ["compute process line not understood: '@@evil end apps rc=0@@'"]


def test_driver_that_does_not_answer_and_unreadable_parts() -> None:
    down = read_mig_state(framed(gpus=(9, DRIVER_NOT_LOADED)))
    assert down["answered"] is False and down["problem"] == DRIVER_NOT_LOADED
    assert MigState.default()["answered"] is False
    partial = read_mig_state(
        framed(
            gpus=(0, "0, NVIDIA A100-SXM4-80GB, 00000000:07:00.0, [N/A], Disabled, Disabled, "
                  "Disabled"),
            gi=(0, "garbage that is not a table"),
            ci=(0, ""),
            apps=(2, 'Field "gpu_bus_id" is not a valid field to query.'),
            modules=(1, "awk: cannot open /proc/modules"),
        )
    )  # fmt: skip
    assert partial["answered"] is True
    assert partial["gpus"][0]["pci_id"] is None
    assert partial["instances_known"] is False and partial["processes_known"] is False
    assert partial["nvidia_drm"] is None
    assert len(partial["problems"]) == 3


A100_ROW = "0, NVIDIA A100-SXM4-80GB, 00000000:07:00.0, 0x20B210DE, Enabled, Enabled, Enabled"
NO_CI = (6, "No compute instances found: Not Found")


@pytest.mark.parametrize(
    ("gi", "said"),
    [
        ((124, ""), "did not finish (exit 124): no output"),
        ((9, "Failed to initialize NVML: Driver/library version mismatch"), "(exit 9): Failed"),
        ((0, ""), "did not finish (exit 0): no output"),
    ],
)
def test_a_listing_that_did_not_finish_leaves_the_instances_unknown(
    gi: tuple[int, str], said: str
) -> None:
    # Read as "no instances", a timed-out `mig -lgi` had the operation create a second set of
    # GPU instances beside the ones that exist.
    state = read_mig_state(
        framed(gpus=(0, A100_ROW), gi=gi, ci=NO_CI, apps=(0, ""), modules=(0, "nvidia"))
    )
    assert state["answered"] is True and state["instances_known"] is False
    assert said in state["problems"][0]
    plan = plan_mig(HostMig.from_facts(state, {}), "all-3g", CONFIGS["all-3g"])
    assert plan.unknown and not plan.changes


def test_a_listing_cut_off_mid_table_is_not_the_instances() -> None:
    # The first rows of a real listing, then the timeout: the rows it printed are not all.
    lgi = (FIXTURES / "mig" / "summerlo-a30-class-mig-lgi-4x-1g.6gb.txt").read_text()
    cut = "\n".join(lgi.splitlines()[:-3])
    state = read_mig_state(
        framed(gpus=(0, A100_ROW), gi=(124, cut), ci=NO_CI, apps=(0, ""), modules=(0, "nvidia"))
    )
    assert state["instances_known"] is False
    assert state["gpus"][0]["gpu_instances"] == []
    whole = read_mig_state(
        framed(gpus=(0, A100_ROW), gi=(0, lgi), ci=NO_CI, apps=(0, ""), modules=(0, "nvidia"))
    )
    assert whole["instances_known"] is True and len(whole["gpus"][0]["gpu_instances"]) == 4


def test_a_process_line_that_cannot_be_placed_leaves_the_processes_unknown() -> None:
    state = read_mig_state(
        framed(
            gpus=(0, A100_ROW),
            gi=(6, "No GPU instances found: Not Found"),
            ci=NO_CI,
            apps=(0, "00000000:07:00.0, 4242, python3\n00000000:99:00.0, 77, hidden\n"),
            modules=(0, "nvidia"),
        )
    )
    assert state["instances_known"] is True and state["processes_known"] is False
    assert state["gpus"][0]["processes"] == [{"pid": 4242, "name": "python3"}]
    assert state["problems"] == [
        "compute process line not understood: '00000000:99:00.0, 77, hidden'"
    ]


# --- the plan ---------------------------------------------------------------------------------

CONFIGS = read_mig_configs(
    {
        "version": "v1",
        "mig-configs": {
            "all-3g": [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}],
            "a100-only": [
                {"devices": "all", "mig-enabled": False},
                {
                    "device-filter": ["0x20B210DE"],
                    "devices": "all",
                    "mig-enabled": True,
                    "mig-devices": {"1g.10gb": 3, "4g.40gb": 1},
                },
            ],
            "gpu1": [{"devices": [1], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}],
            "three-3g": [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 3}}],
            "ci-profile": [
                {"devices": "all", "mig-enabled": True, "mig-devices": {"1c.3g.40gb": 2}}
            ],
        },
    }
)  # fmt: skip


def gpu(index: int, name: str = A100, mode: str | None = "Disabled", **changes) -> GpuMig:
    pci = {A100: "0x20B210DE", H100: "0x233010DE"}.get(name)
    values = dict(bus_id=f"00000000:{index:02X}:00.0", pci_id=pci, mig_current=mode,
                  mig_pending=mode, persistence_mode="Disabled")  # fmt: skip
    values.update(changes)
    return GpuMig(index=index, name=name, **values)


def plan(gpus: list[GpuMig], config: str, stop: bool = False, **host) -> MigPlan:
    return plan_mig(HostMig(gpus=tuple(gpus), **host), config, CONFIGS[config], stop)


def test_device_filter_and_last_entry_win_per_gpu() -> None:
    result = plan([gpu(0), gpu(1, H100)], "a100-only")
    assert result.matched == (0, 1)
    (change,) = result.changes  # the H100 wants MIG off and has it off
    assert change.index == 0 and change.create == ("4g.40gb", "1g.10gb", "1g.10gb", "1g.10gb")
    assert change.wanted_instances == ("1g.10gb", "1g.10gb", "1g.10gb", "4g.40gb")
    assert change.reset and change.set_mode


def test_gpus_without_an_entry_are_left_alone() -> None:
    result = plan([gpu(0), gpu(1)], "gpu1")
    assert result.matched == (1,) and [c.index for c in result.changes] == [1]
    assert plan([gpu(0)], "gpu1").matched == ()


def test_only_ampere_needs_a_reset_and_only_then_do_holders_matter() -> None:
    daemons = ("nvidia-dcgm.service", "nvidia-persistenced.service")
    hopper = plan([gpu(0, H100)], "all-3g", active_units=daemons, nvidia_drm=True)
    assert hopper.refusals == () and not hopper.changes[0].reset
    hopper_stop = plan([gpu(0, H100)], "all-3g", stop=True, active_units=daemons)
    assert hopper_stop.stop_units == ()
    ampere = plan([gpu(0)], "all-3g", stop=True, active_units=daemons)
    assert ampere.refusals == () and ampere.stop_units == daemons
    commands = plan_commands(ampere)
    held = commands[0].splitlines()
    assert held[:3] == [
        "(",
        "set -e",
        "systemctl stop nvidia-dcgm.service nvidia-persistenced.service",
    ]
    # Started again whether or not the steps between succeeded.
    restart = "systemctl start nvidia-persistenced.service nvidia-dcgm.service || ga_undo=1"
    assert held.index(restart) > held.index(")")
    assert commands[1] == verify_command(ampere) and len(commands) == 2
    unknown_drm = plan([gpu(0)], "all-3g", nvidia_drm=None, problems=("modules: no file",))
    assert unknown_drm.refusals[0].startswith("cannot tell whether nvidia_drm is loaded")


def test_a_masked_daemon_that_runs_still_holds_the_gpus_and_is_never_stopped() -> None:
    units = {
        "nvidia-dcgm.service": {"active": "active", "enabled": "masked"},
        "nvidia-persistenced.service": {"active": "active", "enabled": "masked-runtime"},
        "nvsm.service": {"active": "inactive", "enabled": "masked"},  # masked and stopped
        "dcgm-exporter.service": {"active": "activating", "enabled": "enabled"},
    }
    state = {"gpus": [], "instances_known": True, "processes_known": True, "nvidia_drm": False}
    host = HostMig.from_facts(state, units)
    assert host.active_units == ("dcgm-exporter.service",)
    assert host.masked_running == ("nvidia-dcgm.service", "nvidia-persistenced.service")
    gpus = (gpu(0, persistence_mode="Enabled"),)
    for stop in (False, True):
        result = plan_mig(dataclasses.replace(host, gpus=gpus), "all-3g", CONFIGS["all-3g"], stop)
        masked = [r for r in result.refusals if "masked" in r]
        assert masked == [
            "nvidia-dcgm.service, nvidia-persistenced.service are masked but running and hold "
            "the GPUs, so the GPU reset that the MIG mode change of GPU 0 needs would fail; a "
            "masked unit stopped here could not be started again, so stop_services leaves it "
            "alone: stop it by hand (systemctl stop nvidia-dcgm.service "
            "nvidia-persistenced.service) or unmask it (systemctl unmask nvidia-dcgm.service "
            "nvidia-persistenced.service)"
        ]
        # The running persistenced explains persistence mode: no second refusal for it.
        assert not any("nvidia-smi -pm 1" in r for r in result.refusals)
        assert "nvidia-dcgm.service" not in result.stop_units
    # A Hopper mode change needs no reset: what holds the GPUs does not matter.
    hopper = dataclasses.replace(host, gpus=(gpu(0, H100),))
    assert plan_mig(hopper, "all-3g", CONFIGS["all-3g"]).refusals == ()


@pytest.mark.parametrize(
    ("name", "resets"),
    [
        (A100, True),
        ("NVIDIA A100-PCIE-40GB", True),
        ("A100-SXM4-40GB", True),
        ("NVIDIA A30", True),
        ("NVIDIA A800 80GB PCIe", True),
        (H100, False),
        ("NVIDIA H200", False),
        ("NVIDIA B200", False),
    ],
)
def test_which_generations_reset(name: str, resets: bool) -> None:
    assert resets_to_change_mode(name) is resets


def test_profiles_are_checked_against_the_model() -> None:
    assert (
        "does not fit (9/7 compute and 12/8 memory slices)"
        in plan([gpu(0)], "three-3g").refusals[0]
    )
    assert "compute-instance profiles (1c.3g.40gb)" in plan([gpu(0)], "ci-profile").refusals[0]
    # Judged by GPU instance, as the audit does: in place, nothing to refuse.
    gis = ((1, "3g.40gb"), (2, "3g.40gb"))
    ci = gpu(0, mode="Enabled", gpu_instances=gis, compute_instances=((1, 0), (2, 0)))
    assert plan([ci], "ci-profile").in_sync
    t4 = plan([gpu(0, "Tesla T4", mode=None)], "all-3g")
    assert t4.impossible == ("GPU 0 (Tesla T4) does not support MIG, the config wants it enabled",)
    assert not t4.in_sync and t4.changes == ()
    # A model the table lacks: the driver and the read-back check decide.
    assert plan([gpu(0, "NVIDIA B200")], "three-3g").refusals == ()


def test_instances_without_a_compute_instance_are_rebuilt() -> None:
    gis = ((1, "3g.40gb"), (2, "3g.40gb"))
    complete = gpu(0, mode="Enabled", gpu_instances=gis, compute_instances=((1, 0), (2, 0)))
    assert plan([complete], "all-3g").in_sync
    half = gpu(0, mode="Enabled", gpu_instances=gis, compute_instances=((1, 0),))
    (change,) = plan([half], "all-3g").changes
    assert change.differences == ("1 GPU instance(s) without exactly one compute instance",)
    assert change.destroy_compute and change.destroy_gpu and not change.set_mode


def test_what_cannot_be_read_blocks() -> None:
    enabled = gpu(0, mode="Enabled")
    assert plan([enabled], "all-3g", instances_known=False).unknown
    busy = gpu(0, processes=(GpuProcess(7, "x"),))
    assert (
        plan([gpu(0)], "all-3g", processes_known=False)
        .refusals[0]
        .startswith("cannot tell which GPUs run compute processes")
    )
    assert "runs compute processes (pid 7 x)" in plan([busy], "all-3g").refusals[0]


def test_format_gpus() -> None:
    assert format_gpus([0, 1, 2, 3, 5, 7, 8]) == "0-3, 5, 7, 8"
    assert format_gpus([4]) == "4"


# --- the read-back check, on a real -lgi capture ------------------------------------------------


def test_verify_reads_a_real_lgi_listing(tmp_path: Path) -> None:
    lgi = FIXTURES / "mig" / "summerlo-a30-class-mig-lgi-4x-1g.6gb.txt"
    lci_rows = "".join(
        f"|   0  {gi:>5}       MIG 1g.6gb     0    0    0:1 |\n" for gi in (3, 4, 5, 6)
    )
    fake = tmp_path / "nvidia-smi"
    fake.write_text(
        "#!/bin/sh\n"
        'case "$*" in\n'
        f'  *-lgi*) cat "{lgi}" ;;\n'
        f"  *-lci*) printf '%s' '{lci_rows}' ;;\n"
        "  *mig.mode.current*) echo Enabled ;;\n"
        "esac\n"
    )  # fmt: skip
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}

    def check(profiles: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
        (change,) = plan([gpu(0, "NVIDIA A30")], "all-3g").changes
        wanted = dataclasses.replace(change, wanted_instances=profiles)
        command = verify_command(MigPlan("site-a30", (0,), (wanted,)))
        return subprocess.run(["sh", "-c", command], env=env, capture_output=True, text=True)

    assert check(("1g.6gb",) * 4).returncode == 0
    short = check(("1g.6gb",) * 3)
    assert short.returncode == 1
    assert short.stderr.splitlines() == [
        "GPU 0: GPU instances [1g.6gb 1g.6gb 1g.6gb 1g.6gb] and 4 compute instance(s), "
        "wanted [1g.6gb 1g.6gb 1g.6gb] and 3",
        "MIG config site-a30 is not in place on the GPUs above",
    ]


def test_the_fact_script_runs_in_a_real_shell(tmp_path: Path) -> None:
    bin_dir, root = tmp_path / "bin", tmp_path / "root"
    bin_dir.mkdir()
    fake = bin_dir / "nvidia-smi"
    fake.write_text(
        "#!/bin/sh\n"
        'case "$*" in\n'
        "  *--query-gpu*) echo '0, NVIDIA A100-SXM4-80GB, 00000000:07:00.0, 0x20B210DE, "
        "Disabled, Disabled, Enabled' ;;\n"
        "  *mig*) echo 'No MIG-enabled devices found.'; exit 6 ;;\n"
        "esac\n"
    )
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    env["GPUAUDIT_ROOT"] = str(root)

    def read() -> dict:
        script = MigState().command()
        done = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True)
        return MigState().process(done.stdout.splitlines())

    # A simulated host's root without the file: not this machine's modules, but "unknown".
    unknown = read()
    assert unknown["answered"] and unknown["instances_known"] and unknown["processes_known"]
    assert unknown["nvidia_drm"] is None
    assert unknown["problems"][0].startswith("loaded kernel modules unreadable: awk:")
    (root / "proc").mkdir(parents=True)
    (root / "proc" / "modules").write_text("nvidia_drm 77824 4 - Live 0x0\nnvidia 1 2 - Live 0x0\n")
    assert read()["nvidia_drm"] is True
    # `timeout` killed `nvidia-smi mig -lgi`: the instances are unknown, not none.
    fake.write_text(fake.read_text().replace("  *mig*)", "  'mig -lgi') exit 124 ;;\n  *mig*)"))
    hung = read()
    assert hung["answered"] and hung["instances_known"] is False
    assert "nvidia-smi mig -lgi did not finish (exit 124): no output" in hung["problems"]


# --- which GPU a command changes --------------------------------------------------------------


def test_commands_name_each_gpu_by_the_bus_id_read_for_it() -> None:
    # The A100 at 0F:00.0 is GPU 0 now (the one at 07:00.0 did not come up after a reboot): the
    # plan made for it aims at 0F:00.0, so a GPU renumbered before the commands run is never
    # given this layout, and a missing one makes nvidia-smi fail instead.
    renumbered = gpu(0, bus_id="00000000:0F:00.0", persistence_mode="Enabled")
    result = plan([renumbered], "all-3g", stop=True)
    assert result.changes[0].target == "00000000:0F:00.0" and result.refusals == ()
    commands = plan_commands(result)
    text = "\n".join(commands)
    for step in ("-pm 0", "-pm 1", "-mig 1", "-cgi 3g.40gb,3g.40gb -C", "--query-gpu"):
        assert f"-i 00000000:0F:00.0 {step}" in text, step
    assert "nvidia-smi -r -i 00000000:0F:00.0\n" in text
    assert "ga_check 00000000:0F:00.0 Enabled '3g.40gb 3g.40gb' 0" in commands[-1]
    assert " -i 0 " not in text and " -i 0\n" not in text
    relayout = gpu(0, bus_id="00000000:0F:00.0", mode="Enabled",
                   gpu_instances=((1, "7g.80gb"),), compute_instances=((1, 0),))  # fmt: skip
    text = "\n".join(plan_commands(plan([relayout], "all-3g")))
    assert "mig -dci -i 00000000:0F:00.0\n" in text and "mig -dgi -i 00000000:0F:00.0\n" in text


@pytest.mark.parametrize("bus_id", ["[N/A]", "", "Unknown Error", "0; reboot", "00000000:0F:00"])
def test_a_gpu_without_a_bus_id_of_its_own_is_refused_not_guessed(bus_id: str) -> None:
    result = plan([gpu(0), gpu(1, bus_id=bus_id)], "all-3g")
    (refusal,) = result.refusals
    assert refusal.startswith(f"GPU 1 ({A100}): nvidia-smi gave no PCI bus id for it")
    assert result.changes[1].target is None
    with pytest.raises(ValueError, match="GPU 1: no PCI bus id"):
        plan_commands(result)
    # A GPU that is already as wanted needs no command: its bus id does not matter.
    enabled = gpu(1, bus_id=bus_id, mode="Enabled",
                  gpu_instances=((1, "3g.40gb"), (2, "3g.40gb")),
                  compute_instances=((1, 0), (2, 0)))  # fmt: skip
    assert plan([enabled], "all-3g").in_sync


def test_two_gpus_listed_with_one_bus_id_are_refused() -> None:
    twins = [gpu(0), gpu(1, bus_id="0000:00:00.0")]  # the same address, shorter spelling
    refusals = plan(twins, "all-3g").refusals
    assert [r.split(":", 1)[0] for r in refusals] == [f"GPU 0 ({A100})", f"GPU 1 ({A100})"]
    assert all("is listed for more than one GPU" in r for r in refusals)
