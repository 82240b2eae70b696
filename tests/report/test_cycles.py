"""The cyclic garbage collector's settings for a process that collects a fleet."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# Each case runs in a fresh interpreter: freezing and the thresholds are process-wide.
_SETTLE = textwrap.dedent(
    """
    import gc, weakref
    from gpuaudit.report.cycles import settle_for_collection

    class Node:
        pass

    gc.set_threshold({start}, 10, 10)
    loaded = Node()
    settle_for_collection()
    print(gc.get_freeze_count() > 0, gc.get_threshold()[0])
    # A cycle made after settling is still found and freed.
    cycle = Node()
    cycle.self = cycle
    gone = weakref.ref(cycle)
    del cycle
    gc.collect()
    print(gone() is None)
    """
)


def _printed(script: str) -> list[str]:
    """What ``script`` prints in a fresh interpreter, word by word."""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    return done.stdout.split()


def _settle(start: int) -> list[str]:
    return _printed(_SETTLE.format(start=start))


def test_what_is_loaded_is_frozen_and_the_youngest_threshold_raised() -> None:
    frozen, threshold, freed = _settle(700)
    assert frozen == "True"
    assert int(threshold) == 20_000
    assert freed == "True"


def test_a_higher_threshold_or_a_disabled_one_is_kept() -> None:
    assert _settle(50_000)[1] == "50000"
    assert _settle(0)[1] == "0"


_PAUSE = textwrap.dedent(
    """
    import gc, weakref
    from gpuaudit.report.cycles import cycle_collection_paused

    class Node:
        pass

    if {frozen}:
        kept = [Node() for _ in range(100)]
        gc.freeze()
    before = gc.get_freeze_count()
    with cycle_collection_paused():
        made = [Node() for _ in range(50_000)]  # the block's objects, alive after it
        cycle = Node()
        cycle.self = cycle
        gone = weakref.ref(cycle)
        del cycle
    oldest = any(o is made[0] for o in gc.get_objects(generation=2))
    print(gc.isenabled(), gc.get_freeze_count() == before, oldest)
    gc.collect()
    print(gone() is None)
    """
)


def _pause(frozen: bool) -> list[str]:
    return _printed(_PAUSE.format(frozen=frozen))


def test_a_pause_resumes_without_a_pass_over_what_it_made() -> None:
    """The 50,000 objects made in the block are in the oldest generation when it ends (left
    in the youngest, the first allocation after the block would walk them all); the cycle
    made in it is still freed by a full pass; nothing stays frozen."""
    assert _pause(frozen=False) == ["True", "True", "True", "True"]


def test_a_pause_leaves_what_a_process_froze_frozen() -> None:
    enabled, same_freeze, _oldest, freed = _pause(frozen=True)
    assert (enabled, same_freeze, freed) == ("True", "True", "True")
