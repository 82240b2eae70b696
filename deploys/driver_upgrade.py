"""One step of a staged NVIDIA driver upgrade on one host.

    pyinfra -y --limit <host> <inventory> deploys/driver_upgrade.py \\
        --data gpuaudit_step=<step> --data gpuaudit_target=<version> \\
        [--data gpuaudit_rollback_version=<version>]

``gpuaudit upgrade INVENTORY --to VERSION`` runs it once per step and host and records each
step in its journal; it can also be run by hand. The step runs exactly its operations
(``gpuaudit.operations.upgrade`` and ``driver``):

- ``stop_services``   stop the GPU services that run (persistence daemon, fabric manager, DCGM,
                      dcgm-exporter, nv-hostengine)
- ``unpin``           release the driver packages (apt preferences pin and holds, dnf locks)
- ``install``         install ``gpuaudit_target``: every driver package together, at the
                      Debian version the host's repositories offer for it
- ``pin``             pin and hold the driver packages at ``gpuaudit_target``
- ``reload``          unload the NVIDIA modules and load the installed driver; fails while a
                      process or daemon holds a GPU (then run ``reboot``)
- ``reboot``          reboot and wait until the host answers in a new boot
- ``start_services``  start the GPU services that are enabled
- ``rollback``        stop services, unpin, install ``gpuaudit_rollback_version``, pin it
                      again unless ``gpuaudit_rollback_pin=unpinned`` (the host was not
                      pinned before the rollout: it is left released, as it was), reload
                      (rebooting where the reload is refused), start services

Host data: ``gpuaudit_reboot_timeout`` (seconds, default 900), ``gpuaudit_reboot_delay``
(default 10), ``gpuaudit_reboot_interval`` (default 5), ``gpuaudit_apt_update`` (refresh the
package index before installing, default False). An unknown or missing step, or a version
that is not a driver release, fails the host with the reason. pyinfra reads ``--data`` values as
JSON where they parse as JSON, so a two-part version that reads as a number (``595.84``) is
passed quoted: ``--data 'gpuaudit_target="595.84"'``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyinfra import host
from pyinfra.api.exceptions import DeployError

from gpuaudit.operations import driver, upgrade

STEPS = (
    "stop_services",
    "unpin",
    "install",
    "pin",
    "reload",
    "reboot",
    "start_services",
    "rollback",
)


class StepError(DeployError):
    """The step or its version cannot be run as given."""


def _version(key: str) -> str:
    value = host.data.get(key)
    if value is None:
        raise StepError(f"{host.name}: --data {key}=<driver version> is required for this step")
    if not isinstance(value, str):
        raise StepError(
            f"{host.name}: {key} was read as {type(value).__name__} {value!r}, not a version; "
            f"pass it quoted: --data '{key}=\"<version>\"'"
        )
    return value


def _reboot(**extra: Any) -> None:
    upgrade.reboot_and_wait(
        name="Reboot and wait for the host",
        timeout=int(host.data.get("gpuaudit_reboot_timeout", 900)),
        delay=float(host.data.get("gpuaudit_reboot_delay", 10)),
        interval=float(host.data.get("gpuaudit_reboot_interval", 5)),
        **extra,
    )


def _install(version: str) -> None:
    upgrade.install_driver(
        name=f"Install NVIDIA driver {version}",
        version=version,
        update=bool(host.data.get("gpuaudit_apt_update", False)),
    )


def _rollback() -> None:
    version = _version("gpuaudit_rollback_version")
    upgrade.stop_gpu_services(name="Stop the GPU services")
    driver.unpin(name="Release the NVIDIA driver packages")
    _install(version)
    pin = host.data.get("gpuaudit_rollback_pin", "pinned")
    if pin not in ("pinned", "unpinned"):
        raise StepError(
            f"{host.name}: gpuaudit_rollback_pin is {pin!r}; it is 'pinned' or 'unpinned'"
        )
    if pin == "pinned":
        driver.pin(name=f"Pin the NVIDIA driver packages at {version}", version=version)
    # A refused reload (a GPU still in use) is not the end of a rollback: the reboot after it
    # runs only while the old driver is still not loaded.
    upgrade.reload_driver(name="Load the NVIDIA driver", _ignore_errors=True)
    _reboot(only_if_driver_differs=True)
    upgrade.start_gpu_services(name="Start the GPU services")


RUN: dict[str, Callable[[], None]] = {
    "stop_services": lambda: upgrade.stop_gpu_services(name="Stop the GPU services"),
    "unpin": lambda: driver.unpin(name="Release the NVIDIA driver packages"),
    "install": lambda: _install(_version("gpuaudit_target")),
    "pin": lambda: driver.pin(
        name="Pin the NVIDIA driver packages", version=_version("gpuaudit_target")
    ),
    "reload": lambda: upgrade.reload_driver(name="Load the NVIDIA driver"),
    "reboot": _reboot,
    "start_services": lambda: upgrade.start_gpu_services(name="Start the GPU services"),
    "rollback": _rollback,
}
assert tuple(RUN) == STEPS

step = host.data.get("gpuaudit_step")
if step not in RUN:
    given = "no gpuaudit_step given" if step is None else f"unknown gpuaudit_step {step!r}"
    raise StepError(f"{host.name}: {given}; the steps are: {', '.join(STEPS)}")
RUN[str(step)]()
