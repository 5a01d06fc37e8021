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
import numpy.typing as npt

from merkat.control.base import Controller
from merkat.control.batched import BATCHED, SUSPEND, BatchedPolicy
from merkat.control.batched.base import Rows, batch_of, plain
from merkat.control.formulas import least_alloc, least_alloc_of, mean_bid, mean_bid_of
from merkat.control.types import Action, AppStatus, Demand, VMState
from merkat.core.draft import Columns, bidding, rebid_columns
from merkat.core.model import App, AppNext, Observed, to_micro
from merkat.core.reconcile import Decider, Prices
from merkat.defaults import MICRO
from merkat.market import RESOURCES

Outcome = Demand | dict[str, float]
"""A batched application's demand: a stop or a suspension, or its VMs' one bid (a mapping
over the resources it trades; the VM count unchanged)."""

MIN_BATCH = 2
"""The fewest applications a batch decides for; a lone application takes the scalar path.
Since small groups take a policy's plain form (:func:`~merkat.control.batched.base.plain`,
a few µs a row, no numpy pass) a batch pays from two applications (8 while every group paid
a numpy pass's fixed cost; docs/benchmarks.md, "Issue 28, thirteenth session: the batched
controllers' fixed cost")."""

_FITS_VMS = 4
"""Up to this many VMs, whether an application's balance pays its new bids as they are is
found in the batch's numpy pass (:func:`decide`'s ``ready``), the rest by
:func:`~merkat.core.bids.within_budget`."""

_EXACT = float(2 ** 53)  # balances (micro-credits) a float holds exactly


class Lane:
    """What a batch reads of one application that never changes, read once and kept on its
    record (``App.lane``, a cache like ``App.const``, valid while ``controller`` and ``spec``
    are the application's): its batched form (``policy``, None: the scalar path), whether its spec
    lets a batch decide for it (``ok``: a finite deadline, every traded resource a market
    one), its group (``key``: the form's name and the traded resources), the batch's
    resources (``res``, :attr:`Observation.resources
    <merkat.control.types.Observation.resources>`' order) and where each traded resource's
    bid is in them (``at``), and its constant row (``fixed``: renewal, deadline, the VM size
    per resource, the controller's parameters, :attr:`BatchedPolicy.fixed`).

    What it replaces: the per-period gather of those values from the spec, the constant
    parts and the controller, and :func:`batchable`'s registry look-up and ``accepts``;
    ``tests/test_batched.py`` pins the batched period equal to the scalar one."""

    __slots__ = ("at", "controller", "fixed", "key", "ok", "policy", "res", "spec")

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
        self.res: tuple[str, ...] = tuple(r for r in RESOURCES if r in trade)
        self.key = f"{ctl.name}\x00{','.join(trade)}"  # (a str: its hash is kept)
        self.at = [self.res.index(r) for r in trade] if self.ok else []
        self.fixed: list[float] = []

    def fill(self, app: App, decider: Decider) -> None:
        """Read :attr:`fixed` (a batch's first use of this lane)."""
        if self.policy is None:
            return
        const = app.const or decider.const(app)
        size = const.vm_size
        self.fixed = [float(x) for x in (  # type: ignore[arg-type]
            const.renewal, app.spec.deadline, *[size[r] for r in self.res],
            *self.policy.state(self.controller, self.res)[:self.policy.fixed])]


def lane(app: App) -> Lane:
    """``app``'s :class:`Lane` (built on first use)."""
    ln: Lane | None = app.lane
    if ln is None or ln.controller is not app.controller or ln.spec is not app.spec:
        ln = app.lane = Lane(app)
    return ln


Entry = tuple[App, int, list[float], list[float | None], "Columns | None"]
"""One application of a batch as the gather reads it: the application, its balance
(micro-credits), its lane's ``fixed`` row, its row (balance in credits, VMs, work done and
total, progress and ideal rates, the generic metric (None: NaN), then per resource its current
bid and allocation: :class:`~merkat.control.batched.base.Rows`) and its VM columns when it
has more than one VM (read by the gather, :func:`_columns`, and reused for its next state;
None: one VM). One tuple appended per application (the gather's one list operation)."""


class _Group:
    """The applications of one batch (:data:`Entry` each), gathered application by
    application, and the columns :func:`_decide_group` reads of them."""

    def __init__(self, policy: BatchedPolicy, lane: Lane) -> None:
        self.policy = policy
        self.resources = lane.res
        self.trade = lane.spec.trade
        self.at = lane.at
        self.entries: list[Entry] = []

    def unzip(self) -> None:
        """The entries as columns: ``apps``, ``balances``, ``fixed``, ``rows``, ``columns``."""
        self.apps, self.balances, self.fixed, self.rows, self.columns = (
            list(c) for c in zip(*self.entries, strict=True))


def batchable(app: App) -> BatchedPolicy | None:
    """The batched form that decides for ``app`` this period, or None (the scalar path)."""
    if app.status is not AppStatus.RUNNING or not app.columns[0]:
        return None
    ln: Lane | None = app.lane
    if ln is None or ln.controller is not app.controller or ln.spec is not app.spec:
        ln = lane(app)
    return ln.policy


def decide(decider: Decider, rows: Sequence[tuple[App, BatchedPolicy, int, Observed]],
           now: float, prices: Prices, history: Sequence[Prices],
           ready: dict[str, AppNext] | None = None) -> dict[str, Outcome]:
    """The outcomes of the applications of ``rows`` (each with the batched form
    :func:`batchable` gave it, its balance in micro-credits and what the world reports) that a
    batch decided, by application id; those absent take the scalar path. ``ready``, when
    given, receives the next state of each application whose new bid, on each of its VMs, its
    balance pays as it is (:func:`~merkat.core.draft.bidding`: what
    :meth:`Decider.rebid <merkat.core.reconcile.Decider.rebid>` makes of a draft, since
    :func:`~merkat.core.bids.within_budget` changes nothing), by id."""
    groups: dict[str, _Group] = {}
    suspended = VMState.SUSPENDED
    for app, policy, balance, seen in rows:
        ln: Lane | None = app.lane
        if ln is None or ln.controller is not app.controller or ln.spec is not app.spec:
            ln = lane(app)
        if not ln.ok:
            continue
        if not ln.fixed:
            ln.fill(app, decider)
        m = seen.metrics
        done, total, rate, ideal, perf = (m.work_done, m.work_total, m.progress_rate,
                                          m.ideal_rate, m.performance)
        if total is None or (rate is None and ideal is None):
            continue
        if done != done or total != total or rate != rate or ideal != ideal or perf != perf:
            continue  # NaN stands for None in a batch: a NaN reported takes the scalar path
        cols = app.columns
        res = ln.res
        columns: Columns | None = None
        if len(cols[0]) == 1:  # mean_bid and least_alloc of one VM
            if cols[1][0] is suspended:
                continue
            bid, alloc = cols[2][0], cols[5][0]
            if len(res) == 1:  # (one traded resource: the trace jobs' CPU)
                r = res[0]
                row = [balance / MICRO, 1.0, done, total, rate, ideal, perf,
                       0.0 + bid.get(r, 0.0), alloc.get(r, 0.0)]  # (sum() adds from 0)
            else:
                row = [balance / MICRO, 1.0, done, total, rate, ideal, perf,
                       *[0.0 + bid.get(r, 0.0) for r in res], *[alloc.get(r, 0.0) for r in res]]
        else:
            columns = _columns(app)
            if columns is None:
                continue
            if len(res) == 1:
                r = res[0]
                row = [balance / MICRO, float(len(cols[0])), done, total, rate, ideal, perf,
                       mean_bid_of(columns[2], r), least_alloc_of(columns[5], r)]
            else:
                row = [balance / MICRO, float(len(cols[0])), done, total, rate, ideal, perf,
                       *mean_bid(columns[2], res).values(),
                       *least_alloc(columns[5], res).values()]
        group = groups.get(ln.key)
        if group is None:
            group = groups[ln.key] = _Group(policy, ln)
        group.entries.append((app, balance, ln.fixed, row, columns))
    out: dict[str, Outcome] = {}
    for group in groups.values():
        if len(group.entries) < MIN_BATCH:  # the scalar path is faster (docs/benchmarks.md)
            continue
        group.unzip()
        _decide_group(decider, group, group.trade, now, prices, history, out, ready)
    return out


def _decide_group(decider: Decider, group: _Group, trade: tuple[str, ...], now: float,
                  prices: Prices, history: Sequence[Prices], out: dict[str, Outcome],
                  ready: dict[str, AppNext] | None) -> None:
    """One group's batch, its outcomes into ``out`` (and ``ready``: see :func:`decide`)."""
    mine = decider.prices_for(trade, prices, history)
    res = group.resources
    reserve = decider.reserve
    apps = group.apps
    policy = group.policy
    controllers = [a.controller for a in apps]
    n = len(apps)
    rows = Rows(time=now, period=decider.period, resources=res, prices=[mine[r] for r in res],
                capacity=[decider.capacity[r] for r in res],
                bid_min=[float(reserve.get(r, 0.0)) for r in res], rows=group.rows,
                fixed=group.fixed)
    try:
        if plain(policy, n):
            result = policy.decide_rows(controllers, rows)  # type: ignore[attr-defined]
        else:
            result = policy.decide(controllers, batch_of(rows, policy.live(controllers, res)))
    except Exception:  # a bug of the batched form: the scalar path decides for them
        return
    at = group.at
    stops, suspends, declined = result.stop, result.suspend, result.declined
    usual = (stops.count(None) == n and True not in suspends
             and (declined is None or True not in declined))  # (the usual period: every row a bid)
    # the usual row: every VM bids the new bid (a mapping over the traded resources)
    values = result.rows()
    if at != list(range(len(res))):
        values = [[v[k] for k in at] for v in values]
    if result.bid is not None:
        nvms = np.array([row[1] for row in group.rows], dtype=np.float64)
        fitting = _fitting(result.bid, at, nvms, group.balances)
        if usual:
            plain_rows = [True] * n
        else:
            other = (np.array([r is not None for r in stops], dtype=bool)
                     | np.array(suspends, dtype=bool))
            if declined is not None:
                other |= np.array(declined, dtype=bool)
            plain_rows = (~other).tolist()
            fitting &= ~other
        fits: list[bool] = fitting.tolist()
    else:
        fits = _fitting_rows(values, group.rows, group.balances)
        if usual:
            plain_rows = [True] * n
        else:
            plain_rows = [r is None and not s for r, s in zip(stops, suspends, strict=True)]
            if declined is not None:
                plain_rows = [p and not d for p, d in zip(plain_rows, declined, strict=True)]
            fits = [f and p for f, p in zip(fits, plain_rows, strict=True)]
    balances, gathered = group.balances, group.rows
    one = trade[0] if len(trade) == 1 else None
    for i, app, row, ok, bids in zip(range(n), apps, values, fits, plain_rows, strict=True):
        app_id = app.spec.id
        if bids:
            bid = out[app_id] = ({one: row[0]} if one is not None
                                 else dict(zip(trade, row, strict=True)))
            if ready is not None and not ok:  # (more than _FITS_VMS VMs: pays decides)
                count = int(gathered[i][1])  # (the gather's VM count)
                ok = count > _FITS_VMS and pays(bid, count, balances[i])
            if ok and ready is not None:
                columns = group.columns[i]
                ready[app_id] = (bidding(app, bid) if columns is None
                                 else rebid_columns(app, bid, columns))
            continue
        if declined is not None and declined[i]:
            continue
        reason = stops[i]
        if reason is not None:
            out[app_id] = Demand(Action.STOP, reason=reason)
        else:  # (suspends[i])
            out[app_id] = Demand(Action.SUSPEND, nvms=len(app.columns[0]), reason=SUSPEND)


def _columns(app: App) -> Columns | None:
    """``app``'s VM columns (``App.columns``: the record's own, shared, read only), or
    None when one of its VMs is suspended (the scalar path). What it replaces: a read of
    every VM record into new lists (:func:`~merkat.core.draft.columns`) at every gather;
    :func:`~merkat.core.draft.rebid_columns` copies them into the next state.
    ``tests/test_batched_gather.py`` pins the next states equal to ``draft`` + ``rebid``,
    ``tests/test_lazy_records.py`` the columns equal to the eager records."""
    cols = app.columns
    return None if VMState.SUSPENDED in cols[1] else cols


def pays(bid: dict[str, float], nvms: int, balance: int) -> bool:
    """Whether :func:`~merkat.core.bids.within_budget` leaves ``nvms`` VMs each bidding
    ``bid`` as they are (the next state :func:`~merkat.core.draft.bidding` makes is then
    :meth:`Decider.rebid <merkat.core.reconcile.Decider.rebid>`'s): the same sums in the same
    order (the mapping's values from 0, then VM after VM; :func:`pays_summed`), finite and at
    most ``balance`` (micro-credits). What it replaces, for applications of more than
    :data:`_FITS_VMS` VMs: a :func:`~merkat.core.draft.draft` of every VM column,
    ``set_uniform`` and ``within_budget``; ``tests/test_batched_gather.py`` pins it against
    them.

    O(1) where the answer is certain: the VM after VM sum of ``nvms`` copies of a finite
    ``x > 0`` is within ``nvms²·ε·x`` of ``nvms·x`` (recursive summation's error bound), so
    a product clear of the balance by that much (and a micro-credit) answers as the sum
    would; ``x <= 0`` sums to at most 0. Otherwise (not finite, near the balance, near an
    overflow) the sum itself (:func:`pays_summed`): the answer is the same bool either way
    (``tests/test_batched_gather.py``, hypothesis, balances at the boundary)."""
    x = sum(bid.values())
    y = nvms * x
    if x - x == 0 and -1e300 < y < 1e300:  # finite, and so is every partial sum
        if x <= 0:
            return True  # (a sum of copies of x <= 0 is <= 0)
        slack = y * (nvms * nvms * 2.3e-16 + 1e-15)
        if (y + slack) * MICRO + 1 <= balance:
            return True
        if (y - slack) * MICRO - 1 > balance:
            return False
    return pays_summed(x, nvms, balance)


def pays_summed(x: float, nvms: int, balance: int) -> bool:
    """:func:`pays` by its sums: ``nvms`` copies of ``x`` (a VM's bids summed) added VM
    after VM, as :func:`~merkat.core.bids.within_budget` adds them (the reference)."""
    total = 0.0
    for _ in range(nvms):
        total += x
    return math.isfinite(total) and (total <= 0 or to_micro(total) <= balance)


def _fitting(new: np.ndarray, at: list[int], nvms: np.ndarray, balances: list[int]
             ) -> npt.NDArray[np.bool_]:
    """Per row, whether :func:`~merkat.core.bids.within_budget` leaves the bids of its
    ``nvms`` VMs (each bidding ``new``'s column, its values in ``at``'s order) as they are:
    their total, summed as it sums them (each VM's values from 0, then VM after VM), is
    finite and at most the balance (micro-credits, rounded as :func:`to_micro
    <merkat.core.model.to_micro>` rounds). Rows of more than :data:`_FITS_VMS` VMs, or of a
    balance a float does not hold exactly, are False (within_budget decides)."""
    with np.errstate(invalid="ignore", over="ignore"):
        x = 0.0 + new[at[0]]
        for k in at[1:]:
            x = x + new[k]
        total = 0.0 + x
        for k in range(2, min(int(nvms.max()), _FITS_VMS) + 1):  # (none when every row has 1 VM)
            total = np.where(nvms >= k, total + x, total)
        bal = np.array(balances, dtype=np.float64)
        ok = (np.isfinite(total) & (nvms <= _FITS_VMS) & (bal < _EXACT)
              & ((total <= 0) | (np.rint(total * MICRO) <= bal)))
    out: npt.NDArray[np.bool_] = ok
    return out


def _fitting_rows(values: list[list[float]], rows: Sequence[Sequence[float | None]],
                  balances: list[int]) -> list[bool]:
    """:func:`_fitting` of a plain form's bids on Python floats: ``values[i]`` the row's bids
    in the traded resources' order, ``rows[i][1]`` its VM count (the gather's rows);
    ``tests/test_batched_plain.py`` pins the two equal."""
    out: list[bool] = []
    for v, row, bal in zip(values, rows, balances, strict=True):
        nvms = row[1]
        if not (nvms <= _FITS_VMS and bal < _EXACT):  # type: ignore[operator]
            out.append(False)
            continue
        x = 0.0 + v[0]
        for y in v[1:]:
            x = x + y
        total = 0.0 + x
        for _ in range(1, int(nvms)):  # type: ignore[arg-type]
            total = total + x
        if total - total != 0:  # not finite
            out.append(False)
        elif total <= 0:
            out.append(True)
        else:
            y = total * MICRO
            out.append(y - y == 0 and round(y) <= bal)
    return out
