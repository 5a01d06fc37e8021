"""The one seam between the market and the world: what a backend is asked to do each period.

The period loop (:mod:`merkat.platform.period`) decides; a :class:`Backend` acts (Ray
autoscaler v2 style: a pure decision, then a reconciler). The simulator's backend
(:mod:`merkat.backends.sim`) models the VM operations and the applications' progress; the live
one manages real processes. Both receive the same :class:`Plan`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from merkat.control.types import Metrics


@dataclass(frozen=True)
class VMPlacement:
    """A VM to create (or resume) on host ``host`` (an index into the platform's hosts)."""

    vm: str
    app: str
    host: int


@dataclass(frozen=True)
class Plan:
    """Everything the backend must do at the start of a period, in this order.

    ``destroy``: VMs to release. ``suspend``: VMs to suspend (they keep their memory image but no
    host resources). ``create``: new VMs and where. ``resume``: suspended VMs and where they
    restart. ``migrate``: ``(vm, from_host, to_host)``. ``allocations``: for every VM that runs
    this period, its allocation of each resource its application trades (CPU in cores, memory
    in MiB): the limits to enforce. A resource the application does not trade (memory in a
    CPU-only market) is absent: it is reserved as requested, not limited.
    """

    time: float
    period: float
    destroy: tuple[str, ...] = ()
    suspend: tuple[str, ...] = ()
    create: tuple[VMPlacement, ...] = ()
    resume: tuple[VMPlacement, ...] = ()
    migrate: tuple[tuple[str, int, int], ...] = ()
    allocations: Mapping[str, Mapping[str, float]] = field(default_factory=dict)


class Backend(Protocol):
    """What the platform needs from the world: act on a plan, report application metrics."""

    def apply(self, plan: Plan) -> None:
        """Carry out ``plan`` (create, destroy, migrate, suspend, resume, set allocations)."""
        ...

    def metrics(self, app: str) -> Metrics:
        """The latest metrics of application ``app`` (progress, rate, tasks left...)."""
        ...

    def finished(self, app: str) -> bool:
        """Whether ``app``'s work is complete (its controller will then stop it)."""
        ...

    def idle(self, app: str) -> frozenset[str]:
        """The VMs of ``app`` that run no task now (a master-worker's idle workers), which a
        horizontal policy releases first. Empty when every VM is busy or the notion does not
        apply (rigid applications)."""
        ...
