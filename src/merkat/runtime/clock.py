"""Clocks of the driver: virtual (the simulator jumps from period to period) or the wall clock
(the live service sleeps until the next period).

Contract: ``now()`` is the time in seconds since the run's origin; ``wait_until(t)`` returns
once ``now() >= t`` (a virtual clock sets it; the wall clock sleeps); ``virtual`` tells the
driver it may jump over idle time to the next arrival.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


class Clock(Protocol):
    virtual: bool

    def now(self) -> float: ...

    def wait_until(self, t: float) -> None: ...


@dataclass
class VirtualClock:
    """Simulated time: it moves only when the driver says so."""

    t: float = 0.0
    virtual: bool = True

    def now(self) -> float:
        return self.t

    def wait_until(self, t: float) -> None:
        self.t = max(self.t, t)


@dataclass
class FunctionClock:
    """The time some function reads (the live service: ``time.time``, or a test's fake
    clock); ``wait_until`` sleeps until then (the service's loop does its own waiting and
    never asks for a time in the future)."""

    read: Callable[[], float] = time.time
    virtual: bool = False

    def now(self) -> float:
        return self.read()

    def wait_until(self, t: float) -> None:
        delay = t - self.read()
        if delay > 0:
            time.sleep(delay)
