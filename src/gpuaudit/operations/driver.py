"""Hold the NVIDIA driver packages against unattended upgrades (GA106)."""

from __future__ import annotations

import re
from collections.abc import Generator, Iterable

from pyinfra import host
from pyinfra.api import QuoteString, StringCommand, operation
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.server import Which

from gpuaudit.facts.remediation import AptHolds
from gpuaudit.rules.policy_defaults import DEFAULT_POLICY


@operation()
def pin(patterns: Iterable[str] | None = None) -> Generator[StringCommand, None, None]:
    """
    Hold every installed NVIDIA driver package that is not held yet (``apt-mark hold``).

    + patterns: package-name regular expressions matched from the start (default: the
      policy's ``driver_package_patterns``, the same list rule GA106 reads)

    Only apt hosts are supported so far; on an rpm host the operation changes nothing and
    says so.

    .. code:: python

        driver.pin(name="Hold the NVIDIA driver packages")
    """
    regexes = [
        re.compile(p)
        for p in (patterns if patterns is not None else DEFAULT_POLICY["driver_package_patterns"])
    ]
    if not host.get_fact(Which, "apt-mark"):
        if host.get_fact(Which, "rpm"):
            host.noop("rpm host: holding driver packages is only supported with apt so far")
        else:
            host.noop("no apt-mark on the host: no Debian packages to hold")
        return
    installed = host.get_fact(DebPackages)
    driver = sorted(name for name in installed if any(rx.match(name) for rx in regexes))
    holds: list[str] = host.get_fact(AptHolds)
    held = set(holds)
    unheld = [name for name in driver if name not in held]
    if unheld:
        yield StringCommand("apt-mark", "hold", *(QuoteString(name) for name in unheld))
    elif driver:
        host.noop(f"driver packages already held: {', '.join(driver)}")
    else:
        host.noop("no NVIDIA driver package is installed")
