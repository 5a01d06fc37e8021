"""What the world reports about the applications a period (or an admission point) decides
for: one :class:`~merkat.core.model.Observed` per application, read by the driver from its
backend.

:func:`observe_each` is the definition: per application its ``metrics``, its ``idle`` VMs
when it is running (an application that is not running has none) and ``finished``, three
calls of the :class:`~merkat.core.backend.Backend` seam. A backend that can report them all
at once for less (the simulator's, which reuses an application's last report while nothing
in it changed) is an :class:`Observes` and answers :func:`observe` itself, with the same
values; ``tests/test_sim_observe.py`` pins the simulator's answer to :func:`observe_each`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, cast, runtime_checkable

from merkat.control.types import AppStatus
from merkat.core.backend import Backend
from merkat.core.model import App, Observed


@runtime_checkable
class Observes(Protocol):
    """A backend that reports every application of a period in one call."""

    def observe(self, apps: Sequence[App]) -> dict[str, Observed]:
        """``{app id: Observed}`` for ``apps``, equal to :func:`observe_each`'s."""
        ...


def observe_each(backend: Backend, apps: Sequence[App]) -> dict[str, Observed]:
    """``{app id: Observed}`` for ``apps``: the backend's ``metrics``, ``idle`` (running
    applications only) and ``finished`` of each (the module docstring)."""
    out: dict[str, Observed] = {}
    for a in apps:
        app_id = a.spec.id
        running = a.status == AppStatus.RUNNING
        out[app_id] = Observed(
            backend.metrics(app_id),
            backend.idle(app_id) if running else frozenset(),
            backend.finished(app_id),
        )
    return out


_KINDS: dict[type, bool] = {}  # backend class -> is an Observes (a Protocol's isinstance
# costs ~8 µs: once per class, not once per period)


def observe(backend: Backend, apps: Sequence[App]) -> dict[str, Observed]:
    """What ``backend`` reports about ``apps``: its own :meth:`Observes.observe` when its
    class has one, else :func:`observe_each`."""
    kind = type(backend)
    bulk = _KINDS.get(kind)
    if bulk is None:
        bulk = _KINDS[kind] = isinstance(backend, Observes)
    if bulk:
        return cast(Observes, backend).observe(apps)
    return observe_each(backend, apps)
