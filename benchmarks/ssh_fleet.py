"""Benchmark (a): the audit of a fleet over real SSH, against pyinfra's trivial fact.

    .venv/bin/python benchmarks/ssh_fleet.py                 # 100 hosts
    .venv/bin/python benchmarks/ssh_fleet.py --hosts 20 --repeat 3

One real sshd on 127.0.0.1 stands in for N hosts (benchmarks/sshd.py): each host logs in with
its profile's key, whose environment puts that simulated host's tools first on PATH (tools that
answer from recorded simulator outputs: benchmarks/recorded_hosts.py) and gives it an empty
HOME, so the login reads no rc file. Then, side by side in one run, over the same inventory:

- ``pyinfra -y INVENTORY fact server.Hostname`` (pyinfra's trivial fact: one ``uname -n``);
- the collection alone: ``pyinfra -y INVENTORY deploys/audit.py`` with ``GPUAUDIT_SHARD`` set,
  which collects each host and writes its snapshot but leaves the register out;
- the whole audit: ``gpuaudit audit INVENTORY`` (pyinfra, every snapshot, then the register
  and its views).

Control CPU is the user + system time of each command's whole process tree (getrusage
RUSAGE_CHILDREN before and after; sshd, started before and still running, and the commands it
runs for the logins are not in it). sshd's log gives, for each run, the connections, the
remote commands (exec requests) and the SSH bytes of each connection, both directions.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from recorded_hosts import RecordedHost, fleet_profiles, record_fleet
from sshd import LogCounts, Login, Sshd, host_cpus, new_key, running_sshd

REPO = Path(__file__).resolve().parents[1]
PYINFRA = [sys.executable, "-m", "pyinfra", "-y"]
HOSTNAME_FACT = "server.Hostname"


@dataclass(frozen=True)
class Fleet:
    """N inventory hosts over a few recorded profiles, one login (key) per profile."""

    hosts: tuple[tuple[str, str], ...]  # (inventory name, profile)
    recorded: Mapping[str, RecordedHost]
    logins: Mapping[str, Login]

    def gpus(self, profile: str) -> int:
        return self.recorded[profile].gpus


def build_fleet(workdir: Path, count: int, profiles: Sequence[str]) -> Fleet:
    recorded = record_fleet(tuple(profiles), workdir / "hosts")
    keys = workdir / "keys"
    keys.mkdir(parents=True, exist_ok=True)
    logins = {
        name: Login(key=new_key(keys / name), env=host.env()) for name, host in recorded.items()
    }
    hosts = tuple((f"gpu-{i:05d}", profiles[i % len(profiles)]) for i in range(count))
    return Fleet(hosts=hosts, recorded=recorded, logins=logins)


def write_inventory(path: Path, fleet: Fleet, sshd: Sshd, known_hosts: Path) -> Path:
    known_hosts.write_text(sshd.known_hosts_line())
    rows = [
        (
            name,
            {
                "ssh_hostname": sshd.address,
                "ssh_port": sshd.port,
                "ssh_user": sshd.user,
                "ssh_key": str(fleet.logins[profile].key),
                "ssh_known_hosts_file": str(known_hosts),
                "ssh_allow_agent": False,
                "ssh_look_for_keys": False,
                "expected_gpu_count": fleet.gpus(profile),
            },
        )
        for name, profile in fleet.hosts
    ]
    path.write_text(f"gpu_hosts = {rows!r}\n")
    return path


@dataclass(frozen=True)
class Measured:
    label: str
    cpu_s: float
    wall_s: float
    returncode: int
    log: LogCounts


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(
    label: str, argv: Sequence[str], sshd: Sshd, env: Mapping[str, str] | None = None
) -> Measured:
    """Run ``argv`` to its end: CPU of its process tree, wall time, and what sshd logged."""
    since = sshd.log_size()
    cpu, clock = _children_cpu(), time.perf_counter()
    done = subprocess.run(
        list(argv),
        env={**os.environ, **(env or {})},
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    wall, cpu = time.perf_counter() - clock, _children_cpu() - cpu
    time.sleep(0.5)  # sshd logs a connection's byte counts as it closes
    if done.returncode != 0:
        print(f"{label}: exit status {done.returncode}\n{done.stderr[-2000:]}", file=sys.stderr)
    return Measured(label, cpu, wall, done.returncode, sshd.counts(since))


def audit_commands(
    inventory: Path, run_dir: Path, options: Sequence[str] = ()
) -> dict[str, tuple[list[str], dict[str, str]]]:
    """The three commands of one round: the trivial fact, the collection alone, the audit;
    ``options`` are pyinfra's (--parallel)."""
    return {
        "fact": ([*PYINFRA, *options, str(inventory), "fact", HOSTNAME_FACT], {}),
        "collect": (
            [*PYINFRA, *options, str(inventory), "deploys/audit.py"],
            {"GPUAUDIT_SHARD": "1/1", "GPUAUDIT_RUN_DIR": str(run_dir / "collect")},
        ),
        "audit": (
            [sys.executable, "-m", "gpuaudit.cli", "audit", *options, str(inventory),
             "--reports-dir", str(run_dir), "--run-id", "audit"],
            {},
        ),
    }  # fmt: skip


def _per_host_ms(runs: Sequence[Measured], hosts: int) -> float:
    return statistics.median(r.cpu_s for r in runs) * 1000 / hosts


def report(results: Mapping[str, list[Measured]], fleet: Fleet) -> None:
    hosts = len(fleet.hosts)
    eight = sum(1 for _, p in fleet.hosts if fleet.gpus(p) == 8)
    print(f"\n{hosts} hosts ({eight} with 8 GPUs), {len(fleet.recorded)} profiles, one sshd")
    print(f"{'run':<10}{'CPU ms/host':>12}{'wall s':>9}{'exec/host':>11}{'KiB/host':>10}"
          f"{'max KiB':>9}{'connections':>13}")  # fmt: skip
    fact_ms = _per_host_ms(results["fact"], hosts)
    for label, runs in results.items():
        last = runs[-1].log
        per_conn = [(s + r) / 1024 for s, r in last.transferred] or [0.0]
        print(
            f"{label:<10}{_per_host_ms(runs, hosts):>12.1f}"
            f"{statistics.median(r.wall_s for r in runs):>9.1f}"
            f"{last.exec_requests / hosts:>11.2f}{last.bytes_total / 1024 / hosts:>10.1f}"
            f"{max(per_conn):>9.1f}{last.accepted:>13}"
        )
    collect_ms = _per_host_ms(results["collect"], hosts)
    audit_ms = _per_host_ms(results["audit"], hosts)
    print(f"\nratio collection / trivial fact (control CPU per host): {collect_ms / fact_ms:.2f}")
    print(f"ratio whole audit / trivial fact (control CPU per host): {audit_ms / fact_ms:.2f}")
    print(f"register and views (audit - collection): {audit_ms - collect_ms:.1f} ms per host")
    print("max KiB: the largest connection (SSH bytes, both directions), an upper bound for "
          "every host, 8-GPU hosts included")  # fmt: skip


def fleet_arguments(doc: str, hosts: int) -> argparse.ArgumentParser:
    """The options both SSH benchmarks take: the fleet's size, profiles and directory."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--hosts", type=int, default=hosts)
    parser.add_argument(
        "--profiles", default=",".join(fleet_profiles()), help="simulator profiles, cycled"
    )
    parser.add_argument("--workdir", type=Path, help="keep the fleet and runs here")
    parser.add_argument(
        "--shared-cpus",
        action="store_true",
        help="let the controller and the simulated hosts share every CPU (default: CPU 0 is "
        "the controller's, the others the hosts')",
    )
    return parser


def split_cpus(shared: bool) -> set[int]:
    """Pin this process (and so every command it measures) to the controller's CPUs; the
    hosts' CPUs, for sshd (every CPU when ``shared``)."""
    controller, hosts = host_cpus()
    if shared:
        return controller | hosts
    os.sched_setaffinity(0, controller)
    return hosts


def main(argv: Sequence[str] | None = None) -> int:
    parser = fleet_arguments(__doc__ or "", 100)
    parser.add_argument("--repeat", type=int, default=1, help="rounds; medians are printed")
    parser.add_argument("--parallel", type=int, help="pyinfra --parallel (default pyinfra's)")
    parser.add_argument("--profile-out", type=Path, help="cProfile the collection into FILE")
    args = parser.parse_args(argv)
    with ExitStack() as stack:
        workdir = args.workdir or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        fleet = build_fleet(workdir, args.hosts, args.profiles.split(","))
        cpus = split_cpus(args.shared_cpus)
        sshd = stack.enter_context(running_sshd(workdir / "sshd", fleet.logins, cpus=cpus))
        inventory = write_inventory(workdir / "inventory.py", fleet, sshd, workdir / "known")
        print(f"controller on CPUs {sorted(os.sched_getaffinity(0))}, hosts on {sorted(cpus)}")
        results: dict[str, list[Measured]] = {"fact": [], "collect": [], "audit": []}
        for round_number in range(args.repeat):
            run_dir = workdir / f"runs{round_number}"
            options = [f"--parallel={args.parallel}"] if args.parallel else []
            for label, (command, env) in audit_commands(inventory, run_dir, options).items():
                if label == "collect" and args.profile_out:
                    command = [sys.executable, "-m", "cProfile", "-o", str(args.profile_out),
                               "-m", "pyinfra", *command[len(PYINFRA) - 1 :]]  # fmt: skip
                results[label].append(measure(label, command, sshd, env))
        report(results, fleet)
        failed = [r.label for runs in results.values() for r in runs if r.returncode]
        return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
