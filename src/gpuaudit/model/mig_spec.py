"""The site's MIG layouts in NVIDIA mig-parted's format, read as is.

A mig-parted file (``version: v1``, ``mig-configs:``) maps config names to lists of entries::

    mig-configs:
      all-1g.10gb:
        - devices: all              # or a list of GPU indexes
          mig-enabled: true
          mig-devices: {"1g.10gb": 7}
      mixed:
        - device-filter: ["0x233010DE"]   # PCI device id + vendor id, as mig-parted reads it
          devices: [0, 1, 2, 3]
          mig-enabled: false

The policy may hold the whole file or only its ``mig-configs`` map. Loading is strict, as
mig-parted's own (api/spec/v1/spec.go): an unknown field or a wrong type is an error, because a
typo would otherwise read as "no MIG wanted". When several entries match a GPU, the last one
wins, as when mig-parted applies them in order. An entry without ``mig-devices`` wants no
instances, as in mig-parted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_ENTRY_FIELDS = frozenset({"devices", "device-filter", "mig-enabled", "mig-devices"})
_PROFILE = re.compile(r"^(?:(?P<c>\d+)c\.)?(?P<g>\d+)g\.(?P<gb>\d+)gb(?:\+(?P<attrs>.*))?$")
# Compute / GPU instance slice counts NVML defines profiles for.
_SLICES = {1, 2, 3, 4, 6, 7, 8}
# Attribute names (me, me.all, gfx, -me, ...): checked for shape, new ones keep appearing.
_ATTRIBUTE = re.compile(r"^-?[A-Za-z][A-Za-z0-9]*(?:\.[A-Za-z0-9]+)?$")


class MigSpecError(ValueError):
    """A MIG config in the policy that mig-parted would not accept either."""


@dataclass(frozen=True)
class MigEntry:
    devices: tuple[int, ...] | None  # None: all GPUs
    device_filter: tuple[str, ...]  # "0x20B010DE", upper case; empty: any device
    mig_enabled: bool
    mig_devices: dict[str, int]  # profile (as written, lower case) -> count

    def matches(self, index: int, pci_id: str | None) -> bool:
        if self.devices is not None and index not in self.devices:
            return False
        return not self.device_filter or (pci_id or "").upper() in self.device_filter

    def gpu_instances(self) -> dict[str, int]:
        """Desired GPU-instance counts: "1c.3g.40gb" is a compute instance in a 3g.40gb GI."""
        counts: dict[str, int] = {}
        for profile, count in self.mig_devices.items():
            gi = profile.split(".", 1)[1] if profile.split(".", 1)[0].endswith("c") else profile
            counts[gi] = counts.get(gi, 0) + count
        return {p: n for p, n in counts.items() if n}


def read_mig_configs(value: Any) -> dict[str, tuple[MigEntry, ...]]:
    """Config name -> entries, from a mig-parted document or its ``mig-configs`` map."""
    if not value:
        return {}
    if not isinstance(value, Mapping):
        raise MigSpecError(f"mig_configs must be a mapping, not {type(value).__name__}")
    if "mig-configs" in value:
        unknown = set(value) - {"version", "mig-configs"}
        if unknown or str(value.get("version")) != "v1":
            raise MigSpecError(
                "a mig-parted document needs version: v1 and mig-configs only"
                + (f" (unknown: {', '.join(sorted(map(str, unknown)))})" if unknown else "")
            )
        value = value["mig-configs"]
        if not isinstance(value, Mapping):
            raise MigSpecError("mig-configs must map config names to lists of entries")
    return {str(name): _entries(str(name), entries) for name, entries in value.items()}


def _entries(name: str, raw: Any) -> tuple[MigEntry, ...]:
    if not isinstance(raw, Sequence) or isinstance(raw, (str, bytes)):
        raise MigSpecError(f"mig config {name!r}: a list of entries is needed")
    return tuple(_entry(f"mig config {name!r} entry {i}", e) for i, e in enumerate(raw))


def _entry(where: str, raw: Any) -> MigEntry:
    if not isinstance(raw, Mapping):
        raise MigSpecError(f"{where}: a mapping is needed")
    unknown = set(map(str, raw)) - _ENTRY_FIELDS
    if unknown:
        raise MigSpecError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    if not isinstance(raw.get("mig-enabled"), bool):
        raise MigSpecError(f"{where}: mig-enabled must be true or false")
    return MigEntry(
        devices=_devices(where, raw.get("devices", "all")),
        device_filter=_filter(where, raw.get("device-filter")),
        mig_enabled=raw["mig-enabled"],
        mig_devices=_mig_devices(where, raw.get("mig-devices") or {}),
    )


def _devices(where: str, raw: Any) -> tuple[int, ...] | None:
    if raw == "all":
        return None
    listed = isinstance(raw, Sequence) and not isinstance(raw, (str, bytes))
    if listed and all(isinstance(i, int) and not isinstance(i, bool) for i in raw):
        return tuple(raw)
    raise MigSpecError(f"{where}: devices must be 'all' or a list of GPU indexes")


def _filter(where: str, raw: Any) -> tuple[str, ...]:
    if raw is None:
        return ()
    items = [raw] if isinstance(raw, str) else raw
    if not isinstance(items, Sequence) or not all(isinstance(i, str) for i in items):
        raise MigSpecError(f"{where}: device-filter must be a PCI id or a list of them")
    return tuple(i.upper() for i in items)


def _mig_devices(where: str, raw: Any) -> dict[str, int]:
    if not isinstance(raw, Mapping) or not all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in raw.values()
    ):
        raise MigSpecError(f"{where}: mig-devices must map profiles to counts")
    for profile in raw:
        problem = profile_problem(str(profile).strip())
        if problem:
            raise MigSpecError(f"{where}: mig-devices profile {profile!r}: {problem}")
    return {str(profile).strip().lower(): int(n) for profile, n in raw.items()}


def profile_problem(profile: str) -> str | None:
    """Why a MIG profile name is malformed (None when it is well formed)."""
    match = _PROFILE.match(profile)
    if not match:
        return "expected [<C>c.]<G>g.<MEM>gb[+<attribute>,...], e.g. 1g.10gb or 1c.2g.20gb"
    g = int(match["g"])
    c = int(match["c"]) if match["c"] else g
    if c not in _SLICES:
        return f"unknown Compute Instance slice size: {c}"
    if g not in _SLICES:
        return f"unknown GPU Instance slice size: {g}"
    if match["attrs"] is not None:
        attrs = match["attrs"].split(",")
        if len(set(attrs)) != len(attrs):
            return "non unique attribute in list"
        bad = [a for a in attrs if not _ATTRIBUTE.match(a)]
        if bad:
            return f"malformed attribute {bad[0]!r}"
    return None
