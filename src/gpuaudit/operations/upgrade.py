"""One host's NVIDIA driver-upgrade steps, as pyinfra operations.

The staged upgrade (``gpuaudit upgrade``) runs them one step at a time per host through
``deploys/driver_upgrade.py``, in this order::

    stop_gpu_services → driver.unpin → install_driver → driver.pin
        → reload_driver (or, when it is refused, reboot_and_wait) → start_gpu_services

and rolls a host back with the same steps at the version it had. The pin steps are
:func:`gpuaudit.operations.driver.pin` and :func:`~gpuaudit.operations.driver.unpin`.

Each operation reads the host first and yields only what differs, otherwise it says why it
changes nothing (``host.noop``), so a step the journal replays after a controller died changes
nothing the second time. Every value put into a command is quoted.
"""

from __future__ import annotations

import re
import time
from collections.abc import Generator, Iterable, Mapping

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, QuoteString, StringCommand, operation
from pyinfra.api.exceptions import ConnectError, OperationValueError
from pyinfra.api.host import Host
from pyinfra.connectors.util import clear_askpass_cache, remove_any_sudo_askpass_file
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.rpm import RpmPackages
from pyinfra.facts.server import KernelModules, Which

from gpuaudit.facts.packages import driver_packages, version_mismatches
from gpuaudit.facts.remediation import NvidiaDriverVersion
from gpuaudit.facts.upgrade import AptPolicyVersions, BootId, NvidiaModuleVersion
from gpuaudit.operations.driver import by_package_manager, regexes_or_refusal
from gpuaudit.operations.plan import refusal
from gpuaudit.operations.services import installed_units
from gpuaudit.operations.unit_state import RUNNING
from gpuaudit.rules.versions import is_driver_version, version_key

# The GPU services, in the order they start: the persistence daemon first, fabric manager
# (which NVSwitch hosts need before any CUDA job), then DCGM's host engine and its exporter.
GPU_SERVICES = (
    "nvidia-persistenced",
    "nvidia-fabricmanager",
    "nv-hostengine",
    "nvidia-dcgm",
    "dcgm-exporter",
)
# Unit-file states of a unit that comes up at boot: start_gpu_services starts only these.
_STARTS_AT_BOOT = ("enabled", "enabled-runtime", "static")
# The NVIDIA kernel modules, users before what they use: the order modprobe -r needs.
UNLOAD_ORDER = ("nvidia_peermem", "nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia")
_ALWAYS_LOADED = ("nvidia", "nvidia_modeset", "nvidia_uvm")
# A driver release: branch, then one or two more numbers (550.127.05, 595.84).
# pyinfra's own way to reboot where systemd-run is missing (operations/server.py reboot).
_DETACHED_REBOOT = "( sleep 1 && reboot ) </dev/null >/dev/null 2>&1 &"

Commands = Generator[StringCommand | FunctionCommand, None, None]


@operation()
def stop_gpu_services(names: Iterable[str] = GPU_SERVICES) -> Commands:
    """
    Stop the GPU services that are running, so that the driver can be replaced and unloaded.

    + names: the units (default: nvidia-persistenced, nvidia-fabricmanager, nv-hostengine,
      nvidia-dcgm, dcgm-exporter); those the host does not have are left out

    One ``systemctl stop`` for every installed unit that runs, consumers first. Whether a unit
    is enabled does not change: :func:`start_gpu_services` starts the enabled ones again.

    .. code:: python

        upgrade.stop_gpu_services(name="Stop the GPU services")
    """
    wanted, units, present = installed_units(names)
    running = [unit for unit in present if units[unit].get("active") in RUNNING]
    if running:
        yield StringCommand("systemctl", "stop", *(QuoteString(u) for u in reversed(running)))
    elif present:
        host.noop(f"no GPU service is running ({', '.join(present)} stopped)")
    else:
        host.noop(f"none of {', '.join(wanted)} is installed")


@operation()
def start_gpu_services(names: Iterable[str] = GPU_SERVICES) -> Commands:
    """
    Start the GPU services that come up at boot (enabled or static) and are not running.

    + names: the units, as for :func:`stop_gpu_services`

    A disabled unit stays stopped, as it would after a reboot. One ``systemctl start`` in start
    order (persistence daemon, fabric manager, DCGM, exporter). A unit of the NVIDIA driver fails
    to start while no driver is loaded: the step fails, which is what a gate must see.

    .. code:: python

        upgrade.start_gpu_services(name="Start the GPU services")
    """
    wanted, units, present = installed_units(names)
    enabled = [unit for unit in present if units[unit].get("enabled") in _STARTS_AT_BOOT]
    stopped = [unit for unit in enabled if units[unit].get("active") != "active"]
    if stopped:
        yield StringCommand("systemctl", "start", *(QuoteString(u) for u in stopped))
    elif enabled:
        host.noop(f"GPU services already running: {', '.join(enabled)}")
    elif present:
        host.noop(f"no GPU service is enabled ({', '.join(present)}): none started")
    else:
        host.noop(f"none of {', '.join(wanted)} is installed")


@operation()
def install_driver(
    version: str, patterns: Iterable[str] | None = None, update: bool = False
) -> Commands:
    """
    Install NVIDIA driver ``version``: every installed driver package moves to it together.

    + version: the driver release (``550.127.05``)
    + patterns: the driver's package-name patterns, as for :func:`driver.pin
      <gpuaudit.operations.driver.pin>` (default: the host's, with libraries, fabric manager
      and IMEX added)
    + update: refresh the package index first (``apt-get update``) when something is to install

    The packages are the installed ones whose version names a driver release: the driver, the
    DKMS module, ``libnvidia-*`` (NSCQ included), fabric manager, utils …; for another driver
    branch the same names with the new branch number (``nvidia-driver-535`` →
    ``nvidia-driver-550``, ``nvidia-dkms-535-server`` → ``nvidia-dkms-550-server``).

    apt hosts: each package's Debian version is the one the host's repositories offer for that
    driver release (``apt-cache policy``; the highest where several are); the operation refuses,
    naming the packages, when a repository lacks it. One ``apt-get install -y
    --allow-change-held-packages --allow-downgrades`` with each ``package=version`` (so a
    rollback can go down), non-interactive, keeping changed configuration files. dnf and yum
    hosts: ``dnf install -y package-version`` (``downgrade`` when every package goes down).
    The driver loads at :func:`reload_driver` or the next reboot.

    .. code:: python

        upgrade.install_driver(name="Install driver 550.127.05", version="550.127.05")
    """
    if not is_driver_version(version):
        raise OperationValueError(f"not an NVIDIA driver version: {version!r} (550.127.05)")
    regexes = regexes_or_refusal(patterns)
    if isinstance(regexes, StringCommand):
        yield regexes
        return
    yield from by_package_manager(
        "apt-get",
        lambda: _install_apt(version, regexes, update),
        lambda manager: _install_rpm(manager, version, regexes),
        "install",
    )


def _install_apt(version: str, regexes: list[re.Pattern[str]], update: bool) -> Commands:
    installed = driver_packages(host.get_fact(DebPackages), regexes)
    if not installed:
        yield refusal(NO_DRIVER_PACKAGE)
        return
    targets = target_packages(installed, version)
    if _already_at(installed, targets, version):
        return
    if update:
        yield StringCommand("apt-get", "update")
    offered = host.get_fact(AptPolicyVersions, packages=targets)
    chosen, missing = choose_versions(targets, offered, version)
    if missing:
        listed = "; ".join(
            f"{name} ({'offers ' + ', '.join(found) if found else 'unknown to apt'})"
            for name, found in missing.items()
        )
        yield refusal(
            f"cannot install driver {version}: the host's apt repositories offer no "
            f"{version} for {listed}. Add the repository that carries it, or refresh the "
            "index (update=True, host data gpuaudit_apt_update)"
        )
        return
    yield StringCommand(
        "DEBIAN_FRONTEND=noninteractive",
        "apt-get",
        "install",
        "-y",
        "--allow-change-held-packages",
        "--allow-downgrades",
        "-o",
        "Dpkg::Options::=--force-confdef",
        "-o",
        "Dpkg::Options::=--force-confold",
        *(QuoteString(f"{name}={chosen[name]}") for name in targets),
    )


def _install_rpm(manager: str, version: str, regexes: list[re.Pattern[str]]) -> Commands:
    installed = driver_packages(host.get_fact(RpmPackages), regexes)
    if not installed:
        yield refusal(NO_DRIVER_PACKAGE)
        return
    targets = target_packages(installed, version)
    if _already_at(installed, targets, version):
        return
    downgrade = all(
        name in installed and version_key(installed[name]) > version_key(version)
        for name in targets
    )
    yield StringCommand(
        QuoteString(manager),
        "downgrade" if downgrade else "install",
        "-y",
        *(QuoteString(f"{name}-{version}") for name in targets),
    )


NO_DRIVER_PACKAGE = (
    "no NVIDIA driver package is installed: install_driver moves the installed driver "
    "packages to another version and chooses no packages of its own"
)


def _already_at(installed: dict[str, str], targets: list[str], version: str) -> bool:
    at_version = {name: installed[name] for name in targets if name in installed}
    if len(at_version) == len(targets) and not version_mismatches(at_version, version):
        host.noop(f"driver packages already at {version}: {', '.join(targets)}")
        return True
    return False


def branch_of(version: str) -> str:
    """``1:550.127.05-0ubuntu1`` → ``550``."""
    return version.split(":", 1)[-1].split(".", 1)[0]


def target_packages(installed: Mapping[str, str], version: str) -> list[str]:
    """The package names driver ``version`` is installed as: each installed driver package,
    renamed where its name carries its own branch (``nvidia-utils-535`` → ``nvidia-utils-550``).
    """
    branch = branch_of(version)
    names: set[str] = set()
    for name, current in installed.items():
        old = branch_of(current)
        names.add(
            re.sub(rf"(?<=-){re.escape(old)}(?=-|$)", branch, name) if old != branch else name
        )
    return sorted(names)


def choose_versions(
    names: Iterable[str], offered: Mapping[str, list[str]], version: str
) -> tuple[dict[str, str], dict[str, list[str]]]:
    """(package → the offered Debian version of driver ``version``, package → what is offered
    where none is). ``offered`` lists versions highest first, as apt-cache policy does."""
    chosen: dict[str, str] = {}
    missing: dict[str, list[str]] = {}
    for name in names:
        versions = offered.get(name, [])
        matching = [v for v in versions if not version_mismatches({name: v}, version)]
        if matching:
            chosen[name] = matching[0]
        else:
            missing[name] = list(versions)
    return chosen, missing


@operation()
def reload_driver() -> Commands:
    """
    Load the installed NVIDIA driver in place of the loaded one, without a reboot.

    When the loaded module's version (``/proc/driver/nvidia/version``) differs from the one
    installed for the running kernel (``modinfo``), the loaded NVIDIA modules are unloaded,
    users first (``modprobe -r nvidia_uvm nvidia_drm nvidia_modeset nvidia``, those loaded), and
    the driver loaded again (``modprobe -a nvidia nvidia_modeset nvidia_uvm``, with nvidia_drm
    and nvidia_peermem where they were loaded).

    The kernel refuses to unload a module in use: a process on a GPU, a daemon that keeps the
    GPUs open (stop them first: :func:`stop_gpu_services`), a display holding nvidia_drm. The
    operation then fails (modprobe exits non-zero), and the caller reboots instead
    (:func:`reboot_and_wait`).

    .. code:: python

        upgrade.reload_driver(name="Load the new NVIDIA driver")
    """
    installed = host.get_fact(NvidiaModuleVersion)
    if installed is None:
        yield refusal(
            "no NVIDIA kernel module is installed for the running kernel (modinfo nvidia finds "
            "none): nothing to load; the driver's DKMS build may have failed"
        )
        return
    loaded = host.get_fact(NvidiaDriverVersion)
    if loaded == installed:
        host.noop(f"NVIDIA driver {installed} already loaded")
        return
    modules = host.get_fact(KernelModules) or {}
    present = [module for module in UNLOAD_ORDER if module in modules]
    if present:
        yield StringCommand("modprobe", "-r", *(QuoteString(m) for m in present))
    extra = [m for m in ("nvidia_drm", "nvidia_peermem") if m in present]
    yield StringCommand("modprobe", "-a", *(QuoteString(m) for m in (*_ALWAYS_LOADED, *extra)))


@operation(is_idempotent=False)
def reboot_and_wait(
    timeout: int = 900,
    delay: float = 10,
    interval: float = 5,
    only_if_driver_differs: bool = False,
) -> Commands:
    """
    Reboot the host and wait until it is back, in a new boot.

    + timeout: seconds to wait for the host to answer again after the reboot
    + delay: seconds before the first attempt to reconnect
    + interval: seconds between attempts
    + only_if_driver_differs: reboot only while the loaded NVIDIA module is not the installed
      one (the fallback after :func:`reload_driver` was refused); otherwise change nothing

    The reboot runs from a systemd timer a second after the command returns (``systemd-run
    --on-active=1 … systemctl reboot``), so the login session that asked for it is not what
    has to survive it; without systemd-run, pyinfra's own detached ``( sleep 1 && reboot ) &``.
    The host counts as back when it accepts a connection and its boot id
    (``/proc/sys/kernel/random/boot_id``) is a new one; the operation fails when that has not
    happened within ``timeout``. pyinfra's ``server.reboot`` is the model; it compares uptimes
    instead, and runs the reboot from a background process of the session.

    .. code:: python

        upgrade.reboot_and_wait(name="Reboot into the new driver", timeout=900)
    """
    if only_if_driver_differs:
        installed = host.get_fact(NvidiaModuleVersion)
        loaded = host.get_fact(NvidiaDriverVersion)
        if installed is None:
            host.noop("no NVIDIA module is installed for the running kernel: a reboot loads none")
            return
        if loaded == installed:
            host.noop(f"NVIDIA driver {installed} is loaded: no reboot needed")
            return
    booted: list[str | None] = []

    # pyinfra passes (state, host) to callbacks whose parameters have these names.
    def remember_boot(state, host) -> None:
        # No sudo password file may wait on the old boot's /tmp.
        remove_any_sudo_askpass_file(host)
        booted.append(host.get_fact(BootId))

    def wait_for_boot(state, host) -> bool:
        return wait_for_new_boot(host, booted[0], timeout, delay, interval)

    yield FunctionCommand(remember_boot, (), {})
    if host.get_fact(Which, "systemd-run"):
        yield StringCommand(
            "systemd-run",
            "--on-active=1",
            "--timer-property=AccuracySec=100ms",
            "systemctl",
            "reboot",
        )
    else:
        yield StringCommand(_DETACHED_REBOOT)
    yield FunctionCommand(wait_for_boot, (), {})


def wait_for_new_boot(
    target: Host, before: str | None, timeout: float, delay: float, interval: float
) -> bool:
    """Reconnect to ``target`` until it answers in a boot other than ``before``; False when
    ``timeout`` seconds pass first."""
    time.sleep(delay)
    clear_askpass_cache(target)
    target.disconnect()
    deadline = time.monotonic() + timeout
    while True:
        try:
            target.connect(show_errors=False, raise_exceptions=True)
        except ConnectError as exc:
            logger.info(f"{target.print_prefix}not back yet: {exc}")
        else:
            now = target.get_fact(BootId)
            if before is None or now is None or now != before:
                logger.info(f"{target.print_prefix}back after the reboot (boot {now})")
                return True
            target.disconnect()  # still the old boot: the reboot has not begun
        if time.monotonic() >= deadline:
            logger.error(f"{target.print_prefix}did not come back within {timeout} s of the reboot")
            return False
        time.sleep(interval)
