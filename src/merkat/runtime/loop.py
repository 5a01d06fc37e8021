"""The one period loop: a world run period by period on its clock, admitting its arrivals.

:func:`loop_periods` is the loop of every periodic world: the Merkat driver
(:meth:`Driver.run <merkat.runtime.driver.Driver.run>`: the period decision, the backend, the
economy) and Tycoon's market (:mod:`merkat.worlds.tycoon.simulator`: Best Response bids, an
auction per host, charging by use, every 10 s). A world is a :class:`Periodic`: its clock
(:mod:`~merkat.runtime.clock`), its arrivals (:mod:`~merkat.runtime.arrivals`) and what it does
at each step. From ``start`` (default: the period boundary at or before the first arrival), at
``t = start + k × period``, while ``t < until``:

1. nothing active (:meth:`Periodic.busy`): the run ends when no arrival is pending or when
   :meth:`Periodic.idle` says so; with ``skip_idle`` the loop jumps to the boundary
   :meth:`Periodic.skip` gives for the next arrival;
2. the clock waits until ``t``; the arrivals due are admitted (:meth:`Periodic.admit_due`);
3. the period (:meth:`Periodic.period_at`, run while something is active or always without
   ``skip_idle``); False ends the run there;
4. what happens until the next boundary (:meth:`Periodic.after`: admissions between periods,
   a simulated world's advance).

Returns the time it stopped at. Decision: time is ``start + k × period`` (``k`` periods since
the start or the last jump), not a running sum, so that a period that is not a binary fraction
(0.7 s) never drifts; for the periods of the papers' runs (whole seconds) the two are the same
numbers.
"""

from __future__ import annotations

import math
from typing import Protocol

from merkat.runtime.arrivals import Arrivals
from merkat.runtime.clock import Clock


class Periodic(Protocol):
    """A world :func:`loop_periods` runs (module doc)."""

    @property
    def arrivals(self) -> Arrivals:
        """What it admits over time (``next_time``, ``due``)."""
        ...

    @property
    def clock(self) -> Clock:
        """Its time: virtual (simulations) or the wall's."""
        ...

    @property
    def skip_idle(self) -> bool:
        """Whether the loop jumps over time when nothing is active."""
        ...

    @property
    def period(self) -> float:
        """Seconds between two periods."""
        ...

    def busy(self) -> bool:
        """Whether anything is active (a period has work)."""
        ...

    def idle(self, t: float) -> bool:
        """Nothing is active at ``t``: True ends the run here."""
        ...

    def skip(self, t: float, arrival: float) -> float:
        """Nothing is active at ``t`` and the next arrival is at ``arrival``: the boundary to
        jump to (with ``skip_idle``)."""
        ...

    def admit_due(self, t: float) -> None:
        """Admit the arrivals due at ``t``."""
        ...

    def period_at(self, t: float) -> bool:
        """The period at ``t``; False ends the run here (nothing more of this period)."""
        ...

    def after(self, t0: float, t1: float) -> None:
        """What happens after the period at ``t0``, until the next boundary ``t1``."""
        ...


def loop_periods(world: Periodic, until: float = math.inf, start: float | None = None
                ) -> float:
    """Run ``world`` period by period (module doc); return the time it stopped at."""
    P = world.period
    arrivals, clock = world.arrivals, world.clock
    first = arrivals.next_time()
    base = start if start is not None else (math.floor(first / P) * P if first else 0.0)
    k = 0
    t = base
    while t < until:
        if not world.busy():
            nxt = arrivals.next_time()
            if nxt is None or world.idle(t):
                break
            if world.skip_idle and nxt > t:  # nothing runs: jump to the next arrival's period
                jump = world.skip(t, nxt)
                if jump != t:
                    base, k, t = jump, 0, jump
        clock.wait_until(t)
        world.admit_due(t)
        if (world.busy() or not world.skip_idle) and not world.period_at(t):
            break
        k += 1
        world.after(t, base + k * P)
        t = base + k * P
    return t
