"""What the control node spends per host turning collector output into a snapshot file.

For a few simulated hosts (gpuaudit.sim: 8-GPU HGX boards and small ones), the real collector
is run once against each (setup, not measured) and its output kept. Then, per host and in the
same process, one after the other, each ``--loops`` times:

  decode  parse_bundle_text(): the collector output into sections (gzip and base64 undone);
  build   assemble.build_snapshot(): every section parsed into a HostSnapshot;
  write   RunDir.write_snapshot(): the snapshot's JSON written to its file in a run directory.

and prints the CPU milliseconds of each per host, with build / decode and write / decode: the
ratios are the numbers to compare across machines (decoding is the least any controller does
with a host's output). CPU time (this process's, single-threaded) is what is measured, which
other work on a shared machine does not stretch. Run it with::

    .venv/bin/python benchmarks/snapshot_build.py
    .venv/bin/python benchmarks/snapshot_build.py --loops 50 --profile a100-hgx-02
    .venv/bin/python benchmarks/snapshot_build.py --profile-out build.prof   # cProfile of build

``--bundles DIR`` keeps the collector outputs in DIR (``<profile>.txt``) and reuses them on the
next run; ``--dump DIR`` writes each host's snapshot JSON there, to compare two versions' output.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from gpuaudit.assemble.build import build_snapshot
from gpuaudit.collect import collector_script
from gpuaudit.parsers.bundle import parse_bundle_text
from gpuaudit.report.run import RunDir
from gpuaudit.sim.host import materialize
from gpuaudit.sim.profiles import expected_gpu_count, get_profile

# 8-GPU boards (MIG on a100-hgx-01, NVLink everywhere), then small hosts and an AMD one.
PROFILES = ("a100-hgx-01", "a100-hgx-02", "h100-01", "v100-01", "t4-01", "mi100-01")
COLLECTED_AT = "2024-01-01T00:00:00Z"


def collector_output(profile: str, base: Path) -> str:
    """The real collector's output on a fresh simulated host of ``profile``."""
    sim = materialize(profile, profile, base, reset=True)
    done = subprocess.run(
        ["sh", "-c", collector_script("bench")],
        env={**os.environ, **sim.env()},
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return done.stdout


def bundles(profiles: tuple[str, ...], keep: Path | None) -> dict[str, str]:
    found: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="gpuaudit-bench-sim-") as tmp:
        for profile in profiles:
            cached = keep / f"{profile}.txt" if keep else None
            if cached is not None and cached.is_file():
                found[profile] = cached.read_text(encoding="utf-8")
                continue
            found[profile] = collector_output(profile, Path(tmp))
            if cached is not None:
                cached.parent.mkdir(parents=True, exist_ok=True)
                cached.write_text(found[profile], encoding="utf-8")
    return found


def cpu_ms(fn: Callable[[], object], loops: int) -> float:
    """Median CPU milliseconds of one ``fn()`` over ``loops`` calls."""
    times = []
    for _ in range(loops):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return statistics.median(times) * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", action="append", help="simulator profile (repeatable)")
    parser.add_argument("--loops", type=int, default=20, help="measure each step this many times")
    parser.add_argument("--bundles", type=Path, help="keep / reuse the collector outputs here")
    parser.add_argument("--dump", type=Path, help="write each host's snapshot JSON here")
    parser.add_argument("--profile-out", type=Path, help="write a cProfile of the builds here")
    args = parser.parse_args(argv)
    profiles = tuple(args.profile or PROFILES)

    texts = bundles(profiles, args.bundles)
    print(
        f"{'host':<14}{'GPUs':>5}{'output':>10}{'JSON':>10}"
        f"{'decode':>9}{'build':>9}{'write':>9}{'build/dec':>11}{'write/dec':>11}"
    )
    rows: list[tuple[float, float, float]] = []
    profiler = cProfile.Profile() if args.profile_out else None
    with tempfile.TemporaryDirectory(prefix="gpuaudit-bench-run-") as tmp:
        run = RunDir(Path(tmp) / "run")
        run.hosts_dir.mkdir(parents=True)
        for profile in profiles:
            text = texts[profile]
            bundle = parse_bundle_text(text)
            snapshot = build_snapshot(profile, bundle, collected_at=COLLECTED_AT)
            gc.collect()
            decode = cpu_ms(partial(parse_bundle_text, text), args.loops)
            build = cpu_ms(
                partial(build_snapshot, profile, bundle, collected_at=COLLECTED_AT), args.loops
            )
            write = cpu_ms(partial(run.write_snapshot, snapshot), args.loops)
            if profiler is not None:
                profiler.enable()
                for _ in range(args.loops):
                    build_snapshot(profile, bundle, collected_at=COLLECTED_AT)
                profiler.disable()
            written = run.snapshot_path(profile).read_text(encoding="utf-8")
            if args.dump:
                args.dump.mkdir(parents=True, exist_ok=True)
                (args.dump / f"{profile}.json").write_text(written, encoding="utf-8")
            gpus = expected_gpu_count(get_profile(profile))
            rows.append((decode, build, write))
            print(
                f"{profile:<14}{gpus:>5}{len(text) / 1024:>8.0f}Ki{len(written) / 1024:>8.0f}Ki"
                f"{decode:>7.2f}ms{build:>7.2f}ms{write:>7.2f}ms"
                f"{build / decode:>10.1f}×{write / decode:>10.1f}×"
            )
    decode, build, write = (sum(column) for column in zip(*rows, strict=True))
    print(
        f"{'all':<14}{'':>5}{'':>10}{'':>10}{decode:>7.2f}ms{build:>7.2f}ms{write:>7.2f}ms"
        f"{build / decode:>10.1f}×{write / decode:>10.1f}×"
    )
    if profiler is not None:
        profiler.dump_stats(str(args.profile_out))
        print(f"cProfile of the builds written to {args.profile_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
