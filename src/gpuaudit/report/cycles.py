"""Pausing Python's cyclic garbage collector while a large fleet's objects are made."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def cycle_collection_paused() -> Iterator[None]:
    """The cyclic garbage collector paused for the block, resumed after.

    Loading a fleet's snapshots and building its report make millions of objects that live
    until the report is written (snapshots, rule outcomes, findings, page data), and each of
    the collector's full passes walks every one of them: a fifth of the build's time at 1,000
    hosts, and a quarter of loading 2,500 snapshots, for nothing, since what is thrown away is
    freed by reference counting (a build leaves a handful of objects in cycles, which the
    collector takes once it runs again). Memory is unchanged. Nested blocks leave it to the
    outermost.

    What the block made is resumed in the oldest generation (:func:`_resume`): left in the
    youngest, every object made in the block and still alive would be walked by the very next
    pass, a sixth of what loading the fleet costs, to find those few cycles.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        _resume()


def _resume() -> None:
    """Enable the collector with what is tracked now in its oldest generation. Frozen and
    unfrozen at once, every tracked object moves there (and the youngest generation's count
    starts again from zero); a full pass, if the process lives to make one, finds the cycles
    among them. A process that froze objects of its own (settle_for_collection) keeps them
    frozen: the collector is only enabled there."""
    if not gc.get_freeze_count():
        gc.freeze()
        gc.unfreeze()
    gc.enable()


# The youngest generation's threshold for a process that collects a fleet (Python's is 700).
_COLLECTING_THRESHOLD = 20_000


def settle_for_collection() -> None:
    """Make the cyclic garbage collector cheap for the rest of a collecting process (pyinfra
    running the audit), once everything it runs on is loaded.

    What is loaded by then (pyinfra, paramiko, gevent, gpuaudit, the inventory) lives as long
    as the process: it is moved out of the collector's reach (``gc.freeze``), so a full pass no
    longer walks it. And each host's snapshot is tens of thousands of objects that live until
    the register is written: at Python's threshold of 700 new objects, building one started
    some thirty passes, each of the middle generation's walking the snapshots of the hosts
    before it. With a higher threshold a host's snapshot starts one or two. Cycles are still
    found and freed, a little later; what the process holds does not change.
    """
    gc.freeze()
    youngest, *older = gc.get_threshold()
    if youngest and youngest < _COLLECTING_THRESHOLD:
        gc.set_threshold(_COLLECTING_THRESHOLD, *older)
