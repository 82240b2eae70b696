"""How much the report costs on top of reading the snapshots, on a large synthetic fleet.

Writes ``--hosts`` synthetic host snapshots (synthetic_fleet.py) into a temporary run directory,
then measures, in the same process and one after the other:

  (a) load   RunDir.load_snapshots(): read and parse every snapshot file;
  (b) build  run.rebuild(): the whole ``gpuaudit report <run-dir>`` — load, evaluate the rules,
             build the register, write register.json, index.html and the other outputs.

and prints both (wall clock and CPU time), their ratio (build / load, on CPU time) and the sizes
of what was written. The ratio is the number to watch: it does not depend on how fast the
machine is, nor, being taken on CPU time, on what else runs on it.

With ``--previous``, the build of a second run of the same snapshots beside the first, with
trends against it, as a quarterly audit is built; side by side: the previous run's risks taken
from its trend-basis.json (sealed with its register.json's digest: trend_basis.py), and read
back from its register.json (its trend-basis.json without the register's part, as files
written before that part was kept are): reading the previous run alone, and the whole build,
each with its CPU time and tracemalloc's peak.

With ``--collected``, the fleet is snapshots as the audit writes them, raw sections included
(the synthetic fleet leaves them out): the real collector's output on each of the simulated
8-GPU NVIDIA boards, built into a snapshot once, the hosts taking those boards in turn under
their own names.

Then peak memory, side by side: the snapshots' size on disk; tracemalloc's count of what the
loaded snapshots hold (after load) and its peaks during (a) and (b); and the peak resident
size (VmHWM) of a fresh child process doing only (a) against one doing (b), with the
ratios build / load (Linux: read from /proc/self/status). Run it with::

    .venv/bin/python benchmarks/report_build.py                 # 10,000 hosts × 8 GPUs
    .venv/bin/python benchmarks/report_build.py --hosts 2000 --repeat 3
    .venv/bin/python benchmarks/report_build.py --collected --bundles /tmp/bundles
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent))

from snapshot_build import bundles
from synthetic_fleet import synthetic_fleet

from gpuaudit.assemble.build import build_snapshot
from gpuaudit.model.snapshot import HostSnapshot
from gpuaudit.parsers.bundle import parse_bundle_text
from gpuaudit.pipeline import rebuild
from gpuaudit.report.cycles import cycle_collection_paused
from gpuaudit.report.run import RunDir
from gpuaudit.report.trend_basis import BASIS_FILE
from gpuaudit.report.trends import load_previous
from gpuaudit.report.verdict import VERDICT_ENV, AuditVerdict, hand_over, taken_over

T = TypeVar("T")


def timed(fn: Callable[[], T]) -> tuple[float, float, T]:
    """Wall-clock and CPU seconds of ``fn()``.

    CPU time is what the ratio uses: on a shared machine other processes stretch wall-clock
    time, not this process's CPU time (the work is single-threaded).
    """
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, result


def write_fleet(run: RunDir, hosts: int, gpus: int) -> int:
    """Write the snapshots plainly (no fsync per file: setting up is not what is measured)."""
    run.hosts_dir.mkdir(parents=True, exist_ok=True)
    total = 0
    for snapshot in synthetic_fleet(hosts, gpus):
        text = snapshot.to_json() + "\n"
        run.snapshot_path(snapshot.host).write_text(text, encoding="utf-8")
        total += len(text.encode("utf-8"))
    return total


COLLECTED_AT = "2024-01-01T00:00:00Z"
# The demo fleet's 8-GPU NVIDIA boards: healthy, a row remap pending, driver drift, a MIG
# layout with a change pending, a GPU fallen off the bus, and an H100 board.
COLLECTED_PROFILES = (
    "a100-hgx-01", "a100-hgx-02", "a100-hgx-03", "a100-hgx-04", "a100-hgx-05", "h100-01",
)  # fmt: skip


def collected_snapshots(keep: Path | None) -> list[HostSnapshot]:
    """One snapshot per :data:`COLLECTED_PROFILES` board as the audit writes it: the real
    collector run on the simulated host (answering from real captured outputs), its output
    built into a snapshot with every raw section kept as evidence."""
    texts = bundles(COLLECTED_PROFILES, keep)
    return [
        build_snapshot(profile, parse_bundle_text(texts[profile]), collected_at=COLLECTED_AT)
        for profile in COLLECTED_PROFILES
    ]


def write_collected_fleet(run: RunDir, hosts: int, keep: Path | None) -> int:
    """``hosts`` snapshots, each a :func:`collected_snapshots` board under its own name, the
    boards taking turns."""
    boards = collected_snapshots(keep)
    run.hosts_dir.mkdir(parents=True, exist_ok=True)
    total = 0
    for number in range(hosts):
        snapshot = replace(boards[number % len(boards)], host=f"gpu-{number:05d}")
        text = snapshot.to_json() + "\n"
        run.snapshot_path(snapshot.host).write_text(text, encoding="utf-8")
        total += len(text.encode("utf-8"))
    return total


def mib(size: float) -> str:
    return f"{size / 2**20:.1f} MiB"


# VmHWM, not getrusage's ru_maxrss: Linux carries a forked child's ru_maxrss over from its
# parent (this process, which holds a fleet), while VmHWM belongs to the exec'd program alone.
_CHILD = """
import sys
from gpuaudit.pipeline import rebuild
from gpuaudit.report.cycles import cycle_collection_paused
from gpuaudit.report.run import RunDir
from gpuaudit.report.trend_basis import BASIS_FILE
from gpuaudit.report.trends import load_previous
from gpuaudit.report.verdict import VERDICT_ENV, AuditVerdict, hand_over, taken_over
run = RunDir(sys.argv[2])
snapshots = run.load_snapshots() if sys.argv[1] == "load" else rebuild(run)
with open("/proc/self/status", encoding="ascii") as status:
    print(next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:")))
"""


def child_peak_rss(what: str, run: RunDir) -> int:
    """Peak resident bytes of a fresh Python process doing only ``what`` (load or build)."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, what, str(run.path)],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(done.stdout.split()[-1])


def traced(fn: Callable[[], T]) -> tuple[int, int, T]:
    """(bytes still allocated by ``fn``'s result, tracemalloc's peak during ``fn``, result)."""
    gc.collect()
    tracemalloc.start()
    try:
        result = fn()
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return held, peak, result


def memory(run: RunDir, snapshot_bytes: int) -> None:
    held, load_peak, snapshots = traced(run.load_snapshots)
    del snapshots
    _, build_peak, _ = traced(lambda: rebuild(run))
    load_rss, build_rss = child_peak_rss("load", run), child_peak_rss("build", run)
    print("                 load       build      build / load")
    print(f"snapshots  {mib(snapshot_bytes):>10}   on disk;  {mib(held)} in memory, as loaded")
    print(
        f"tracemalloc{mib(load_peak):>10} {mib(build_peak):>11} {build_peak / load_peak:8.1f} ×"
        "  peak of Python allocations"
    )
    print(
        f"peak RSS   {mib(load_rss):>10} {mib(build_rss):>11} {build_rss / load_rss:8.1f} ×"
        "  peak resident size of a child process (interpreter and imports included)"
    )


def terminal_summary(run: RunDir, repeat: int) -> None:
    """What `gpuaudit audit` reads to print the run's summary and apply --fail-on, side by
    side: register.json read back, as it did, and the verdict the process that wrote the
    register hands over (report/verdict.py), each with its CPU time and tracemalloc's peak."""
    read_back = lambda: AuditVerdict.of(run.load_register(outcomes=False))  # noqa: E731
    with tempfile.TemporaryDirectory(prefix="gpuaudit-verdict-") as private:
        handed = Path(private, "verdict.json")
        os.environ[VERDICT_ENV] = str(handed)
        try:
            hand_over(run.load_register(outcomes=False), run.register_path)
        finally:
            del os.environ[VERDICT_ENV]
        taken = lambda: taken_over(handed, run.register_path)  # noqa: E731
        verdict = taken()  # the same summary and counts as the register read back
        assert verdict is not None and verdict == replace(read_back(), register=verdict.register)
        print("\nthe terminal's summary and --fail-on     CPU        peak")
        for label, read in (("register.json read back", read_back), ("verdict handed over", taken)):
            with cycle_collection_paused():  # as `gpuaudit audit` reads the register
                cpu = min(timed(read)[1] for _ in range(repeat))
            _, peak, _ = traced(read)
            print(f"  {label:<34} {cpu * 1000:9.1f} ms {mib(peak):>10}")


def with_previous(run: RunDir, repeat: int) -> None:
    """Build a second run of ``run``'s snapshots with trends against ``run`` (module
    docstring): once with ``run``'s trend-basis.json as written, once without its register
    part."""
    later = RunDir(run.path.parent / "later")
    later.hosts_dir.mkdir(parents=True)
    for path in run.snapshot_files():
        os.link(path, later.hosts_dir / path.name)
    basis_path = run.path / BASIS_FILE
    sealed = basis_path.read_text(encoding="utf-8")
    kept = json.loads(sealed)
    if "register" not in kept:
        raise SystemExit("the first run's trend-basis.json keeps no register part")
    unsealed = json.dumps({k: v for k, v in kept.items() if k != "register"})
    stat = basis_path.stat()

    def basis(text: str) -> None:  # the snapshots' stamps in it stay those of the files
        basis_path.write_text(text, encoding="utf-8")
        os.utime(basis_path, ns=(stat.st_atime_ns, stat.st_mtime_ns))

    load = min(timed(later.load_snapshots)[1] for _ in range(repeat))
    print(f"\nwith a previous run (trends):  load {load:.2f} s CPU")
    print("previous run read (CPU, peak)        build CPU  build / load  build peak")
    for label, text in (("from trend-basis.json", sealed), ("register.json read back", unsealed)):
        basis(text)
        with cycle_collection_paused():  # as the build reads it
            read = min(timed(lambda: load_previous(run.path))[1] for _ in range(repeat))
        _, read_peak, _ = traced(lambda: load_previous(run.path))
        cpu = min(timed(lambda: rebuild(later, previous=run.path))[1] for _ in range(repeat))
        _, peak, _ = traced(lambda: rebuild(later, previous=run.path))
        trends = json.loads(later.register_path.read_text(encoding="utf-8"))["trends"]
        assert trends and trends["compared_hosts"] == len(later.snapshot_files())
        print(
            f"  {label:<24} {read:5.2f} s {mib(read_peak):>10} {cpu:8.2f} s {cpu / load:8.2f} ×"
            f"  {mib(peak):>10}"
        )
    basis(sealed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=10_000)
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per host")
    parser.add_argument("--repeat", type=int, default=1, help="measure each this many times")
    parser.add_argument("--no-memory", action="store_true", help="leave out the memory part")
    parser.add_argument(
        "--previous", action="store_true", help="also build a second run, with trends"
    )
    parser.add_argument(
        "--collected",
        action="store_true",
        help="snapshots as the audit writes them (raw sections kept), of the simulated 8-GPU "
        "boards, instead of the synthetic fleet",
    )
    parser.add_argument(
        "--bundles", type=Path, help="with --collected: keep / reuse the collector outputs here"
    )
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="gpuaudit-bench-") as tmp:
        run = RunDir(Path(tmp) / "run")
        if args.collected:
            setup, _, snapshot_bytes = timed(
                lambda: write_collected_fleet(run, args.hosts, args.bundles)
            )
            kind = f"8 GPUs, collected from {len(COLLECTED_PROFILES)} simulated boards"
        else:
            setup, _, snapshot_bytes = timed(lambda: write_fleet(run, args.hosts, args.gpus))
            kind = f"{args.gpus} GPUs, synthetic"
        print(f"fleet      {args.hosts} hosts × {kind}, snapshots {mib(snapshot_bytes)}")
        print(f"           written in {setup:.1f} s (setup, not measured)")
        load: list[tuple[float, float]] = []
        build: list[tuple[float, float]] = []
        for _ in range(args.repeat):
            wall, cpu, snapshots = timed(run.load_snapshots)
            assert len(snapshots) == args.hosts
            del snapshots
            load.append((wall, cpu))
            wall, cpu, _ = timed(lambda: rebuild(run))
            build.append((wall, cpu))
        load_wall, load_cpu = (statistics.median(t) for t in zip(*load, strict=True))
        build_wall, build_cpu = (statistics.median(t) for t in zip(*build, strict=True))
        print("                 wall      CPU")
        print(f"(a) load   {load_wall:8.2f} s {load_cpu:8.2f} s   RunDir.load_snapshots()")
        print(
            f"(b) build  {build_wall:8.2f} s {build_cpu:8.2f} s   "
            "rebuild(): load + rules + register + all outputs + HTML"
        )
        print(f"ratio      {build_cpu / load_cpu:8.1f} ×  build / load (CPU time)")
        for path in sorted(run.path.iterdir()):
            if path.is_file():
                print(f"output     {path.name:<16} {mib(path.stat().st_size):>10}")
        page = sorted((run.path / "page").glob("*.js")) if (run.path / "page").is_dir() else []
        if page:
            total = sum(p.stat().st_size for p in page)
            print(f"output     page/*.js        {mib(total):>10}   host details, {len(page)} files")
        terminal_summary(run, args.repeat)
        if not args.no_memory:
            memory(run, snapshot_bytes)
        if args.previous:
            with_previous(run, args.repeat)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
