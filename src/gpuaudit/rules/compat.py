"""GA120–GA121: can the driver run the site's software — CUDA versions, loaded vs installed."""

from __future__ import annotations

import re
from collections.abc import Iterable

from gpuaudit.model.snapshot import HostSnapshot
from gpuaudit.rules import refs
from gpuaudit.rules.audit import DRIVER_MODULE, GPU_LIST, PACKAGES
from gpuaudit.rules.base import (
    CheckResult,
    Evidence,
    Finding,
    NotEvaluated,
    Owner,
    Rule,
    RuleContext,
    Severity,
    rule,
)
from gpuaudit.rules.evidence import section_excerpt
from gpuaudit.rules.software import host_driver_version
from gpuaudit.rules.versions import DRIVER_PACKAGE_VERSION, major_minor, same_version

# A package version that names a driver release (535.129.03, 1:550.127.05-0ubuntu1), as
# opposed to a repository or meta package with a version of its own (1.0-1).


def _supported_cuda(snap: HostSnapshot) -> str | None:
    return snap.cuda_version or next((g.cuda_version for g in snap.gpus if g.cuda_version), None)


@rule(
    "GA120",
    "Driver too old for the CUDA versions the site requires",
    category="software",
    owner=Owner.INFRA,
    severity=Severity.HIGH,
    likelihood=4,
    impact=4,
    remediation=(
        "Upgrade the host to a driver whose CUDA version covers every required version, "
        "one host group at a time (drain, gpuaudit.operations.driver.unpin, install, "
        "gpuaudit.operations.driver.pin, reboot, re-audit); on "
        "datacenter GPUs the CUDA forward-compatibility package (cuda-compat) is the "
        "alternative for one newer CUDA. Or build the images for the CUDA the driver has."
    ),
    references=(
        refs.CUDA_COMPAT,
        refs.GUIDE_CUDA_COMPAT,
        refs.GUIDE_DRIVER_ERRORS,
        refs.GUIDE_PREPRODUCTION,
    ),
)
def cuda_insufficient(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[CheckResult]:
    """The driver supports an older CUDA than the site's images are built for.

    Checks: every version in ``required_cuda_versions`` (policy or inventory host data) against
    the CUDA version the driver supports (nvidia-smi's ``cuda_version``). Silent when nothing is
    required; not evaluated when the host reports no CUDA version (AMD hosts; a driver that
    does not answer is GA101's).
    Why: a CUDA runtime newer than the driver fails at start with "CUDA driver version is
    insufficient for CUDA runtime version": the host driver is too old for the image.
    A newer major version never runs (high); a newer minor version of the same major may run
    through CUDA minor version compatibility, but not code that needs PTX JIT or newer driver
    APIs (medium).
    Evidence: the driver, the CUDA version it supports, and the required versions it does not.
    Remediation: staged driver upgrade, the forward-compatibility package, or older images.
    """
    required = ctx.settings_for(snap).get("required_cuda_versions") or ()
    if isinstance(required, (str, int, float)):
        required = [required]
    supported_text = _supported_cuda(snap)
    supported = major_minor(supported_text) if supported_text else None
    if required and supported is None:
        yield NotEvaluated(
            "the host reports no CUDA version"
            + (f" ({supported_text!r} is not one)" if supported_text else "")
            + (f": {gpus}" if (gpus := GPU_LIST.missing(snap)) else "")
        )
    if not required or supported is None:
        return
    wanted = {str(v): major_minor(v) for v in required}
    invalid = sorted(v for v, parsed in wanted.items() if parsed is None)
    if invalid:
        raise ValueError(f"required_cuda_versions: not CUDA versions: {', '.join(invalid)}")
    too_new = sorted(
        (v for v, parsed in wanted.items() if parsed and parsed > supported),
        key=lambda v: wanted[v] or (0, 0),
    )
    if not too_new:
        return
    new_major = any((wanted[v] or (0, 0))[0] > supported[0] for v in too_new)
    note = (
        "a newer major version never runs on this driver"
        if new_major
        else "CUDA minor version compatibility may run some of it, but not PTX JIT or newer APIs"
    )
    yield rule.finding(
        snap,
        f"Driver {host_driver_version(snap)} supports CUDA {supported_text}; the site requires "
        f"CUDA {', '.join(too_new)} ('CUDA driver version is insufficient for CUDA runtime "
        f"version'): {note}.",
        Evidence(
            fact="cuda_version",
            actual=supported_text,
            expected=f">= {too_new[-1]}",
            excerpt=f"required_cuda_versions: {', '.join(wanted)}",
        ),
        severity=Severity.HIGH if new_major else Severity.MEDIUM,
        likelihood=4 if new_major else 3,
    )


@rule(
    "GA121",
    "Installed driver packages differ from the loaded kernel module",
    category="software",
    needs=(DRIVER_MODULE, PACKAGES),
    owner=Owner.INFRA,
    severity=Severity.HIGH,
    likelihood=4,
    impact=4,
    remediation=(
        "Drain the host and reboot it (or unload and reload the nvidia modules) so the loaded "
        "driver matches the installed packages, or reinstall the packages at the loaded version; "
        "then hold them so an unattended upgrade cannot repeat it (GA106)."
    ),
    references=(
        refs.GUIDE_LIBRARY_MISMATCH,
        refs.GUIDE_PIN_VERSIONS,
        refs.GUIDE_DRIVER_ERRORS,
        refs.GUIDE_DRIVER_CRASH,
    ),
)
def driver_package_mismatch(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[Finding]:
    """Driver packages were upgraded (or downgraded) underneath the running kernel module.

    Checks: the loaded module's version (/proc/driver/nvidia/version) against every installed
    package matching ``driver_package_patterns`` whose version names a driver release
    (repository and meta packages with versions of their own are left out).
    Why: the user-space libraries then belong to another driver than the kernel module: NVML and
    CUDA fail with "Failed to initialize NVML: Driver/library version mismatch" (or a "CUDA
    initialization error") until a reboot. It is what an
    unattended upgrade of unheld packages leaves behind, and it explains a GA101 on the host.
    Evidence: the loaded version and the packages at other versions.
    Remediation: reboot or reload the modules; hold the packages.
    """
    loaded = snap.driver_version_proc
    if not loaded:
        return
    patterns = [re.compile(p) for p in ctx.settings_for(snap)["driver_package_patterns"]]
    others = [
        p
        for p in snap.packages
        if any(rx.match(p.name) for rx in patterns)
        and DRIVER_PACKAGE_VERSION.match(p.version)
        and not same_version(p.version, loaded)
    ]
    if not others:
        return
    listed = ", ".join(f"{p.name} {p.version}" for p in others[:6])
    more = f" and {len(others) - 6} more" if len(others) > 6 else ""
    yield rule.finding(
        snap,
        f"The loaded kernel module is driver {loaded}, but {listed}{more} are installed: CUDA "
        "and NVML fail with 'Driver/library version mismatch' until the host reboots.",
        Evidence(
            fact="packages",
            actual={p.name: p.version for p in others},
            expected=f"driver packages at {loaded}",
            excerpt=section_excerpt(snap, "driver_proc", 2),
        ),
    )
