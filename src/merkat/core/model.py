"""The platform's records: applications, VMs, a period's :class:`Decision` and its
:class:`PeriodRecord` (the data of :mod:`merkat.core.period`).

Performance caches (``App.const``, ``App.lane``, ``App.view``: the VM records built from
the columns) live on these records because they are invalidated by identity or by the
writers when the record changes; they are never part of the domain state and are documented
where they are defined.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

from merkat.control.base import Controller
from merkat.control.types import AppStatus, Metrics, VMState
from merkat.core.backend import Plan
from merkat.core.lifecycle import ENDED
from merkat.defaults import MICRO
from merkat.market import NO_HOST, RESOURCES


def to_micro(credits: float) -> int:
    """Credits (float) to the ledger's integer micro-credits, rounded to the nearest."""
    return round(credits * MICRO)


@dataclass(frozen=True)
class AppSpec:
    """An application as submitted (the template of Merkat Fig. 5, reduced to what the
    period loop needs).

    ``vm_size``: each VM's maximum useful allocation (cores, MiB); ``vm_min``: what a node must
    hold for one VM (memory); ``size``: VMs to start. ``budget``: initial credits, ``renewal``:
    credits added per period, never above ``budget_cap`` (default: the initial budget, Themis
    §III-A). ``trade``: resources the application bids on (others get no bid: CPU-only runs).
    """

    id: str
    policy: str
    size: int
    vm_size: Mapping[str, float]
    submit_time: float
    budget: float
    renewal: float = 0.0
    budget_cap: float | None = None
    deadline: float | None = None
    vm_min: Mapping[str, float] = field(default_factory=dict)
    params: Mapping[str, Any] = field(default_factory=dict)
    owner: str = "users"
    nvms_max: int = 1_000_000
    trade: tuple[str, ...] = RESOURCES


@dataclass(slots=True)
class VMRecord:
    """The platform's view of one VM. ``bid`` and ``alloc`` hold the resources its application
    trades (:attr:`AppSpec.trade`), in that order; the others are neither bid for nor limited."""

    id: str
    app: str
    state: VMState
    host: int = NO_HOST
    bid: dict[str, float] = field(default_factory=dict)
    alloc: dict[str, float] = field(default_factory=dict)
    new: bool = True  # not placed yet (created or resumed): has no host
    # What a controller reads of this VM (merkat.control.types.VMInfo): the record itself is
    # the controller's view; bid and alloc dicts are replaced, never mutated.
    busy: bool = field(default=True, repr=False, compare=False)


Columns = tuple[list[str], list[VMState], list[dict[str, float]], list[int], list[bool],
                list[dict[str, float]]]
"""An application's VM columns, in :class:`AppNext`'s order (ids, states, bids, hosts,
fresh, allocations): one entry per VM, its record's values (the mappings shared)."""


_NO_VMS: Columns = ([], [], [], [], [], [])
"""No VM: the columns of an application none of whose VMs exist (shared; never changed:
a writer keeps new lists, :mod:`merkat.core.draft`)."""


class App:
    """One application under its controller: its record.

    **Its VMs are columns** (``columns``, :data:`Columns`: the truth, issue 28), written by
    :mod:`merkat.core.draft` (a decision's :func:`~merkat.core.draft.install`, the commit's
    starts and failed operations, the live service's :func:`~merkat.core.draft.writing`).
    Its :class:`VMRecord` objects are a view built from them on first read and kept until
    they change: :meth:`records` to read them (the controllers' views), ``vms`` to read or
    write them (the view is then *lent*, :attr:`lent`: the columns are read again from its
    records at every use, so a write into a record is seen, until the next change of the
    columns drops the view; a record read is the VM's state until then: read ``vms`` again
    after a period or an admission). Assigning ``vms`` (a list of records) makes their values the columns.
    What it replaces: every VM's record written back from the next state's columns at every
    commit (``draft.install``, ~2 M records a themis-fig5 market run) and the records read
    into columns at the next decision; ``tests/test_lazy_records.py`` pins the records built
    from the columns equal to the ones the eager writers made, after every period of a flaky
    run and after each of the live service's writers.

    The other caches (``const``, ``lane``) are not part of the domain state and are
    documented where they are defined."""

    __slots__ = ("__weakref__", "account", "broke_since", "clean", "columns", "const",
                 "controller", "end_time", "lane", "outcome", "reason", "resumes", "spec", "spent",
                 "start_time", "status", "suspensions", "view", "vm_count")

    lent = False
    """Whether its record view is lent (``vms`` was read: the class is then :class:`_Lent`,
    whose ``columns`` are read again from the view at every use until a writer sets new
    ones, which drops the view and makes it an :class:`App` again). What it replaces: a
    check of a flag at every read of ``columns`` (a property: ~60 ns, ~8 reads an
    application a period); ``tests/test_lazy_records.py`` pins a write through ``vms``
    seen."""

    def __init__(self, spec: AppSpec, controller: Controller, account: str,
                 status: AppStatus = AppStatus.WAITING, vms: list[VMRecord] | None = None,
                 start_time: float | None = None, end_time: float | None = None,
                 reason: str = "", suspensions: int = 0, resumes: int = 0, vm_count: int = 0,
                 spent: int = 0, broke_since: float | None = None, outcome: str = "") -> None:
        self.spec = spec
        self.controller = controller
        self.account = account
        self.status = status
        # its VM columns: shared lists, read and never changed (a writer sets new ones and
        # drops the view, :mod:`merkat.core.draft`)
        self.columns: Columns = _NO_VMS
        self.view: list[VMRecord] | None = None  # the records built from the columns
        if vms is not None:
            self.vms = vms
        self.start_time = start_time
        self.end_time = end_time
        self.reason = reason
        self.suspensions = suspensions
        self.resumes = resumes
        self.vm_count = vm_count  # VMs ever created (for unique ids)
        self.spent = spent  # micro-credits paid (charges net of refunds)
        self.broke_since = broke_since  # since when it cannot pay the reserve for its VMs
        self.outcome = outcome  # how it ended: finished, stopped-deadline, stopped-budget...
        # what never changes in its observations and market rows (Decider.const): a cache
        self.const: AppConst | None = None
        # what a batch reads of it that never changes (merkat.core.batch.Lane): a cache
        self.lane: Any = None
        # the next state its last commit installed unchanged, to hand out again as its
        # next unchanged draft (merkat.core.draft.rebid_columns): a cache
        self.clean: AppNext | None = None

    def records(self) -> list[VMRecord]:
        """Its VM records, to read only (not lent: see the class docstring), built from its
        columns on first read and kept until they change."""
        vms = self.view
        if vms is None:
            ids, states, bids, hosts, fresh, allocs = self.columns
            vms = self.view = list(map(VMRecord, ids, repeat(self.spec.id), states, hosts,
                                       bids, allocs, fresh))
        return vms

    @property
    def vms(self) -> list[VMRecord]:
        """Its VM records (:meth:`records`), lent: a write into one is seen (see the class
        docstring)."""
        vms = self.view if self.view is not None else self.records()
        self.__class__ = _Lent
        return vms

    @vms.setter
    def vms(self, records: list[VMRecord]) -> None:
        """Its VMs become ``records`` (the list is the view, lent: the caller holds it)."""
        self.view = records
        self.__class__ = _Lent

    @property
    def active(self) -> bool:
        return self.status not in ENDED

    def __repr__(self) -> str:
        return f"App({self.spec.id!r}, status={self.status.value}, vms={len(self.columns[0])})"


_COLUMNS: Any = App.__dict__["columns"]  # (the slot's descriptor: _Lent reads and writes it)


class _Lent(App):
    """An :class:`App` whose record view is lent (:attr:`App.lent`): its ``columns`` are
    read from the view's records at every use (a write into one is seen); setting new ones
    drops the view and makes it an :class:`App` again."""

    __slots__ = ()
    lent = True

    @property
    def columns(self) -> Columns:
        view: list[VMRecord] = self.view  # type: ignore[assignment]  # (lent: built)
        columns: Columns = (
            [vm.id for vm in view], [vm.state for vm in view], [vm.bid for vm in view],
            [vm.host for vm in view], [vm.new for vm in view], [vm.alloc for vm in view])
        _COLUMNS.__set__(self, columns)
        return columns

    @columns.setter
    def columns(self, columns: Columns) -> None:
        _COLUMNS.__set__(self, columns)
        self.view = None
        self.__class__ = App  # type: ignore[assignment]


@dataclass(frozen=True)
class PeriodRecord:
    """What happened in one period."""

    index: int
    time: float
    prices: dict[str, float]
    allocated: dict[str, float]
    capacity: dict[str, float]
    running_apps: int
    waiting_apps: int
    suspended_apps: int
    vms: int
    created: int
    destroyed: int
    migrations: int
    suspended: int
    resumed: int
    charged: int  # micro-credits
    refused: tuple[str, ...] = ()  # "app: action refused while status" (lifecycle table)
    failed: tuple[str, ...] = ()  # "op vm: reason" for each operation the backend reported failed
    unpaid: tuple[str, ...] = ()  # applications that could not pay (their VMs did not run)
    minted: int = 0  # micro-credits minted this period (allowances)
    redistributed: int = 0  # micro-credits returned to users by the Virtual Bank


@dataclass(frozen=True)
class Observed:
    """What the world reports about one application before a period (read by the driver from
    the backend): its metrics, its idle VMs (workers with no task) and whether its work is
    done."""

    metrics: Metrics
    idle: frozenset[str] = frozenset()
    finished: bool = False


@dataclass(slots=True)
class AppNext:
    """What a decision makes of one application, as values: its record's fields after the
    commit (before the backend's report). The VM columns hold one entry per VM, in order:
    ``ids``, ``states``, ``bids`` (shared mappings), ``hosts`` (``NO_HOST``: none), ``fresh``
    (:attr:`VMRecord.new`: to be placed for the first time) and ``allocs``. ``same_vms``: the
    VMs are the record's own, in its order (none added or dropped); ``moved``: a state, host
    or ``fresh`` changed (else only bids and allocations may have).
    :mod:`merkat.core.draft` makes one from a record and writes it into one.

    **Copy on write** (issue 28): ``base`` is the record's columns the next state was drafted
    from, and a column list that is still ``base``'s (the same object) is the record's own,
    shared: it is read, never changed in place. A writer that changes a column in place
    first makes it the next state's own (:func:`~merkat.core.draft.own`,
    :func:`~merkat.core.draft.own_allocs`, :func:`~merkat.core.draft.own_bids`: the one place
    that copies); a writer that puts a new list there (``keep``, ``set_uniform``,
    ``within_budget``) needs nothing. So an application whose VMs, bids and allocations the
    decision does not change costs no copy from its draft to its commit, and the commit
    keeps its columns (and its record view) as they were."""

    id: str
    status: AppStatus
    start_time: float | None
    end_time: float | None
    reason: str
    outcome: str
    suspensions: int
    resumes: int
    vm_count: int
    broke_since: float | None
    ids: list[str]
    states: list[VMState]
    bids: list[dict[str, float]]
    hosts: list[int]
    fresh: list[bool]
    allocs: list[dict[str, float]]
    same_vms: bool = True
    moved: bool = False
    base: Columns = _NO_VMS  # the record's columns it shares until a writer owns them

    @property
    def active(self) -> bool:
        return self.status not in ENDED


@dataclass
class Decision:
    """One period's decision (:meth:`~merkat.core.period.Platform.decide`), or an
    admission's (:mod:`merkat.core.admission`): what the driver must do and what the
    platform's records become, as ids and values (no record was changed to make it).
    ``plan``: the backend's plan (the VMs it starts, ``create`` and ``resume``, and moves,
    ``migrate``); ``bills``: ``(application id, micro-credits)`` each application's VMs bid for
    the period (charging by bid); ``usage``: what they use at the clearing's prices (charging
    by use, at most the bill); ``refused``: actions the lifecycle table refused; ``apps``: by
    application id, what the decision makes of each application it **changes**
    (:class:`AppNext`); an application absent is unchanged, its next state its record as it
    is (:func:`merkat.core.draft.next_of` reads either): a period leaves out every
    application whose record its decision leaves as it is (its status, times, counters,
    VMs, bids and allocations the record's; ``Platform.every_next`` puts them in, the
    reference), so a reader must not take the keys for the active applications;
    ``taken``: the ids it took out of the admission queue. The rest feeds the
    :class:`PeriodRecord`."""

    index: int
    time: float
    plan: Plan
    bills: tuple[tuple[str, int], ...]
    usage: Sequence[tuple[str, int]]  # (a tuple, or a Usage computed when first read)
    refused: tuple[str, ...]
    prices: dict[str, float]
    allocated: dict[str, float]
    bidding: int
    apps: dict[str, AppNext] = field(default_factory=dict, repr=False)
    taken: tuple[str, ...] = ()
    # an admission between periods (merkat.core.admission), not a period: its plan only
    # starts the admitted applications' VMs, its bills are prorated, it makes no record
    admission: bool = False


@dataclass(frozen=True)
class Charged:
    """What the economy charged for a decision: micro-credits paid per application id, the
    applications that could not pay, the total moved to the provider."""

    paid: Mapping[str, int]
    unpaid: frozenset[str]
    total: int
    minted: int = 0
    redistributed: int = 0


@dataclass(frozen=True)
class AppConst:
    """An application's constant observation parts (restricted to the resources it trades)
    and its VMs' constant market rows (cap and minimum per resource, in market order)."""

    vm_size: dict[str, float]
    capacity: dict[str, float]
    bid_min: dict[str, float]
    cap_row: list[float]
    min_row: list[float]
    columns: tuple[tuple[str, int], ...]  # (traded resource, its market column or -1)
    zero: dict[str, float]  # no allocation (never mutated)
    history: bool  # the controller reads past prices (Controller.reads_price_history)
    renewal: float  # credits per period its budget is renewed with (0: none)
    reserve_cost: int  # micro-credits one VM pays at the reserve price


@dataclass
class Ops:
    """Operations decided while reconciling, before the market runs."""

    destroy: list[str] = field(default_factory=list)
    suspend: list[str] = field(default_factory=list)


class NonFiniteBid(RuntimeError):
    """A controller asked for a bid that is NaN or infinite: a bug in its policy. Raised in
    the period where the bid was made, naming the policy, the application and the VM."""
