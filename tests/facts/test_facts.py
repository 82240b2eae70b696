"""Data-driven fact tests in pyinfra's layout: tests/facts/<module.Fact>/<case>.json holds the
fact's arguments, the host's output lines and the fact value they must give."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from gpuaudit.collect import collector_script, packed_collector, packed_command, unpacked_command
from gpuaudit.facts.gpu import GpuAuditSections

HERE = Path(__file__).parent
FACTS = {"gpu.GpuAuditSections": GpuAuditSections}
CASES = sorted(HERE.glob("*/*.json"))

EXPECTED_SECTIONS = {
    "meta", "tools", "os_release", "nvidia_smi_xml", "nvidia_topo", "mig_gi", "mig_ci",
    "driver_proc", "kernel_log", "kernel_log_previous", "packages", "package_holds", "sysctl",
    "services", "device_nodes", "lspci", "rocm_smi", "amd_smi", "nvml", "nvlink_status",
    "nvlink_errors", "monitoring",
}  # fmt: skip
# Asked for only where Slurm is installed (this machine has it for the Slurm tests).
SLURM_SECTIONS = {"slurm_node", "slurm_conf", "slurm_gres_conf", "slurmd_conf", "slurmd_gres"}


@pytest.mark.parametrize("case", CASES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_fact_case(case: Path) -> None:
    data = json.loads(case.read_text(encoding="utf-8"))
    fact = FACTS[case.parent.name]()
    command = fact.command(**data.get("arg", {}))
    assert command == collector_script(data["arg"]["nonce"], comments=False)
    assert fact.process(data["output"]) == data["fact"]


def test_every_case_folder_names_a_known_fact() -> None:
    assert {p.parent.name for p in CASES} == set(FACTS)


def test_command_is_one_script_running_every_section() -> None:
    command = GpuAuditSections().command(nonce="t0t0")
    for section in EXPECTED_SECTIONS:
        assert f"ga_section {section} " in command
    # No nonce given: each run gets a fresh one.
    assert GpuAuditSections().command() != GpuAuditSections().command()


def test_nonce_cannot_inject_shell() -> None:
    with pytest.raises(ValueError):
        GpuAuditSections().command(nonce="x; rm -rf /")


def test_default_marks_not_collectable() -> None:
    assert GpuAuditSections.default()["complete"] is False


def test_collector_runs_in_a_real_shell_without_gpu_tools(tmp_path: Path) -> None:
    """On a machine with no GPU tooling every section is still framed and reports why."""
    script = collector_script("real01")
    empty_path = tmp_path / "bin"
    empty_path.mkdir()
    result = subprocess.run(
        ["sh", "-c", f"PATH=/usr/bin:/bin; export PATH; {script}"],
        capture_output=True,
        text=True,
        check=True,
    )
    fact = GpuAuditSections().process(result.stdout.splitlines())
    assert fact["complete"] is True
    assert fact["problems"] == []
    slurm = shutil.which("scontrol", path="/usr/bin:/bin") or shutil.which(
        "slurmd", path="/usr/bin:/bin"
    )
    assert set(fact["sections"]) == EXPECTED_SECTIONS | (SLURM_SECTIONS if slurm else set())
    sections = fact["sections"]
    if "nvidia-smi=0" in sections["tools"]["stdout"]:
        assert sections["nvidia_smi_xml"]["rc"] == 127
        assert "nvidia-smi: command not found" in sections["nvidia_smi_xml"]["stderr"]
    assert "kernel=" in sections["meta"]["stdout"]
    assert sections["os_release"]["rc"] == 0


def test_collector_reads_files_under_gpuaudit_root(tmp_path: Path) -> None:
    (tmp_path / "proc/driver/nvidia").mkdir(parents=True)
    (tmp_path / "proc/driver/nvidia/version").write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.127.05  Tue Oct  8 03:22:07 UTC 2024\n"
    )
    (tmp_path / "proc/sys/net/core").mkdir(parents=True)
    (tmp_path / "proc/sys/net/core/rmem_max").write_text("212992\n")
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev/nvidia0").write_text("")
    (tmp_path / "dev/nvidia0").chmod(0o666)
    script = collector_script("root01")
    result = subprocess.run(
        ["sh", "-c", f"GPUAUDIT_ROOT={shlex.quote(str(tmp_path))}; export GPUAUDIT_ROOT; {script}"],
        capture_output=True,
        text=True,
        check=True,
    )
    sections = GpuAuditSections().process(result.stdout.splitlines())["sections"]
    assert "550.127.05" in sections["driver_proc"]["stdout"]
    # Errors name the host's path, not where the root is mounted.
    assert sections["os_release"]["rc"] == 1
    assert sections["os_release"]["stderr"] == "/etc/os-release: No such file or directory\n"
    assert sections["sysctl"]["stdout"] == "net.core.rmem_max = 212992\n"
    assert sections["device_nodes"]["stdout"].startswith("666 ")
    assert sections["device_nodes"]["stdout"].split()[-1] == "/dev/nvidia0"  # root stripped


def test_kernel_log_is_filtered_and_bounded(tmp_path: Path) -> None:
    """A huge kernel log: only matching lines travel, the newest ones, each cut to 2 KiB."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    dmesg = bin_dir / "dmesg"
    dmesg.write_text(
        "#!/bin/sh\n"
        "i=0; while [ $i -lt 7000 ]; do\n"
        '  echo "[ $i.000000] NVRM: Xid (PCI:0000:3b:00): 13, pid=1, Graphics Exception"\n'
        '  echo "[ $i.000001] eth0: link up"\n'
        "  i=$((i+1)); done\n"
        "printf '[ 9999.0] NVRM: %05000d\\n' 0\n"
    )
    dmesg.chmod(0o755)
    script = collector_script("klog01")
    result = subprocess.run(
        ["sh", "-c", f"PATH={shlex.quote(str(bin_dir))}:/usr/bin:/bin; {script}"],
        capture_output=True,
        text=True,
        check=True,
    )
    section = GpuAuditSections().process(result.stdout.splitlines())["sections"]["kernel_log"]
    lines = section["stdout"].splitlines()
    assert len(lines) == 5000
    assert section["truncated"] is True
    assert "lines=7001 max=5000" in section["stderr"]
    assert not any("eth0" in line for line in lines)
    assert lines[0].startswith("[ 2001.000000] NVRM: Xid")  # the newest lines are kept
    assert len(lines[-1]) == 2048


def test_packed_command_unpacks_to_the_plain_command_with_its_settings() -> None:
    """What the host unpacks and runs is the plain command, settings and nonce included."""
    fact = GpuAuditSections()
    for options in ({}, {"command_timeout": 12, "dcgm_diag_level": 1, "dcgm_diag_timeout": 90}):
        packed = fact.command(nonce="pack01", packed=True, **options)
        assert unpacked_command(packed) == fact.command(nonce="pack01", **options)


def test_packed_collector_sends_every_host_the_same_packed_text() -> None:
    """The packed text is compressed once for a run: only the assignments in front of it
    (the nonce, the settings) differ between hosts."""
    first = GpuAuditSections().command(nonce="hostA1", command_timeout=60, packed=True)
    second = GpuAuditSections().command(nonce="hostB2", command_timeout=5, packed=True)
    assert first != second
    payload = re.compile(r"printf %s ([A-Za-z0-9+/=]+) \|")
    first_text, second_text = payload.search(first), payload.search(second)
    assert first_text is not None and second_text is not None
    assert first_text.group(1) == second_text.group(1)
    assert "hostA1" not in first_text.group(1) and "ga_nonce=hostA1\n" in first


@pytest.mark.parametrize(
    "settings", ["A=$(touch pwned)\n", "A=1; touch pwned\n", "A=x y\n", "touch pwned\n"]
)
def test_packed_command_refuses_settings_that_are_not_plain_assignments(settings: str) -> None:
    with pytest.raises(ValueError, match="plain assignments"):
        packed_command("echo hi\n", settings)
    with pytest.raises(ValueError, match="nonce"):
        packed_collector("bad nonce!")


def test_packed_collector_runs_with_its_nonce_in_a_real_shell(tmp_path: Path) -> None:
    """The nonce set in front of the packed text frames every section the script prints."""
    command = GpuAuditSections().command(nonce="shell07", command_timeout=5, packed=True)
    done = subprocess.run(
        ["/bin/sh", "-c", command],
        env={"PATH": "/usr/bin:/bin", "GPUAUDIT_ROOT": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "@@gpuaudit-collector 1 shell07@@" in done.stdout
    result = GpuAuditSections().process(done.stdout.splitlines())
    assert result["complete"] is True
    assert "meta" in result["sections"] and "GPUAUDIT_TIMEOUT" not in done.stdout


def _kernel_log_section(tmp_path: Path, dmesg_script: str, **env: str) -> dict[str, object]:
    """The kernel_log section the real collector gives with ``dmesg_script`` as dmesg."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    dmesg = bin_dir / "dmesg"
    dmesg.write_text("#!/bin/sh\n" + dmesg_script)
    dmesg.chmod(0o755)
    settings = "".join(
        f"{name}={shlex.quote(value)}; export {name}; " for name, value in env.items()
    )
    result = subprocess.run(
        [
            "sh",
            "-c",
            f"PATH={shlex.quote(str(bin_dir))}:/usr/bin:/bin; {settings}"
            f"{collector_script('klog02')}",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    section: dict[str, object] = GpuAuditSections().process(result.stdout.splitlines())["sections"][
        "kernel_log"
    ]
    return section


# 1000 lines of 100 bytes each (99 characters and the newline), numbered from 0.
HUNDRED_BYTE_LINES = (
    "i=0; while [ $i -lt 1000 ]; do\n"
    '  printf "[ %4d.000000] NVRM: Xid (PCI:0000:3b:00): 13, %052d\\n" $i 0; i=$((i+1)); done\n'
)


@pytest.mark.parametrize("value", ["10k", "-5", "abc", "0", "1e3", " 50"])
def test_kernel_log_line_bound_that_is_no_number_keeps_the_default(
    tmp_path: Path, value: str
) -> None:
    section = _kernel_log_section(
        tmp_path,
        'echo "[    0.000000] Linux version 5.15.0"\n'
        'echo "[   12.000000] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."\n',
        GPUAUDIT_KERNEL_LOG_LINES=value,
    )
    assert section["rc"] == 0
    assert "Xid (PCI:0000:3b:00): 79" in str(section["stdout"])
    stderr = str(section["stderr"])
    assert f"GPUAUDIT_KERNEL_LOG_LINES='{value}' is not a number of lines" in stderr
    assert "lines=1 max=5000" in stderr


def test_kernel_log_line_bound_that_is_a_number_is_kept(tmp_path: Path) -> None:
    section = _kernel_log_section(tmp_path, HUNDRED_BYTE_LINES, GPUAUDIT_KERNEL_LOG_LINES="10")
    lines = str(section["stdout"]).splitlines()
    assert len(lines) == 10 and lines[0].startswith("[  990.000000]")
    assert "lines=1000 max=10" in str(section["stderr"])
    assert "is not a number of lines" not in str(section["stderr"])


@pytest.mark.parametrize(
    ("max_bytes", "kept"),
    [
        pytest.param(50000, 500, id="cut-on-a-line-boundary"),
        pytest.param(50050, 500, id="cut-inside-a-line"),
        pytest.param(49999, 499, id="cut-one-byte-into-a-line"),
    ],
)
def test_kernel_log_byte_bound_drops_only_a_partial_first_line(
    tmp_path: Path, max_bytes: int, kept: int
) -> None:
    section = _kernel_log_section(
        tmp_path, HUNDRED_BYTE_LINES, GPUAUDIT_SECTION_BYTES=str(max_bytes)
    )
    lines = str(section["stdout"]).splitlines()
    assert len(lines) == kept
    assert all(len(line) == 99 and line.startswith("[ ") for line in lines)  # whole lines only
    assert lines[-1].startswith("[  999.000000]")  # the newest line is kept
    assert section["truncated"] is True
    assert f"max_bytes={max_bytes}" in str(section["stderr"])


def test_kernel_log_whose_ring_buffer_wrapped_is_marked_incomplete(tmp_path: Path) -> None:
    """dmesg no longer starts at boot (an XID storm filled the ring buffer): the earliest
    lines are gone, and the section says so."""
    section = _kernel_log_section(
        tmp_path,
        'echo "[86400.123456] NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception"\n'
        'echo "[86401.000000] NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception"\n',
    )
    stderr = str(section["stderr"])
    assert section["truncated"] is True
    assert "ring_start=86400" in stderr
    assert "the kernel ring buffer has wrapped" in stderr
    assert len(str(section["stdout"]).splitlines()) == 2


def test_kernel_log_that_starts_at_boot_is_whole(tmp_path: Path) -> None:
    section = _kernel_log_section(
        tmp_path,
        'echo "[    0.000000] Linux version 5.15.0-105-generic"\n'
        'echo "[86400.123456] NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception"\n',
    )
    assert section["truncated"] is False
    assert "ring_start" not in str(section["stderr"])


# --- kernel_log_previous: the boots before this one, from the journal -------------------------


def _earlier_boots_section(tmp_path: Path, boots: dict[int, str], **env: str) -> dict[str, object]:
    """The kernel_log_previous section the real collector gives with a journalctl that has
    ``boots`` (offset -> a shell command printing that boot's kernel log) and no others."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    cases = "".join(f"  -{-boot}) {command} ;;\n" for boot, command in boots.items())
    journalctl = bin_dir / "journalctl"
    journalctl.write_text(
        "#!/bin/sh\n"
        'echo "$*" >>"$(dirname "$0")/asked"\n'
        'case "$3" in\n'
        f"{cases}"
        '  *) echo "Data from the specified boot ($3) is not available: No such boot ID in '
        'journal" >&2; exit 1 ;;\n'
        "esac\n"
    )
    journalctl.chmod(0o755)
    settings = "".join(
        f"{name}={shlex.quote(value)}; export {name}; " for name, value in env.items()
    )
    result = subprocess.run(
        ["sh", "-c", f"PATH={shlex.quote(str(bin_dir))}:/usr/bin:/bin; {settings}"
         f"{collector_script('klog03')}"],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    sections = GpuAuditSections().process(result.stdout.splitlines())["sections"]
    section: dict[str, object] = sections["kernel_log_previous"]
    return section


def _xid_lines(boot: int, count: int) -> str:
    return (
        f'i=0; while [ $i -lt {count} ]; do echo "Nov 2{-boot} 10:00:0$i h kernel: '
        f'NVRM: Xid (PCI:0000:3b:00): 79, boot {boot} line $i"; i=$((i+1)); done'
    )


def test_earlier_boots_are_read_oldest_first_each_after_its_line(tmp_path: Path) -> None:
    boots = {-1: _xid_lines(-1, 2), -2: _xid_lines(-2, 1), -3: "echo 'h kernel: no match'"}
    section = _earlier_boots_section(tmp_path, boots)
    assert section["rc"] == 0
    assert str(section["stdout"]).splitlines() == [
        "-- boot -3 --",
        "-- boot -2 --",
        "Nov 22 10:00:00 h kernel: NVRM: Xid (PCI:0000:3b:00): 79, boot -2 line 0",
        "-- boot -1 --",
        "Nov 21 10:00:00 h kernel: NVRM: Xid (PCI:0000:3b:00): 79, boot -1 line 0",
        "Nov 21 10:00:01 h kernel: NVRM: Xid (PCI:0000:3b:00): 79, boot -1 line 1",
    ]
    assert str(section["stderr"]).strip() == "source=journalctl boots=3 lines=3 max=5000"
    # Read until the journal had no more: boot -4 was asked for, and refused, -5 not.
    asked = (tmp_path / "bin" / "asked").read_text().splitlines()
    assert [line.split()[2] for line in asked] == ["-1", "-2", "-3", "-4"]
    assert section["truncated"] is False


def test_earlier_boots_share_the_line_bound_the_newest_boot_first(tmp_path: Path) -> None:
    boots = {-1: _xid_lines(-1, 3), -2: _xid_lines(-2, 3), -3: _xid_lines(-3, 2)}
    section = _earlier_boots_section(tmp_path, boots, GPUAUDIT_KERNEL_LOG_LINES="4")
    lines = str(section["stdout"]).splitlines()
    assert lines == [
        "-- boot -3 --",
        "-- boot -2 --",
        "Nov 22 10:00:02 h kernel: NVRM: Xid (PCI:0000:3b:00): 79, boot -2 line 2",
        "-- boot -1 --",
        *(f"Nov 21 10:00:0{i} h kernel: NVRM: Xid (PCI:0000:3b:00): 79, boot -1 line {i}"
          for i in range(3)),
    ]  # fmt: skip
    assert "boots=3 lines=8 max=4" in str(section["stderr"])
    assert section["truncated"] is True


def test_earlier_boots_setting(tmp_path: Path) -> None:
    boots = {-1: _xid_lines(-1, 1), -2: _xid_lines(-2, 1), -3: _xid_lines(-3, 1)}
    two = _earlier_boots_section(tmp_path, boots, GPUAUDIT_EARLIER_BOOTS="2")
    assert "boots=2 lines=2" in str(two["stderr"])
    assert "-- boot -3 --" not in str(two["stdout"])
    wrong = _earlier_boots_section(tmp_path, boots, GPUAUDIT_EARLIER_BOOTS="two")
    assert "GPUAUDIT_EARLIER_BOOTS='two' is not a number of boots: 5 are read" in str(
        wrong["stderr"]
    )
    assert "boots=3 lines=3" in str(wrong["stderr"])


def test_an_earlier_boot_whose_read_hangs_ends_the_reading_and_says_so(tmp_path: Path) -> None:
    boots = {-1: _xid_lines(-1, 1), -2: "sleep 30", -3: _xid_lines(-3, 1)}
    section = _earlier_boots_section(tmp_path, boots, GPUAUDIT_TIMEOUT="1")
    assert section["rc"] == 0
    stderr = str(section["stderr"])
    assert "journalctl -k -b -2 timed out after 1s: it and the boots before it are not read" in (
        stderr
    )
    assert "boots=1 lines=1 max=5000 unread=-2" in stderr
    assert str(section["stdout"]).splitlines()[0] == "-- boot -1 --"
    assert section["truncated"] is True  # XIDs may be missing: counts are lower bounds


def test_a_journal_without_the_boot_before_this_one_says_why(tmp_path: Path) -> None:
    section = _earlier_boots_section(tmp_path, {})
    assert section["rc"] == 1
    assert "No such boot ID in journal" in str(section["stderr"])
    assert section["stdout"] == ""


def _restricted_kernel_log(tmp_path: Path, journal: str) -> dict[str, object]:
    """The kernel_log section the real collector gives where dmesg is refused (dmesg_restrict,
    an audit user without CAP_SYSLOG) and ``journal`` is what ``journalctl -k -b`` prints."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "dmesg").write_text(
        "#!/bin/sh\necho 'dmesg: read kernel buffer failed: Operation not permitted' >&2\nexit 1\n"
    )
    (bin_dir / "journalctl").write_text(f"#!/bin/sh\n{journal}\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    result = subprocess.run(
        ["sh", "-c", f"PATH={shlex.quote(str(bin_dir))}:/usr/bin:/bin; "
         f"{collector_script('klog04')}"],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    section: dict[str, object] = GpuAuditSections().process(result.stdout.splitlines())["sections"][
        "kernel_log"
    ]
    return section


def test_a_journal_that_could_not_be_read_is_no_clean_kernel_log(tmp_path: Path) -> None:
    """journalctl -k -b exits 0 with "-- No entries --" when it may open no journal file, its
    hint on stderr: the section fails (GA105 reports it) instead of reading as a log without
    XIDs."""
    hint = "Hint: You are currently not seeing messages from other users and the system."
    section = _restricted_kernel_log(tmp_path, f"echo '-- No entries --'; echo '{hint}' >&2")
    assert section["rc"] == 1 and section["stdout"] == ""
    assert "journalctl -k -b has no kernel message of the running boot" in str(section["stderr"])
    assert hint in str(section["stderr"])


def test_a_readable_journal_without_xids_is_a_clean_kernel_log(tmp_path: Path) -> None:
    boot = "Dec 07 10:00:00 h kernel: Linux version 6.1.0-27-amd64"
    section = _restricted_kernel_log(tmp_path, f"echo '{boot}'")
    assert section["rc"] == 0 and section["stdout"] == ""
    assert "source=journalctl lines=0" in str(section["stderr"])
