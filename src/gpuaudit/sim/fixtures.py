"""Access to the real captured outputs packaged in ``sim/data`` and the derivations made from
them (a topology matrix with another NVLink count, kernel-log lines moved to another GPU).

The simulator never makes up the layout of an NVIDIA tool's output that a capture shows: it
copies the capture and changes values in it. ``data/README.md`` names each file's origin.
"""

from __future__ import annotations

import re
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent / "data"
KINDS = (
    *("nvidia-smi-xml", "topo", "kernel-log", "mig", "rocm-smi", "slurm", "monitoring"),
    "dcgm-diag",
)

# PCI addresses as the NVIDIA kernel module prints them: "PCI:0000:3b:00" in XID lines and
# "GPU at PCI:0000:3b:00: GPU-<uuid>", "0000:01:00.0" in older "fallen off the bus" lines.
_PCI = re.compile(r"\b([0-9a-fA-F]{4}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(\.[0-7])?\b")
_GPU_UUID = re.compile(
    r"GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
)
_XID = re.compile(r"(NVRM: Xid \([^)]*\): )(\d+)(, .*)$")
_XID_PROCESS = re.compile(r"^(pid=[^,]*, (?:name=[^,]*, )?)")


def fixture_path(kind: str, name: str) -> Path:
    if kind not in KINDS:
        raise ValueError(f"unknown fixture kind {kind!r}")
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"bad fixture name {name!r}")
    path = DATA_DIR / kind / name
    if not path.is_file():
        raise FileNotFoundError(f"no packaged fixture {kind}/{name}")
    return path


def read_fixture(kind: str, name: str) -> str:
    return fixture_path(kind, name).read_text(encoding="utf-8")


def topology_gpu_count(text: str) -> int:
    header = text.splitlines()[0] if text else ""
    return len(re.findall(r"GPU\d+(?!\w)", header))


def render_topology(fixture: str, gpu_count: int, replace: dict[str, str] | None = None) -> str:
    """``nvidia-smi topo -m`` from a real matrix of the same GPU count, with link labels
    swapped where the host differs from the captured one (``{"NV18": "NV12"}`` turns an
    H100 NVSwitch matrix into the A100 one: 12 NVLinks per GPU instead of 18)."""
    text = read_fixture("topo", fixture)
    found = topology_gpu_count(text)
    if found != gpu_count:
        raise ValueError(f"topology fixture {fixture} shows {found} GPUs, host has {gpu_count}")
    for old, new in (replace or {}).items():
        # Whole cells only: "NV1" must not touch "NV18".
        text = re.sub(rf"(?<![\w#]){re.escape(old)}(?!\w)", new, text)
    return text


def rewrite_kernel_lines(
    lines: list[str],
    targets: list[tuple[str, str]],
    xid: dict[str, object] | None = None,
) -> list[str]:
    """Move captured kernel-log lines onto this host's GPUs.

    ``targets`` lists (bus id, uuid) of the GPUs that should appear in the lines: the first
    PCI address met in the capture becomes the first target, the second the second, and so
    on (a capture naming more GPUs than there are targets reuses the last one). The case
    and width the capture printed are kept. ``xid`` ({"from": 62, "to": 79, "message": …})
    turns one XID code into another, keeping the line's time stamp and process fields: used
    for codes no public capture shows, in the kernel's own line form.
    """
    if not targets:
        raise ValueError("rewrite_kernel_lines needs at least one target GPU")
    mapping: dict[str, int] = {}

    def target_for(address: str) -> tuple[str, str]:
        key = address.lower()
        if key not in mapping:
            mapping[key] = min(len(mapping), len(targets) - 1)
        return targets[mapping[key]]

    def move_address(match: re.Match[str]) -> str:
        bus_id, _ = target_for(":".join(match.group(1, 2, 3)))
        domain, bus, devfn = bus_id.split(":")
        device, _, function = devfn.partition(".")
        spelled = f"{domain[-4:]}:{bus}:{device}"
        spelled = spelled.upper() if match.group(2).isupper() else spelled.lower()
        return spelled + (f".{function}" if match.group(4) else "")

    out: list[str] = []
    for line in lines:
        moved = _PCI.sub(move_address, line)
        first = _PCI.search(line)
        if first is not None:
            _, uuid = target_for(":".join(first.group(1, 2, 3)))
            moved = _GPU_UUID.sub(uuid, moved)
        if xid is not None:
            moved = _rewrite_xid(moved, xid)
        out.append(moved)
    return out


def _rewrite_xid(line: str, xid: dict[str, object]) -> str:
    match = _XID.search(line)
    if match is None or int(match.group(2)) != int(str(xid["from"])):
        return line
    rest = match.group(3)[2:]  # after ", "
    process = _XID_PROCESS.match(rest)
    prefix = process.group(1) if process else ""
    new_tail = f", {prefix}{xid['message']}"
    return line[: match.start()] + match.group(1) + str(xid["to"]) + new_tail
