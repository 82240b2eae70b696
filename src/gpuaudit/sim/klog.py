"""The simulated kernel ring buffer as ``dmesg`` prints it, with the faults that make a real
one hard to read: bytes that are not UTF-8 in XID lines, and a log of hundreds of MiB.

A huge log is made up while it is written, chunk by chunk, and never held whole: ordinary
kernel messages (none of which the collector keeps) with the host's own kernel-log lines (its
XIDs, from real captures) sprinkled in, and one runaway NVRM line half way.
"""

from __future__ import annotations

import re

from gpuaudit.sim.state import fault_param, has_fault

# Typing names for the checker only: importing typing costs each tool call milliseconds.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator

    from gpuaudit.sim.state import State

# Everyday kernel messages of a GPU server; none matches the collector's NVRM/Xid filter.
_NOISE = (
    "EXT4-fs (nvme0n1p2): re-mounted. Opts: errors=remount-ro. Quota mode: none.",
    'audit: type=1400 audit(1717200000.123:4242): apparmor="DENIED" operation="open" '
    'profile="snap.lxd.daemon" name="/proc/1/cmdline" pid=4242 comm="lxd" requested_mask="r"',
    "IPv6: ADDRCONF(NETDEV_CHANGE): eth0: link becomes ready",
    "mlx5_core 0000:5e:00.0: mlx5_cmd_out_err:838: ACCESS_REG(0x805) op_mod(0x1) failed, "
    "status bad parameter(0x3), syndrome (0x6c4d48), err(-22)",
    "systemd-journald[812]: /var/log/journal/system.journal: Journal header limits reached "
    "or header out-of-date, rotating.",
    "usb 1-1.2: new high-speed USB device number 5 using xhci_hcd",
    "perf: interrupt took too long (2502 > 2500), lowering kernel.perf_event_max_sample_rate "
    "to 79750",
    "TCP: request_sock_TCP: Possible SYN flooding on port 8000. Sending cookies.",
)
_PREFIX = "kern  :info  : 2025-06-01T00:@T@,{micro:06d}+00:00 "
_RUNAWAY_MIB = 1
_PROCESS_NAME = re.compile(rb"name=[^,]*")


def dmesg_chunks(state: State) -> Iterator[bytes]:
    """The bytes ``dmesg`` prints for the host, in chunks: the boot's first line, then the
    host's kernel-log lines (without that first line where the ring buffer has wrapped)."""
    if not has_fault(state, "ring_wrapped"):
        release = state.get("kernel_release", "5.15.0-105-generic")
        yield f"[    0.000000] Linux version {release} (buildd@lcy02-amd64-001)\n".encode()
    own = [line.encode("utf-8") for line in state.get("kernel_log", [])]
    if has_fault(state, "non_utf8"):
        # A process whose name is Latin-1 ("träin.py"): the kernel prints comm as raw bytes.
        own = [
            _PROCESS_NAME.sub(b"name=tr\xe4in.py", line, count=1) if b"Xid" in line else line
            for line in own
        ]
    if not has_fault(state, "huge_kernel_log"):
        yield b"".join(line + b"\n" for line in own)
        return
    mib = float(fault_param(state, "huge_kernel_log", "mib", 200))
    every = max(1, int(fault_param(state, "huge_kernel_log", "every", 200)))
    yield from _flood(own, int(mib * 1024 * 1024), every)


def _flood(own: list[bytes], total: int, every: int) -> Iterator[bytes]:
    """About ``total`` bytes: ``every`` noise lines, then the next of the host's own lines."""
    template = "".join(
        _PREFIX.format(micro=i) + _NOISE[i % len(_NOISE)] + "\n" for i in range(every)
    ).encode("ascii")
    runaway = (
        b"kern  :err   : 2025-06-01T00:30:00,000000+00:00 NVRM: "
        + b"0xdeadbeef " * (_RUNAWAY_MIB * 1024 * 1024 // 11)
        + b"\n"
    )
    written = chunk = 0
    while written < total:
        stamp = f"{chunk // 60 % 60:02d}:{chunk % 60:02d}".encode("ascii")
        block = template.replace(b"@T@", stamp)
        if own:
            block += own[chunk % len(own)] + b"\n"
        if written < total // 2 <= written + len(block):
            block += runaway
        yield block
        written += len(block)
        chunk += 1
