"""An application's next state as values (:class:`~merkat.core.model.AppNext`): made from
its record when a decision starts to change it, changed by the decision, written into the
record by the commit (:mod:`merkat.core.commit`).

The decision (:meth:`Platform.decide <merkat.core.period.Platform.decide>`, admissions)
changes only these values, never the records; :func:`install` is the one place a decision's
outcome enters the records.

**Kept columns** (issue 28). Every period each application's VM records were read into six
column lists, one ``append`` per VM and column (the largest single cost of a many-VM run:
``themis-fig5``'s jobs of N processors are N VMs). The columns are now kept on the record
(``App.kept``, :func:`kept`) in step with ``App.vms``: :func:`install` keeps the installed
next state's own lists (a next state is consumed by its commit), so a draft is six C-speed
list copies. Kept lists are never changed once kept (a writer keeps new ones or drops them),
so a cache may hold them as its key (:class:`~merkat.core.running.RunningRows`). The rule that keeps them right: a :class:`~merkat.core.model.VMRecord`'s
``state``, ``host``, ``bid``, ``alloc`` and ``new`` are written by :func:`install`, by
:func:`started` (the commit's VM starts, written in both), or by a writer that then calls
:func:`changed` (the commit's failed migrations, the live service's
``service/failures.py``, ``applied.py``, ``recovery.py``: the columns are read again at
their next use); a new ``App.vms`` list, or one of another length, is noticed by
:func:`kept` itself. ``tests/test_kept_columns.py`` checks the kept columns against a fresh
read (:func:`columns`, the reference) after every period and admission of runs with
suspends, resumes, migrations and failed operations, and after the live service's writers.
"""

from __future__ import annotations

from collections.abc import Sequence

from merkat.control.types import VMState
from merkat.core.model import App, AppNext, Columns, VMRecord
from merkat.market import NO_HOST

__all__ = ["Columns", "add_vm", "bidding", "changed", "columns", "copy", "draft", "install",
           "keep", "kept", "rebid_columns", "started"]


def draft(app: App) -> AppNext:
    """``app``'s record as a next state (the VM columns are new lists; mappings shared): its
    kept columns copied (:func:`kept`), or one VM's record read at once (the usual trace
    job: faster than the kept columns' look-up and copies)."""
    vms = app.vms
    if len(vms) == 1:
        vm = vms[0]
        return _next(app, [vm.id], [vm.state], [vm.bid], [vm.host], [vm.new], [vm.alloc])
    ids, states, bids, hosts, fresh, allocs = kept(app)
    return _next(app, ids[:], states[:], bids[:], hosts[:], fresh[:], allocs[:])


def _next(app: App, ids: list[str], states: list[VMState], bids: list[dict[str, float]],
          hosts: list[int], fresh: list[bool], allocs: list[dict[str, float]]) -> AppNext:
    """``app``'s record's fields with these VM columns (new lists, the caller's): a next
    state, written once for :func:`draft` and the rebids."""
    return AppNext(
        app.spec.id, app.status, app.start_time, app.end_time, app.reason, app.outcome,
        app.suspensions, app.resumes, app.vm_count, app.broke_since,
        ids, states, bids, hosts, fresh, allocs,
    )


def kept(app: App) -> Columns:
    """``app``'s VM columns as kept between periods (``App.kept``; see the module
    docstring): shared lists, to read and never to change. Read from the records
    (:func:`columns`, not kept: only :func:`install` keeps columns) when there are none, or
    when ``App.vms`` is not the list they were kept for or not of their length. What it
    replaces: :func:`columns` of ``app.vms`` at every use."""
    k = app.kept
    vms = app.vms
    if k is None or k[0] is not vms or len(k[1][0]) != len(vms):
        return columns(vms)  # type: ignore[return-value]  # (not None: no refuse)
    return k[1]


def changed(app: App) -> None:
    """``app``'s VM records were written outside :func:`install` and :func:`started`: its
    kept columns are read again from them at their next use (:func:`kept`). Every such
    writer calls it once after writing (the module docstring names them); the next
    :func:`install` keeps them again."""
    app.kept = None


def started(app: App) -> tuple[list[VMRecord], list[VMState], dict[str, int]]:
    """What :func:`~merkat.core.commit.settle` needs to write the VMs of ``app`` the
    backend started: its records, its kept states (a new list, kept in place of the one
    read: kept lists are never changed once kept, so a holder of one, e.g. a cache's key,
    never sees it change; the caller sets ``states[k]`` with ``records[k].state``) and each
    VM's row by id."""
    ids, states, bids, hosts, fresh, allocs = kept(app)
    states = states[:]
    app.kept = (app.vms, (ids, states, bids, hosts, fresh, allocs))
    return app.vms, states, dict(zip(ids, range(len(ids)), strict=True))


def columns(vms: Sequence[VMRecord], refuse: VMState | None = None) -> Columns | None:
    """The VM columns of ``vms`` (:data:`Columns`: new lists, mappings shared) read in one
    pass (faster than a comprehension or a map per column); None as soon as a VM is in state
    ``refuse`` (never when it is None). The reference the kept columns (:func:`kept`) are
    tested equal to."""
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
    vms = app.vms
    if len(vms) == 1:  # the usual trace job
        vm = vms[0]
        return _rebid(app, bid, [vm.id], [vm.state], vm.bid, [vm.host], [vm.new], [vm.alloc])
    return rebid_columns(app, bid, kept(app))


def rebid_columns(app: App, bid: dict[str, float], columns: Columns) -> AppNext:
    """:func:`bidding` of ``app`` from its VM ``columns`` (its kept ones, :func:`kept`, read
    and not changed: the next state holds copies; the batch's gather,
    :mod:`merkat.core.batch`)."""
    ids, states, bids, hosts, fresh, allocs = columns
    return _rebid(app, bid, ids[:], states[:], bids[0] if bids else None, hosts[:], fresh[:],
                  allocs[:])


def _rebid(app: App, bid: dict[str, float], ids: list[str], states: list[VMState],
           first: dict[str, float] | None, hosts: list[int], fresh: list[bool],
           allocs: list[dict[str, float]]) -> AppNext:
    """The next state of :func:`bidding` from its own new columns (``first``: the first
    VM's bid, None without VMs)."""
    if first is not None and first == bid:
        bid = first
    return _next(app, ids, states, [bid] * len(ids), hosts, fresh, allocs)


def copy(nx: AppNext) -> AppNext:
    """An independent copy of ``nx`` (its columns copied; mappings shared)."""
    return AppNext(
        nx.id, nx.status, nx.start_time, nx.end_time, nx.reason, nx.outcome, nx.suspensions,
        nx.resumes, nx.vm_count, nx.broke_since, list(nx.ids), list(nx.states), list(nx.bids),
        list(nx.hosts), list(nx.fresh), list(nx.allocs), nx.same_vms, nx.moved,
    )


def add_vm(nx: AppNext, bid: dict[str, float]) -> None:
    """A new VM (booting, not placed) at the end of ``nx``'s VMs."""
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
    """Write ``nx`` into ``app``'s record: its fields, and its VMs' (records made for the VMs
    the decision added; those it dropped leave the record). ``nx`` is consumed: its column
    lists become ``app``'s kept columns (:func:`kept`), which only the commit's writers
    change after this (the module docstring)."""
    app.status = nx.status
    app.start_time = nx.start_time
    app.end_time = nx.end_time
    app.reason = nx.reason
    app.outcome = nx.outcome
    app.suspensions = nx.suspensions
    app.resumes = nx.resumes
    app.vm_count = nx.vm_count
    app.broke_since = nx.broke_since
    cols = (nx.ids, nx.states, nx.bids, nx.hosts, nx.fresh, nx.allocs)
    if nx.same_vms and not nx.moved:  # the usual period: new bids and allocations only
        for vm, bid, alloc in zip(app.vms, nx.bids, nx.allocs, strict=True):
            vm.bid = bid
            vm.alloc = alloc
        app.kept = (app.vms, cols)
        return
    columns = zip(nx.states, nx.bids, nx.hosts, nx.fresh, nx.allocs, strict=True)
    if nx.same_vms:
        for vm, (state, bid, host, new, alloc) in zip(app.vms, columns, strict=True):
            vm.state = state
            vm.bid = bid
            vm.host = host
            vm.new = new
            vm.alloc = alloc
        app.kept = (app.vms, cols)
        return
    old = {vm.id: vm for vm in app.vms}
    vms: list[VMRecord] = []
    for vm_id, (state, bid, host, new, alloc) in zip(nx.ids, columns, strict=True):
        rec = old.get(vm_id)
        if rec is None:
            rec = VMRecord(vm_id, nx.id, state)
        rec.state = state
        rec.bid = bid
        rec.host = host
        rec.new = new
        rec.alloc = alloc
        vms.append(rec)
    app.vms = vms
    app.kept = (vms, cols)
