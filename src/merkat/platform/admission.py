"""Admission between periods (Merkat §4.2.2): the applications manager's queue.

Users submit platforms at any time; the applications manager takes them from its queue every
admission interval (10 s in Merkat), checks their start condition and asks the market
scheduler for their VMs. Here, at an admission point ``now`` between two periods (the driver,
:class:`~merkat.runtime.driver.Driver`, calls :func:`admit`):

1. each application submitted since the last period and still waiting is observed at the
   **last clearing's prices** and its controller decides (the start condition is the
   controller's start policy: it starts, or it waits for the next period);
2. the VMs of the applications that start are placed by worst-fit on the hosts' current load
   (:func:`~merkat.market.placement.worst_fit_decreasing`: **the running VMs stay where they
   are**, nothing migrates), and every host's proportional share is recomputed with the
   newcomers' bids (:func:`~merkat.market.balance.enforceable`): a newcomer shares its host
   with the VMs already there, as a new process shares a cgroup-enforced machine, until the
   next period re-clears the whole market; an application whose VMs cannot all be placed (a
   minimum no host can hold) stays in the queue for the next period;
3. the newcomers' bills are their bids prorated to what is left of the period
   (``(until - now) / period``), charged by the driver's economy like a period's; the running
   applications already paid for the period (by bid: their share changes, their bid does not).

Decisions (docs/simulator-market.md, "Admission between periods"):

- an application's start condition is checked once between periods, at the first admission
  point after its submission: prices only change when the market clears, so checking again
  every 10 s until the next period would give the same answer;
- the market price is not changed by an admission (it is the cluster-wide price of the last
  clearing; the hosts' shares are what changes);
- only stateless mechanisms (proportional share, Tycoon's auctions) admit between periods: a
  stateful one (posted prices) moves its state with every clearing, and a partial clearing
  would move it; their applications start at the next period boundary, as before.

Pure like the period: no clock, no ledger, no backend.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from merkat.control.types import AppStatus
from merkat.market import NO_HOST, enforceable, worst_fit_decreasing
from merkat.market.clear import check_reserve
from merkat.market.share import FloatArray, IntArray
from merkat.platform.backend import Plan
from merkat.platform.market_input import bidding as bidding_vms
from merkat.platform.market_input import market_vms
from merkat.platform.model import App, Decision, Observed, Ops, VMRecord
from merkat.platform.plan import bills_of, make_plan

if TYPE_CHECKING:
    from merkat.platform.period import Platform


@dataclass(frozen=True)
class Placement:
    """An admission's clearing: every VM's host and allocation (the two fields of a
    :class:`~merkat.market.Clearing` that :func:`~merkat.platform.plan.make_plan` reads)."""

    host: IntArray
    allocation: FloatArray
    bid: FloatArray  # the market's input: bids and hosts before
    before: IntArray


def place(platform: Platform, runs: Sequence[tuple[App, list[VMRecord]]]) -> Placement:
    """Place ``runs``' new VMs (host ``NO_HOST``) by worst-fit, the others where they are;
    each host's proportional share of its VMs' bids."""
    n = sum(len(vms) for _, vms in runs)
    vms = market_vms(runs, n, platform._const)
    check_reserve(vms, platform._reserve)
    host = worst_fit_decreasing(platform.hosts, vms)
    allocation, _ = enforceable(platform.hosts, vms, host)
    return Placement(host, allocation, vms.bid, vms.host)


def _revert(app: App, before: int) -> None:
    """Back to the queue: the start did not happen (its VMs were never placed)."""
    app.vms = []
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
    newcomers: list[tuple[App, list[VMRecord]]] = [(a, a.vms) for a, _ in starting]
    runs: list[tuple[App, list[VMRecord]]] = []
    result = None
    if newcomers:
        new_ids = {a.spec.id for a, _ in newcomers}
        # the VMs placed by the last clearing (and admissions since) keep their hosts
        here = [(a, [vm for vm in vms if vm.host != NO_HOST])
                for a, vms in bidding_vms(platform.active.values()) if a.spec.id not in new_ids]
        here = [(a, vms) for a, vms in here if vms]
        while newcomers:  # place them all, or send back those whose VMs do not all fit
            result = place(platform, here + newcomers)
            hosts = result.host
            keep, i = [], sum(len(vms) for _, vms in here)
            for app, vms in newcomers:
                if (hosts[i:i + len(vms)] != NO_HOST).all():
                    keep.append((app, vms))
                i += len(vms)
            if len(keep) == len(newcomers):
                break
            for app, before in starting:
                if all(app is not a for a, _ in keep):
                    _revert(app, before)
            newcomers = keep
        runs = here + newcomers
    placed: list[VMRecord] = []
    moved: list[tuple[VMRecord, int]] = []
    if newcomers and result is not None:
        plan = make_plan(now, platform.period, runs, result, ops, placed, moved, platform._const,
                         result.before)
        bills, usage = bills_of(newcomers, result.host, result.before, result.allocation, result.bid,
                                platform.prices, start=sum(len(vms) for _, vms in here))
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
        bidding=sum(len(vms) for _, vms in newcomers), starting=placed, moved=moved,
        admission=True,
    )
