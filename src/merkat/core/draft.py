"""An application's next state as values (:class:`~merkat.core.model.AppNext`): made from
its record when a decision starts to change it, changed by the decision, written into the
record by the commit (:mod:`merkat.core.commit`).

The decision (:meth:`Platform.decide <merkat.core.period.Platform.decide>`, admissions)
changes only these values, never the records; :func:`install` is the one place a decision's
outcome enters the records.

**The columns are the truth** (issue 28). An application's VMs are six column lists on its
record (``App.columns``, :data:`~merkat.core.model.Columns`), and its
:class:`~merkat.core.model.VMRecord` objects are a view built from them when something
reads them (``App.records``, ``App.vms``), kept until they change. :func:`install` makes
the next state's own lists the record's columns (a next state is consumed by its commit):
O(1) per application, no record written. Column lists are never changed once on a record
(a writer puts new ones there, which drops the view), so a cache may hold them as its key
(:class:`~merkat.core.running.RunningRows`).

**Copy on write** (issue 28, fifteenth session). A draft shares the record's column lists
(:attr:`AppNext.base <merkat.core.model.AppNext.base>`) and copies none; a writer that
changes a column in place first makes it the next state's own (:func:`own`,
:func:`own_allocs`, :func:`own_bids`, the one place that copies: :func:`add_vm`, the
reconciliation's suspends and resumes, ``set_bids``' per-VM loop, the plan's moves and
allocations); a writer that puts a new list there needs nothing. A rebid of the bid every
VM already holds shares every list (:func:`rebid_columns`), and :func:`install` of a next
state that still holds every list of the record's keeps its columns and its record view.
So an application the decision does not change costs one :class:`AppNext` from draft to
commit and no copy. ``tests/test_cow.py`` runs flaky many-VM runs (suspends, resumes,
migrations, failed operations, withholdings, admission points, a scalar controller trading
two resources) both ways and checks the columns after every commit equal the eager
copies', and that no decision, admission or withholding changes a record's columns.

**Every writer of VM records goes through this module**: :func:`install` (a decision's
outcome), :func:`starting`, :func:`unplace` and :func:`move_back` (the commit's VM starts,
failed starts and failed migrations), :func:`writing` (the live service's
``service/failures.py``, ``applied.py``, ``recovery.py``: records written in place, then
read back into the columns) and ``App.vms``'s assignment (records made elsewhere). A record
written in place through ``App.vms`` (tests) is still seen: reading ``App.vms`` lends the
view, whose records the columns are read from at every use until the next change.
``tests/test_lazy_records.py`` checks, after every period and admission of a flaky run with
suspends, resumes, migrations and failed operations, that the records built from the
columns equal those the eager writers (the code this replaces) made, and after each of the
live service's writers that the columns equal a fresh read of the records.

**The allocations' least, kept** (issue 28, twenty-first session): a plan that carries its
column (:data:`~merkat.core.plan.MIN_COLUMN_VMS` VMs) keeps each run's least allocation
for the list it left (:func:`keep_leasts`), and the controllers read it
(:func:`kept_least`) instead of a ``min`` over the list's mappings; the lists are never
changed once a plan left them, so the value holds while the list is the same object.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from merkat.control.types import VMState
from merkat.core.model import App, AppNext, Columns, VMRecord
from merkat.market import NO_HOST

__all__ = ["Columns", "add_vm", "as_is", "bidding", "columns", "copy", "draft", "install",
           "install_each", "keep", "keep_leasts", "kept", "kept_least", "move_back",
           "next_of", "own", "own_allocs", "own_bids", "rebid_columns", "starting", "unplace",
           "writing"]


def draft(app: App) -> AppNext:
    """``app``'s record as a next state, copy on write: its column lists are the record's,
    shared until a writer makes one its own (:func:`own`; :class:`~merkat.core.model.AppNext`).
    What it replaces: six list copies per application and period (``tests/test_cow.py``
    pins every period's records equal to the eager copies' and unchanged by the decision)."""
    cols = app.columns
    ids, states, bids, hosts, fresh, allocs = cols
    return _next(app, cols, ids, states, bids, hosts, fresh, allocs)


def next_of(nexts: Mapping[str, AppNext], app: App) -> AppNext:
    """``app``'s next state in a decision's ``nexts`` (``Decision.apps``, which holds only
    the applications the decision changes), else its record as one (:func:`draft`: an
    application absent is unchanged). The way to read any application's next state."""
    nx = nexts.get(app.spec.id)
    return draft(app) if nx is None else nx


def _next(app: App, base: Columns, ids: list[str], states: list[VMState],
          bids: list[dict[str, float]], hosts: list[int], fresh: list[bool],
          allocs: list[dict[str, float]]) -> AppNext:
    """``app``'s record's fields with these VM columns (those that are ``base``'s, the
    record's columns, are shared: copy on write): a next state, written once for
    :func:`draft` and the rebids."""
    return AppNext(
        app.spec.id, app.status, app.start_time, app.end_time, app.reason, app.outcome,
        app.suspensions, app.resumes, app.vm_count, app.broke_since,
        ids, states, bids, hosts, fresh, allocs, True, False, base,
    )


def own(nx: AppNext) -> AppNext:
    """``nx`` with every column list its own (copied where it is still the record's,
    :attr:`AppNext.base`): the one place a next state's shared columns are copied, called by
    every writer that changes a column in place (:func:`add_vm`, the reconciliation's
    suspends and resumes, the plan's moves). Returns ``nx``."""
    if nx.base is _OWNED:  # (owned already: the usual second call of a writer)
        return nx
    now: tuple[list[Any], ...] = (nx.ids, nx.states, nx.bids, nx.hosts, nx.fresh, nx.allocs)
    cols = [c[:] if c is b else c for c, b in zip(now, nx.base, strict=True)]
    nx.ids, nx.states, nx.bids, nx.hosts, nx.fresh, nx.allocs = cols
    nx.base = _OWNED
    return nx


_OWNED: Columns = ([], [], [], [], [], [])
"""The base of a next state :func:`own` made every list of its own (no record's columns:
never changed, never a column list)."""


def own_allocs(nx: AppNext) -> list[dict[str, float]]:
    """``nx``'s allocations, its own list (copied if it is still the record's): to write
    in place (the plan's allocations; :func:`own` for the other columns)."""
    allocs = nx.allocs
    if allocs is nx.base[5]:
        allocs = nx.allocs = allocs[:]
    return allocs


def own_bids(nx: AppNext) -> list[dict[str, float]]:
    """``nx``'s bids, its own list (copied if it is still the record's): to write in place
    (:func:`~merkat.core.bids.set_bids`)."""
    bids = nx.bids
    if bids is nx.base[2]:
        bids = nx.bids = bids[:]
    return bids


def kept(app: App) -> Columns:
    """``app``'s VM columns (``App.columns``, the truth: see the module docstring): shared
    lists, to read and never to change."""
    return app.columns


@contextmanager
def writing(app: App) -> Iterator[list[VMRecord]]:
    """``app``'s VM records to write in place (``with writing(app) as vms: vm.host = ...``):
    when the block ends, even by an exception, its columns are read again from them (new
    lists). The way the live service's writers (``service/failures.py``, ``applied.py``)
    change records: a record written outside it would be lost at the next change of the
    columns."""
    vms = app.vms
    try:
        yield vms
    finally:
        app.columns = columns(vms)  # type: ignore[assignment]  # (not None: no refuse)
        app.view = None


def starting(app: App) -> tuple[list[VMState], dict[str, int]]:
    """What :func:`~merkat.core.commit.settle` needs to write the VMs of ``app`` the
    backend started: its VM states (a new list, made the record's column in place of the
    one read: columns are never changed once on a record, so a holder of one, e.g. a
    cache's key, never sees it change; the caller writes ``states[k]`` before anything
    reads them) and each VM's row by id."""
    ids, states, bids, hosts, fresh, allocs = app.columns
    states = states[:]
    app.columns = (ids, states, bids, hosts, fresh, allocs)
    app.view = None
    return states, dict(zip(ids, range(len(ids)), strict=True))


def unplace(app: App, k: int) -> None:
    """``app``'s VM at row ``k`` has no host and no allocation and is to be placed (its
    start failed: placed again next period). New column lists."""
    ids, states, bids, hosts, fresh, allocs = app.columns
    hosts, fresh, allocs = hosts[:], fresh[:], allocs[:]
    hosts[k], fresh[k], allocs[k] = NO_HOST, True, {}
    app.columns = (ids, states, bids, hosts, fresh, allocs)
    app.view = None


def move_back(app: App, vm_id: str, host: int) -> None:
    """``app``'s VM ``vm_id`` is on ``host`` (its migration failed: it did not move). New
    column lists."""
    ids, states, bids, hosts, fresh, allocs = app.columns
    hosts = hosts[:]
    hosts[ids.index(vm_id)] = host
    app.columns = (ids, states, bids, hosts, fresh, allocs)
    app.view = None


def columns(vms: Sequence[VMRecord], refuse: VMState | None = None) -> Columns | None:
    """The VM columns of ``vms`` (:data:`Columns`: new lists, mappings shared) read in one
    pass (faster than a comprehension or a map per column); None as soon as a VM is in state
    ``refuse`` (never when it is None). The reference the columns are tested equal to."""
    ids: list[str] = []
    states: list[VMState] = []
    bids: list[dict[str, float]] = []
    hosts: list[int] = []
    fresh: list[bool] = []
    allocs: list[dict[str, float]] = []
    for vm in vms:
        state = vm.state
        if state is refuse:
            return None
        ids.append(vm.id)
        states.append(state)
        bids.append(vm.bid)
        hosts.append(vm.host)
        fresh.append(vm.new)
        allocs.append(vm.alloc)
    return ids, states, bids, hosts, fresh, allocs


def bidding(app: App, bid: dict[str, float]) -> AppNext:
    """``draft(app)`` whose every VM bids ``bid`` (``set_uniform``: one shared mapping, the
    first VM's own when it is equal): a batched application's next state
    (:mod:`merkat.core.batch`; ``tests/test_batched.py`` pins the period equal to the
    scalar path's)."""
    return rebid_columns(app, bid, app.columns)


def rebid_columns(app: App, bid: dict[str, float], columns: Columns) -> AppNext:
    """:func:`bidding` of ``app`` from its VM ``columns`` (its own, :func:`kept`: shared by
    the next state, copy on write; the batch's gather, :mod:`merkat.core.batch`). When every
    VM already holds a mapping equal to ``bid`` (the usual quiet period: one ``==`` and a
    ``count`` in C), the bids list is shared too and the next state is the record's
    columns untouched (their mappings all equal ``bid``: the same values as the one shared
    mapping the eager copy made), and no next state is even made when the record's last
    commit installed one unchanged on these very columns (``App.clean``:
    :func:`install_each` sets it). The clean next state is handed out again every period
    while it is still the record's values (the same columns, its allocations' list the
    record's, nothing moved, the same ``broke_since``: the only fields a period writes into
    a handed-out one, the plan's and the loop's), so an application no decision changes
    keeps one next state for as long as it stays so (the period leaves it out of
    ``Decision.apps``: :meth:`Platform.decide <merkat.core.period.Platform.decide>`); one a
    decision wrote into and that was not committed (a period that failed) is not handed
    out. Else the VMs share ``bid`` (the first VM's mapping when equal) in a new list.
    What it replaces: six list copies a call (``tests/test_cow.py``)."""
    ids, states, bids, hosts, fresh, allocs = columns
    n = len(ids)
    if bids:
        first = bids[0]
        if first == bid:
            if bids.count(first) == n:  # (identity first, then ==: C speed)
                return as_is(app, columns)
            bid = first
    return _next(app, columns, ids, states, [bid] * n, hosts, fresh, allocs)


def as_is(app: App, columns: Columns) -> AppNext:
    """:func:`rebid_columns`' answer when every VM of ``columns`` (``app``'s record's) already
    holds a mapping equal to the bid: the record's clean next state while it is still the
    record's values (see :func:`rebid_columns`), else a next state on these columns
    untouched. :func:`merkat.core.batch_slo.paid` calls it directly when it knows the VMs
    bid so (the record's bids list it saw so, and the same bid)."""
    clean = app.clean
    if (clean is not None and clean.base is columns and clean.allocs is columns[5]
            and not clean.moved and clean.broke_since == app.broke_since):
        return clean  # (still the record's values: see install_each)
    ids, states, bids, hosts, fresh, allocs = columns
    return _next(app, columns, ids, states, bids, hosts, fresh, allocs)


def copy(nx: AppNext) -> AppNext:
    """An independent copy of ``nx`` (its columns copied; mappings shared)."""
    return AppNext(
        nx.id, nx.status, nx.start_time, nx.end_time, nx.reason, nx.outcome, nx.suspensions,
        nx.resumes, nx.vm_count, nx.broke_since, list(nx.ids), list(nx.states), list(nx.bids),
        list(nx.hosts), list(nx.fresh), list(nx.allocs), nx.same_vms, nx.moved,
    )


def add_vm(nx: AppNext, bid: dict[str, float]) -> None:
    """A new VM (booting, not placed) at the end of ``nx``'s VMs."""
    own(nx)
    nx.vm_count += 1
    nx.ids.append(f"{nx.id}/vm{nx.vm_count}")
    nx.states.append(VMState.BOOTING)
    nx.bids.append(bid)
    nx.hosts.append(NO_HOST)
    nx.fresh.append(True)
    nx.allocs.append({})
    nx.same_vms = False


def keep(nx: AppNext, rows: Sequence[int]) -> None:
    """Keep only the VMs at ``rows`` (in that order)."""
    nx.ids = [nx.ids[k] for k in rows]
    nx.states = [nx.states[k] for k in rows]
    nx.bids = [nx.bids[k] for k in rows]
    nx.hosts = [nx.hosts[k] for k in rows]
    nx.fresh = [nx.fresh[k] for k in rows]
    nx.allocs = [nx.allocs[k] for k in rows]
    nx.same_vms = False


def install(app: App, nx: AppNext) -> None:
    """Write ``nx`` into ``app``'s record: its fields, and its VM columns, which become the
    record's (``nx`` is consumed: only this module's writers change them after this, the
    module docstring). O(1): no VM record is written (its record view is dropped, built
    again from the columns on the next read: ``App.records``). What it replaces: each VM's
    record written from the columns (made for the VMs the decision added), ~1 µs a VM a
    period; ``tests/test_lazy_records.py`` pins the records equal.

    Copy on write (:func:`draft`): when ``nx`` still holds every column list of ``app``'s
    (nothing written into its VMs), the columns stay, and so does the record view built
    from them (``App.records``: the same values); ``tests/test_cow.py``."""
    install_each(((app, nx),))


def install_each(pairs: Iterable[tuple[App, AppNext]]) -> None:
    """:func:`install` of each ``(record, next state)`` of ``pairs``, in one loop (the
    commit's, :func:`~merkat.core.commit.settle`: no call per application). A next state
    installed unchanged (every list the record's, no VM added, dropped or moved: its
    fields are then the record's, as values) is kept as the record's ``clean`` next
    state, which :func:`rebid_columns` hands out again while it is still the record's
    values: an application nothing changes costs no new next state, nor one whose
    period changed only its bids or allocations (:data:`INSTALLED`)
    (``tests/test_cow.py`` compares every next state handed out with a fresh one)."""
    for app, nx in pairs:
        app.status = nx.status
        app.start_time = nx.start_time
        app.end_time = nx.end_time
        app.reason = nx.reason
        app.outcome = nx.outcome
        app.suspensions = nx.suspensions
        app.resumes = nx.resumes
        app.vm_count = nx.vm_count
        app.broke_since = nx.broke_since
        cols = app.columns
        ids, states, bids, hosts = nx.ids, nx.states, nx.bids, nx.hosts
        fresh, allocs = nx.fresh, nx.allocs
        if (ids is not cols[0] or states is not cols[1] or bids is not cols[2]
                or hosts is not cols[3] or fresh is not cols[4] or allocs is not cols[5]):
            cols = app.columns = (ids, states, bids, hosts, fresh, allocs)
            app.view = None
            if INSTALLED and nx.same_vms and not nx.moved:  # nx is app's record, as values
                nx.base = cols
                app.clean = nx
            else:
                app.clean = None
        elif nx.same_vms and not nx.moved:  # nothing written: nx is app's record, as values
            nx.base = cols
            app.clean = nx
        else:
            app.clean = None


INSTALLED = True
"""A next state installed with lists of its own but its record's VMs, none moved (a period
that rebid or reallocated them: its new bids' or allocations' list; issue 28,
twenty-fourth session) is kept as the record's ``clean`` next state too (:func:`install_each`),
as one installed unchanged is: once installed its fields and lists are the record's, and
its ``base`` is made the record's new columns (copy on write: a writer copies them
first). The period after it hands it out again (:func:`as_is`) instead of drafting a new
:class:`~merkat.core.model.AppNext`, and leaves it out of ``Decision.apps`` unless its
plan changes it. False: the reference (such a next state dropped at its commit);
``tests/test_reallocated.py`` runs both ways."""


_LEASTS: dict[int, tuple[list[dict[str, float]], str, float]] = {}
"""The last many-VM plan's allocation lists by ``id`` (each held, so its id is not reused
while here): the list, its resource and its least value (:func:`keep_leasts`)."""


def keep_leasts(lists: Sequence[list[dict[str, float]]], r: str, lows: Sequence[float]
                ) -> None:
    """Remember, in place of the last ones, that each of ``lists`` (the next states'
    allocation lists a plan left, every mapping ``{r: v}``) has the least value ``lows[k]``
    (the plan's column's ``np.minimum.reduceat`` over the list's span: issue 28,
    twenty-first session), so the controllers read it instead of a ``min`` over the list's
    mappings (:func:`kept_least`). Kept only where it is that ``min`` bit for bit: not NaN
    (numpy's ``minimum`` propagates one, ``min`` keeps it only first) and no zero (``min``
    keeps the first of ``0.0`` and ``-0.0``); equal floats other than zeros are the same
    bits. A list is never changed once a plan left it (a writer copies it first,
    :func:`own_allocs`), so the value stays its ``min`` while the list is the same object."""
    _LEASTS.clear()
    for allocs, low in zip(lists, lows, strict=True):
        if low == low and low != 0.0:
            _LEASTS[id(allocs)] = (allocs, r, low)


def kept_least(allocs: list[dict[str, float]], r: str) -> float | None:
    """``allocs``' least value of ``r`` as :func:`keep_leasts` kept it (the very list, the
    same resource), else None (the caller takes the ``min``:
    :func:`~merkat.control.formulas.least_alloc_of`)."""
    hit = _LEASTS.get(id(allocs))
    if hit is None or hit[0] is not allocs or hit[1] != r:
        return None
    return hit[2]
