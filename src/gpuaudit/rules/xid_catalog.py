"""NVIDIA's XID catalogue as data: the immediate action per code, and how other tools read it.

Source: NVIDIA, "Analyzing Xid Errors with the Xid Catalog" (docs.nvidia.com/deploy/xid-errors/)
and NVIDIA/NVSentinel's xiderrorsmapping.csv, as the field guide sums them up
(docs/field-guide/xid.md). The catalogue's immediate-action buckets:

- RESTART_APP: the application's context is lost; restart it.
- IGNORE: informational; nothing to do now.
- RESET_GPU: stop the GPU's processes, ``nvidia-smi -r``; reboot if it persists; replace the GPU
  if it persists after a reboot.
- RESTART_BM: reboot the node.
- WORKFLOW: the action depends on what else happened (48, 45, NVLink codes, 154).
- OTHER: a specific step (cabling, firmware, VM restart, UVM).
- CONTACT_SUPPORT: NVIDIA's "unexpected error, report the issue" codes (mostly legacy and
  display codes), and any code the catalogue does not list.

Every code from 1 to 162 is listed with its bucket; the field guide's table is the subset
seen on datacenter GPUs, the rest (more copy-engine, decoder and JPEG engine codes, DLA codes,
the legacy codes) comes from the same NVIDIA catalogue through NVSentinel's mapping. A finding
names a code by its description here or, failing that, by NVIDIA's mnemonic (xid_mnemonics.py).

Other health checks read some codes more harshly; ``other_readings()`` returns the readings that
differ from NVIDIA's so a finding can show them. gpuaudit follows NVIDIA by default and lets a
site policy override a code with a reason (policy key ``xid_overrides``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

from gpuaudit.rules import refs
from gpuaudit.rules.base import Severity
from gpuaudit.rules.xid_mnemonics import MNEMONICS


class XidAction(str, Enum):
    RESTART_APP = "RESTART_APP"
    IGNORE = "IGNORE"
    RESET_GPU = "RESET_GPU"
    RESTART_BM = "RESTART_BM"
    WORKFLOW = "WORKFLOW"
    OTHER = "OTHER"
    CONTACT_SUPPORT = "CONTACT_SUPPORT"


@dataclass(frozen=True)
class XidEntry:
    code: int
    action: XidAction
    description: str = ""  # empty where the mnemonic says it all
    step: str = ""  # the concrete step when it is more specific than the action's default
    severity: Severity | None = None  # where the code departs from its action's default

    @property
    def default_severity(self) -> Severity:
        return self.severity or ACTION_SEVERITY[self.action]

    @property
    def what_to_do(self) -> str:
        return self.step or ACTION_STEP[self.action]

    @property
    def mnemonic(self) -> str:
        return MNEMONICS.get(self.code, "")

    @property
    def label(self) -> str:
        name = self.description or self.mnemonic
        return f"XID {self.code}" + (f" ({name})" if name else "")


ACTION_SEVERITY: dict[XidAction, Severity] = {
    XidAction.RESTART_BM: Severity.CRITICAL,
    XidAction.RESET_GPU: Severity.HIGH,
    XidAction.WORKFLOW: Severity.HIGH,
    XidAction.OTHER: Severity.MEDIUM,
    XidAction.RESTART_APP: Severity.MEDIUM,
    XidAction.CONTACT_SUPPORT: Severity.MEDIUM,
    XidAction.IGNORE: Severity.INFO,
}

ACTION_STEP: dict[XidAction, str] = {
    XidAction.RESTART_APP: "restart the application that was using the GPU",
    XidAction.IGNORE: "informational, no action needed now",
    XidAction.RESET_GPU: (
        "stop the GPU's processes and reset it (nvidia-smi -r -i <gpu>); reboot if it "
        "persists; replace the GPU if it persists after a reboot"
    ),
    XidAction.RESTART_BM: "drain and reboot the node",
    XidAction.WORKFLOW: "follow NVIDIA's workflow for this code",
    XidAction.OTHER: "follow the catalogue's specific step",
    XidAction.CONTACT_SUPPORT: (
        "not in NVIDIA's immediate-action table: collect nvidia-bug-report.sh and contact "
        "NVIDIA support"
    ),
}

# (likelihood, impact) of the risk a recorded event stands for, by action.
ACTION_SCORE: dict[XidAction, tuple[int, int]] = {
    XidAction.RESTART_BM: (4, 5),
    XidAction.RESET_GPU: (4, 4),
    XidAction.WORKFLOW: (4, 4),
    XidAction.OTHER: (3, 4),
    XidAction.RESTART_APP: (3, 3),
    XidAction.CONTACT_SUPPORT: (3, 3),
    XidAction.IGNORE: (2, 1),
}


def _bucket(
    action: XidAction,
    codes: dict[int, str],
    *,
    step: str = "",
    severity: Severity | None = None,
) -> list[XidEntry]:
    return [XidEntry(code, action, desc, step, severity) for code, desc in codes.items()]


_COPY_ENGINE = "copy engine exception"
_NVDEC = "NVDEC exception"
_NVLINK = "NVLink error"

# fmt: off
_REPORT_ISSUE = (
    *range(1, 8), 9, 10, 12, *range(15, 25), *range(26, 31), *range(33, 37), 42, 47,
    *range(49, 54), *range(55, 60), 61, 65, 73, 81, 87, 90, 91, 108, *range(111, 119),
    *range(122, 126), 138, 142,
)
# fmt: on

_ENTRIES: list[XidEntry] = [
    *_bucket(
        XidAction.RESTART_APP,
        {
            8: "GPU stopped processing: idle timeout",
            13: "graphics engine exception",
            31: "MMU fault: GPU memory page fault, often an application OOB access or OOM",
            32: "PBDMA: invalid or corrupted push buffer stream",
            39: _COPY_ENGINE,
            40: _COPY_ENGINE,
            41: _COPY_ENGINE,
            68: _NVDEC,
            69: "graphics engine class error",
            70: _COPY_ENGINE,
            71: _COPY_ENGINE,
            72: _COPY_ENGINE,
            75: _COPY_ENGINE,
            76: _COPY_ENGINE,
            77: _COPY_ENGINE,
            80: "pushbuffer CRC: corrupted data sent to the GPU",
            83: _NVDEC,
            84: _NVDEC,
            94: "contained ECC error, only the affected application is hit",
        },
    ),
    *_bucket(
        XidAction.IGNORE,
        {
            14: "fake error (driver test)",
            37: "FECS: unimplemented firmware method",
            38: "FECS: firmware watchdog timeout",
            44: "graphics engine fault during context switch",
            66: "FECS: register access violation",
            67: "FECS: verification violation",
            93: "InfoROM erase limit",
            106: "SMBPBI test message",
            107: "SMBPBI test message (silent)",
            121: "C2C link error",
            137: "NVLink FLA privilege error",
            141: "fast path error",
            152: "DLA SMMU error",
            153: "DLA timeout",
            157: "resource retirement failure",
            161: "channel retirement failure",
        },
    ),
    # Informational for NVIDIA, but several health checks fail or warn on these: low, not info,
    # so they stay visible in the register.
    *_bucket(
        XidAction.IGNORE,
        {
            43: "GPU stopped processing, application-level",
            63: "row remap / page retirement recorded",
            92: "high single-bit ECC error rate",
        },
        severity=Severity.LOW,
    ),
    *_bucket(
        XidAction.RESET_GPU,
        {
            46: "GPU timeout",
            62: "PMU halt: internal micro-controller halted",
            64: "row remap / page retirement recording failure",
            95: "uncontained ECC error",
            109: "context switch timeout",
            110: "security fault",
            119: "GSP RPC timeout",
            120: "GSP error",
            136: "ALI link training failure",
            140: "unrecovered ECC error",
            143: "GPU initialisation failure",
            155: "NVLink software-defined error",
            156: "resource retirement event",
            158: "fatal timeout",
            162: "",
        },
    ),
    *_bucket(
        XidAction.RESTART_BM, {79: "GPU has fallen off the bus", 160: "channel retirement event"}
    ),
    # Engines the field guide's table leaves out; same bucket in NVIDIA's catalogue.
    *_bucket(
        XidAction.RESTART_APP,
        {
            11: "graphics engine: missing hardware",
            25: "graphics engine: illegal notify",
            60: "SEC2 engine error",
            **{code: _COPY_ENGINE for code in (85, *range(126, 136))},
            **{code: _NVDEC for code in (88, 89, 96, 97, 98)},
            **{code: "NVJPG engine error" for code in (82, *range(99, 106))},
            86: "optical flow engine error",
            139: "optical flow engine error",
        },
    ),
    # NVIDIA: "unexpected error, report the issue" — named by their mnemonics.
    *_bucket(XidAction.CONTACT_SUPPORT, dict.fromkeys(_REPORT_ISSUE, "")),
    XidEntry(
        48,
        XidAction.WORKFLOW,
        "double-bit ECC error",
        "alone: reset the GPU; together with XID 63/64: drain and reset, then check the SRAM "
        "error threshold and run field diagnostics",
    ),
    XidEntry(
        45,
        XidAction.WORKFLOW,
        "preemptive cleanup, due to previous errors",
        "alone: restart nvidia-fabricmanager; after another XID it is that error's clean-up",
        Severity.MEDIUM,
    ),
    *_bucket(
        XidAction.WORKFLOW,
        {code: _NVLINK for code in (74, 144, 145, 146, 147, 148, 149, 150)},
        step="decode the error registers in the message and check the NVLink link named",
    ),
    XidEntry(
        154,
        XidAction.WORKFLOW,
        "GPU recovery action changed",
        "follow the recovery action the message names",
        Severity.MEDIUM,
    ),
    XidEntry(
        54,
        XidAction.OTHER,
        "auxiliary power",
        "check the mechanicals and the auxiliary power cabling",
        Severity.HIGH,
    ),
    XidEntry(78, XidAction.OTHER, "", "update the driver software and GPU firmware"),
    XidEntry(151, XidAction.OTHER, "", "restart the VM", Severity.HIGH),
    XidEntry(159, XidAction.OTHER, "", "check the unified memory (UVM) driver and its users"),
]

CATALOG: dict[int, XidEntry] = {entry.code: entry for entry in _ENTRIES}
if len(CATALOG) != len(_ENTRIES):
    raise ValueError("an XID code is listed twice in the catalogue")


@dataclass(frozen=True)
class RecoveryAction:
    words: str  # as the driver spells it, lower case
    severity: Severity
    step: str


# Recovery actions the driver can ask for (XID 154 lines, nvidia-smi gpu_recovery_action; NVML:
# NONE, GPU_RESET, NODE_REBOOT, DRAIN_P2P, DRAIN_AND_RESET), most specific spelling first.
RECOVERY_ACTIONS: tuple[RecoveryAction, ...] = (
    RecoveryAction("node reboot", Severity.CRITICAL, "drain and reboot the node"),
    RecoveryAction("system reboot", Severity.CRITICAL, "drain and reboot the node"),
    RecoveryAction(
        "drain and reset", Severity.HIGH, "drain peer-to-peer traffic and reset the GPU"
    ),
    RecoveryAction("drain p2p", Severity.HIGH, "drain peer-to-peer traffic from the GPU"),
    RecoveryAction("gpu reset", Severity.HIGH, "reset the GPU (nvidia-smi -r)"),
    RecoveryAction("bus reset", Severity.HIGH, "reset the GPU's PCIe bus"),
    # nvidia-smi's short spellings ("Reboot", "Reset", "Drain P2P").
    RecoveryAction("reboot", Severity.CRITICAL, "drain and reboot the node"),
    RecoveryAction("reset", Severity.HIGH, "reset the GPU (nvidia-smi -r)"),
    RecoveryAction("drain", Severity.HIGH, "drain peer-to-peer traffic from the GPU"),
)


def recovery_action(text: str | None) -> RecoveryAction | None:
    """The recovery action a driver message or field names; None for "None" or no action."""
    lowered = (text or "").lower()
    return next((a for a in RECOVERY_ACTIONS if a.words in lowered), None)


def lookup(code: int | None) -> XidEntry:
    """The catalogue entry for a code; unknown (or unreadable) codes mean contact support."""
    if code is not None and code in CATALOG:
        return CATALOG[code]
    return XidEntry(code if code is not None else -1, XidAction.CONTACT_SUPPORT)


# --- how other tools read the same codes (docs/field-guide/xid.md, other health checks) -------

AZURE_NODE_FAILING = frozenset(
    {48, 56, 57, 58, 62, 63, 64, 65, 68, 69, 73, 74, 79, 80, 81, 92, 119, 120}
)
AWS_EKS_FATAL = frozenset(
    {46, 48, 54, 62, 63, 64, 74, 79, 95, 109, 110, 119, 120, 136, 140, 142, 143, 151, 155}
    | {156, 158}
)
META_GCM_WARN = frozenset({13, 31, 43, 45, 63, 68, 92, 109})  # every other XID is CRITICAL
DCGM_FAIL = frozenset({48, 64, 74, 79, 95, 119, 120, 140})
DCGM_WARN = frozenset({94})

# The field guide's table of common codes (docs/field-guide/xid.md#common-xid-codes), its
# "first step" column: (the step, how harsh it is: 0 nothing, 1 look at the app, 2 hardware).
FIELD_GUIDE: dict[int, tuple[str, int]] = {
    13: ("check for an out-of-memory or a driver bug", 1),
    31: ("usually out of memory: check the job's memory use", 1),
    43: ("the GPU hung: reset it", 2),
    45: ("expected while the driver recovers", 0),
    48: ("failing memory: replace the GPU", 2),
    63: ("ECC errors piling up: plan to replace the GPU", 2),
    79: ("PCIe fault: check the slot, riser and cabling", 2),
}

_HARSHNESS = {
    Severity.INFO: 0,
    Severity.LOW: 0,
    Severity.MEDIUM: 1,
    Severity.HIGH: 2,
    Severity.CRITICAL: 2,
}


def _readings(code: int) -> Iterable[tuple[str, int]]:
    """Every other tool's verdict on a code, with its harshness (0 none, 1 warn, 2 fail)."""
    if code in FIELD_GUIDE:
        step, harsh = FIELD_GUIDE[code]
        yield f"field guide: {step} ({refs.GUIDE_XID_TABLE})", harsh
    if code in AZURE_NODE_FAILING:
        yield "Azure HPC health checks fail the node", 2
    if code in AWS_EKS_FATAL:
        yield "AWS EKS node monitoring treats it as fatal", 2
    if code in DCGM_FAIL:
        yield "DCGM health watch fails", 2
    elif code in DCGM_WARN:
        yield "DCGM health watch warns", 1
    if code >= 0:
        yield ("Meta gcm warns", 1) if code in META_GCM_WARN else ("Meta gcm: critical", 2)


def other_readings(entry: XidEntry) -> list[str]:
    """Readings of ``entry.code`` by other tools that are harsher or milder than NVIDIA's."""
    nvidia = _HARSHNESS[entry.default_severity]
    return [text for text, harsh in _readings(entry.code) if harsh != nvidia]
