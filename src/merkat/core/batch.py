"""The batched half of a period's decision (issue 28): the running applications whose policy
has a batched form (:data:`merkat.control.batched.BATCHED`) gathered into arrays, one
:class:`~merkat.control.batched.Batch` per policy and traded resources, and decided in one
pass each.

What it replaces: for those applications, the scalar path of :meth:`Platform.decide
<merkat.core.period.Platform.decide>` — :meth:`Decider.observe
<merkat.core.reconcile.Decider.observe>` (an :class:`~merkat.control.types.Observation`
each), :func:`~merkat.core.isolation.ask` (the controller's ``decide``) and the
:class:`~merkat.control.types.Demand` of a uniform bid. Everything else takes the scalar path,
in the same period: an application that waits or is suspended, has a suspended VM, lacks the
metrics the batch reads (a deadline, a work count, a rate) or reports one as NaN, trades a resource outside
:data:`~merkat.market.RESOURCES`, or whose controller the batch does not accept (custom
controllers, plugins, parameters it does not cover). ``tests/test_batched.py`` pins the two
paths equal (:attr:`Platform.batched <merkat.core.period.Platform.batched>` turns this one
off).

A batch that raises (a bug in a batched form) changes no controller and sends its
applications to the scalar path, where an error fails that application alone
(:mod:`merkat.core.isolation`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from merkat.control.batched import BATCHED, SUSPEND, Batch, BatchedPolicy
from merkat.control.formulas import least_alloc, mean_bid
from merkat.control.types import Action, AppStatus, Demand, VMState
from merkat.core.model import App, Observed
from merkat.core.reconcile import Decider, Prices
from merkat.defaults import MICRO
from merkat.market import RESOURCES

Outcome = Demand | dict[str, float]
"""A batched application's demand: a stop or a suspension, or its VMs' one bid (a mapping
over the resources it trades; the VM count unchanged)."""

_NAN = float("nan")

MIN_BATCH = 16
"""The fewest applications a batch decides for; smaller groups take the scalar path (a numpy
pass costs about as much as a hundred small operations whatever its size, and a running
application's scalar decision about twenty; docs/benchmarks.md, "Where a period's time
goes")."""


class _Group:
    """The rows of one batch, as lists, gathered application by application."""

    def __init__(self, policy: BatchedPolicy, resources: tuple[str, ...]) -> None:
        self.policy = policy
        self.resources = resources
        self.apps: list[App] = []
        # per application: balance, renewal, deadline, VMs, work done and total, progress
        # and ideal rates, the generic metric, then per resource its VM size, current bid, allocation, then the
        # controller's state (BatchedPolicy.state)
        self.rows: list[list[float]] = []


def _nan(*values: float | None) -> bool:
    """Whether any of ``values`` is NaN."""
    return any(v is not None and v != v for v in values)


def batchable(app: App) -> BatchedPolicy | None:
    """The batched form that decides for ``app`` this period, or None (the scalar path)."""
    ctl = app.controller
    name = ctl.name
    if name not in BATCHED or app.status is not AppStatus.RUNNING or not app.vms:
        return None
    policy = BATCHED.get(name)
    return policy if policy.accepts(ctl) else None


def decide(decider: Decider, rows: Sequence[tuple[App, BatchedPolicy, int, Observed]],
           now: float, prices: Prices, history: Sequence[Prices]) -> dict[str, Outcome]:
    """The outcomes of the applications of ``rows`` (each with the batched form
    :func:`batchable` gave it, its balance in micro-credits and what the world reports) that a
    batch decided, by application id; those absent take the scalar path."""
    groups: dict[tuple[str, tuple[str, ...]], _Group] = {}
    suspended = VMState.SUSPENDED
    for app, policy, balance, seen in rows:
        spec, m = app.spec, seen.metrics
        if (spec.deadline is None or m.work_total is None
                or (m.progress_rate is None and m.ideal_rate is None)
                or not math.isfinite(spec.deadline)):  # (the scalar spend limit raises)
            continue
        if _nan(m.work_done, m.work_total, m.progress_rate, m.ideal_rate, m.performance):
            continue  # NaN stands for None in a batch: a NaN reported takes the scalar path
        vms = app.vms
        if any(vm.state is suspended for vm in vms):
            continue
        trade = spec.trade
        key = (policy.name, trade)
        group = groups.get(key)
        if group is None:
            if any(r not in RESOURCES for r in trade):
                continue
            resources = tuple(r for r in RESOURCES if r in trade)  # Observation.resources
            group = groups[key] = _Group(policy, resources)
        const = app.const or decider.const(app)
        res = group.resources
        group.apps.append(app)
        size = const.vm_size
        cur = mean_bid([vm.bid for vm in vms], res)
        low = least_alloc([vm.alloc for vm in vms], res)
        group.rows.append([
            balance / MICRO, const.renewal, spec.deadline, float(len(vms)), m.work_done,
            m.work_total, _NAN if m.progress_rate is None else m.progress_rate,
            _NAN if m.ideal_rate is None else m.ideal_rate,
            _NAN if m.performance is None else m.performance,
            *[size[r] for r in res], *[cur[r] for r in res], *[low[r] for r in res],
            *policy.state(app.controller, res),
        ])
    out: dict[str, Outcome] = {}
    for (_, trade), group in groups.items():
        if len(group.apps) < MIN_BATCH:  # the scalar path is faster (docs/benchmarks.md)
            continue
        mine = decider.prices_for(trade, prices, history)
        res = group.resources
        reserve = decider.reserve
        cols = np.array(group.rows, dtype=np.float64).T
        R = len(res)
        batch = Batch(
            time=now, period=decider.period, resources=res,
            prices=np.array([mine[r] for r in res]),
            capacity=np.array([decider.capacity[r] for r in res]),
            bid_min=np.array([float(reserve.get(r, 0.0)) for r in res]),
            balance=cols[0], renewal=cols[1], deadline=cols[2], nvms=cols[3],
            work_done=cols[4], work_total=cols[5], progress_rate=cols[6], ideal_rate=cols[7],
            performance=cols[8], vm_size=cols[9:9 + R], bid=cols[9 + R:9 + 2 * R],
            alloc=cols[9 + 2 * R:9 + 3 * R], state=cols[9 + 3 * R:],
        )
        apps = group.apps
        try:
            result = group.policy.decide([a.controller for a in apps], batch)
        except Exception:  # a bug of the batched form: the scalar path decides for them
            continue
        bids = result.bid.T.tolist()
        at = [res.index(r) for r in trade]
        declined = result.declined or [False] * len(apps)
        for i, app in enumerate(apps):
            if declined[i]:
                continue
            reason = result.stop[i]
            if reason is not None:
                out[app.spec.id] = Demand(Action.STOP, reason=reason)
            elif result.suspend[i]:
                out[app.spec.id] = Demand(Action.SUSPEND, nvms=len(app.vms), reason=SUSPEND)
            else:
                row = bids[i]
                out[app.spec.id] = {r: row[k] for r, k in zip(trade, at, strict=True)}
    return out

