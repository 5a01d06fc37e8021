"""A running ``vertical-deadline`` application of one traded resource decided in one function
(issue 28, sixteenth session): :func:`decide_vd1`, themis-fig5's many-VM jobs.

What it replaces, for the applications it takes (a running application of
:class:`~merkat.control.batched.deadline.BatchedVerticalDeadline` trading one resource): the
chain :class:`Pass.__call__ <merkat.core.batch.Pass>` →
:meth:`BatchedVerticalDeadline.one <merkat.control.batched.deadline.BatchedVerticalDeadline.one>`
→ :func:`~merkat.control.batched.base.need_row`,
:func:`~merkat.control.batched.base.spend_cap_row` → :func:`~merkat.core.fits.pays_one` →
:func:`~merkat.core.draft.bidding`, as :mod:`merkat.core.batch_slo` does for the SLO
policies: the lane's constants are one object read once (:class:`Vd1`), the period's time,
price and reserve of its resource the shared :class:`~merkat.core.batch_slo.Tick`, and the
arithmetic of those functions runs in their order on the same Python floats (the estimate,
the stop rule, the progress rates, Scale-One-VM's step, the spend cap, the suspend rule, the
controller's state written last), so every float and every branch is theirs.
``tests/test_batch_slo.py`` compares it with the :class:`~merkat.core.batch.Pass`, bit for
bit, on random applications full of edge values (hypothesis).
"""

from __future__ import annotations

import math

from merkat.control.batched.base import SUSPEND, gap_row, need_row, spend_cap_row
from merkat.control.batched.deadline import BatchedVerticalDeadline
from merkat.control.formulas import scale_to
from merkat.control.generic import AGGRESSIVE
from merkat.control.types import Action, Demand, VMState
from merkat.core.batch_slo import Kept1, Tick, paid, row_of
from merkat.core.model import App, AppNext, Observed
from merkat.defaults import MICRO

_INF, _NAN = math.inf, math.nan
_STOP, _SUSPEND = Action.STOP, Action.SUSPEND
_VM_SUSPENDED = VMState.SUSPENDED


class Vd1(Kept1):
    """What :func:`decide_vd1` reads of one lane that never changes (``Lane.slo1``, made by
    :func:`vd1_of` on the lane's first batched period: renewal, deadline, VM size and the
    controller's parameters), and its resource's :class:`~merkat.core.batch_slo.Tick`
    (``per``)."""

    __slots__ = ("abort", "alpha", "deadline", "horizon", "limit", "per", "renewal", "size",
                 "t_diff", "tol")
    slo = False  # (the period's loop: decide_vd1, not decide_slo1)

    def __init__(self, res: str, fixed: list[float], per: Tick) -> None:
        super().__init__(res)
        (self.renewal, self.deadline, self.size, self.t_diff, self.limit, self.alpha,
         self.tol, self.horizon, self.abort) = fixed
        self.per = per


def decide_vd1(app: App, k: Vd1, balance: int, seen: Observed
               ) -> AppNext | Demand | dict[str, float] | None:
    """:class:`Pass.__call__ <merkat.core.batch.Pass>` of a running application whose lane
    has a :class:`Vd1` (``k``, its :class:`~merkat.core.batch_slo.Tick` taken for this
    period), bit for bit: its next state when its balance pays its new bid as it is, else
    that bid's mapping, a STOP or SUSPEND demand, or None (the scalar path decides)."""
    row = row_of(app, k, seen)
    if row is None:
        return None
    cols, n, b, a, work, rate, ideal = row
    r = k.res
    ctl = app.controller
    try:
        # --- BatchedVerticalDeadline.one, one resource ----------------------------------
        fbal = balance / MICRO
        per = k.per
        now = per.time
        scaler, value = ctl.scaler, ctl.alloc_est.value  # type: ignore[attr-defined]
        size, alpha = k.size, k.alpha
        old = value.get(r, _NAN)
        e = float(a) if old != old else alpha * a + (1 - alpha) * old
        at_max = e >= (1 - k.tol) * size
        frac = 1.0
        if size > 0:
            x = e / size
            frac = frac * (x if x < 1.0 else 1.0)
        left = k.deadline - now
        finished = work <= 0
        hopeless = k.abort != 0 and need_row(work, ideal, left) > 1
        stop = finished or hopeless or left <= 0
        no_rate = rate != rate
        p_est = ((0.0 if no_rate else rate) if ideal != ideal else ideal * frac)
        p_now = p_est if no_rate else rate
        p_ref = work / left if left > 0 else _INF
        d = 1 if p_est < p_ref else (-1 if p_est > p_ref else 0)
        direction, run = scaler.direction, float(scaler.run)
        if d != 0 and d != direction:
            direction, run = d, 0.0
        run = run + 1
        t = gap_row(p_est, p_ref)
        hold = t < k.t_diff or direction == 0
        if run >= k.limit:
            factor = AGGRESSIVE
        else:
            factor = 1.0 + t
            factor = AGGRESSIVE if factor > AGGRESSIVE else factor
        floor = per.floor
        kept = floor if floor > b else b
        if hold:
            x = kept
        elif direction > 0:
            x = kept * factor
        else:
            x = b / factor
            x = floor if floor > x else x
        wanted = x
        cap = spend_cap_row(fbal, k.renewal, n + 0.0, left, per.period, k.horizon)
        short = not at_max and wanted > cap * (1 + 1e-12)
        susp = not stop and short and p_now < p_ref and p_est < p_ref
        if at_max:
            x = floor if floor > b / 2 else b / 2
        elif wanted > cap:
            x = scale_to({r: x}, cap, {r: floor})[r]
        cost = 0.0
        if susp:
            cost = cost + per.price * size
        value[r] = e
        if stop:
            return Demand(_STOP, reason="finished" if finished else (
                "aborted while running: the deadline can no longer be met" if hopeless
                else "stopped: the deadline has passed"))
        if at_max:
            ctl.short = False  # type: ignore[attr-defined]
        else:
            scaler.direction, scaler.run, scaler.wanted = int(direction), int(run), wanted
            ctl.short = short  # type: ignore[attr-defined]
            if susp:
                ctl.suspended_at = now  # type: ignore[attr-defined]
                ctl.suspend_cost = cost  # type: ignore[attr-defined]
                ctl.suspensions += 1  # type: ignore[attr-defined]
    except Exception:  # (a bug, scale_to's): the scalar path, as the reference
        return None
    if susp:
        return Demand(_SUSPEND, nvms=n, reason=SUSPEND)
    return paid(app, cols, r, x, n, balance, k)


def rests_vd1(app: App, k: Vd1, seen: Observed) -> bool:
    """Whether a suspended ``vertical-deadline`` application of one traded resource still
    waits this period (``k``, its :class:`~merkat.core.batch_slo.Tick` taken for this
    period): :meth:`Pass.resting <merkat.core.batch.Pass.resting>` and
    ``VerticalDeadline.still_suspended`` in one function, on the lane's kept values — every
    VM suspended, no stop reason (finished, the needed fraction above 1, the deadline passed),
    and the resume wait not over or a full-size VM not cheaper than at the suspension; False
    when not certain or when the reference would raise (the controller is then asked).

    What it replaces: the chain ``Pass.__call__`` → ``Pass.resting`` →
    ``Decider.prices_for`` → ``still_suspended`` → ``Metrics.work_left``, ``_fraction``,
    ``_in_resume_wait``, ``_vm_cost`` (a generator over the VM size), for the suspended
    applications of a themis-fig5 run (60,799 of its 0.2 run's 157,000 decisions): the same
    comparisons on the same floats in the same order (the VM's cost ``0 + price × size``:
    the lane trades one resource and its VM size names only what it trades).
    ``tests/test_batch_slo.py`` pins it against ``Pass`` (hypothesis: edge metrics, times,
    suspensions, costs and prices)."""
    states = app.columns[1]
    if states.count(_VM_SUSPENDED) != len(states):
        return False
    c = app.controller
    try:
        if c.share is not None:  # type: ignore[attr-defined]
            return False
        per = k.per
        time = per.time
        m = seen.metrics
        total = m.work_total
        work = None
        if total is not None:
            work = total - m.work_done  # (Metrics.work_left: max(0.0, ...))
            if not work > 0.0:
                work = 0.0
            if work <= 0:
                return False
        left = app.spec.deadline - time  # type: ignore[operator]
        rate = m.ideal_rate
        if work is not None and rate is not None:
            ideal = 0.0 if work == 0 else (_INF if rate <= 0 else work / rate)
            if left <= 0:
                if ideal > 0:  # (_fraction: infinite, > 1)
                    return False
            elif ideal / left > 1:
                return False
        if left <= 0:
            return False
        since = c.suspended_at  # type: ignore[attr-defined]
        if since is None:
            since = -_INF
        wait = c.resume_wait * 2 ** min(c.suspensions - 1, 16)  # type: ignore[attr-defined]
        if time < since + wait * per.period:
            return True
        return bool(0 + per.price * k.size >= c.suspend_cost)  # type: ignore[attr-defined]
    except Exception:  # (the reference's check raised: the controller's own path reports it)
        return False


def vd1_of(policy: object, res: str, fixed: list[float], ticks: dict[str, Tick]) -> Vd1 | None:
    """A lane's :class:`Vd1` when :func:`decide_vd1` decides for it (``vertical-deadline``'s
    form, one traded resource ``res``), else None."""
    if not isinstance(policy, BatchedVerticalDeadline):
        return None
    per = ticks.get(res)
    if per is None:
        per = ticks[res] = Tick()
    return Vd1(res, fixed, per)
