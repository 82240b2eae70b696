"""GA1xx: the driver stack — driver answering, GPUs visible, tools installed, versions pinned."""

from __future__ import annotations

import re
from collections.abc import Iterable

from gpuaudit.model.snapshot import HostSnapshot, HostStatus
from gpuaudit.rules import refs
from gpuaudit.rules.audit import GPU_LIST, GPU_TOOL, PACKAGES, PCI_BUS, TOOL_LIST
from gpuaudit.rules.base import (
    CheckResult,
    Evidence,
    Finding,
    Need,
    NotEvaluated,
    Outcome,
    Owner,
    Rule,
    RuleContext,
    Severity,
    rule,
)
from gpuaudit.rules.evidence import gpu_label, section_excerpt


def host_driver_version(snap: HostSnapshot) -> str | None:
    """The driver version the host runs: nvidia-smi's, else any GPU's."""
    return snap.driver_version or next(
        (g.driver_version for g in snap.gpus if g.driver_version), None
    )


def _driver_version_missing(snap: HostSnapshot) -> str | None:
    if host_driver_version(snap):
        return None
    return GPU_LIST.missing(snap) or "no driver version: nvidia-smi reported none"


# The driver version the host runs (nvidia-smi's, a GPU's, or the loaded module's).
DRIVER_VERSION = Need("the driver version", _driver_version_missing)


@rule(
    "GA101",
    "NVIDIA driver not loaded or not responding",
    category="software",
    needs=(GPU_TOOL,),
    owner=Owner.INFRA,
    severity=Severity.CRITICAL,
    likelihood=5,
    impact=5,
    remediation=(
        "Check `lsmod | grep nvidia` and the kernel log; reload the driver (modprobe nvidia) "
        "or reinstall it for the running kernel (DKMS build missing after a kernel update), "
        "then reboot if a GPU stays unreachable."
    ),
    references=(
        refs.NVIDIA_SMI,
        refs.GUIDE_DRIVER_DEBUGGING,
        refs.GUIDE_DRIVER_ERRORS,
        refs.GUIDE_DRIVER_CRASH,
        refs.GUIDE_FIRST_CHECKS,
    ),
)
def driver_not_responding(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[Finding]:
    """nvidia-smi is installed but cannot talk to the driver.

    Checks: host status DRIVER_NOT_RESPONDING, and whether /proc/driver/nvidia/version exists
    (no file: the kernel module is not loaded; a file: loaded but not answering).
    Why: no CUDA program can start ("CUDA initialization error"), and in Kubernetes the node
    goes NotReady or offers no GPUs.
    Evidence: the status and nvidia-smi's own output.
    Remediation: load or rebuild the kernel module; reboot if it stays unreachable.
    """
    if snap.status is not HostStatus.DRIVER_NOT_RESPONDING:
        return
    loaded = bool(snap.driver_version_proc)
    state = (
        f"the kernel module is loaded ({snap.driver_version_proc}) but does not answer"
        if loaded
        else "the kernel module is not loaded (no /proc/driver/nvidia/version)"
    )
    yield rule.finding(
        snap,
        f"nvidia-smi cannot talk to the driver: {state}."
        + (f" {snap.status_detail}" if snap.status_detail else ""),
        Evidence(
            fact="status",
            actual=snap.status.value,
            expected=HostStatus.OK.value,
            excerpt=section_excerpt(snap, "nvidia_smi_xml", 8),
        ),
    )


@rule(
    "GA103",
    "GPU reports an error state",
    category="software",
    needs=(GPU_LIST,),
    per_gpu=True,
    owner=Owner.INFRA,
    severity=Severity.HIGH,
    likelihood=4,
    impact=4,
    remediation=(
        "Drain the GPU and reset it (nvidia-smi -r -i <gpu>); reboot if the reset fails; check "
        "the kernel log for the XID that preceded it."
    ),
    references=(refs.NVIDIA_SMI, refs.GUIDE_FIRST_CHECKS, refs.GUIDE_DRIVER_CRASH),
)
def gpu_error_state(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[Finding]:
    """A GPU that nvidia-smi lists but that answers with an error.

    Checks: GPU status "error" (e.g. nvidia-smi printing "Unknown Error" or "GPU requires reset"
    for its fields).
    Why: the GPU is present but unusable; jobs scheduled on it fail at CUDA initialisation.
    Evidence: the GPU's status and the error text.
    Remediation: drain and reset the GPU, reboot if that fails.
    """
    for gpu in snap.gpus:
        if gpu.status == "error":
            yield rule.finding(
                snap,
                f"{gpu_label(gpu)} answers with an error"
                + (f": {gpu.status_detail}." if gpu.status_detail else "."),
                Evidence(
                    fact=f"gpus[{gpu.index}].status",
                    actual=gpu.status,
                    expected="ok",
                    excerpt=gpu.status_detail,
                ),
                gpu=gpu.index,
            )


_VENDOR_TOOLS = {"nvidia": ("nvidia-smi",), "amd": ("rocm-smi", "amd-smi")}
_BUS_VENDORS = {"10de": "nvidia", "1002": "amd"}


def _vendor_on_bus(snap: HostSnapshot) -> str | None:
    """The vendor of the GPUs lspci lists (None: no GPU listed, or lspci did not answer)."""
    if PCI_BUS.missing(snap) is not None:
        return None
    vendors = {_BUS_VENDORS.get(d.vendor_id) for d in snap.pci_devices if d.is_gpu}
    return next((v for v in ("nvidia", "amd") if v in vendors), None)


@rule(
    "GA104",
    "GPU management tool missing",
    category="software",
    needs=(TOOL_LIST,),
    owner=Owner.INFRA,
    severity=Severity.HIGH,
    likelihood=4,
    impact=4,
    remediation=(
        "Install the vendor's driver utilities (nvidia-utils / nvidia-compute-utils for "
        "nvidia-smi; rocm-smi-lib or amdsmi for AMD) matching the installed driver."
    ),
    references=(refs.NVIDIA_SMI, refs.GUIDE_DRIVER_DEBUGGING, refs.GUIDE_INCIDENT),
)
def gpu_tool_missing(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[CheckResult]:
    """The GPU vendor's CLI is not installed on a host that should have GPUs.

    Checks: ``gpu_vendor`` (host_data ``vendor``) "nvidia" needs nvidia-smi, "amd" needs
    rocm-smi or amd-smi; with no vendor set but ``expected_gpu_count`` > 0, nvidia-smi is
    required unless an AMD tool is present; with neither, the vendor of the GPUs lspci lists.
    Not evaluated when the host did not report its tools, or when it has no GPU tool and
    neither the inventory nor the PCI bus listing says whether it has GPUs.
    Why: without the tool neither the audit nor an operator can see the GPUs' health, and a
    missing nvidia-smi usually means the driver install is incomplete.
    Evidence: the tools found on the host and what the inventory expects.
    Remediation: install the vendor utilities matching the driver.
    """
    if not snap.tools:
        return
    policy = ctx.settings_for(snap)
    vendor = str(policy.get("gpu_vendor") or "").lower() or None
    expected = policy.get("expected_gpu_count")
    if vendor is None and isinstance(expected, int) and expected > 0:
        has_amd = any(snap.tools.get(t) for t in _VENDOR_TOOLS["amd"])
        vendor = "amd" if has_amd else "nvidia"
    if vendor is None:
        vendor = _vendor_on_bus(snap)
    if vendor is None and not any(snap.tools.get(t) for ts in _VENDOR_TOOLS.values() for t in ts):
        bus = PCI_BUS.missing(snap)
        if bus is not None:
            yield NotEvaluated(
                "no GPU tool is installed, the inventory names no GPU vendor or count, and "
                f"the PCI bus could not tell whether the host has GPUs ({bus})"
            )
        return
    needed = _VENDOR_TOOLS.get(vendor or "")
    if not needed or any(snap.tools.get(t) for t in needed):
        return
    yield rule.finding(
        snap,
        f"{' / '.join(needed)} is not installed, but the inventory expects {vendor} GPUs"
        + (f" ({expected})." if expected else "."),
        Evidence(
            fact="tools",
            actual={t: snap.tools.get(t, False) for t in needed},
            expected={t: True for t in needed},
            excerpt=section_excerpt(snap, "tools"),
        ),
    )


@rule(
    "GA105",
    "Kernel log unreadable: XID history unknown",
    category="software",
    needs=(TOOL_LIST,),
    owner=Owner.INFRA,
    severity=Severity.MEDIUM,
    likelihood=3,
    impact=3,
    remediation=(
        "Install util-linux (dmesg) or allow the audit user to read the kernel log "
        "(run it with sudo, or kernel.dmesg_restrict=0 / journal access via the "
        "systemd-journal or adm group)."
    ),
    references=(refs.XID_CATALOG, refs.GUIDE_DRIVER_LOGS, refs.GUIDE_XID_LOG, refs.GUIDE_INCIDENT),
)
def kernel_log_unreadable(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[Finding]:
    """Neither dmesg nor journalctl -k could be read.

    Checks: both tools missing, or the collector's kernel_log section failing (typically
    dmesg_restrict for a non-root audit user).
    Why: XIDs are only in the kernel log; without it GA301 cannot see a GPU that fell off the
    bus or a double-bit ECC error, and the register looks cleaner than the host is.
    Evidence: which tools exist and the collector's message.
    Remediation: install dmesg or grant the audit user read access to the kernel log.
    """
    section = snap.sections.get("kernel_log")
    both_missing = snap.tools.get("dmesg") is False and snap.tools.get("journalctl") is False
    failed = section is not None and section.rc not in (0, None)
    if not (both_missing or failed):
        return
    why = (
        "neither dmesg nor journalctl is installed"
        if both_missing
        else f"reading it failed (rc={section.rc if section else None})"
    )
    yield rule.finding(
        snap,
        f"The kernel log could not be read: {why}. XID errors on this host are unknown.",
        Evidence(
            fact="sections.kernel_log",
            actual={
                "dmesg": snap.tools.get("dmesg"),
                "journalctl": snap.tools.get("journalctl"),
                "rc": section.rc if section else None,
            },
            expected="a readable kernel log",
            excerpt=section.stderr.strip() if section else "",
        ),
    )


@rule(
    "GA106",
    "Driver packages not held",
    category="software",
    needs=(PACKAGES,),
    owner=Owner.INFRA,
    severity=Severity.MEDIUM,
    likelihood=3,
    impact=4,
    remediation=(
        "Pin and hold the driver packages together with their libraries and fabric manager "
        "with gpuaudit.operations.driver.pin (deploys/remediate.py): an apt preferences pin "
        "plus apt-mark hold, or dnf versionlock; upgrade them only through a staged driver "
        "upgrade (canary, waves, health gates)."
    ),
    references=(refs.GUIDE_PIN_VERSIONS, refs.GUIDE_CANARY, refs.GUIDE_LIBRARY_MISMATCH),
    operation="gpuaudit.operations.driver.pin",
)
def driver_not_held(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[Finding]:
    """NVIDIA driver packages are installed but none is held against upgrades.

    Checks: installed packages matching policy ``driver_package_patterns`` and their hold
    state (apt-mark showhold / dnf versionlock).
    Why: an unattended upgrade replaces the user-space driver while the old kernel module is
    loaded ("driver/library version mismatch") and rolls a new driver out to the whole fleet at
    once, skipping the canary a staged upgrade starts with.
    Evidence: the driver packages and their versions, and the hold list.
    Remediation: hold the packages (gpuaudit.operations.driver.pin).
    """
    patterns = [re.compile(p) for p in ctx.settings_for(snap)["driver_package_patterns"]]
    driver = [p for p in snap.packages if any(rx.match(p.name) for rx in patterns)]
    if not driver or any(p.held for p in driver):
        return
    holds = snap.sections.get("package_holds")
    note = ""
    if holds is not None and holds.rc not in (0, None):
        note = f" The hold list could not be read (rc={holds.rc}); holds may exist unseen."
    listed = ", ".join(f"{p.name} {p.version}" for p in driver[:6])
    more = f" and {len(driver) - 6} more" if len(driver) > 6 else ""
    yield rule.finding(
        snap,
        f"No driver package is held: {listed}{more}.{note}",
        Evidence(
            fact="packages",
            actual={p.name: p.version for p in driver},
            expected="driver packages held",
            excerpt=section_excerpt(snap, "package_holds", 10),
        ),
    )


@rule(
    "GA107",
    "Driver differs from the desired version",
    category="software",
    owner=Owner.INFRA,
    severity=Severity.MEDIUM,
    likelihood=3,
    impact=3,
    remediation=(
        "Move the host to the desired driver in stages, canary first (drain, "
        "gpuaudit.operations.driver.unpin, install, gpuaudit.operations.driver.pin, reboot, "
        "re-audit), or update the policy if the desired version changed."
    ),
    references=(refs.GUIDE_UNIFORM_VERSIONS, refs.GUIDE_CANARY, refs.GUIDE_DRIVER_ERRORS),
)
def driver_not_desired(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[CheckResult]:
    """The host's driver is not the version, or not of the branch, the site policy or
    inventory asks for.

    Checks: the driver version against ``desired_driver_version``, or its branch (the number
    before the first dot: 550 of 550.127.05) against ``desired_driver_branch`` (policy or
    host_data; a layer that sets one clears the other). The desired driver is an NVIDIA
    driver: on a host whose GPUs are all AMD the rule is not applicable (the amdgpu / ROCm
    version is another numbering; GA701 still compares it across hosts of one model).
    Silent when no driver is desired; not evaluated when the driver version is unknown (GA101
    covers that).
    Why: images and CUDA runtimes are built and tested for one driver; "CUDA driver version is
    insufficient" is a common failure on hosts left behind, and mixed drivers make incidents
    hard to compare.
    Evidence: installed and desired versions (or branches).
    Remediation: staged upgrade to the desired version.
    """
    settings = ctx.settings_for(snap)
    desired = settings.get("desired_driver_version")
    branch = settings.get("desired_driver_branch")
    if not desired and not branch:
        return
    if snap.gpus and not snap.driver_version and all(g.vendor == "amd" for g in snap.gpus):
        yield NotEvaluated(
            "the host's GPUs are AMD: the desired driver is an NVIDIA driver version",
            outcome=Outcome.NOT_APPLICABLE,
        )
        return
    installed = snap.driver_version or next(
        (g.driver_version for g in snap.gpus if g.vendor == "nvidia" and g.driver_version), None
    )
    if not installed:
        yield NotEvaluated(DRIVER_VERSION.missing(snap) or "no driver version")
        return
    if desired:
        if str(desired) == installed:
            return
        wants, expected = str(desired), str(desired)
    else:
        if installed.split(".")[0] == str(branch):
            return
        wants, expected = f"the {branch} branch", f"{branch}.x"
    yield rule.finding(
        snap,
        f"Driver {installed} is installed; the policy wants {wants}.",
        Evidence(
            fact="driver_version",
            actual=installed,
            expected=expected,
            excerpt=snap.driver_version_proc or "",
        ),
    )
