"""Version strings as hosts print them: compare, order, and match package versions to drivers."""

from __future__ import annotations

import re

_NUMBER = re.compile(r"\d+")


def version_key(version: str) -> tuple[int, ...]:
    """Order versions by their numbers: 550.90.07 < 550.127.05, 5.15.0-105 < 5.15.0-119."""
    return tuple(int(n) for n in _NUMBER.findall(version))


def same_version(package_version: str, driver: str) -> bool:
    """Whether a package is the driver's version: 1:535.129.03-0ubuntu1 is 535.129.03."""
    upstream = package_version.split(":", 1)[-1]
    return re.match(re.escape(driver) + r"(?![\d.])", upstream) is not None


def major_minor(version: object) -> tuple[int, int] | None:
    """``"12.4"``, ``"12.4.1"``, ``12.4`` or ``12`` as (major, minor); None if not a version.

    Policies written in YAML give ``12.4`` as a number; a float cannot hold ``12.10``, so sites
    should quote CUDA versions, and the message shows the value as it was read.
    """
    numbers = [int(n) for n in _NUMBER.findall(str(version))]
    if not numbers:
        return None
    return numbers[0], numbers[1] if len(numbers) > 1 else 0
