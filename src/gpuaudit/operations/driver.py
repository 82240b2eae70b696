"""Pin the NVIDIA driver packages together so that no upgrade moves one apart (GA106, GA121).

An unattended upgrade that replaces the user-space libraries (``libnvidia-*``) or fabric manager
while the old kernel module stays loaded leaves NVML failing with "Driver/library version
mismatch". The driver, its libraries and fabric manager are therefore pinned as one set: on
apt hosts with a preferences file (``Pin-Priority: 1001``) and ``apt-mark hold``, on dnf and
yum hosts with ``versionlock``. The staged upgrade calls :func:`unpin`, installs, then
:func:`pin` at the new version.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Generator, Iterable
from typing import TypeVar

from pyinfra import host
from pyinfra.api import FileUploadCommand, QuoteString, StringCommand, operation
from pyinfra.api.exceptions import OperationValueError
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.files import File
from pyinfra.facts.rpm import RpmPackages
from pyinfra.facts.server import Which

from gpuaudit.facts.packages import (
    AptPinFile,
    DnfVersionlockPlugin,
    DnfVersionLocks,
    apt_pin_versions,
    driver_packages,
    locks_to_change,
    render_apt_preferences,
    valid_version,
    version_mismatches,
    versionlock_plugin,
)
from gpuaudit.facts.remediation import AptHolds
from gpuaudit.operations.files import replace_file
from gpuaudit.operations.plan import refusal
from gpuaudit.operations.settings import HostSettingError, host_settings
from gpuaudit.rules.versions import driver_release

DEFAULT_PIN_FILE = "/etc/apt/preferences.d/gpuaudit-nvidia-driver"
PIN_FILE_MODE = "644"  # apt, run by any user, must read the pin file
# Packages that must move with the driver beyond the policy's patterns: every user-space
# library (libnvidia-nscq-* included; the container toolkit's libnvidia-container* has its own
# versions and is no part of the driver), fabric manager (Debian nvidia-fabricmanager-*, RPM
# nvidia-fabric-manager) and IMEX.
CO_PINNED_PATTERNS = (r"libnvidia-(?!container)", r"nvidia-fabric-?manager", r"nvidia-imex")
# apt reads only preferences.d files named like this (apt_preferences(5)): no extension or
# ".pref", letters, digits, "_", "-" and ".".
_APT_PREFERENCES_NAME = re.compile(r"^(?:[A-Za-z0-9_-]+|[A-Za-z0-9_.-]+\.pref)$")

Commands = Generator[StringCommand | FileUploadCommand, None, None]
C = TypeVar("C")  # the commands an operation yields


@operation()
def pin(
    version: str | None = None,
    patterns: Iterable[str] | None = None,
    pin_file: str = DEFAULT_PIN_FILE,
) -> Commands:
    """
    Pin the installed NVIDIA driver packages, all at one version, against upgrades.

    + version: the driver version to pin (``550.127.05``); the installed packages must already
      be at it, pinning installs nothing. None pins the versions installed now
    + patterns: package-name regular expressions matched from the start (default: host data's
      or the policy's ``driver_package_patterns``, with the driver's libraries, fabric manager
      and IMEX added so that they are pinned together with it)
    + pin_file: the apt preferences file gpuaudit writes (apt hosts only)

    apt hosts: the preferences file pins each package at its version (priority 1001), written
    whole when it differs, and ``apt-mark hold`` holds the packages not held yet. dnf and yum
    hosts: ``versionlock`` locks each package at its installed version, installing the plugin
    first where it is missing. A package counts when its version names a driver release.

    .. code:: python

        driver.pin(name="Pin the NVIDIA driver packages")
        driver.pin(name="Pin driver 550.127.05", version="550.127.05")
    """
    if version is not None and not valid_version(version):
        raise OperationValueError(f"not a package version: {version!r}")
    _check_pin_file(pin_file)
    regexes = regexes_or_refusal(patterns)
    if isinstance(regexes, StringCommand):
        yield regexes
        return
    yield from by_package_manager(
        "apt-mark",
        lambda: _pin_apt(version, regexes, pin_file),
        lambda manager: _pin_rpm(manager, version, regexes),
        "pin",
    )


@operation()
def unpin(patterns: Iterable[str] | None = None, pin_file: str = DEFAULT_PIN_FILE) -> Commands:
    """
    Release the NVIDIA driver packages that :func:`pin` pinned.

    + patterns: package-name regular expressions, as for :func:`pin`
    + pin_file: the apt preferences file :func:`pin` wrote

    apt hosts: the preferences file is removed and the held driver packages are unheld. dnf
    and yum hosts: the driver packages' version locks are deleted. Nothing else changes, so an
    upgrade run right after moves the driver packages and nothing more.

    .. code:: python

        driver.unpin(name="Release the NVIDIA driver packages")
    """
    _check_pin_file(pin_file)
    regexes = regexes_or_refusal(patterns)
    if isinstance(regexes, StringCommand):
        yield regexes
        return
    yield from by_package_manager(
        "apt-mark",
        lambda: _unpin_apt(regexes, pin_file),
        lambda manager: _unpin_rpm(manager, regexes),
        "unpin",
    )


def _patterns() -> list[str]:
    """The host's driver package patterns, from the settings its audit is judged by."""
    return list(host_settings().driver_package_patterns)


def driver_regexes(patterns: Iterable[str] | None) -> list[re.Pattern[str]]:
    """Patterns given are used as given; by default the co-pinned packages join the host's.
    A pattern of the host's settings that is no regular expression raises HostSettingError."""
    if patterns is not None:
        return [re.compile(p) for p in patterns]
    chosen = _patterns()
    chosen += [p for p in CO_PINNED_PATTERNS if p not in chosen]
    regexes = []
    for pattern in chosen:
        try:
            regexes.append(re.compile(pattern))
        except (re.error, TypeError) as bad:
            raise HostSettingError(
                f"driver_package_patterns: {pattern!r} is not a regular expression ({bad})"
            ) from None
    return regexes


def regexes_or_refusal(patterns: Iterable[str] | None) -> list[re.Pattern[str]] | StringCommand:
    """:func:`driver_regexes`, or the refusal of this host where its settings' patterns are
    unusable: one host's bad inventory data fails that host, not the run."""
    try:
        return driver_regexes(patterns)
    except HostSettingError as bad:
        return refusal(str(bad))


def _check_pin_file(pin_file: str) -> None:
    name = posixpath.basename(pin_file)
    if not posixpath.isabs(pin_file) or not _APT_PREFERENCES_NAME.match(name):
        raise OperationValueError(
            f"pin_file {pin_file!r}: apt reads only absolute preferences.d files named with "
            "letters, digits, '_', '-' and '.', with no extension or '.pref'"
        )


def by_package_manager(
    apt_tool: str,
    on_apt: Callable[[], Generator[C, None, None]],
    on_rpm: Callable[[str], Generator[C, None, None]],
    what: str,
) -> Generator[C, None, None]:
    """The apt commands where the host has ``apt_tool``, else those of its rpm manager (dnf,
    else yum), else a no-op saying there are no driver packages to ``what``."""
    if host.get_fact(Which, apt_tool):
        yield from on_apt()
        return
    manager = rpm_manager()
    if manager:
        yield from on_rpm(manager)
        return
    host.noop(f"no apt or dnf on the host: no driver packages to {what}")


def rpm_manager() -> str | None:
    """dnf, else yum, where the host has one."""
    for manager in ("dnf", "yum"):
        if host.get_fact(Which, manager):
            return manager
    return None


def _selected(
    installed: dict[str, set[str]], regexes: list[re.Pattern[str]], version: str | None
) -> tuple[dict[str, str], StringCommand | None]:
    """The driver packages to pin, and the refusal to yield instead when ``version`` is not
    the one installed, or, with no ``version``, when the packages are not all of one driver
    release: pinning them as they are would hold the mismatch in place."""
    packages = driver_packages(installed, regexes)
    if version is None:
        releases = {name: driver_release(v) for name, v in packages.items()}
        if len(set(releases.values())) <= 1:
            return packages, None
        listed = ", ".join(f"{name} {v}" for name, v in packages.items())
        return packages, refusal(
            "cannot pin the driver: its packages are of different releases "
            f"({listed}); pinned so, the mismatch would be held in place. Install one "
            "release for all of them first (the staged upgrade installs, then pins), or pin "
            "a version"
        )
    others = version_mismatches(packages, version)
    if not others:
        return packages, None
    listed = ", ".join(f"{name} {v}" for name, v in others.items())
    return packages, refusal(
        f"cannot pin driver {version}: installed driver packages are at other "
        f"versions ({listed}); pinning installs nothing, so install {version} first "
        "(the staged upgrade installs, then pins)"
    )


def _pin_apt(version: str | None, regexes: list[re.Pattern[str]], pin_file: str) -> Commands:
    packages, refused = _selected(host.get_fact(DebPackages), regexes, version)
    if refused:
        yield refused
        return
    if not packages:
        host.noop("no NVIDIA driver package is installed")
        return
    content = render_apt_preferences(apt_pin_versions(packages, version))
    rewrite = host.get_fact(AptPinFile, path=pin_file) != content
    # Uploads land with the mode of a private temporary file; apt run by any user must read
    # the pin, or it silently ignores it. A pin file of the right text can have lost its mode
    # too (a hand-made copy, a restrictive umask): it is set again on its own.
    # The new text is written beside the file, given its mode and renamed over it, so apt
    # never reads half a pin file.
    chmod = rewrite or _mode_of(pin_file) != PIN_FILE_MODE
    if rewrite:
        yield from replace_file(content, pin_file, PIN_FILE_MODE)
    elif chmod:
        yield StringCommand("chmod", PIN_FILE_MODE, QuoteString(pin_file))
    holds: list[str] = host.get_fact(AptHolds)
    unheld = [name for name in packages if name not in holds]
    if unheld:
        yield StringCommand("apt-mark", "hold", *(QuoteString(name) for name in unheld))
    elif not chmod:
        host.noop(f"driver packages already pinned and held: {', '.join(packages)}")


def _mode_of(path: str) -> str | None:
    """The file's permission bits as pyinfra's File fact gives them (``644``), or None."""
    info = host.get_fact(File, path=path)
    return str(info.get("mode")) if isinstance(info, dict) else None


def _unpin_apt(regexes: list[re.Pattern[str]], pin_file: str) -> Commands:
    pinned = host.get_fact(AptPinFile, path=pin_file) is not None
    if pinned:
        yield StringCommand("rm", "-f", QuoteString(pin_file))
    holds: list[str] = host.get_fact(AptHolds)
    packages = driver_packages(host.get_fact(DebPackages), regexes)
    release = [name for name in packages if name in holds]
    if release:
        yield StringCommand("apt-mark", "unhold", *(QuoteString(name) for name in release))
    elif not pinned:
        host.noop("no driver package is pinned or held")


def _pin_rpm(manager: str, version: str | None, regexes: list[re.Pattern[str]]) -> Commands:
    packages, refused = _selected(host.get_fact(RpmPackages), regexes, version)
    if refused:
        yield refused
        return
    if not packages:
        host.noop("no NVIDIA driver package is installed")
        return
    locks: dict[str, list[str]] = {}
    if host.get_fact(DnfVersionlockPlugin, manager=manager):
        locks = host.get_fact(DnfVersionLocks, manager=manager)
    else:
        plugin = versionlock_plugin(manager)
        yield StringCommand(QuoteString(manager), "install -y", QuoteString(plugin))
    delete, lock = locks_to_change(packages, locks)
    if delete:
        yield _versionlock(manager, "delete", delete)
    if lock:
        yield _versionlock(manager, "add", [f"{name}-{packages[name]}" for name in lock])
    else:
        host.noop(f"driver packages already locked: {', '.join(packages)}")


def _unpin_rpm(manager: str, regexes: list[re.Pattern[str]]) -> Commands:
    if not host.get_fact(DnfVersionlockPlugin, manager=manager):
        host.noop(f"no driver package is locked: the {manager} versionlock plugin is missing")
        return
    locks = host.get_fact(DnfVersionLocks, manager=manager)
    locked = driver_packages(locks, regexes)
    if locked:
        yield _versionlock(manager, "delete", list(locked))
    else:
        host.noop("no driver package is locked")


def _versionlock(manager: str, verb: str, specs: list[str]) -> StringCommand:
    return StringCommand(
        QuoteString(manager), "versionlock", verb, *(QuoteString(spec) for spec in specs)
    )
