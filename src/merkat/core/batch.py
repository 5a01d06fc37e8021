"""The batched half of a period's decision (issue 28): each running application whose policy
has a batched form (:data:`merkat.control.batched.BATCHED`) decided in one pass of its own,
from its kept lane to its next state, inside the period's one loop over its applications
(:meth:`Platform.decide <merkat.core.period.Platform.decide>`); and a suspended
``vertical-deadline`` application that still waits answered without its controller.

What it replaces: for those applications, the scalar path of :meth:`Platform.decide
<merkat.core.period.Platform.decide>` — :meth:`Decider.observe
<merkat.core.reconcile.Decider.observe>` (an :class:`~merkat.control.types.Observation`
each), :func:`~merkat.core.isolation.ask` (the controller's ``decide``) and the
:class:`~merkat.control.types.Demand` of a uniform bid turned into the next state. Everything
else takes the scalar path, in the same period: an application that waits or is suspended
(but those :func:`Pass.__call__` finds resting), has a suspended VM, lacks the metrics the
batch reads (a deadline, a work count, a rate) or reports one as NaN, trades a resource outside
:data:`~merkat.market.RESOURCES`, or whose controller the batch does not accept (custom
controllers, plugins, parameters it does not cover). ``tests/test_batched.py`` pins the two
paths equal (:attr:`Platform.batched <merkat.core.period.Platform.batched>` turns this one
off).

**One pass per application** (issue 28, fifteenth session). Until then an application went
through five loops: the decide loop's first pass (the poor check, :func:`batchable`), the
gather (its row appended to its policy's group), the policy's pass over the group (the plain
or the numpy form), the budget check over the group (``_fitting``), the outcomes (a bid
mapping, :func:`pays`, the next state) and the decide loop's second pass. Now the period's one
loop calls :class:`Pass` per application, which reads its row from its kept :class:`Lane`, its
VM columns and its metrics, calls its form's :meth:`~merkat.control.batched.base.BatchedPolicy.one`
(the plain form's arithmetic, which moves the controller's state last) and checks the budget
(:func:`fits`, :func:`pays`) to give its next state at once. A row that raises (the scalar
re-split on a VM size of 0, a bug of a form) moves no controller and takes the scalar path,
alone. The numpy forms stay as the plain forms' reference (``tests/test_batched_plain.py``):
with no gather to build, a numpy pass no longer pays at any group size (docs/benchmarks.md,
"Issue 28, fifteenth session: the controllers").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from merkat.control.base import Controller
from merkat.control.batched import BATCHED, SUSPEND, BatchedPolicy
from merkat.control.batched.base import Rows
from merkat.control.deadline import VerticalDeadline
from merkat.control.formulas import least_alloc, least_alloc_of, mean_bid, mean_bid_of
from merkat.control.types import Action, AppStatus, Demand, VMState
from merkat.core.batch_slo import Slo1, Tick, slo1_of
from merkat.core.batch_vd import Vd1, vd1_of
from merkat.core.draft import bidding
from merkat.core.fits import (
    _EXACT,
    _FITS_VMS,
    fits,
    fits_one,
    pays,
    pays_one,
    pays_summed,
    pays_total,
)
from merkat.core.isolation import WAIT
from merkat.core.model import App, AppNext, Observed
from merkat.core.reconcile import Decider, Prices
from merkat.defaults import MICRO
from merkat.market import RESOURCES

__all__ = ["Lane", "Outcome", "Pass", "batchable", "decide", "fits", "fits_one", "lane", "pays",
           "pays_one", "pays_summed", "pays_total"]

Outcome = Demand | dict[str, float]
"""A batched application's demand: a stop or a suspension, or its VMs' one bid (a mapping
over the resources it trades; the VM count unchanged)."""

_NAN = math.nan

_RUNNING, _SUSPENDED = AppStatus.RUNNING, AppStatus.SUSPENDED
_VM_SUSPENDED = VMState.SUSPENDED

_RESTING: dict[type, Callable[..., bool]] = {VerticalDeadline: VerticalDeadline.still_suspended}
"""The controller types whose suspended state :class:`Pass` decides, by exact type (a
subclass may change what it answers), with their check."""


class Lane:
    """What a batch reads of one application that never changes, read once and kept on its
    record (``App.lane``, a cache like ``App.const``, valid while ``controller`` and ``spec``
    are the application's): its batched form (``policy``, None: the scalar path), whether its spec
    lets a batch decide for it (``ok``: a finite deadline, every traded resource a market
    one), its form's one-application pass (``one``: ``policy.one`` when ``ok``, else None),
    its group (``key``: the form's name and the traded resources), the batch's resources
    (``res``, :attr:`Observation.resources <merkat.control.types.Observation.resources>`'
    order), its one traded resource (``single``, None when it trades several) and where each
    traded resource's bid is in ``res`` (``at``), its constant row (``fixed``: renewal,
    deadline, the VM size per resource, the controller's parameters,
    :attr:`BatchedPolicy.fixed`) and, for a suspended application, its controller's "still
    suspended" check (``rest``, :data:`_RESTING`).

    What it replaces: the per-period gather of those values from the spec, the constant
    parts and the controller, and :func:`batchable`'s registry look-up and ``accepts``;
    ``tests/test_batched_gather.py`` pins a kept lane equal to a fresh one after every
    period of a run with suspends, resumes and failures."""

    __slots__ = ("at", "controller", "fixed", "key", "ok", "one", "policy", "res", "rest",
                 "single", "slo1", "spec")

    def __init__(self, app: App) -> None:
        ctl = app.controller
        self.controller: Controller = ctl
        self.spec = app.spec
        policy = BATCHED.get(ctl.name) if ctl.name in BATCHED else None
        self.policy: BatchedPolicy | None = (
            policy if policy is not None and policy.accepts(ctl) else None)
        spec = app.spec
        trade = spec.trade
        self.ok = (self.policy is not None and spec.deadline is not None
                   and math.isfinite(spec.deadline)  # (the scalar spend limit raises)
                   and all(r in RESOURCES for r in trade))
        self.one = self.policy.one if self.ok and self.policy is not None else None
        self.res: tuple[str, ...] = tuple(r for r in RESOURCES if r in trade)
        self.single = trade[0] if self.ok and len(trade) == 1 else None
        self.key = f"{ctl.name}\x00{','.join(trade)}"  # (a str: its hash is kept)
        self.at = [self.res.index(r) for r in trade] if self.ok else []
        self.fixed: list[float] = []
        self.rest = _RESTING.get(type(ctl))
        self.slo1: Slo1 | Vd1 | None = None  # (one traded resource: one function)

    def fill(self, app: App, decider: Decider) -> None:
        """Read :attr:`fixed` (a batch's first use of this lane)."""
        if self.policy is None:
            return
        const = app.const or decider.const(app)
        size = const.vm_size
        self.fixed = [float(x) for x in (  # type: ignore[arg-type]
            const.renewal, app.spec.deadline, *[size[r] for r in self.res],
            *self.policy.state(self.controller, self.res)[:self.policy.fixed])]
        if self.ok and self.single is not None:
            self.slo1 = (slo1_of(self.policy, self.single, self.fixed, decider.ticks)
                         or vd1_of(self.policy, self.single, self.fixed, decider.ticks))


def lane(app: App) -> Lane:
    """``app``'s :class:`Lane` (built on first use, or again when its controller or spec was
    replaced)."""
    ln: Lane | None = app.lane
    if ln is None or ln.controller is not app.controller or ln.spec is not app.spec:
        ln = app.lane = Lane(app)
    return ln


def batchable(app: App) -> BatchedPolicy | None:
    """The batched form that decides for ``app`` this period, or None (the scalar path)."""
    if app.status is not AppStatus.RUNNING or not app.columns[0]:
        return None
    return lane(app).policy


class Pass:
    """One period's batched decisions, one application at a time (see the module docstring):
    ``Pass(decider, now, prices, history)(app, balance, seen)`` for each application the
    period decides, in its order. Holds the period's values each form reads (a
    :class:`~merkat.control.batched.base.Rows` without rows per traded-resource group, made on
    first use)."""

    __slots__ = ("ctxs", "decider", "history", "now", "prices")

    def __init__(self, decider: Decider, now: float, prices: Prices,
                 history: Sequence[Prices]) -> None:
        self.decider = decider
        self.now = now
        self.prices = prices
        self.history = history
        self.ctxs: dict[str, Rows] = {}

    def context(self, ln: Lane) -> Rows:
        """The period's values for ``ln``'s group (its prices, reserve and capacity over its
        resources), made once a period."""
        decider = self.decider
        mine = decider.prices_for(ln.spec.trade, self.prices, self.history)
        res, reserve = ln.res, decider.reserve
        ctx = self.ctxs[ln.key] = Rows(
            time=self.now, period=decider.period, resources=res, prices=[mine[r] for r in res],
            capacity=[decider.capacity[r] for r in res],
            bid_min=[float(reserve.get(r, 0.0)) for r in res], rows=(), fixed=())
        return ctx

    def take(self, per: Tick, ln: Lane) -> None:
        """Give ``per`` (the :class:`~merkat.core.batch_slo.Tick` of ``ln``'s one traded
        resource) this period's values: the time, the period, the resource's price and
        reserve (:meth:`context`'s, the same for every lane trading that resource)."""
        ctx = self.ctxs.get(ln.key)
        if ctx is None:
            ctx = self.context(ln)
        per.at = self
        per.time, per.period = ctx.time, ctx.period
        per.price, per.floor = ctx.prices[0], ctx.bid_min[0]

    def __call__(self, app: App, balance: int, seen: Observed) -> AppNext | Outcome | None:
        """``app``'s decision this period when a batched form or a resting check decides it
        (``app`` has VMs; ``balance`` in micro-credits): its next state when its balance pays
        its new bid on every VM as it is (:func:`~merkat.core.draft.bidding`, what ``draft``
        + :meth:`Decider.rebid <merkat.core.reconcile.Decider.rebid>` make then), else the
        bid mapping to rebid, a STOP or SUSPEND demand, :data:`~merkat.core.isolation.WAIT`
        for a suspended application that still waits; None: the scalar path decides (the
        controller untouched)."""
        ln: Lane | None = app.lane
        if ln is None or ln.controller is not app.controller or ln.spec is not app.spec:
            ln = lane(app)
        status = app.status
        if status is not _RUNNING:
            if status is _SUSPENDED and ln.rest is not None:
                return WAIT if self.resting(app, ln, seen) else None
            return None
        one = ln.one
        if one is None:
            return None
        m = seen.metrics
        done, total, rate, ideal, perf = (m.work_done, m.work_total, m.progress_rate,
                                          m.ideal_rate, m.performance)
        if total is None or (rate is None and ideal is None):
            return None
        if done != done or total != total or rate != rate or ideal != ideal or perf != perf:
            return None  # NaN stands for None in a batch: a NaN reported takes the scalar path
        cols = app.columns
        n = len(cols[0])
        single = ln.single
        if n == 1:  # mean_bid and least_alloc of one VM
            if cols[1][0] is _VM_SUSPENDED:
                return None
            bid, alloc = cols[2][0], cols[5][0]
            if single is not None:  # (one traded resource: the trace jobs' CPU)
                bids = [0.0 + bid.get(single, 0.0)]  # (sum() adds from 0)
                allocs = [alloc.get(single, 0.0)]
            else:
                bids = [0.0 + bid.get(r, 0.0) for r in ln.res]
                allocs = [alloc.get(r, 0.0) for r in ln.res]
        else:
            if _VM_SUSPENDED in cols[1]:
                return None
            if single is not None:
                bids = [mean_bid_of(cols[2], single)]
                allocs = [least_alloc_of(cols[5], single)]
            else:
                bids = list(mean_bid(cols[2], ln.res).values())
                allocs = list(least_alloc(cols[5], ln.res).values())
        fixed = ln.fixed
        if not fixed:
            ln.fill(app, self.decider)
            fixed = ln.fixed
        ctx = self.ctxs.get(ln.key)
        if ctx is None:
            ctx = self.context(ln)
        work = total - (_NAN if done is None else done)  # (metrics_row's, inlined)
        if not work > 0.0:
            work = 0.0
        try:
            stop, suspend, new = one(app.controller, fixed, ctx, balance / MICRO, n + 0.0,
                                     work, _NAN if rate is None else rate,
                                     _NAN if ideal is None else ideal, perf, bids, allocs)
        except Exception:  # (a bug of the form, the scalar re-split's): the scalar path
            return None
        if new is None:  # declined
            return None
        if stop is not None:
            return Demand(Action.STOP, reason=stop)
        if suspend:
            return Demand(Action.SUSPEND, nvms=n, reason=SUSPEND)
        # the usual row: every VM bids the new bid (a mapping over the traded resources)
        if single is not None:
            x = new[0]
            out = {single: x}
            if n == 1:  # fits_one of one VM, inlined
                x = 0.0 + x
                ok = (balance < _EXACT and x - x == 0
                      and (x <= 0 or ((y := x * MICRO) - y == 0 and round(y) <= balance)))
            else:
                ok = (fits_one(x, n, balance) if n <= _FITS_VMS
                      else pays_one(x, n, balance))
        else:
            values = [new[k] for k in ln.at]
            out = dict(zip(app.spec.trade, values, strict=True))
            ok = fits(values, n, balance) if n <= _FITS_VMS else pays(out, n, balance)
        return bidding(app, out) if ok else out

    def resting(self, app: App, ln: Lane, seen: Observed) -> bool:
        """Whether ``app`` (suspended, its controller of a type in :data:`_RESTING`) still
        waits this period without its controller's state changing: every VM suspended and its
        controller's check (``still_suspended``) on the values the observation would hold;
        False when that check raises (the controller's own path reports it).

        What it replaces: :meth:`Decider.observe
        <merkat.core.reconcile.Decider.observe>` and :func:`~merkat.core.isolation.ask` for
        the suspended applications of a themis-fig5 run, most periods of most of them (58 k
        of 61 k scalar decisions of its 0.2 run). ``tests/test_resting.py`` pins
        ``still_suspended`` against ``decide``; the golden digests and
        ``tests/test_batched.py`` (``Platform(batched=False)`` asks every controller) the
        runs."""
        states = app.columns[1]
        if states.count(_VM_SUSPENDED) != len(states):  # (Observation.phase)
            return False
        decider = self.decider
        spec = app.spec
        const = app.const or decider.const(app)
        try:
            return bool(ln.rest(app.controller, self.now, decider.period,  # type: ignore[misc]
                                spec.deadline, seen.metrics,
                                decider.prices_for(spec.trade, self.prices, self.history),
                                const.vm_size))
        except Exception:  # (the controller's own path reports it)
            return False


def decide(decider: Decider, rows: Sequence[tuple[App, int, Observed]], now: float,
           prices: Prices, history: Sequence[Prices],
           ready: dict[str, AppNext] | None = None) -> dict[str, Outcome]:
    """The batched outcomes of the running applications of ``rows`` (each with its balance in
    micro-credits and what the world reports), by application id, as one period's
    :class:`Pass` gives them (those absent take the scalar path); ``ready``, when given,
    receives the next states the pass made (their bids paid as they are), by id, whose bid
    the outcome then holds."""
    step = Pass(decider, now, prices, history)
    out: dict[str, Outcome] = {}
    for app, balance, seen in rows:
        if app.status is not AppStatus.RUNNING or not app.columns[0]:
            continue
        made = step(app, balance, seen)
        if made is None:
            continue
        if isinstance(made, dict | Demand):
            out[app.spec.id] = made
            continue
        out[app.spec.id] = made.bids[0]  # (the new bid's mapping, or its equal it kept)
        if ready is not None:
            ready[app.spec.id] = made
    return out
