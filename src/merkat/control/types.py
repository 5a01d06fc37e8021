"""What a controller sees (:class:`Observation`) and what it asks for (:class:`Demand`).

Units (docs/architecture.md, "Units and invariants"): CPU in cores, memory in MiB, money in credits, time in seconds,
prices in credits per unit per period, bids in credits per period per VM and resource.
Resources are named as in :data:`merkat.market.RESOURCES` (``"cpu"``, ``"memory"``); a mapping
may hold only ``"cpu"`` for a CPU-only market, and every rule here iterates over the resources
the observation actually carries.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import Any, Protocol, TypeVar

CPU = "cpu"
MEMORY = "memory"
RESOURCES: tuple[str, ...] = (CPU, MEMORY)

Amounts = Mapping[str, float]
"""Per-resource amounts: allocations, sizes, capacities, prices or bids."""


class Sense(Enum):
    """Which way a performance metric is better. Written once, used by every policy.

    Merkat Alg. 1 tracks an *iteration time* (lower is better); Themis Fig. 3-4 track a
    *progress rate* (higher is better). See :func:`merkat.control.formulas.judge`.
    """

    LOWER_IS_BETTER = "lower"
    HIGHER_IS_BETTER = "higher"


class VMState(Enum):
    """Life-cycle state of one VM as the backend reports it."""

    BOOTING = "booting"
    RUNNING = "running"
    MIGRATING = "migrating"
    SUSPENDED = "suspended"
    RESUMING = "resuming"


class AppStatus(StrEnum):
    """Where an application is in its life: one enum for the platform's status and the
    controller's phase (:attr:`Observation.phase`, derived from its VMs). Allowed moves:
    :data:`merkat.core.lifecycle.APP_TRANSITIONS`."""

    WAITING = "waiting"  # submitted, no VM yet (queued, postponed)
    RUNNING = "running"  # at least one VM not suspended
    SUSPENDED = "suspended"  # every VM suspended
    FINISHED = "finished"  # all work done
    STOPPED = "stopped"  # stopped before finishing (deadline out of reach, budget...)
    FAILED = "failed"  # its VMs could not run (live service: a process gone for good)


Phase = AppStatus
"""The controller's name for :class:`AppStatus` (an observation's phase is never an end)."""


class Action(Enum):
    """Life-cycle request of a :class:`Demand` (Merkat Alg. 4, SLO paper Alg. 1)."""

    NONE = "none"  # no life-cycle change: keep waiting, or keep running with the bids given
    START = "start"  # create ``nvms`` VMs with ``new_vm_bid``
    SUSPEND = "suspend"  # suspend every VM (they stop bidding)
    RESUME = "resume"  # resume every VM with the bids given
    STOP = "stop"  # release every VM; the application ends (finished, aborted or hopeless)


class VMInfo(Protocol):
    """What a controller reads of one VM of its application (``Observation.vms``).

    Contract: read-only, and valid only during the controller call that received it. The
    platform passes its own VM records (no copy per VM per period: under deadline policies
    both the bid and the allocation of nearly every VM change every period, and copying
    them was ~9 % of a themis-fig5 market run, docs/benchmarks.md); a hand-built observation passes
    :class:`VMView` records. A controller never writes to it and never keeps it past the call
    (it keeps ids and numbers instead).
    """

    @property
    def id(self) -> str: ...
    @property
    def state(self) -> VMState: ...
    @property
    def alloc(self) -> Amounts:
        """Allocation received in the last period, per resource (cores, MiB)."""
    @property
    def bid(self) -> Amounts:
        """Current bid, per resource (credits per period)."""
    @property
    def busy(self) -> bool:
        """Runs a task (master-worker); idle workers are released first."""


@dataclass(frozen=True)
class VMView:
    """One VM of the application: its state, last allocation and current bid (a
    :class:`VMInfo` as a frozen record, for observations built by hand and idle workers)."""

    id: str
    state: VMState
    alloc: Amounts
    """Allocation received in the last period, per resource (cores, MiB)."""
    bid: Amounts
    """Current bid, per resource (credits per period)."""
    busy: bool = True
    """Runs a task (master-worker); idle workers are released first."""


@dataclass(frozen=True)
class Metrics:
    """Application metrics read by the monitors (Merkat §4.2.3). ``None``: not reported.

    ``performance``/``reference``/``sense``: the generic metric v, v_ref of Merkat Alg. 1-2 and
    Themis Fig. 3. ``work_done``/``work_total``: progress in work units (e.g. iterations);
    ``progress_rate``: work units per second measured over the last period; ``ideal_rate``: the
    user's performance model, work units per second at the full VM size (Themis §IV-A).
    ``tasks_left``/``task_time_avg``/``task_time_max``: the task farm's queue (Themis Fig. 4).
    """

    performance: float | None = None
    reference: float | None = None
    sense: Sense = Sense.LOWER_IS_BETTER
    work_done: float = 0.0
    work_total: float | None = None
    progress_rate: float | None = None
    ideal_rate: float | None = None
    tasks_left: int | None = None
    task_time_avg: float | None = None
    task_time_max: float | None = None

    @property
    def work_left(self) -> float | None:
        if self.work_total is None:
            return None
        return max(0.0, self.work_total - self.work_done)


@dataclass(frozen=True)
class Budget:
    """The application's account after this period's renewal (docs/architecture.md, the period step 1).

    ``balance``: credits available now; ``renewal``: credits added every period.
    """

    balance: float
    renewal: float = 0.0


_RESOURCES_OF: dict[tuple[str, ...], tuple[str, ...]] = {}  # Observation.resources, by template


def check_amounts(name: str, amounts: Amounts) -> None:
    """Raise ValueError naming the first amount that is not a finite number >= 0."""
    for r, x in amounts.items():
        if not (x >= 0 and math.isfinite(x)):
            raise ValueError(f"{name}[{r!r}] must be a finite number >= 0, got {x}")


@dataclass(frozen=True)
class Observation:
    """Everything one decision may use; built by the period loop, never mutated.

    ``vm_size`` is the VM template: the maximum useful allocation of every VM of the application
    (alloc_max of Merkat Alg. 1-3, alloc_ref of Themis Table I). ``size`` is how many VMs the
    application asks for when it starts (a rigid application's processes). ``bid_min`` is the
    market's reserve: the smallest bid accepted per VM and resource. ``capacity`` is the
    cluster's capacity per resource (C_r of Merkat Alg. 3). ``nvms_max`` is the provider's
    limit on VMs per application (T_nvms of Themis Table I). ``deadline`` and ``submit_time``
    are absolute times in seconds.
    """

    time: float
    period: float
    prices: Amounts
    capacity: Amounts
    vm_size: Amounts
    budget: Budget
    bid_min: Amounts = field(default_factory=dict)
    vms: tuple[VMInfo, ...] = ()
    metrics: Metrics = field(default_factory=Metrics)
    price_history: tuple[Amounts, ...] = ()
    """Past prices, oldest first (the current prices are in ``prices``); empty unless the
    controller declares ``reads_price_history`` (:class:`~merkat.control.base.Controller`)."""
    deadline: float | None = None
    submit_time: float = 0.0
    size: int = 1
    nvms_max: int = 1_000_000

    def __post_init__(self) -> None:
        if not self.period > 0:
            raise ValueError(f"period must be > 0, got {self.period}")
        if self.size < 1:
            raise ValueError(f"size must be >= 1, got {self.size}")
        if self.nvms_max < 1:
            raise ValueError(f"nvms_max must be >= 1, got {self.nvms_max}")
        check_amounts("prices", self.prices)
        check_amounts("capacity", self.capacity)
        check_amounts("vm_size", self.vm_size)
        check_amounts("bid_min", self.bid_min)

    @property
    def resources(self) -> tuple[str, ...]:
        """The resources this application trades: those of its VM template, in market order."""
        names = tuple(self.vm_size)
        cached = _RESOURCES_OF.get(names)
        if cached is None:  # a handful of distinct templates: computed once each
            known = [r for r in RESOURCES if r in names]
            cached = (*known, *sorted(r for r in names if r not in RESOURCES))
            if len(_RESOURCES_OF) < 1024:
                _RESOURCES_OF[names] = cached
        return cached

    @property
    def phase(self) -> Phase:
        if not self.vms:
            return Phase.WAITING
        # every VM suspended: none active (active_vms is computed once per observation)
        return Phase.RUNNING if self.active_vms else Phase.SUSPENDED

    @property
    def active_vms(self) -> tuple[VMInfo, ...]:
        """The VMs that are not suspended (computed once per observation; ``vms`` itself when
        none is suspended)."""
        cache = self.__dict__
        cached: tuple[VMInfo, ...] | None = cache.get("_active_vms")
        if cached is None:
            vms = self.vms
            suspended = VMState.SUSPENDED
            cached = vms
            for vm in vms:
                if vm.state is suspended:
                    cached = tuple([v for v in vms if v.state is not suspended])
                    break
            cache["_active_vms"] = cached  # frozen: cache beside the fields
        return cached

    @property
    def time_to_deadline(self) -> float | None:
        return None if self.deadline is None else self.deadline - self.time

    @property
    def ideal_time_left(self) -> float | None:
        """Remaining execution time at the full VM size: work left / ideal rate (t_ideal)."""
        left, rate = self.metrics.work_left, self.metrics.ideal_rate
        if left is None or rate is None:
            return None
        if left == 0:
            return 0.0
        return math.inf if rate <= 0 else left / rate


@dataclass(frozen=True)
class Demand:
    """What the application asks the platform for the next period.

    ``nvms``: desired number of VMs after this period (the platform creates ``nvms`` minus the
    current count with ``new_vm_bid``, or releases the VMs in ``release``). ``bids``: bid per
    kept VM and resource. ``reason``: a short human-readable cause, for the event log.
    """

    action: Action = Action.NONE
    nvms: int = 0
    bids: Mapping[str, Amounts] = field(default_factory=dict)
    new_vm_bid: Amounts = field(default_factory=dict)
    release: tuple[str, ...] = ()
    reason: str = ""

    def bid_for(self, vm_id: str) -> Amounts:
        """The bid of ``vm_id``: its own entry, else the bid for new VMs."""
        return self.bids.get(vm_id, self.new_vm_bid)

    def total(self) -> float:
        """Credits per period this demand offers, over all its VMs and resources."""
        kept = 0.0
        for b in self.bids.values():
            kept += sum(b.values())
        extra = self.nvms - len(self.bids)
        return kept + extra * sum(self.new_vm_bid.values()) if extra > 0 else kept


# --- fast construction of the records above ---------------------------------------------------

_R = TypeVar("_R")


def record_builder(cls: type[_R]) -> Callable[..., _R]:
    """``cls(**fields)`` for a frozen dataclass, built by filling the instance's ``__dict__``.

    A frozen dataclass's ``__init__`` sets every field through ``object.__setattr__``; the
    period loop builds thousands of these records per period, and copying a dict of the
    defaults, updating it with the fields given and installing it as the instance's
    ``__dict__`` is faster. The builder takes the fields as keyword arguments, with the same
    defaults (and default factories), so a missing or unknown field is a TypeError as with
    ``cls``; the instance's ``__dict__`` holds the fields in their declared order, as
    ``cls(...)`` makes it. ``__post_init__`` is *not* run: use this only where its checks are
    made elsewhere (the platform checks an observation's parts once, not per period). Falls
    back to ``cls`` itself if ``cls`` has slots or its own ``__new__``.
    """
    if not dataclasses.is_dataclass(cls) or hasattr(cls, "__slots__") or (
        cls.__new__ is not object.__new__
    ):
        return cls
    template: dict[str, Any] = {}
    required: list[str] = []
    factories: list[tuple[str, Callable[[], Any]]] = []
    for f in dataclasses.fields(cls):
        template[f.name] = f.default
        if f.default is dataclasses.MISSING:
            if f.default_factory is dataclasses.MISSING:
                required.append(f.name)
            else:
                factories.append((f.name, f.default_factory))
    size, new, set_dict = len(template), object.__new__, object.__setattr__

    checked = bool(required or factories)

    def build(**fields: Any) -> _R:
        values = {**template, **fields}  # a known field keeps its place, in declared order
        if len(values) != size:
            unknown = sorted(set(fields) - set(template))
            raise TypeError(f"{build.__name__}() got an unexpected keyword argument {unknown[0]!r}")
        if checked:
            for name in required:
                if name not in fields:
                    raise TypeError(f"{build.__name__}() missing keyword argument {name!r}")
            for name, factory in factories:
                if name not in fields:
                    values[name] = factory()
        obj = new(cls)
        set_dict(obj, "__dict__", values)
        return obj

    build.__qualname__ = build.__name__ = f"new_{cls.__name__}"
    return build


new_vm_view = record_builder(VMView)
new_metrics = record_builder(Metrics)
new_budget = record_builder(Budget)
new_demand = record_builder(Demand)
new_observation_unchecked = record_builder(Observation)
"""An :class:`Observation` without its ``__post_init__`` checks (the caller made them)."""
