"""Version strings as hosts print them: compare, order, and match package versions to drivers."""

from __future__ import annotations

import re

_NUMBER = re.compile(r"\d+")
# A driver release as NVIDIA numbers them: 550.127.05, 535.54.03, 595.84.
_DRIVER_VERSION = re.compile(r"^\d{3}\.\d+(?:\.\d+)?$")
# A package version of a driver release: 550.127.05-0ubuntu1, 3:550.127.05-1.el9.
DRIVER_PACKAGE_VERSION = re.compile(r"^(?:\d+:)?\d{3}\.\d+")


def is_driver_version(text: object) -> bool:
    """Whether ``text`` names a driver release (a string like 550.127.05)."""
    return isinstance(text, str) and _DRIVER_VERSION.match(text) is not None


def version_key(version: str) -> tuple[int, ...]:
    """Order versions by their numbers: 550.90.07 < 550.127.05, 5.15.0-105 < 5.15.0-119."""
    return tuple(int(n) for n in _NUMBER.findall(version))


def same_version(package_version: str, driver: str) -> bool:
    """Whether a package is the driver's version: 1:535.129.03-0ubuntu1 is 535.129.03."""
    upstream = package_version.split(":", 1)[-1]
    return re.match(re.escape(driver) + r"(?![\d.])", upstream) is not None


def driver_release(package_version: str) -> str | None:
    """The driver release a package version names: 550.127.05 of 1:550.127.05-0ubuntu1."""
    match = _RELEASE.match(package_version.split(":", 1)[-1])
    return match.group(0) if match else None


_RELEASE = re.compile(r"\d{3}\.\d+(?:\.\d+)?(?![\d.])")


def major_minor(version: object) -> tuple[int, int] | None:
    """``"12.4"``, ``"12.4.1"``, ``12.4`` or ``12`` as (major, minor); None if not a version.

    Policies written in YAML give ``12.4`` as a number; a float cannot hold ``12.10``, so sites
    should quote CUDA versions, and the message shows the value as it was read.
    """
    numbers = [int(n) for n in _NUMBER.findall(str(version))]
    if not numbers:
        return None
    return numbers[0], numbers[1] if len(numbers) > 1 else 0
