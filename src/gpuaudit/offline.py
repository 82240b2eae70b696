"""Offline audits: hosts that SSH cannot reach send the collector's output instead.

On the host (no gpuaudit, no Python needed)::

    sh collect.sh > "$(hostname).bundle"        # collect.sh from `gpuaudit collect-script`

Then, anywhere::

    gpuaudit report --bundle gpu-01.bundle gpu-02.bundle ...

A bundle is read with the same code the live audit uses (the fact's framing reader and the
snapshot builder), so the register it gives is the register an SSH audit of the same hosts gives.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gpuaudit.assemble.build import build_snapshot, failed_snapshot
from gpuaudit.model.snapshot import HostSnapshot
from gpuaudit.parsers.bundle import parse_bundle_text
from gpuaudit.parsers.limits import INPUT_BYTES, read_start
from gpuaudit.parsers.system import parse_meta

BUNDLE_SUFFIXES = (".bundle", ".txt", ".out")
_ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def host_name_for(path: Path) -> str:
    """The host a bundle file stands for: its file name without the bundle suffix."""
    name = path.name
    for suffix in BUNDLE_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def snapshot_from_bundle(
    path: Path, *, host: str | None = None, host_data: dict[str, Any] | None = None
) -> HostSnapshot:
    """Build the snapshot of one bundle file; an unreadable file is a failed host, not a crash."""
    name = host or host_name_for(path)
    try:
        raw, cut = read_start(path, INPUT_BYTES)
    except OSError as error:
        return failed_snapshot(name, f"bundle {path} could not be read: {error}")
    bundle = parse_bundle_text(raw.decode("utf-8", "replace"))
    if cut:
        # A bundle larger than any collector writes: only its start is read, and it says so.
        note = f"bundle file larger than {cut} bytes: only its first {cut} bytes were read"
        bundle = dataclasses.replace(bundle, problems=(*bundle.problems, note))
    if not bundle.sections:
        problem = "; ".join(bundle.problems) or "no sections"
        return failed_snapshot(name, f"bundle {path.name} is not collector output: {problem}")
    meta_section = bundle.sections.get("meta")
    collected = parse_meta(meta_section.stdout).get("date") if meta_section else None
    return build_snapshot(
        name,
        bundle,
        host_data=host_data,
        collected_at=collected if collected and _ISO_UTC.match(collected) else None,
    )


def snapshots_from_bundles(paths: Iterable[Path]) -> list[HostSnapshot]:
    snapshots = [snapshot_from_bundle(Path(p)) for p in paths]
    seen: dict[str, int] = {}
    for snap in snapshots:
        seen[snap.host] = seen.get(snap.host, 0) + 1
    duplicates = sorted(host for host, count in seen.items() if count > 1)
    if duplicates:
        raise ValueError(f"several bundles name the same host: {', '.join(duplicates)}")
    return snapshots
