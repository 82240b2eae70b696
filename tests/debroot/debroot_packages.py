"""The driver versions and dummy packages the Debian-root tests install (a module of its own:
test files import it by name, and a module called ``conftest`` would be any directory's)."""

from __future__ import annotations

OLD = "550.90.07-0ubuntu1"
NEW = "550.127.05-0ubuntu1"
# Dummy packages named like NVIDIA's: name → packages it depends on at exactly its own version.
DRIVER_PACKAGES: dict[str, tuple[str, ...]] = {
    "libnvidia-compute-550": (),
    "nvidia-driver-550": ("libnvidia-compute-550",),
    "nvidia-fabricmanager-550": ("nvidia-driver-550",),
    "libnvidia-nscq-550": (),
}
# An unrelated package with an upgrade too: a pinned driver must not freeze the whole host.
CANARY = "gpuaudit-canary"
CANARY_OLD = "1.0-1"
CANARY_NEW = "1.1-1"

# The rpm host's driver packages, named as in NVIDIA's RHEL repositories: name → (epoch,
# release, packages it requires at exactly its own epoch:version-release).
RPM_OLD = "550.90.07"
RPM_NEW = "550.127.05"
RPM_PACKAGES: dict[str, tuple[str | None, str, tuple[str, ...]]] = {
    "nvidia-driver-libs": ("3", "1.el9", ()),
    "nvidia-driver": ("3", "1.el9", ("nvidia-driver-libs",)),
    "nvidia-fabric-manager": (None, "1", ("nvidia-driver",)),
    "libnvidia-nscq-550": (None, "1", ()),
}
RPM_CANARY_OLD = "1.0"
RPM_CANARY_NEW = "1.1"
