"""Admission between periods (Merkat §4.2.2): the applications manager's queue.

Users submit platforms at any time; the applications manager takes them from its queue every
admission interval (10 s in Merkat), checks their start condition and asks the market
scheduler for their VMs. Here, at an admission point ``now`` between two periods (the platform's
:meth:`Platform.admit <merkat.core.period.Platform.admit>` calls :func:`admit`):

1. each application submitted since the last period and still waiting is observed at the
   **last clearing's prices** and its controller decides (the start condition is the
   controller's start policy: it starts, or it waits for the next period);
2. the VMs of the applications that start are placed by worst-fit on the hosts' current load
   (:func:`~merkat.market.placement.worst_fit_decreasing`: **the running VMs stay where they
   are**, nothing migrates), and every host's proportional share is recomputed with the
   newcomers' bids (:func:`~merkat.market.allocation_error.enforceable`): a newcomer shares its host
   with the VMs already there, as a new process shares a cgroup-enforced machine, until the
   next period re-clears the whole market; an application whose VMs cannot all be placed (a
   minimum no host can hold) stays in the queue for the next period. The running VMs are
   read from the records (:func:`~merkat.core.running.running`, each application's rows
   kept while its records do not change) and only those whose
   allocation changes — the VMs on the hosts that receive newcomers — are drafted, planned
   and committed (``tests/test_admission.py`` checks the decision against the one that
   drafts every running application). That is the full path (:func:`_full`), the
   reference; an admission point after another of the same period takes, when it proves it
   gives the same answer, the last point's kept state instead, and the first point after a
   period the period's clearing (:mod:`~merkat.core.admission_keep`: only the newcomers
   placed, only the nodes they go to re-cleared);
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

Pure like the period: no clock, no ledger, no backend, and no record changed: the admission
is a :class:`~merkat.core.model.Decision` (``admission=True``) that the platform commits
like a period's (:meth:`Platform.settle <merkat.core.period.Platform.settle>`).
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from merkat.control.types import AppStatus
from merkat.core import admission_plan
from merkat.core.admission_keep import MAX_NEW, AdmissionKeep, Placed, Placement
from merkat.core.admission_plan import Bills
from merkat.core.backend import Plan
from merkat.core.bills import Usage
from merkat.core.draft import draft, keep
from merkat.core.isolation import ask, fail, reconcile
from merkat.core.market_input import Rows, Run, market_rows, size
from merkat.core.model import App, AppNext, Decision, Observed, Ops
from merkat.core.plan import bills_of, make_plan
from merkat.core.reconcile import Decider, Prices
from merkat.core.running import Running, RunningRows
from merkat.market import NO_HOST, RESOURCES, Hosts, VMs, worst_fit_decreasing
from merkat.market.allocation_error import enforceable_capped
from merkat.market.clear import check_reserve
from merkat.market.share import FloatArray, IntArray


def place(hosts: Hosts, reserve: FloatArray, here: Rows,
          runs: Sequence[Run]) -> tuple[Placement, VMs, bool]:
    """Place ``runs``' new VMs (host ``NO_HOST``) by worst-fit on ``hosts`` beside the VMs
    running there (``here``: their market rows, which stay where they are); each host's
    proportional share of its VMs' bids (``reserve``: the minimum bid per VM and resource,
    in market order). The rows are ``here``'s, then ``runs``'; with the checked input and
    whether a VM was capped somewhere."""
    new = market_rows(runs, size(runs))
    vms = VMs(here[0] + new[0], *(np.concatenate((a, b)) for a, b in zip(here[1:], new[1:],
                                                                          strict=True)))
    check_reserve(vms, reserve)
    host = worst_fit_decreasing(hosts, vms)
    allocation, _, capped = enforceable_capped(hosts, vms, host)
    return Placement(host, allocation, vms.bid, vms.host), vms, capped


def _touched(here: Running, result: Placement) -> tuple[list[Run], IntArray]:
    """The running applications whose VMs' allocations ``result`` changes, as runs of those
    VMs only (their next states drafted), and those VMs' rows in ``result``. Only those
    applications are visited (each changed row's application found by ``searchsorted`` in
    ``here.ends``), not every running one."""
    rows = np.flatnonzero(here.changed(result.allocation))
    runs: list[Run] = []
    if rows.size == 0:
        return runs, rows
    ends = here.ends
    which: list[int] = np.searchsorted(ends, rows, side="right").tolist()
    apps = here.apps
    last = -1
    mine: list[int] = []
    cur: list[int] = []
    start = 0
    for m, a in zip(rows.tolist(), which, strict=True):
        if a != last:
            app, const, mine = apps[a]
            start = ends[a] - len(mine)
            cur = []
            runs.append((draft(app), const, cur))
            last = a
        cur.append(mine[m - start])
    return runs, rows


def _revert(nx: AppNext, app: App) -> None:
    """Back to the queue: the start did not happen (its VMs were never placed)."""
    keep(nx, ())
    nx.vm_count = app.vm_count
    nx.status = AppStatus.WAITING
    nx.start_time = None


@dataclass(frozen=True)
class Market:
    """What an admission reads of the platform: its cluster, rules, last prices (and the
    past ones, the last entry being ``prices``), records, the period's index and the
    running VMs' rows kept from the last admission point (:class:`RunningRows`) and the
    last admission point's state (:class:`~merkat.core.admission_keep.AdmissionKeep`)."""

    hosts: Hosts
    decider: Decider
    prices: Prices
    history: Sequence[Prices]
    apps: dict[str, App]
    active: Sequence[App]
    index: int
    running: RunningRows
    keep: AdmissionKeep


def admit(market: Market, queued: Sequence[App], now: float, until: float,
          balances: Mapping[str, int], observed: Mapping[str, Observed]) -> Decision:
    """The admission point ``now`` (``until``: the next period boundary) of the ``queued``
    applications (waiting since their submission): see the module docstring. ``balances``
    and ``observed`` cover them. Returns the decision to charge, apply and commit (its plan
    creates nothing when nothing starts); it takes every queued application out of the
    queue."""
    decider = market.decider
    period = decider.period
    nexts: dict[str, AppNext] = {}
    starting: list[tuple[AppNext, App]] = []
    refused: list[str] = []
    ops = Ops()
    for app in queued:
        app_id = app.spec.id
        balance, seen = balances[app.account], observed[app_id]
        obs = decider.observe(app, now, balance, seen, market.prices, market.history)
        demand = ask(app.controller, obs)
        nx = nexts[app_id] = draft(app)
        if isinstance(demand, str):  # its controller raised: it fails, alone
            fail(nx, now, demand, ops)
            continue
        nx = nexts[app_id] = reconcile(decider, app, nx, demand, now, balance, seen, ops,
                                       refused)
        if nx.status is AppStatus.RUNNING and nx.ids:
            starting.append((nx, app))
    const = decider.const
    newcomers: list[Run] = [(nx, const(app), None) for nx, app in starting]
    placed = None
    if newcomers:
        # the VMs placed by the last clearing (and admissions since) keep their hosts
        running = AppStatus.RUNNING
        placed = _placed(market, nexts, newcomers, [app for _, app in starting],
                         any(app.status is running for app in queued))
        fitting = {id(run[0]) for run in placed.fits} if placed is not None else set()
        for nx, app in starting:  # those whose VMs do not all fit: back to the queue
            if id(nx) not in fitting:
                _revert(nx, app)
    if placed is not None:
        # Only the VMs whose allocation changes (those sharing a host with a newcomer) are
        # drafted, planned and committed; the others keep their records as they are.
        newcomers, touched = placed.fits, placed.touched
        plan, bills, usage = _plan_bills(now, period, placed, ops, market.prices)
        nexts.update((run[0].id, run[0]) for run in touched)
        frac = max(0.0, min(1.0, (until - now) / period))
        bills = tuple((a, round(x * frac)) for a, x in bills)
        used = usage  # (prorated when read: charging by bid never reads it)
        usage = Usage(lambda: tuple((a, round(x * frac)) for a, x in used))
        alloc = placed.allocated
    else:
        newcomers = []
        plan = Plan(time=now, period=period, destroy=tuple(ops.destroy),
                    suspend=tuple(ops.suspend))
        bills = usage = ()
        alloc = np.zeros(len(RESOURCES))
    return Decision(
        index=market.index, time=now, plan=plan, bills=bills, usage=usage,
        refused=tuple(refused), prices=dict(market.prices),
        allocated={r: float(alloc[k]) for k, r in enumerate(RESOURCES)},
        bidding=size(newcomers), apps=nexts, admission=True,
    )


def _plan_bills(now: float, period: float, placed: Placed, ops: Ops,
                prices: Prices) -> tuple[Plan, Bills, Sequence[tuple[str, int]]]:
    """The plan, bills and usage of ``placed`` (before the proration): from the kept
    path's lists when :func:`merkat.core.admission_plan.plan` answers
    (:data:`~merkat.core.admission_plan.DIRECT`), else :func:`make_plan` and
    :func:`bills_of` over its arrays (the reference)."""
    newcomers, touched, placement = placed.fits, placed.touched, placed.placement
    start = len(placement.allocation) - size(newcomers)
    rows = placed.rows
    if rows is not None and admission_plan.DIRECT:
        bills = admission_plan.bills(newcomers, rows.new_bid)
        plan = None if bills is None else admission_plan.plan(now, period, touched,
                                                                newcomers, rows, ops)
        if plan is not None and bills is not None:
            return plan, bills, admission_plan.usage(newcomers, lambda: (
                placement.host, placement.before, placement.allocation, placement.bid),
                start, prices)
    plan = make_plan(now, period, touched + newcomers, placement, ops, placement.before)
    bills, usage = bills_of(newcomers, placement.host, placement.before,
                            placement.allocation, placement.bid, prices, start=start)
    return plan, bills, usage


def running_here(active: Sequence[App], drafts: Container[str]) -> list[App]:
    """The running applications among ``active`` whose id is not in ``drafts`` (the point's
    queued applications), in order: the applications whose VMs stay where they are."""
    return [a for a in active if a.status is AppStatus.RUNNING and a.spec.id not in drafts]


def _placed(market: Market, drafts: Container[str], newcomers: list[Run],
            new_apps: list[App], hide: bool = True) -> Placed | None:
    """The placement of ``newcomers`` (records ``new_apps``) beside the running
    applications (:func:`running_here` of ``market.active`` and ``drafts``): from the last
    point's kept state when it is proved to give the reference's answer and they are at
    most ``MAX_NEW`` VMs (:mod:`merkat.core.admission_keep`; the running applications are
    then checked in the pass that finds them, :meth:`AdmissionKeep.valid_among
    <merkat.core.admission_keep.AdmissionKeep.valid_among>`, no list of them built), else
    the reference (:func:`_full`). None when no newcomer fits. Changes no record.
    ``hide``: whether ``drafts`` can hide a running application (False when none of the
    point's queued applications is running: the running ones among ``market.active`` are
    then found without reading ``drafts``)."""
    keep = market.keep
    kept = None
    if size(newcomers) <= MAX_NEW:
        kept = keep.valid_among(market.hosts, market.decider.reserve_row, market.index,
                                market.active, drafts if hide else ())
    placed = keep.place(kept, newcomers, new_apps) if kept is not None else None
    return placed if placed is not None else _full(
        market, running_here(market.active, drafts), newcomers, new_apps)


def _full(market: Market, here_apps: list[App], newcomers: list[Run],
          new_apps: list[App]) -> Placed | None:
    """The reference placement of ``newcomers`` (records ``new_apps``) beside the running
    applications ``here_apps``: every running row read, every node's load summed and
    every node re-cleared; those whose VMs do not all fit are left out and the others
    placed again. None when none fits. Its answer is kept for the next point
    (:meth:`AdmissionKeep.record <merkat.core.admission_keep.AdmissionKeep.record>`)."""
    decider = market.decider
    here = market.running(here_apps, decider.const)
    n_here = len(here.odd)
    runs = newcomers
    while True:  # place them all, or send back those whose VMs do not all fit
        result, vms, capped = place(market.hosts, decider.reserve_row, here.vms, runs)
        hosts = result.host
        fits, i = [], n_here
        for run in runs:
            n = len(run[0].ids)
            if (hosts[i:i + n] != NO_HOST).all():
                fits.append(run)
            i += n
        if len(fits) == len(runs):
            break
        runs = fits
        if not runs:
            market.keep.forget()
            return None
    touched, rows = _touched(here, result)
    sub = np.concatenate((rows, np.arange(n_here, len(result.host))))
    placement = Placement(result.host[sub], result.allocation[sub], result.bid[sub],
                          result.before[sub])
    of = {id(run[0]): app for run, app in zip(newcomers, new_apps, strict=True)}
    market.keep.record(market.hosts, decider.reserve_row, market.index, here,
                       rows.tolist(), runs, [of[id(run[0])] for run in runs], vms.bid,
                       vms.cap, vms.minimum, result.host, result.allocation, capped)
    return Placed(touched, runs, placement, result.allocation.sum(axis=0))
