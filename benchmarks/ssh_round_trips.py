"""Benchmark (b): one remote command per host against one per section, with and without
20 ms of added round-trip delay.

    .venv/bin/python benchmarks/ssh_round_trips.py               # 20 hosts
    .venv/bin/python benchmarks/ssh_round_trips.py --hosts 100 --delay-ms 10

The fleet is benchmark (a)'s (ssh_fleet.py: one sshd, a key per simulated profile, tools that
answer from recorded outputs). The delay (``--delay-ms`` in each direction, a round trip twice
that; 0 ms for the runs without delay, over the same link) comes from ``--link``:
``netem``: the sshd runs in a network namespace behind a veth pair, both ends under
``tc netem`` (root and the kernel's sch_netem needed); ``relay``: the sshd listens on
127.0.0.1 and the controller reaches it through a relay in this process (sshd.DelayProxy) that
holds every chunk; ``auto`` (default): netem where the kernel has it, else the relay. The deploy
(collect_deploy.py) collects every host's sections in one command, as the audit does, or in
one command per section. Printed for each of the four runs: wall time of the run and per host
(median of each host's first command to its last answer), remote commands per host and SSH
bytes per host, both directions (sshd's log), and control CPU per host; then the ratios per
section / per host.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ssh_fleet import (
    PYINFRA,
    Measured,
    build_fleet,
    fleet_arguments,
    measure,
    split_cpus,
    write_inventory,
)
from sshd import DelayProxy, NetemUnavailable, Sshd, netem_link, running_sshd

DEPLOY = Path(__file__).resolve().parent / "collect_deploy.py"


def main(argv: Sequence[str] | None = None) -> int:
    parser = fleet_arguments(__doc__ or "", 20)
    parser.add_argument("--delay-ms", type=int, default=10, help="one way, in each direction")
    parser.add_argument(
        "--link",
        choices=("auto", "netem", "relay"),
        default="auto",
        help="how the delay is made (default: netem where the kernel has it)",
    )
    args = parser.parse_args(argv)
    rows: list[tuple[int, str, Measured, float, float, int]] = []
    with ExitStack() as stack:
        workdir = args.workdir or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        fleet = build_fleet(workdir, args.hosts, args.profiles.split(","))
        cpus = split_cpus(args.shared_cpus)
        link, how = None, "a relay in the controller's process (sshd.DelayProxy)"
        if args.link != "relay":
            try:
                link = stack.enter_context(netem_link())
                how = "a veth pair into a network namespace, tc netem on both ends"
            except NetemUnavailable as why:
                if args.link == "netem":
                    print(f"tc netem cannot be used here: {why}", file=sys.stderr)
                    return 2
                print(f"tc netem cannot be used here ({why}); the relay adds the delay")
        if link is not None:
            sshd = stack.enter_context(
                running_sshd(workdir / "sshd", fleet.logins, link.address, link.prefix, cpus)
            )
            target, set_delay = sshd, link.set_delay
        else:
            sshd = stack.enter_context(running_sshd(workdir / "sshd", fleet.logins, cpus=cpus))
            proxy = stack.enter_context(DelayProxy((sshd.address, sshd.port)))
            # The inventory names the relay; the log is the sshd's.
            target = Sshd(sshd.address, proxy.port, sshd.user, sshd.log, sshd.host_key)

            def set_delay(one_way_ms: int) -> None:
                proxy.one_way_s = one_way_ms / 1000

        inventory = write_inventory(workdir / "inventory.py", fleet, target, workdir / "known")
        for delay in (0, args.delay_ms):
            set_delay(delay)
            for mode in ("host", "section"):
                times = workdir / f"times-{delay}-{mode}"
                times.mkdir(parents=True, exist_ok=True)
                env = {"GA_BENCH_MODE": mode, "GA_BENCH_TIMES": str(times)}
                run = measure(mode, [*PYINFRA, str(inventory), str(DEPLOY)], sshd, env)
                answers = [p.read_text().split() for p in times.iterdir()]
                per_host = statistics.median(float(a[0]) for a in answers) if answers else 0.0
                sections = min((int(a[1]) for a in answers), default=0)
                wire = run.log.bytes_total / args.hosts
                rows.append((delay * 2, mode, run, per_host, wire, sections))
    hosts = args.hosts
    print(f"\n{hosts} hosts, one sshd; the delay: {how}")
    print(f"{'RTT ms':>7} {'commands':<12}{'run wall s':>11}{'host wall s':>12}{'exec/host':>10}"
          f"{'KiB/host':>9}{'CPU ms/host':>12}{'sections':>9}")  # fmt: skip
    for rtt, mode, run, per_host, wire, sections in rows:
        print(
            f"{rtt:>7} {'per ' + mode:<12}{run.wall_s:>11.1f}{per_host:>12.2f}"
            f"{run.log.exec_requests / hosts:>10.1f}{wire / 1024:>9.1f}"
            f"{run.cpu_s * 1000 / hosts:>12.1f}{sections:>9}"
        )
    for rtt in sorted({r[0] for r in rows}):
        one, many = (
            next(r for r in rows if r[0] == rtt and r[1] == m) for m in ("host", "section")
        )
        print(
            f"RTT {rtt} ms: per section / per host: run wall {many[2].wall_s / one[2].wall_s:.2f}, "
            f"host wall {many[3] / one[3]:.2f}, control CPU {many[2].cpu_s / one[2].cpu_s:.2f}"
        )
    return 1 if any(r[2].returncode for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
