"""An application's next state as values (:class:`~merkat.core.model.AppNext`): made from
its record when a decision starts to change it, changed by the decision, written into the
record by the commit (:mod:`merkat.core.commit`).

The decision (:meth:`Platform.decide <merkat.core.period.Platform.decide>`, admissions)
changes only these values, never the records; :func:`install` is the one place a decision's
outcome enters the records.
"""

from __future__ import annotations

from collections.abc import Sequence

from merkat.control.types import VMState
from merkat.core.model import App, AppNext, VMRecord
from merkat.market import NO_HOST


def draft(app: App) -> AppNext:
    """``app``'s record as a next state (the VM columns are new lists; mappings shared)."""
    ids, states, bids, hosts, fresh, allocs = columns(app.vms)  # type: ignore[misc]  # (never None without refuse)
    return AppNext(
        app.spec.id, app.status, app.start_time, app.end_time, app.reason, app.outcome,
        app.suspensions, app.resumes, app.vm_count, app.broke_since,
        ids, states, bids, hosts, fresh, allocs,
    )


def columns(vms: Sequence[VMRecord], refuse: VMState | None = None) -> Columns | None:
    """The VM columns of ``vms`` (:data:`Columns`: new lists, mappings shared) read in one
    pass (faster than a comprehension or a map per column); None as soon as a VM is in state
    ``refuse`` (never when it is None)."""
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
    first VM's own when it is equal), in one pass: a batched application's next state
    (:mod:`merkat.core.batch`; ``tests/test_batched.py`` pins the period equal to the
    scalar path's)."""
    vms = app.vms
    if len(vms) == 1:  # the usual trace job
        vm = vms[0]
        return rebid_columns(app, bid, ([vm.id], [vm.state], [vm.bid], [vm.host], [vm.new],
                                        [vm.alloc]))
    ids, states, hosts, fresh, allocs = [], [], [], [], []
    for vm in vms:
        ids.append(vm.id)
        states.append(vm.state)
        hosts.append(vm.host)
        fresh.append(vm.new)
        allocs.append(vm.alloc)
    return rebid_columns(app, bid, (ids, states, [vm.bid for vm in vms[:1]], hosts, fresh,
                                    allocs))


Columns = tuple[list[str], list[VMState], list[dict[str, float]], list[int], list[bool],
                list[dict[str, float]]]
"""An application's VM columns read from its records, in :class:`AppNext`'s order (ids,
states, bids, hosts, fresh, allocations); the bids need only the first VM's."""


def rebid_columns(app: App, bid: dict[str, float], columns: Columns) -> AppNext:
    """:func:`bidding` of ``app`` from its VM ``columns`` already read (new lists, read from
    its records since they last changed: the batch's gather, :mod:`merkat.core.batch`)."""
    ids, states, bids, hosts, fresh, allocs = columns
    if bids and bids[0] == bid:
        bid = bids[0]
    return AppNext(
        app.spec.id, app.status, app.start_time, app.end_time, app.reason, app.outcome,
        app.suspensions, app.resumes, app.vm_count, app.broke_since,
        ids, states, [bid] * len(ids), hosts, fresh, allocs,
    )


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
    the decision added; those it dropped leave the record)."""
    app.status = nx.status
    app.start_time = nx.start_time
    app.end_time = nx.end_time
    app.reason = nx.reason
    app.outcome = nx.outcome
    app.suspensions = nx.suspensions
    app.resumes = nx.resumes
    app.vm_count = nx.vm_count
    app.broke_since = nx.broke_since
    if nx.same_vms and not nx.moved:  # the usual period: new bids and allocations only
        for vm, bid, alloc in zip(app.vms, nx.bids, nx.allocs, strict=True):
            vm.bid = bid
            vm.alloc = alloc
        return
    columns = zip(nx.states, nx.bids, nx.hosts, nx.fresh, nx.allocs, strict=True)
    if nx.same_vms:
        for vm, (state, bid, host, new, alloc) in zip(app.vms, columns, strict=True):
            vm.state = state
            vm.bid = bid
            vm.host = host
            vm.new = new
            vm.alloc = alloc
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
