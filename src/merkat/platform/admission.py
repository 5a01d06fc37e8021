"""Admission between periods (Merkat §4.2.2): the applications manager's queue.

Users submit platforms at any time; the applications manager takes them from its queue every
admission interval (10 s in Merkat) and checks their start condition. Here, at an admission
point ``now`` between two periods (the driver, :class:`~merkat.runtime.driver.Driver`, calls
:func:`admit`):

1. each application submitted since the last period and still waiting is observed at the
   **last clearing's prices** and its controller decides (the start condition is the
   controller's start policy: it starts, or it waits);
2. the VMs of the applications that start are placed by the platform's mechanism **on the
   capacity the last clearing left free** (the running VMs keep their allocations until the
   next period re-clears the whole market); an application whose VMs do not all fit stays in
   the queue for the next period;
3. the placed VMs bid as in a period; their bills are the bids prorated to what is left of the
   period (``(until - now) / period``), charged by the driver's economy like a period's.

Decisions (docs/simulator-market.md, "Admission between periods"):

- an application's start condition is checked once between periods, at the first admission
  point after its submission: prices only change when the market clears, so checking again
  every 10 s until the next period would give the same answer;
- only stateless mechanisms (proportional share) admit between periods: a stateful one
  (Tycoon's, posted prices) moves its state with every clearing, and a partial clearing would
  move it; their applications start at the next period boundary, as before.

Pure like the period: no clock, no ledger, no backend.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from merkat.control.types import AppStatus, VMState
from merkat.market import NO_HOST, Hosts
from merkat.platform.backend import Plan
from merkat.platform.market_input import market_vms
from merkat.platform.model import App, Decision, Observed, Ops, VMRecord
from merkat.platform.plan import bills_of, make_plan

if TYPE_CHECKING:
    from merkat.platform.period import Platform


def free_capacity(platform: Platform) -> Hosts:
    """The cluster's hosts with what the last clearing and the admissions since left free
    (capacity minus the allocations of every placed, not suspended VM; never below 0)."""
    hosts = platform.hosts
    used = np.zeros_like(hosts.capacity)
    cols = {r: k for k, r in enumerate(platform.capacity)}
    for app in platform.active.values():
        if app.status is not AppStatus.RUNNING:
            continue
        for vm in app.vms:
            if vm.host == NO_HOST or vm.state is VMState.SUSPENDED:
                continue
            for r, a in vm.alloc.items():
                k = cols.get(r)
                if k is not None:
                    used[vm.host, k] += a
    return Hosts(hosts.ids, np.maximum(hosts.capacity - used, 0.0))


def _revert(app: App, before: int) -> None:
    """Back to the queue: the start did not happen (its VMs were never placed)."""
    app.vms = []
    app.views = None
    app.vm_count = before
    app.status = AppStatus.WAITING
    app.start_time = None


def admit(
    platform: Platform, now: float, until: float, balances: Mapping[str, int],
    observed: Mapping[str, Observed],
) -> Decision:
    """The admission point ``now`` (``until``: the next period boundary): see the module
    docstring. ``balances`` and ``observed`` cover the queued applications
    (:meth:`Platform.queued <merkat.platform.period.Platform.queued>`). Returns the decision
    to charge and apply (empty when nothing starts); the queue is emptied."""
    queued = platform.queued()
    platform.queue.clear()
    starting: list[tuple[App, int]] = []
    refused: list[str] = []
    ops = Ops()
    for app in queued:
        before = app.vm_count
        obs = platform.observe(app, now, balances[app.account], observed[app.spec.id])
        demand = app.controller.decide(obs)
        platform._reconcile(app, demand, now, balances[app.account], observed[app.spec.id],
                            ops, refused)
        if app.status is AppStatus.RUNNING and app.vms:
            starting.append((app, before))
        elif not app.active:
            del platform.active[app.spec.id]
    runs: list[tuple[App, list[VMRecord]]] = [(a, a.vms) for a, _ in starting]
    result = None
    if runs:
        free = free_capacity(platform)
        while runs:  # place them all, or send back those whose VMs do not all fit
            n = sum(len(vms) for _, vms in runs)
            result = platform._mechanism.clear(
                free, market_vms(runs, n, platform._const), reserve_price=platform._reserve,
                params=platform.balance)
            hosts = result.host
            keep, i = [], 0
            for app, vms in runs:
                if (hosts[i:i + len(vms)] != NO_HOST).all():
                    keep.append((app, vms))
                i += len(vms)
            if len(keep) == len(runs):
                break
            for app, before in starting:
                if all(app is not a for a, _ in keep):
                    _revert(app, before)
            runs = keep
    placed: list[VMRecord] = []
    moved: list[tuple[VMRecord, int]] = []
    if runs and result is not None:
        plan = make_plan(now, platform.period, runs, result, ops, placed, moved, platform._const)
        bills, usage = bills_of(runs, platform.prices)
        frac = max(0.0, min(1.0, (until - now) / platform.period))
        bills = tuple((a, round(x * frac)) for a, x in bills)
        usage = tuple((a, round(x * frac)) for a, x in usage)
        alloc = result.allocation.sum(axis=0)
    else:
        plan = Plan(time=now, period=platform.period, destroy=tuple(ops.destroy),
                    suspend=tuple(ops.suspend))
        bills = usage = ()
        alloc = np.zeros(len(platform.capacity))
    return Decision(
        index=platform.index, time=now, plan=plan, bills=bills, usage=usage,
        refused=tuple(refused), prices=dict(platform.prices),
        allocated={r: float(alloc[k]) for k, r in enumerate(platform.capacity)},
        bidding=sum(len(vms) for _, vms in runs), starting=placed, moved=moved,
        admission=True,
    )
