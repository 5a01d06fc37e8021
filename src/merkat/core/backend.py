"""The one seam between the market and the world: what a backend is asked to do each period.

The period (:mod:`merkat.core.period`) decides; the runtime driver
(:mod:`merkat.runtime.driver`) hands the decision's :class:`Plan` to a :class:`Backend`, which
acts and returns an :class:`ApplyReport`: per operation, done or failed with a reason (Ray
autoscaler v2 style: a pure decision, then a reconciler). The platform takes VM states from the
report, so a failed boot or migration is seen (and retried) by the next period instead of
assumed done. The simulator's backend (:mod:`merkat.backends.sim`) models the VM operations and
the applications' progress; the live ones manage real processes or pods. All receive the same
:class:`Plan`.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, KeysView, Mapping, Sequence, ValuesView
from dataclasses import dataclass, field
from typing import Any, Protocol

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
    CPU-only market) is absent: it is reserved as requested, not limited. An admission's plan
    (between periods) lists only the newcomers and the VMs whose allocation it changes; a VM
    not listed keeps the allocation it has.
    """

    time: float
    period: float
    destroy: tuple[str, ...] = ()
    suspend: tuple[str, ...] = ()
    create: tuple[VMPlacement, ...] = ()
    resume: tuple[VMPlacement, ...] = ()
    migrate: tuple[tuple[str, int, int], ...] = ()
    allocations: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    # (not part of what a plan asks: a backend may ignore it; no field of equality or repr)
    column: AllocColumn | None = field(default=None, repr=False, compare=False)


class Listed(Mapping[str, Mapping[str, float]]):
    """A plan's ``allocations`` as the two lists the plan joined them in: ``ids[m]``'s
    mapping is ``allocs[m]`` (the VM ids unique; issue 28, twentieth session). The
    ``{id: mapping}`` dict is built at the first read that needs it (a look-up, a size,
    ``items()``, ``==``, ``repr``, all the dict's), which a backend that walks ``ids`` and
    ``allocs`` itself (the simulated one) never makes: what it saves is the dict of every
    VM a period. The lists are never changed once here. The reference: the dict itself
    (:data:`merkat.core.plan.LISTED` off).

    Optional, not part of what a plan asks (a backend may ignore them; no part of ``==``):
    ``since``, the ``allocs`` list of an earlier plan's :class:`Listed` with the same
    ``ids`` in the same order, and ``changed``, the positions (ascending) whose mapping is
    not that plan's (the same object at every other position): a backend that carried that
    plan out and put or released no VM since need visit only those (issue 28,
    twenty-fifth session). None: not known."""

    __slots__ = ("_dict", "allocs", "changed", "ids", "since")

    def __init__(self, ids: Sequence[str], allocs: Sequence[Mapping[str, float]],
                 since: Sequence[Mapping[str, float]] | None = None,
                 changed: Sequence[int] | None = None) -> None:
        if len(ids) != len(allocs):
            raise ValueError("one mapping per VM id")
        self.ids, self.allocs = ids, allocs
        self.since, self.changed = since, changed
        self._dict: dict[str, Mapping[str, float]] | None = None

    def as_dict(self) -> dict[str, Mapping[str, float]]:
        """The ``{id: mapping}`` dict (built once; not to be changed)."""
        d = self._dict
        if d is None:
            d = self._dict = dict(zip(self.ids, self.allocs, strict=True))
        return d

    def __getitem__(self, vm: str) -> Mapping[str, float]:
        return self.as_dict()[vm]

    def __iter__(self) -> Iterator[str]:
        return iter(self.as_dict())

    def __len__(self) -> int:
        return len(self.ids)  # (the ids are unique: the dict's size, without building it)

    def __contains__(self, vm: object) -> bool:
        return vm in self.as_dict()

    def items(self) -> ItemsView[str, Mapping[str, float]]:
        return self.as_dict().items()

    def keys(self) -> KeysView[str]:
        return self.as_dict().keys()

    def values(self) -> ValuesView[Mapping[str, float]]:
        return self.as_dict().values()

    def get(self, vm: str, default: Any = None) -> Any:
        return self.as_dict().get(vm, default)

    def __eq__(self, other: object) -> bool:
        return self.as_dict() == (other.as_dict() if isinstance(other, Listed) else other)

    __hash__ = None  # type: ignore[assignment]  # (as a dict's)

    def __repr__(self) -> str:
        return repr(self.as_dict())


@dataclass(frozen=True)
class AllocColumn:
    """A period's :class:`Plan` ``allocations`` as the clearing gave them, when they are one
    column (the usual market: every VM placed, one traded resource; issue 28, twentieth
    session): ``values[m]`` (a float array never written) is ``resource``'s allocation of the
    m-th VM ``allocations`` lists, whose mapping is ``{resource: v}`` with ``v ==
    values[m]``; application ``apps[k]``'s VMs are the ``sizes[k]`` rows from ``starts[k]``.
    The simulated backend reads it to take each application's least allocation at once
    (:func:`merkat.backends.sim_pace.least_cpu`); a plan rebuilt with other allocations (a
    withholding, a backend's own filtering) drops it. ``lows``: each span's least value,
    ``np.minimum.reduceat(values, starts).tolist()``, when the plan took it (every span
    holding a VM: it keeps them for the controllers, :func:`merkat.core.draft.keep_leasts`),
    handed over so that a reader does not take it again (issue 28, twenty-second session);
    None: not taken (a reader takes it itself)."""

    resource: str
    values: Any
    apps: Sequence[str]
    starts: Sequence[int]
    sizes: Sequence[int]
    lows: Sequence[float] | None = None


OPS = ("create", "resume", "destroy", "suspend", "migrate", "resize")
"""The operations a plan asks for (``resize``: a new allocation for a running VM). A backend may
report more kinds (``bind``, ``lost``...); the platform acts on these six."""


@dataclass(frozen=True)
class OpReport:
    """One operation's outcome. ``op``: one of :data:`OPS` or a backend's own kind; ``vm``:
    the VM; ``ok``: done; ``reason``: why it failed (empty when done). ``seconds``: how long it
    took, ``state`` and ``node``: backend details (e.g. a Kubernetes resize's status)."""

    op: str
    vm: str
    ok: bool
    reason: str = ""
    seconds: float = 0.0
    state: str = ""
    node: str = ""

    @classmethod
    def of(cls, op: str, vm: str, error: str | None = None, **details: Any) -> OpReport:
        """The outcome of ``op`` on ``vm``: done when ``error`` is None, else failed with it."""
        return cls(op, vm, error is None, error or "", **details)

    @property
    def error(self) -> str | None:
        """Why it failed, or None when it was done."""
        return None if self.ok else self.reason


@dataclass(frozen=True)
class ApplyReport:
    """What a backend did with one plan: one :class:`OpReport` per operation it tried (a
    backend that reports nothing for an operation is taken to have done it)."""

    time: float
    ops: tuple[OpReport, ...] = ()
    api_calls: int = 0

    @property
    def failed(self) -> tuple[OpReport, ...]:
        return tuple(o for o in self.ops if not o.ok)

    def counts(self) -> dict[str, int]:
        """Operations by kind; failed ones as ``KIND-failed``."""
        out: dict[str, int] = {}
        for o in self.ops:
            key = o.op if o.ok else f"{o.op}-failed"
            out[key] = out.get(key, 0) + 1
        return out


class Backend(Protocol):
    """What the platform needs from the world: act on a plan, report application metrics."""

    def apply(self, plan: Plan) -> ApplyReport:
        """Carry out ``plan`` (create, destroy, migrate, suspend, resume, set allocations) and
        report each operation: done, or failed with a reason. Never raises for a failed
        operation: errors from the world come back as data, and the platform retries a failed
        create, resume, migrate, destroy or suspend in the next period."""
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

