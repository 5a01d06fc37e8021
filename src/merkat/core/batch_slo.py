"""A running SLO application of one traded resource decided in one function (issue 28,
sixteenth session): :func:`decide_slo1`, the lane's closed row.

What it replaces, for the applications it takes (a running application of one of the four
SLO policies, :class:`~merkat.control.batched.slo.BatchedSLO`, trading one resource: every
trace job): the chain :class:`Pass.__call__ <merkat.core.batch.Pass>` →
:meth:`BatchedSLO.one <merkat.control.batched.slo.BatchedSLO.one>` →
:func:`~merkat.control.batched.base.spend_cap_row` and
:func:`~merkat.control.batched.slo.alg1_row` → :func:`~merkat.core.batch.fits_one` →
:func:`~merkat.core.draft.bidding` → :func:`~merkat.core.draft.rebid_columns`, ~870
bytecodes an application on the 150,000-job window, of which ~450 moved values between
those layers: the metrics into a row, the row into the form's arguments, the constant row
unpacked and re-checked (its resource count, the policy's kind) at every call, the bid into a
mapping and back. Here the lane holds what never changes as one tuple read once
(:class:`Slo1`: the controller's parameters, the renewal, the deadline, the VM size and the
kind's flags), a period's values (the time, the period, the resource's price and reserve) are
taken once a period per lane (:attr:`Slo1.tick`), and the arithmetic of those functions runs
in their order on the same Python floats, so every float and every branch is theirs.

The reference stays: :class:`~merkat.core.batch.Pass` decides every other batched
application (several resources, ``vertical-deadline``, the resting check) and is what
``tests/test_batch_slo.py`` compares this function with, bit for bit (hypothesis: the
outcome, the next state's columns, every bid by ``repr`` and the controller's state, its
generator's included, over zeros of both signs, infinities, NaN metrics, broke and rich
balances, deadlines passed, a VM size of 0, several VMs); the golden digests and
``tests/test_batched.py`` (batched = scalar) pin the runs.

Why not a numpy pass over columns kept between periods: every input of a running
application changes every period (the time to its deadline, its work done, its balance), so
the columns would be rewritten row by row each period, and the SLO form's numpy pass costs
~150 µs a period whatever its size (212 µs on 43 rows against 102 µs for the plain form):
it pays only from ~150 running applications of one policy, ~1 % of the part on a trace
window (docs/benchmarks.md, "Issue 28, sixteenth session:
the controllers' inputs and the decide loop").
"""

from __future__ import annotations

import math

from merkat.control.batched.base import SUSPEND, gap_row
from merkat.control.batched.slo import BatchedSLO, resplit_one
from merkat.control.formulas import least_alloc_of, mean_bid_of
from merkat.control.generic import AGGRESSIVE
from merkat.control.types import Action, Demand, VMState
from merkat.core.draft import as_is, kept_least, rebid_columns
from merkat.core.fits import _EXACT, _FITS_VMS, fits_one, pays_one
from merkat.core.model import App, AppNext, Columns, Observed
from merkat.defaults import MICRO

_INF, _NAN = math.inf, math.nan
_VM_SUSPENDED = VMState.SUSPENDED
_STOP, _SUSPEND = Action.STOP, Action.SUSPEND


class Tick:
    """One traded resource's values for a period, shared by every :class:`Slo1` of that
    resource (kept by the platform's :class:`~merkat.core.reconcile.Decider`, ``ticks``):
    the time, the period, the resource's price and reserve, and the period's
    :class:`~merkat.core.batch.Pass` they were taken for (``at``)."""

    __slots__ = ("at", "floor", "period", "price", "time")

    def __init__(self) -> None:
        self.at: object = None
        self.time = self.period = self.price = self.floor = 0.0


class Kept1:
    """What a one-resource lane's decider reads of its application's columns (``res``: its
    traded resource), kept with the columns tuple it was read from (:func:`row_of`), and
    what :func:`paid` last proved of its record's bids (``ok``)."""

    __slots__ = ("cols", "nba", "ok", "res")

    def __init__(self, res: str) -> None:
        self.res = res
        self.cols: Columns | None = None  # (row_of's last columns read, and their values)
        self.nba: tuple[int, float, float] = (0, 0.0, 0.0)
        # (paid's: a record's bids list whose every mapping equals {res: x}, x, and a
        # balance that paid x on each of its VMs; none yet)
        self.ok: tuple[list[dict[str, float]] | None, float, int] = (None, _NAN, 0)


class Slo1(Kept1):
    """What :func:`decide_slo1` reads of one lane that never changes (kept on the lane,
    ``Lane.slo1``; made by :func:`slo1_of` on the lane's first batched period), and its
    resource's :class:`Tick` (``per``)."""

    __slots__ = ("amin", "deadline", "dstrict", "high", "horizon", "late", "low",
                 "min_fraction", "names", "per", "renewal", "size", "strict", "tracks")
    slo = True  # (the period's loop: decide_slo1; merkat.core.batch_vd's Vd1: decide_vd1)

    def __init__(self, policy: BatchedSLO, res: str, fixed: list[float], per: Tick) -> None:
        super().__init__(res)
        (self.renewal, self.deadline, self.size, self.low, self.high, self.min_fraction,
         self.horizon) = fixed
        self.amin = self.min_fraction * self.size  # (one() computes it so, every call)
        self.names = (res,)
        self.strict, self.tracks, self.dstrict = policy.strict, policy.tracks, policy.dstrict
        self.late = policy.late_reason
        self.per = per


def decide_slo1(app: App, k: Slo1, balance: int, seen: Observed
                ) -> AppNext | Demand | dict[str, float] | None:
    """:class:`Pass.__call__ <merkat.core.batch.Pass>` of a running application whose lane
    has a :class:`Slo1` (``k``, its :class:`Tick` taken for this period), bit for bit: its
    next state when its balance pays its new bid as it is, else that bid's mapping, a STOP
    or SUSPEND demand, or None (the scalar path decides; the controller not moved)."""
    row = row_of(app, k, seen)
    if row is None:
        return None
    cols, n, b, a, work, rate, ideal = row
    r = k.res
    c = app.controller
    try:
        fbal = balance / MICRO
        # --- BatchedSLO.one, one resource ---------------------------------------------------
        per = k.per
        size = k.size
        frac = a / size if size > 0 else _NAN
        if frac != frac:
            frac = 1.0
        left = k.deadline - per.time
        finished = work <= 0
        if finished:
            stop = True
        elif k.strict:
            need_t = _INF if ideal <= 0 else work / ideal
            need = (_INF if need_t > 0 else 0.0) if left <= 0 else need_t / left
            stop = need > 1
        else:
            stop = left <= 0
        if k.tracks:
            if rate != rate:
                rate = ideal * frac
            v = 0.0 if work == 0 else (_INF if rate <= 0 else work / rate)
            ref = left
            direction = 1 if v > k.high * ref else (-1 if v < k.low * ref else 0)
        else:
            v, ref = frac, 1.0
            direction = 1 if v < ref / k.high else (-1 if v > ref / k.low else 0)
        # --- spend_cap_row ----------------------------------------------------------------
        if left > 0:
            periods = left / per.period
            if periods - periods == 0:
                periods = -(-periods // 1.0)
            if not periods > 1.0:
                periods = 1.0
        else:
            periods = k.horizon
        bal = fbal if fbal > 0.0 else 0.0
        y = (bal + k.renewal * (periods - 1)) / periods
        nvms = n + 0.0
        y = (y if y < bal else bal) * 1e6 / (nvms if nvms > 1.0 else 1.0)
        if y != 0 and y - y == 0:
            y = y // 1.0
        cap = y / 1e6
        # --- alg1_row -----------------------------------------------------------------------
        # (the gap and the history are read only where a factor is made)
        scaler = c.scaler  # type: ignore[attr-defined]
        hist = scaler.history
        floor = per.floor
        amin = k.amin
        if size <= 0:
            wanted = floor
        else:
            price = per.price
            share = b / price if price > 0 else (_INF if b > 0 else 0.0)
            over = share > size
            if (direction < 0 and a > amin) or over:
                if b == floor and floor > 0:  # at the reserve: b / f <= b for every f >= 1
                    wanted = floor  # (floor > b / f, or b / f == floor: the same float)
                else:
                    f = 1.0 + gap_row(v, ref) if direction < 0 else 1.0
                    if over:
                        q = share / size
                        if q > f:
                            f = q
                    d = b / _factor(f, hist.get(r, 0) == 1)
                    wanted = floor if floor > d else d
            else:
                kept = floor if floor > b else b
                if (direction > 0 and a < size) or a < amin:
                    f = 1.0 + gap_row(v, ref) if direction > 0 else 1.0
                    if a < amin:
                        q = amin / a if a > 0 else AGGRESSIVE
                        if q > f:
                            f = q
                    wanted = kept * _factor(f, hist.get(r, 0) == -1)
                else:
                    wanted = kept
        short = wanted > cap * (1 + 1e-12)
        if stop:
            return Demand(_STOP, reason="finished" if finished else k.late)
        condition = short and (direction > 0 if k.dstrict else frac < k.min_fraction)
        x = wanted
        if wanted > cap:
            x = (resplit1(wanted, cap, a, size, floor) if CLOSED
                 else resplit_one(k.names, [wanted], cap, [a], [size], [floor])[0])
        scaler.wanted = wanted
        if x > b:
            hist[r] = 1
        elif x < b:
            hist[r] = -1
        c.short = short  # type: ignore[attr-defined]
        if condition:
            condition = c.back_off(True)  # type: ignore[attr-defined]
        else:
            c.backoff, c.waited = None, 0  # type: ignore[attr-defined]
    except Exception:  # (the scalar re-split's, a bug): the scalar path, as the reference
        return None
    if condition:
        return Demand(_SUSPEND, nvms=n, reason=SUSPEND)
    return paid(app, cols, r, x, n, balance, k)



REALLOCATED = True
""":func:`row_of` of columns whose VM ids, states and bids are the very lists it last read
(a period moved only the allocations: issue 28, twenty-fourth session) takes the VM count
and mean bid it kept and reads only the least allocation anew (the lists are never changed
once on a record, so the same lists hold the same values). False: the reference (every
value read anew); ``tests/test_reallocated.py`` decides both ways."""


Row1 = tuple[Columns, int, float, float, float, float, float]
"""What :func:`row_of` reads of a running application of one traded resource: its VM
columns, VM count, current bid (the VMs' mean), least allocation, work left (never
negative, NaN as 0), progress rate and ideal rate (NaN: not reported)."""


def row_of(app: App, k: Kept1, seen: Observed) -> Row1 | None:
    """:class:`Pass.__call__ <merkat.core.batch.Pass>`'s reading of ``app``'s inputs on its
    one traded resource ``k.res`` (:data:`Row1`), or None when the scalar path decides (no
    work count, no rate, a NaN reported, a suspended VM): the input of :func:`decide_slo1`
    and :func:`~merkat.core.batch_vd.decide_vd1`.

    The VM count, mean bid and least allocation are kept on ``k`` with the columns they
    were read from (``k.cols``, ``k.nba``) and taken again while ``app.columns`` is that
    very tuple: a record's column lists are never changed once on it and a bid or
    allocation mapping is replaced, never changed (:mod:`merkat.core.draft`), so the same
    tuple holds the same values (an application the last commit left as it was: 74 % of
    the 150,000-job window's), and the count and mean bid while the ids, states and bids
    are those very lists (:data:`REALLOCATED`). What it replaces: the ``len``, the suspended check,
    ``mean_bid_of`` and ``least_alloc_of`` every period; ``tests/test_batch_slo.py``
    decides the same application over several periods both ways, bit for bit. A least
    read anew is the plan's when its column kept one for that very allocation list
    (:func:`~merkat.core.draft.kept_least`: 97 % of themis-fig5's reads), the ``min``
    over the mappings otherwise (``tests/test_plan_leasts.py``)."""
    m = seen.metrics
    done, total, rate, ideal = m.work_done, m.work_total, m.progress_rate, m.ideal_rate
    if total is None or (rate is None and ideal is None):
        return None
    perf = m.performance
    if done != done or total != total or rate != rate or ideal != ideal or perf != perf:
        return None  # (NaN: the scalar path, as the reference)
    cols = app.columns
    kc = k.cols
    if cols is kc:
        n, b, a = k.nba
    elif (REALLOCATED and kc is not None and cols[2] is kc[2] and cols[0] is kc[0]
          and cols[1] is kc[1]):  # only the allocations moved: the least read anew
        n, b, _ = k.nba
        r = k.res
        if n == 1:
            a = cols[5][0].get(r, 0.0)
        else:
            low = kept_least(cols[5], r)
            a = least_alloc_of(cols[5], r) if low is None else low
        k.cols, k.nba = cols, (n, b, a)
    else:
        r = k.res
        n = len(cols[0])
        if n == 1:
            if cols[1][0] is _VM_SUSPENDED:
                return None
            b = 0.0 + cols[2][0].get(r, 0.0)
            a = cols[5][0].get(r, 0.0)
        else:
            if _VM_SUSPENDED in cols[1]:
                return None
            b = mean_bid_of(cols[2], r)
            low = kept_least(cols[5], r)  # (the plan's column's: draft.keep_leasts)
            a = least_alloc_of(cols[5], r) if low is None else low
        k.cols, k.nba = cols, (n, b, a)
    work = total - (_NAN if done is None else done)
    if not work > 0.0:
        work = 0.0
    if rate is None:
        rate = _NAN
    if ideal is None:
        ideal = _NAN
    return cols, n, b, a, work, rate, ideal


def paid(app: App, cols: Columns, r: str, x: float, n: int, balance: int, k: Kept1
         ) -> AppNext | dict[str, float]:
    """``app``'s next state when its balance pays ``x`` on each of its ``n`` VMs as it is
    (:class:`Pass.__call__ <merkat.core.batch.Pass>`'s budget check on one resource ``r``,
    then ``draft.bidding`` on the columns read), else the bid's mapping to rebid.

    Kept (``k.ok``, issue 28, twentieth session): when the columns' bids list is the
    record's list that an earlier call found bidding ``{r: x}`` on every VM (a record's
    lists and mappings are never changed in place, :func:`row_of`), ``x`` is that value
    again (``==``: the check and the comparison read values only) and ``balance`` is at least
    the one that paid it and below ``_EXACT``, the answer is :func:`~merkat.core.draft.as_is`
    without the budget check, the mapping and ``rebid_columns``' comparisons: for a fixed
    ``x`` and ``n`` each of the three checks below is monotone in the balance (a sum at most
    the balance stays so for a larger one; ``pays_total``'s two O(1) answers bound the
    same sum), so it answers True again, and ``rebid_columns`` finds the VMs bidding ``{r:
    x}`` again. The quiet application of a trace window (74 % of w150000's) is this case.
    The check below stays the reference: ``tests/test_batch_slo.py`` decides random
    sequences both ways (a fresh ``Kept1`` every call against one kept)."""
    bids = cols[2]
    kb, kx, kbal = k.ok
    if bids is kb and x == kx and kbal <= balance < _EXACT:
        return as_is(app, cols)
    out = {r: x}
    if n == 1:
        x = 0.0 + x
        ok = (balance < _EXACT and x - x == 0
              and (x <= 0 or ((z := x * MICRO) - z == 0 and round(z) <= balance)))
    else:
        ok = fits_one(x, n, balance) if n <= _FITS_VMS else pays_one(x, n, balance)
    if not ok:
        return out
    nx = rebid_columns(app, out, cols)  # (draft.bidding's, on the columns read)
    if nx.bids is bids and x == x:  # (every VM bids {r: x}: rebid_columns' as_is)
        k.ok = (bids, x, balance)
    return nx


CLOSED = True
"""Whether :func:`decide_slo1` re-splits a bid over its cap by :func:`resplit1` (False: by
:func:`~merkat.control.batched.slo.resplit_one`, the reference)."""


def resplit1(w: float, cap: float, a: float, size: float, floor: float) -> float:
    """:func:`~merkat.control.batched.slo.resplit_one` of one resource (Merkat Alg. 1 lines
    19-25: bid ``w`` re-split within ``cap``, allocation ``a`` of VM size ``size``, floor
    ``floor``), bit for bit, without its mappings (issue 28, twenty-fourth session: four
    dicts, two list comprehensions, ``scale_to`` and ``split_budget``'s loop, ~10 µs, for
    each over-cap bid of a heavy period). Each branch is the one the scalar helpers take on
    one resource, in their order and on the same floats: ``sum`` of one value is ``0 + x``
    (``-0.0`` reads ``0.0``), ``len`` is 1; a ``size`` of 0 under an allocation below it
    raises ``ZeroDivisionError`` as theirs does. ``tests/test_batch_slo.py`` compares the two
    (``repr``, exceptions included) over edge values."""
    if a >= size:  # saturated: scale_to({r: w}, cap, {r: floor})
        total = 0 + w
        if total <= cap:
            return w
        if total <= 0:
            return floor
        return _split1(cap, 1.0 if math.isinf(total) else w, floor)
    # (no resource saturated: the kept part is {}, line 25 splits cap - 0 by 1 - a / size)
    return _split1(cap - 0, 1.0 - a / size, floor)


def _split1(total: float, weight: float, floor: float) -> float:
    """:func:`~merkat.control.formulas.split_budget` of ``total`` over one resource of
    ``weight`` and ``floor``."""
    if total <= 0 + floor:
        return floor
    wsum = 0 + weight
    if wsum <= 0:
        return total / 1
    share = total * (weight / wsum)
    return floor if share < floor else share


def _factor(f: float, halve: bool) -> float:
    """``alg1_row``'s factor ``f`` kept within [1, AGGRESSIVE] (NaN: 1), then halved toward 1
    when ``halve`` (the scaler's last move went the other way)."""
    if not f > 1.0:
        f = 1.0
    elif not f < AGGRESSIVE:
        f = AGGRESSIVE
    return 1.0 + (f - 1.0) / 2.0 if halve else f


def slo1_of(policy: object, res: str | None, fixed: list[float],
            ticks: dict[str, Tick]) -> Slo1 | None:
    """A lane's :class:`Slo1` when :func:`decide_slo1` decides for it (an SLO form, one
    traded resource ``res``; its :class:`Tick` from ``ticks``, made on first use), else
    None."""
    if res is None or not isinstance(policy, BatchedSLO):
        return None
    per = ticks.get(res)
    if per is None:
        per = ticks[res] = Tick()
    return Slo1(policy, res, fixed, per)
