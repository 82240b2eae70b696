"""The host snapshot: everything one audit learned about one host.

A snapshot is written as JSON (one file per host) the moment the host has been collected, and
it is the only input the rules and the report need: ``gpuaudit report <run-dir>`` rebuilds a
register from snapshots alone. The raw text of every collected section travels inside the
snapshot (``sections``) so any parsed value can be traced back to what the host printed.

Conventions (see docs/snapshot-schema.md):
- units are part of field names (``memory_total_mib``, ``power_draw_w``, ``temperature_c``);
- ``None`` means the host did not report the value; where the tool printed something that is
  not a value, ``Gpu.unavailable`` says why (N/A, not supported, unreadable), otherwise the
  section's ``rc`` / ``stderr`` tell whether it was collected at all;
- PCI bus ids are normalised to ``DDDD:BB:DD.F`` upper case (``bus_key``), whatever domain width
  the tool printed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from gpuaudit.model.decode import DecodeError, FieldProblem, decode, describe_value, join_path
from gpuaudit.model.jsonable import to_json_text, to_jsonable

SCHEMA_VERSION = "1.5"
# What a snapshot must have to be read at all; any other field may be missing or unusable.
_REQUIRED = ("schema_version", "host", "status", "collected_at")
# The name of a host whose snapshot gives none that can be used, and no file name stands in.
UNNAMED_HOST = "unnamed-host"
# The host_data entries whose shape gpuaudit gives them itself (the audit writes the host's
# inventory group names), checked on reading like the snapshot's own fields; every other entry
# is the inventory's value as given, judged by the settings that read it.
_HOST_DATA_TYPES: dict[str, Any] = {"groups": tuple[str, ...]}


class HostStatus(str, Enum):
    """How far the audit of a host got."""

    OK = "ok"
    # Collected, but some GPU-facing part did not answer (driver down, a GPU erroring).
    DEGRADED = "degraded"
    # nvidia-smi is present but cannot talk to the driver.
    DRIVER_NOT_RESPONDING = "driver_not_responding"
    # Collected, but neither NVIDIA nor AMD tooling is installed.
    NO_GPU_TOOLING = "no_gpu_tooling"
    # The collector ran but its output could not be read (cut short, garbled).
    COLLECTION_FAILED = "collection_failed"
    # Connected, but the collection did not finish within the audit's time limit.
    TIMED_OUT = "timed_out"
    # The host answered but refused the audit's credentials (or its host key did not match).
    AUTH_FAILED = "auth_failed"
    # No connection could be made.
    UNREACHABLE = "unreachable"
    # The audit stopped (interrupted, or pyinfra ended early) before it reached the host.
    NOT_AUDITED = "not_audited"


@dataclass(frozen=True)
class Section:
    """One collected section: the command's exit status, its stdout and its stderr."""

    rc: int | None
    stdout: str = ""
    stderr: str = ""
    # True when the collector bounded the output (e.g. a huge kernel log).
    truncated: bool = False


@dataclass(frozen=True)
class MigDevice:
    index: int | None
    gpu_instance_id: int | None
    compute_instance_id: int | None
    profile: str | None = None  # e.g. "1g.10gb" when known
    memory_total_mib: int | None = None
    multiprocessor_count: int | None = None


@dataclass(frozen=True)
class EccCounts:
    """ECC error totals for one counter set (volatile or aggregate)."""

    corrected: int | None = None
    uncorrected: int | None = None
    sram_uncorrected: int | None = None
    dram_uncorrected: int | None = None
    # Newer schemas split by memory kind; public health checks threshold SRAM and DRAM apart.
    sram_corrected: int | None = None
    dram_corrected: int | None = None


@dataclass(frozen=True)
class RetiredPages:
    single_bit: int | None = None
    double_bit: int | None = None
    pending: bool | None = None


@dataclass(frozen=True)
class RemappedRows:
    correctable: int | None = None
    uncorrectable: int | None = None
    pending: bool | None = None
    failure: bool | None = None


@dataclass(frozen=True)
class Gpu:
    """One physical GPU as the host reported it."""

    index: int
    vendor: str = "nvidia"  # "nvidia" | "amd"
    status: str = "ok"  # "ok" | "error" (GPU answered with an error, e.g. "Unknown Error")
    status_detail: str = ""
    name: str | None = None
    uuid: str | None = None
    serial: str | None = None
    pci_bus_id: str | None = None  # normalised, see bus_key()
    architecture: str | None = None
    vbios_version: str | None = None
    inforom_image: str | None = None
    driver_version: str | None = None
    cuda_version: str | None = None
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    ecc_mode_current: str | None = None
    ecc_mode_pending: str | None = None
    ecc_volatile: EccCounts = field(default_factory=EccCounts)
    ecc_aggregate: EccCounts = field(default_factory=EccCounts)
    retired_pages: RetiredPages = field(default_factory=RetiredPages)
    remapped_rows: RemappedRows = field(default_factory=RemappedRows)
    temperature_c: float | None = None
    temperature_slowdown_c: float | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    utilization_gpu_pct: float | None = None
    # Active clock-event (throttle) reasons, by nvidia-smi's element names, e.g. "hw_slowdown".
    clock_event_reasons: tuple[str, ...] = ()
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    pcie_replay_count: int | None = None
    mig_mode_current: str | None = None  # "Enabled" | "Disabled" | None (not supported)
    mig_mode_pending: str | None = None
    mig_devices: tuple[MigDevice, ...] = ()
    persistence_mode: bool | None = None
    # nvidia-smi gpu_reset_status / gpu_recovery_action: what the driver itself asks for.
    reset_required: bool | None = None
    drain_and_reset_recommended: bool | None = None
    recovery_action: str | None = None  # e.g. "None", "Reset", "Reboot", "Drain P2P"
    # Memory the GPU repairs itself and the SRAM error threshold (nvidia-smi ecc_errors, NVML
    # nvmlDeviceGetRepairStatus / nvmlDeviceGetUnrepairableMemoryFlag_v1; schema 1.5): a
    # memory channel or TPC repair waiting for a GPU reset, memory the GPU can no longer
    # repair, and the aggregate SRAM uncorrectable errors past the driver's threshold.
    channel_repair_pending: bool | None = None
    tpc_repair_pending: bool | None = None
    unrepairable_memory: bool | None = None
    sram_threshold_exceeded: bool | None = None
    # Why a field the tool printed holds no value: field name ("power_draw_w", or
    # "remapped_rows.pending" inside an object) -> "not_applicable" (N/A), "not_supported"
    # ([Not Supported], deprecated) or "unreadable" (Unknown Error, GPU is lost, garbage).
    unavailable: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class XidEvent:
    """One GPU error event read from the kernel log."""

    # "xid" | "sxid" (NVSwitch) | "fallen_off_bus" (legacy line without an XID) |
    # "init_failed" (RmInitAdapter / rm_init_adapter failed: the GPU did not come up)
    kind: str
    code: int | None
    pci_bus_id: str | None  # normalised
    message: str
    raw: str
    timestamp: str | None = None  # as printed: "[ 49.26]" seconds, ISO, or ctime
    gpu_index: int | None = None  # resolved through the GPUs' bus ids when possible
    # The boot whose log held it, counted back from the running one (-1 the boot before it,
    # -2 the one before that; schema 1.4); None in the running boot's log. An event of
    # previous_boot_xid_events without one (an older snapshot) is from boot -1.
    boot: int | None = None


@dataclass(frozen=True)
class Topology:
    """`nvidia-smi topo -m`: the GPU/NIC connection matrix and CPU/NUMA affinity."""

    devices: tuple[str, ...] = ()  # row labels: GPU0.., NIC0..
    columns: tuple[str, ...] = ()  # column labels of the matrix part
    matrix: tuple[tuple[str, ...], ...] = ()  # matrix[row][col] e.g. "X", "NV18", "PIX", "SYS"
    cpu_affinity: dict[str, str] = field(default_factory=dict)
    numa_affinity: dict[str, str] = field(default_factory=dict)
    legend: dict[str, str] = field(default_factory=dict)  # e.g. NIC0 -> mlx5_0
    gpu_numa_id: dict[str, str] = field(default_factory=dict)  # GPU NUMA ID column, as printed


@dataclass(frozen=True)
class NvLinkLink:
    """One NVLink of a GPU: state and speed (`nvidia-smi nvlink -s`), counters (`nvlink -e`)."""

    link: int
    active: bool | None = None  # None: the status listing did not cover this link
    speed_gb_s: float | None = None  # per-link speed as printed ("25 GB/s")
    replay_errors: int | None = None
    recovery_errors: int | None = None
    crc_errors: int | None = None
    # Every "<name> Errors: N" counter as printed, including ones named above (drivers differ).
    counters: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class GpuNvLink:
    """The NVLinks of one GPU, as `nvidia-smi nvlink` lists them (by GPU index and UUID)."""

    gpu: int
    uuid: str | None = None
    links: tuple[NvLinkLink, ...] = ()
    # NVML: "Unable to retrieve NVLink information as all links are inactive".
    all_inactive: bool = False


@dataclass(frozen=True)
class MigInstance:
    """A GPU or compute instance from `nvidia-smi mig -lgi` / `-lci`."""

    gpu: int
    profile_name: str  # e.g. "MIG 1g.6gb" or "1g.6gb"
    profile_id: int | None
    instance_id: int | None
    placement: str | None = None  # "start:size" for GPU instances
    gpu_instance_id: int | None = None  # for compute instances


@dataclass(frozen=True)
class MigPlacement:
    """One line of ``nvidia-smi mig -lgipp``: where instances of a GPU instance profile may
    start on one GPU."""

    gpu: int
    profile_id: int
    starts: tuple[int, ...]  # placement start indices on the memory-slice axis
    size: int  # memory slices one instance of the profile takes


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    held: bool = False


@dataclass(frozen=True)
class Service:
    name: str
    active: str  # systemctl is-active: active | inactive | failed | unknown ...
    enabled: str  # systemctl is-enabled: enabled | disabled | not-found ...

    @property
    def present(self) -> bool:
        return self.enabled not in ("not-found", "") and self.active != "unknown"

    @property
    def running(self) -> bool:
        return self.active == "active"


@dataclass(frozen=True)
class DeviceNode:
    path: str
    mode: str  # octal permission bits as stat -c %a prints them, e.g. "666"
    owner: str = ""
    group: str = ""

    @property
    def world_writable(self) -> bool:
        try:
            return bool(int(self.mode, 8) & 0o002)
        except ValueError:
            return False


@dataclass(frozen=True)
class PciDevice:
    """One NVIDIA or AMD PCI function as `lspci -D -n` lists it."""

    bus_id: str  # normalised, see bus_key()
    class_code: str  # e.g. "0302" (3D controller), "0300" (VGA), "0680" (bridge: NVSwitch)
    vendor_id: str  # "10de" NVIDIA, "1002" AMD
    device_id: str
    revision: str | None = None  # "ff" when config space reads back all ones (device gone)

    @property
    def is_gpu(self) -> bool:
        return self.class_code in ("0300", "0302", "0380")

    @property
    def is_nvidia_gpu(self) -> bool:
        return self.vendor_id == "10de" and self.is_gpu


@dataclass(frozen=True)
class ParseWarning:
    """Something a parser met in a host's output and could not place: a field it does not
    know, a warning printed in the middle of a listing, a line of a form it cannot read. Never
    dropped: the snapshot keeps it and the page shows it as evidence."""

    source: str  # the format it was read from, e.g. "nvidia-smi -q" or "kernel log"
    message: str  # what was not understood, in words
    text: str = ""  # the line or element as the host printed it (cut to WARNING_TEXT chars)
    gpu: int | None = None  # the GPU it concerns, where the output says


# How much of an unplaced line a ParseWarning keeps.
WARNING_TEXT = 200


def parse_warning(
    source: str, message: str, text: str = "", gpu: int | None = None
) -> ParseWarning:
    """A :class:`ParseWarning` with ``text`` cut to :data:`WARNING_TEXT` characters."""
    text = text.strip()
    if len(text) > WARNING_TEXT:
        text = text[: WARNING_TEXT - 1] + "…"
    return ParseWarning(source, message, text, gpu)


@dataclass(frozen=True)
class CounterField:
    """One enabled line of a dcgm-exporter counters file: ``DCGM FIELD, type, help``."""

    field: str  # e.g. "DCGM_FI_DEV_GPU_TEMP" (also DCGM_EXP_* exporter fields)
    metric_type: str  # gauge | counter | histogram | summary | label, as written
    help: str = ""
    line: int = 0  # 1-based line in the file


@dataclass(frozen=True)
class CountersFile:
    """The counters (collectors) file a dcgm-exporter reads, as the audit read it."""

    path: str  # the path dcgm-exporter was given (or its default)
    # How the path was chosen: "-f" / "--collectors" (argv), "DCGM_EXPORTER_COLLECTORS"
    # (environment) or "default" (/etc/dcgm-exporter/default-counters.csv).
    source: str = "default"
    fields: tuple[CounterField, ...] = ()
    # DCGM fields present in the file but commented out ("# DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, …").
    commented: tuple[str, ...] = ()
    # Lines dcgm-exporter refuses (not three fields, an unknown metric type): it does not start
    # with such a file.
    malformed: tuple[str, ...] = ()
    # Why the file could not be read (missing, permission denied); None when it was read.
    error: str | None = None
    truncated: bool = False

    def exports(self, field_name: str) -> bool:
        return any(f.field == field_name for f in self.fields)


@dataclass(frozen=True)
class ExporterProcess:
    """A monitoring exporter process found under /proc: its argv and the one variable read."""

    pid: int
    name: str  # /proc/PID/comm
    argv: tuple[str, ...] = ()
    # DCGM_EXPORTER_COLLECTORS from /proc/PID/environ; None when unset or unreadable.
    collectors_env: str | None = None
    environ_readable: bool = True


@dataclass(frozen=True)
class MonitoringView:
    """What monitors this host: dcgm-exporter (units, processes, the counters file it reads)
    and node_exporter's textfile directory, where gpuaudit.prom can be dropped."""

    # systemctl is-active answer per unit the collector asked about ("" when not answered).
    units: dict[str, str] = field(default_factory=dict)
    # How many /proc/PID entries the collector saw: 0 means the process table was not
    # visible, so only the units tell whether an exporter runs.
    proc_entries: int | None = None
    processes: tuple[ExporterProcess, ...] = ()
    counters: tuple[CountersFile, ...] = ()
    # node_exporter's --collector.textfile.directory; None when no node_exporter names one.
    textfile_directory: str | None = None
    textfile_directory_exists: bool | None = None
    textfile_directory_writable: bool | None = None

    @property
    def dcgm_exporter_units(self) -> dict[str, str]:
        return {u: s for u, s in self.units.items() if "dcgm-exporter" in u}

    @property
    def dcgm_exporter_processes(self) -> tuple[ExporterProcess, ...]:
        return tuple(p for p in self.processes if p.name == "dcgm-exporter")

    @property
    def node_exporter_processes(self) -> tuple[ExporterProcess, ...]:
        return tuple(p for p in self.processes if p.name != "dcgm-exporter")

    @property
    def dcgm_exporter_running(self) -> bool:
        return bool(self.dcgm_exporter_processes) or any(
            s == "active" for s in self.dcgm_exporter_units.values()
        )

    @property
    def node_exporter_running(self) -> bool:
        return bool(self.node_exporter_processes) or any(
            s == "active" for u, s in self.units.items() if "node" in u
        )


@dataclass(frozen=True)
class GresSpec:
    """One entry of a Slurm GRES list as scontrol or slurmd print it: ``gpu:a100:4(S:0-1)``,
    ``gpu:1``, ``gpu:(null):4(IDX:0-3)``. MIG slices are GRES of their own type
    (``a100_3g.20gb``)."""

    name: str  # "gpu", "mps", "shard" …
    type: str | None = None  # "a100", "nvidia_h100_80gb_hbm3_1g.10gb"; None when untyped
    count: int | None = None  # None: no number (or "no_consume" without one)
    detail: str = ""  # what followed in parentheses: "S:0-1", "IDX:0-3"
    raw: str = ""


@dataclass(frozen=True)
class SlurmNode:
    """One node record of ``scontrol show node -o`` (or its multi-line form)."""

    name: str
    state: str = ""  # as printed: "IDLE+DRAIN", "DOWN*+DRAIN", "MIXED"
    gres: tuple[GresSpec, ...] = ()  # Gres= (what slurm.conf configures for the node)
    gres_used: tuple[GresSpec, ...] = ()  # GresUsed=
    cfg_tres: dict[str, str] = field(default_factory=dict)  # CfgTRES: "gres/gpu" -> "8"
    alloc_tres: dict[str, str] = field(default_factory=dict)
    reason: str | None = None  # Reason= without its "[user@time]" tail
    reason_user: str | None = None  # who set the state: "slurm" (slurmctld itself), "root" …
    reason_time: str | None = None  # as printed, e.g. "2024-12-19T11:03:34"
    version: str | None = None  # slurmd's version (Version=)
    # Every field as printed (OS= and Reason= keep their spaces).
    fields: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class GresLine:
    """One line of gres.conf (``Name=gpu Type=a100 File=/dev/nvidia[0-3]``, ``AutoDetect=nvml``
    or ``NodeName=… Name=…``)."""

    line: int  # 1-based line number in the file
    raw: str
    name: str | None = None
    type: str | None = None
    file: str | None = None  # as written: "/dev/nvidia[0-3]"
    count: str | None = None  # as written: "8", "4G"
    node_name: str | None = None  # NodeName= (the nodes the line is for), None: every node
    auto_detect: str | None = None  # AutoDetect= value on this line, lower case
    flags: str | None = None
    cores: str | None = None
    links: str | None = None
    multiple_files: str | None = None
    file_count: int | None = None  # device files File= names (brackets expanded)


@dataclass(frozen=True)
class GresConf:
    """gres.conf as read from the host; ``path`` is where it was found."""

    lines: tuple[GresLine, ...] = ()
    path: str | None = None


@dataclass(frozen=True)
class SlurmdGres:
    """One GRES as ``slurmd -G`` prints the node's merged configuration."""

    name: str
    raw: str
    type: str | None = None
    count: int | None = None
    index: int | None = None
    file: str | None = None
    links: str | None = None
    flags: tuple[str, ...] = ()  # "HAS_FILE", "HAS_TYPE", "ENV_NVML" …


@dataclass(frozen=True)
class SlurmdHardware:
    """``slurmd -C``: what slurmd finds on the node (CPUs, memory, auto-detected GPUs)."""

    node_name: str | None = None
    cpus: int | None = None
    real_memory_mib: int | None = None
    gres: tuple[GresSpec, ...] = ()  # Gres= where AutoDetect found GPUs
    uptime: str | None = None
    fields: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SlurmView:
    """What Slurm believes about this host: its node record in slurmctld, the host's gres.conf
    and the GRES lines of slurm.conf, and what slurmd itself finds (-C) and reports (-G).
    A part is None when it was not read (tool missing, file absent, command failed); ``problems``
    says why, per part ("node", "gres_conf", "slurm_conf", "slurmd_hardware", "slurmd_gres")."""

    node: SlurmNode | None = None
    node_name: str | None = None  # the node the audit asked slurmctld about
    gres_conf: GresConf | None = None
    # slurm.conf lines about GRES (GresTypes=, AccountingStorageTRES=, NodeName= with Gres=).
    slurm_conf_lines: tuple[str, ...] | None = None
    slurmd_hardware: SlurmdHardware | None = None
    slurmd_gres: tuple[SlurmdGres, ...] | None = None
    problems: dict[str, str] = field(default_factory=dict)


class DiagStatus(str, Enum):
    """A DCGM diagnostic result, whatever the spelling (Pass, PASS, pass)."""

    PASS = "pass"
    FAIL = "fail"
    WARN = "warn"
    SKIP = "skip"
    NOT_RUN = "not_run"
    UNKNOWN = "unknown"  # a word DCGM never printed before: never read as a pass


class DiagRun(str, Enum):
    """Whether the audit's ``dcgmi diag`` ran on the host, and if not, why."""

    RAN = "ran"  # dcgmi answered; ``tests`` holds what it printed
    BUSY = "busy"  # a compute process held a GPU: not run (``busy_pids``)
    NOT_CHECKED = "not_checked"  # idleness could not be proven (no nvidia-smi, it failed)
    MISSING = "missing"  # dcgmi is not installed
    FAILED = "failed"  # dcgmi ran but gave no readable result (hostengine down, timeout)


@dataclass(frozen=True)
class DcgmDiagMessage:
    """A warning or info line of one diagnostic result, as DCGM worded it."""

    text: str
    gpu: int | None = None  # the GPU the message names ("GPU 3 ..."), when it names one
    error_id: int | None = None  # DCGM_FR_* code (JSON only)
    error_category: int | None = None  # DCGM_FR_EC_* (JSON only)
    error_severity: int | None = None  # DCGM_ERROR_* (JSON only)


@dataclass(frozen=True)
class DcgmDiagResult:
    """One result of a test: for the GPUs in ``gpus`` (empty: every GPU the run covered, as
    DCGM prints "Pass - All" or a deployment check without GPU ids)."""

    status: DiagStatus
    raw_status: str = ""
    gpus: tuple[int, ...] = ()
    warnings: tuple[DcgmDiagMessage, ...] = ()
    info: tuple[DcgmDiagMessage, ...] = ()


@dataclass(frozen=True)
class DcgmDiagTest:
    """One diagnostic test ("Memory", "PCIe", "Persistence Mode") in its category."""

    category: str
    name: str
    results: tuple[DcgmDiagResult, ...] = ()
    summary: DiagStatus | None = None  # DCGM 4's test_summary.status, where printed


@dataclass(frozen=True)
class DcgmDiag:
    """The audit's ``dcgmi diag -r LEVEL`` on the host (section ``dcgm_diag``)."""

    run: DiagRun
    level: int
    reason: str = ""  # why it did not run, or what went wrong, in one line
    output_format: str | None = None  # "json" | "text": what was read
    rc: int | None = None  # dcgmi's exit status
    busy_pids: tuple[int, ...] = ()
    dcgm_version: str | None = None
    driver_version: str | None = None
    gpu_device_ids: tuple[str, ...] = ()
    runtime_error: str | None = None  # DCGM's own "runtime_error" / error line
    tests: tuple[DcgmDiagTest, ...] = ()


@dataclass(frozen=True)
class OsInfo:
    pretty_name: str | None = None
    id: str | None = None
    version_id: str | None = None
    kernel: str | None = None
    hostname: str | None = None
    # When the host booted, ISO 8601 UTC (/proc/stat btime): dmesg's [seconds] count from it.
    boot_time: str | None = None


@dataclass(frozen=True)
class HostSnapshot:
    host: str
    status: HostStatus
    collected_at: str  # ISO 8601 UTC
    schema_version: str = SCHEMA_VERSION
    status_detail: str = ""
    # Inventory data the rules use: expected_gpu_count, groups, desired driver, ...
    host_data: dict[str, Any] = field(default_factory=dict)
    os: OsInfo = field(default_factory=OsInfo)
    driver_version: str | None = None
    cuda_version: str | None = None
    # Version of the loaded kernel module, read from /proc/driver/nvidia/version's first line.
    driver_version_proc: str | None = None
    gpus: tuple[Gpu, ...] = ()
    # The NVIDIA GPUs (by Gpu.index) whose nvidia-smi index no source gave: nvidia-smi -q -x
    # prints none, and its order stands for it only when it lists every attached GPU. Their
    # index is a stand-in, and nothing that names GPUs by nvidia-smi's index alone (mig -lgi,
    # -lci, -lgipp; mig-parted device indexes) is matched to them (nvidia_smi_index).
    unnumbered_gpus: tuple[int, ...] = ()
    xid_events: tuple[XidEvent, ...] = ()
    kernel_log_truncated: bool = False
    # The same events from the boots before this one, as the journal kept them (journalctl -k
    # -b -1, -b -2, ...; schema 1.3, earlier boots than -1 since 1.4, each event's ``boot``
    # saying which): what the host logged before its last reboots, which its running kernel's
    # log (xid_events) no longer holds. Oldest boot first, each boot's in log order.
    previous_boot_xid_events: tuple[XidEvent, ...] = ()
    previous_boot_log_truncated: bool = False
    topology: Topology | None = None
    mig_gpu_instances: tuple[MigInstance, ...] = ()
    mig_compute_instances: tuple[MigInstance, ...] = ()
    # Where each GPU instance profile may be placed (mig -lgipp, collected on MIG hosts only).
    mig_placements: tuple[MigPlacement, ...] = ()
    packages: tuple[Package, ...] = ()
    sysctls: dict[str, str] = field(default_factory=dict)
    services: tuple[Service, ...] = ()
    device_nodes: tuple[DeviceNode, ...] = ()
    tools: dict[str, bool] = field(default_factory=dict)  # tool name -> present on the host
    # Problems met while turning sections into this snapshot (section -> message).
    parse_errors: dict[str, str] = field(default_factory=dict)
    # Values the parsers met and could not place (schema 1.1); kept, never dropped.
    parse_warnings: tuple[ParseWarning, ...] = ()
    sections: dict[str, Section] = field(default_factory=dict)
    # GPUs the driver says are attached (nvidia-smi attached_gpus); more than len(gpus) means some
    # could not be queried.
    attached_gpus: int | None = None
    # NVIDIA/AMD PCI functions the bus enumerates, whether or not a driver answers for them.
    pci_devices: tuple[PciDevice, ...] = ()
    # NVLink state and error counters per GPU; None when the audit did not collect them.
    nvlink: tuple[GpuNvLink, ...] | None = None
    # dcgm-exporter and node_exporter on the host; None when the audit did not collect them.
    monitoring: MonitoringView | None = None
    # What Slurm believes about the host; None on a host without Slurm's tools (no Slurm node).
    slurm: SlurmView | None = None
    # The audit's dcgmi diag; None when the policy did not ask for one (level 0).
    dcgm_diag: DcgmDiag | None = None

    def to_dict(self) -> dict[str, Any]:
        result: dict[str, Any] = to_jsonable(self)
        return result

    def to_json(self) -> str:
        """``json.dumps(self.to_dict(), indent=1)``: the snapshot file's text."""
        return to_json_text(self)

    @classmethod
    def from_dict(
        cls,
        data: Any,
        *,
        source: str = "the snapshot",
        host: str = "",
        collected_at: str = "",
    ) -> HostSnapshot:
        """Read a snapshot as :meth:`to_dict` wrote it, or as a person or a tool left it since.

        Every value is checked against its field's type (:mod:`gpuaudit.model.decode`); one of
        the wrong type is read as absent and the snapshot says so
        (:func:`gpuaudit.model.status.with_field_problems`: each is listed in
        ``parse_errors["snapshot"]`` and in the status detail, which names ``source``, and an
        OK host becomes DEGRADED). Where the document's own ``host`` or ``collected_at`` is
        unusable, ``host`` (default ``unnamed-host``) and ``collected_at`` (default: now) stand
        in; an unusable ``status`` reads as DEGRADED.

        Raises ValueError when ``data`` is no snapshot at all: not an object, of another schema
        major version, or without a ``schema_version``, ``host``, ``status`` or
        ``collected_at``.
        """
        # Late: status.py builds snapshots, so it imports this module.
        from gpuaudit.model.status import now_utc, with_field_problems

        if not isinstance(data, dict):
            raise ValueError(f"a snapshot is a JSON object, not {describe_value(data)}")
        missing = [name for name in _REQUIRED if name not in data]
        if missing:
            raise ValueError(f"the snapshot has no {' and no '.join(map(repr, missing))}")
        problems: list[FieldProblem] = []
        fixed = dict(data)
        version = data["schema_version"]
        if not isinstance(version, str):
            problems.append(FieldProblem("schema_version", "a string", describe_value(version)))
            fixed["schema_version"] = version = SCHEMA_VERSION
        if version.split(".")[0] != SCHEMA_VERSION.split(".")[0]:
            raise ValueError(
                f"snapshot schema {version!r} is not readable by this gpuaudit "
                f"(reads {SCHEMA_VERSION})"
            )
        stand_ins = {
            "host": (str, host or UNNAMED_HOST),
            "status": (HostStatus, HostStatus.DEGRADED.value),
            "collected_at": (str, collected_at or now_utc()),
        }
        for name, (hint, stand_in) in stand_ins.items():
            try:
                decode(hint, data[name], name)
            except DecodeError as exc:
                problems.append(exc.problem)
                fixed[name] = stand_in
        if fixed["host"] == "":
            problems.append(FieldProblem("host", "a non-empty string", "''"))
            fixed["host"] = stand_ins["host"][1]
        if isinstance(fixed.get("host_data"), dict):
            fixed["host_data"] = _checked_host_data(fixed["host_data"], problems)
        snapshot, found = decode(cls, fixed)
        return with_field_problems(snapshot, problems + found, source)

    @classmethod
    def from_json(cls, text: str) -> HostSnapshot:
        return cls.from_dict(json.loads(text))

    def nvidia_smi_index(self, gpu: Gpu) -> int | None:
        """The number nvidia-smi gives ``gpu`` (NVML's index: ``-i N``, the GPU column of
        ``mig -lgi``); None for an AMD GPU or one in ``unnumbered_gpus``."""
        if gpu.vendor != "nvidia" or gpu.index in self.unnumbered_gpus:
            return None
        return gpu.index

    def gpu_by_bus(self, pci_bus_id: str | None) -> Gpu | None:
        key = bus_key(pci_bus_id)
        return next((g for g in self.gpus if g.pci_bus_id == key), None) if key else None


def _checked_host_data(host_data: dict[str, Any], problems: list[FieldProblem]) -> dict[str, Any]:
    """``host_data`` with the entries gpuaudit itself shapes checked (_HOST_DATA_TYPES): an
    unusable one is left out, as are its unusable items; the rest is the inventory's, as given."""
    checked = dict(host_data)
    for key, hint in _HOST_DATA_TYPES.items():
        if key not in checked:
            continue
        try:
            value, found = decode(hint, checked[key], join_path("host_data", key))
        except DecodeError as exc:
            problems.append(exc.problem)
            del checked[key]
            continue
        if found:
            problems.extend(found)
            checked[key] = list(value)
    return checked


def bus_key(pci_bus_id: str | None) -> str | None:
    """Normalise a PCI bus id to ``0000:3B:00.0``.

    Accepts ``00000000:3b:00.0``, ``0000:3B:00``, ``3b:00.0`` and a ``PCI:`` prefix.
    """
    if not pci_bus_id:
        return None
    text = pci_bus_id.strip().upper()
    if text.startswith("PCI:"):
        text = text[4:]
    parts = text.split(":")
    if len(parts) == 2:  # bus:device.function, no domain
        parts = ["0000", *parts]
    if len(parts) != 3:
        return text
    domain, bus, devfn = parts
    domain = domain[-4:].rjust(4, "0")
    if "." not in devfn:
        devfn = f"{devfn}.0"
    return f"{domain}:{bus.rjust(2, '0')}:{devfn}"
