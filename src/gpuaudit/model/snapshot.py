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
from gpuaudit.model.jsonable import to_jsonable

SCHEMA_VERSION = "1.1"
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
    xid_events: tuple[XidEvent, ...] = ()
    kernel_log_truncated: bool = False
    topology: Topology | None = None
    mig_gpu_instances: tuple[MigInstance, ...] = ()
    mig_compute_instances: tuple[MigInstance, ...] = ()
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

    def to_dict(self) -> dict[str, Any]:
        result: dict[str, Any] = to_jsonable(self)
        return result

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=False)

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
