"""What the driver admits over time: applications (a spec, the world's model of it, an optional
controller) and scripted events.

Contract of an :class:`Arrivals` source: ``next_time()`` is the time of the earliest pending
arrival (``None`` when none is left); ``due(t)`` removes and returns, in order, every arrival
at or before ``t``. The driver admits them at its admission points (every admission interval
between periods, and at each period boundary). Sources: :class:`ListArrivals` (a sorted list:
trace jobs, scripted scenarios); the live service's applications manager queue is another.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from merkat.control.base import Controller
from merkat.core.model import AppSpec


@dataclass(frozen=True)
class Arrival:
    """An application to admit at ``time`` (``spec``, the backend's ``model`` of it, an
    optional ready-made ``controller``), or an ``event`` (a function called with the driver)
    fired at ``time``. ``index``: the arrival's position in its source (trace job index)."""

    time: float
    spec: AppSpec | None = None
    model: Any = None
    controller: Controller | None = None
    event: Callable[[Any], None] | None = None
    index: int = -1
    account: str | None = None  # its bank account (default ``app:ID``)


class Arrivals(Protocol):
    def next_time(self) -> float | None: ...

    def due(self, t: float) -> Sequence[Arrival]: ...


class ListArrivals:
    """Arrivals from a list, in time order (stable: equal times keep their order). Events due
    at the same time as applications come first (a scripted burst precedes the period)."""

    def __init__(self, arrivals: Sequence[Arrival] = ()) -> None:
        self._items: list[Arrival] = sorted(arrivals, key=lambda a: a.time)
        self._times = [a.time for a in self._items]
        self._next = 0

    def add(self, arrival: Arrival) -> None:
        """Insert ``arrival`` (after the pending ones of the same time)."""
        k = bisect.bisect_right(self._times, arrival.time, lo=self._next)
        self._items.insert(k, arrival)
        self._times.insert(k, arrival.time)

    @property
    def position(self) -> int:
        """How many arrivals have been handed out."""
        return self._next

    def next_time(self) -> float | None:
        return self._times[self._next] if self._next < len(self._times) else None

    def due(self, t: float) -> list[Arrival]:
        k = bisect.bisect_right(self._times, t, lo=self._next)
        out = self._items[self._next:k]
        self._next = k
        if len(out) > 1 and any(a.event is not None for a in out):
            out = [a for a in out if a.event is not None] + [a for a in out if a.event is None]
        return out

    def __len__(self) -> int:
        return len(self._items) - self._next
