"""Package pins: the facts :mod:`gpuaudit.operations.driver` reads, and the pure logic it uses.

The facts read what pins a host has now (an apt preferences file, dnf version locks, whether
the versionlock plugin is there); the functions below them choose the driver packages, match
versions and render or parse pin formats without touching a host, so tests call them directly.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from pyinfra.api import FactBase, QuoteString, StringCommand

from gpuaudit.rules.versions import DRIVER_PACKAGE_VERSION, same_version, version_key

# A version that names a driver release (550.127.05-0ubuntu1, 3:550.127.05-1.el9). Repository
# and meta packages that match the name patterns keep versions of their own (the local
# repository package nvidia-driver-local-repo-… is 1.0-1) and are no part of the driver.
# What a desired version may contain (Debian and RPM version characters only): it goes into
# the preferences file, where a newline or a glob would change what is pinned.
_VERSION = re.compile(r"^[A-Za-z0-9.+~:_-]+$")
# The versionlock plugin package of each rpm package manager.
VERSIONLOCK_PLUGINS = {"dnf": "python3-dnf-plugin-versionlock", "yum": "yum-plugin-versionlock"}
# Lock list entries. dnf 4 writes NAME-EPOCH:VERSION-RELEASE.* ; yum 3 wrote
# EPOCH:NAME-VERSION-RELEASE.ARCH; dnf 5 prints "Package name: NAME" followed by conditions
# such as "evr = EPOCH:VERSION-RELEASE". Versions and releases never contain a hyphen.
_ARCH = r"(?:\.(?:\*|noarch|x86_64|aarch64|i686|ppc64le|s390x))?"
_DNF4_LOCK = re.compile(rf"^(?P<name>.+)-(?:\d+):(?P<vr>[^-:]+-[^-]+?){_ARCH}$")
_YUM_LOCK = re.compile(rf"^(?:\d+):(?P<name>.+)-(?P<vr>[^-:]+-[^-]+?){_ARCH}$")
_DNF5_NAME = re.compile(r"^Package name:\s*(?P<name>\S+)")
_DNF5_EVR = re.compile(r"^evr\s*=\s*(?:\d+:)?(?P<vr>\S+)$")

APT_PIN_PRIORITY = 1001
APT_PREFERENCES_HEADER = (
    "# Managed by gpuaudit (gpuaudit.operations.driver.pin): the NVIDIA driver packages below\n"
    "# are pinned together so that no upgrade moves one of them apart from the others.\n"
    "# gpuaudit rewrites this file whole; gpuaudit.operations.driver.unpin removes it.\n"
)


class AptPinFile(FactBase[str | None]):
    """
    Content of an apt preferences file, or None when there is no such file.

    .. code:: python

        host.get_fact(AptPinFile, path="/etc/apt/preferences.d/gpuaudit-nvidia-driver")
        "# Managed by gpuaudit …\\n\\nPackage: nvidia-driver-550\\nPin: version 550.127.05*\\n…"

    Every line ends with a newline, including the last one.
    """

    @staticmethod
    def default() -> str | None:
        return None

    def command(self, path: str) -> StringCommand:
        file = QuoteString(path)
        return StringCommand("if [ -f", file, "]; then echo present; cat", file, "; fi")

    def process(self, output: list[str]) -> str | None:
        if not output or output[0] != "present":
            return None
        return "".join(f"{line}\n" for line in output[1:])


class DnfVersionlockPlugin(FactBase[bool]):
    """
    Whether ``dnf versionlock`` (or ``yum versionlock``) can run on the host.

    .. code:: python

        host.get_fact(DnfVersionlockPlugin, manager="dnf")
        True

    True when the plugin package is installed, or when the command answers without it (dnf 5
    has versionlock built in).
    """

    @staticmethod
    def default() -> bool:
        return False

    def requires_command(self, manager: str) -> str:
        return manager

    def command(self, manager: str) -> StringCommand:
        return StringCommand(
            "if rpm -q --quiet",
            QuoteString(versionlock_plugin(manager)),
            "||",
            QuoteString(manager),
            "-q versionlock list >/dev/null 2>&1; then echo yes; else echo no; fi",
        )

    def process(self, output: list[str]) -> bool:
        return bool(output) and output[-1].strip() == "yes"


class DnfVersionLocks(FactBase[dict[str, list[str]]]):
    """
    Locked versions (``VERSION-RELEASE``, epoch left out) of each package in the lock list.

    .. code:: python

        host.get_fact(DnfVersionLocks, manager="dnf")
        {"nvidia-driver": ["550.127.05-1.el9"], "nvidia-driver-cuda": ["550.127.05-1.el9"]}

    Exclusions (``!`` entries) and entries that name no single version are left out.
    """

    @staticmethod
    def default() -> dict[str, list[str]]:
        return {}

    def requires_command(self, manager: str) -> str:
        return manager

    def command(self, manager: str) -> StringCommand:
        versionlock_plugin(manager)  # refuses a manager that has no versionlock
        return StringCommand(QuoteString(manager), "-q versionlock list")

    def process(self, output: list[str]) -> dict[str, list[str]]:
        return parse_versionlock_list(output)


def versionlock_plugin(manager: str) -> str:
    """``dnf`` → ``python3-dnf-plugin-versionlock``, ``yum`` → ``yum-plugin-versionlock``."""
    try:
        return VERSIONLOCK_PLUGINS[manager]
    except KeyError:
        raise ValueError(f"no versionlock plugin is known for {manager!r}") from None


def parse_versionlock_list(lines: Iterable[str]) -> dict[str, list[str]]:
    """The lock list as ``dnf versionlock list`` prints it, by package name."""
    locks: dict[str, set[str]] = {}
    dnf5_name: str | None = None
    for raw in lines:
        line = raw.strip()
        if line.startswith(("!", "#")):
            continue
        name_line = _DNF5_NAME.match(line)
        if name_line:
            dnf5_name = name_line.group("name")
            continue
        evr = _DNF5_EVR.match(line)
        if evr and dnf5_name:
            locks.setdefault(dnf5_name, set()).add(evr.group("vr"))
            continue
        entry = _DNF4_LOCK.match(line) or _YUM_LOCK.match(line)
        if entry and not (_has_glob(entry.group("name")) or _has_glob(entry.group("vr"))):
            locks.setdefault(entry.group("name"), set()).add(entry.group("vr"))
    return {name: sorted(versions) for name, versions in sorted(locks.items())}


def _has_glob(text: str) -> bool:
    return any(c in text for c in "*?[")


def valid_version(version: str) -> bool:
    """Whether a desired version is a plain Debian or RPM version (no spaces, no globs)."""
    return bool(_VERSION.match(version))


def driver_packages(
    installed: Mapping[str, Iterable[str]], patterns: Sequence[re.Pattern[str]]
) -> dict[str, str]:
    """The installed driver packages and their versions, by name, sorted.

    A package is one when its name matches a pattern from the start and its version names a
    driver release; of several installed versions the highest counts.
    """
    found: dict[str, str] = {}
    for name in sorted(installed):
        if not any(rx.match(name) for rx in patterns):
            continue
        versions = [v for v in installed[name] if DRIVER_PACKAGE_VERSION.match(v)]
        if versions:
            found[name] = max(versions, key=version_key)
    return found


def version_mismatches(packages: Mapping[str, str], version: str) -> dict[str, str]:
    """The packages whose version is not ``version``: 550.127.05-0ubuntu1 is 550.127.05."""
    return {name: v for name, v in packages.items() if not same_version(v, version)}


def apt_pin_versions(packages: Mapping[str, str], version: str | None) -> dict[str, str]:
    """What each package's ``Pin: version`` reads.

    With no desired version, the exact installed version; with one, the version as a prefix
    (``550.127.05*``, apt's glob), behind the package's epoch where it has one, so that a
    repackaging of the same driver release stays installable.
    """
    if version is None:
        return dict(packages)
    pins: dict[str, str] = {}
    for name, installed in packages.items():
        epoch, sep, _ = installed.partition(":")
        pins[name] = f"{epoch}{sep}{version}*" if sep else f"{version}*"
    return pins


def render_apt_preferences(pins: Mapping[str, str]) -> str:
    """The whole preferences file: the header, then one stanza per pinned version."""
    groups: dict[str, list[str]] = {}
    for name, pin in pins.items():
        groups.setdefault(pin, []).append(name)
    stanzas = [
        f"Package: {' '.join(sorted(names))}\nPin: version {pin}\n"
        f"Pin-Priority: {APT_PIN_PRIORITY}\n"
        for pin, names in sorted(groups.items())
    ]
    return "\n".join([APT_PREFERENCES_HEADER, *stanzas])


def locks_to_change(
    packages: Mapping[str, str], locks: Mapping[str, Sequence[str]]
) -> tuple[list[str], list[str]]:
    """Which locks to delete (at another version) and which packages to lock, by name.

    ``packages`` carries RPM ``VERSION-RELEASE`` strings, the form the lock list is read in.
    """
    delete = [name for name in packages if name in locks and packages[name] not in locks[name]]
    lock = [name for name in packages if packages[name] not in locks.get(name, ())]
    return delete, lock
