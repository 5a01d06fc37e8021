"""The batched form of ``vertical-deadline`` (:class:`~merkat.control.deadline.VerticalDeadline`,
``steer="scale"``, what ``themis-fig5`` runs): see :mod:`merkat.control.batched`."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from merkat.control.base import Controller
from merkat.control.batched.base import (
    BATCHED,
    Batch,
    BatchDemand,
    PlainRows,
    Row,
    Rows,
    gap,
    gap_row,
    need_row,
    pymax,
    pymin,
    spend_cap,
    spend_cap_row,
)
from merkat.control.deadline import VerticalDeadline
from merkat.control.formulas import scale_to
from merkat.control.generic import AGGRESSIVE

_INF, _NAN = math.inf, math.nan
_STATE = 8  # the parameters and counters before the estimates (BatchedVerticalDeadline.state)


class BatchedVerticalDeadline(PlainRows):
    """Themis Fig. 4 lines 1-7 for running applications, row-wise: the EWMA allocation
    estimate (``on_monitor``), ``stop_reason``, the halving at maximum allocation,
    Scale-One-VM (:class:`~merkat.control.generic.ScaleOneVM`) on the progress rates, and the
    suspend rule (§IV-A). A bid over the spend limit is scaled by the scalar
    :func:`~merkat.control.formulas.scale_to` on that row."""

    name = "vertical-deadline"

    def accepts(self, controller: Controller) -> bool:
        return type(controller) is VerticalDeadline and controller.share is None

    fixed = 6

    def state(self, controller: Controller, resources: tuple[str, ...]) -> list[float]:
        c: VerticalDeadline = controller  # type: ignore[assignment]
        s = c.scaler
        return [s.t_diff, s.limit, c.alloc_est.alpha, c.max_alloc_tol, c.horizon,
                c.abort_hopeless, *self.live([c], resources)[0]]

    def live(self, controllers: Sequence[Controller], resources: tuple[str, ...]
             ) -> list[list[float]]:
        out = []
        for c in controllers:
            s, est = c.scaler, c.alloc_est.value  # type: ignore[attr-defined]
            out.append([s.direction, s.run, *[est.get(r, np.nan) for r in resources]])
        return out

    def decide(self, controllers: Sequence[Controller], batch: Batch) -> BatchDemand:
        b = batch
        R, n = b.vm_size.shape
        t_diff, limit, alpha, tol, horizon, abort, direction, run = b.state[:_STATE]
        old = b.state[_STATE:]
        inf = np.inf
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            # --- on_monitor: the EWMA estimate of the allocation (Ewma.update) -------------
            est = np.where(old != old, b.alloc, alpha * b.alloc + (1 - alpha) * old)
            # --- stop_reason ----------------------------------------------------------------
            work = b.work_total - b.work_done
            work = np.where(work > 0.0, work, 0.0)
            left = b.deadline - b.time
            finished = work <= 0
            ideal = np.where(b.ideal_rate <= 0, inf, work / b.ideal_rate)
            need = np.where(left <= 0, np.where(ideal > 0, inf, 0.0), ideal / left)
            hopeless = (abort != 0) & (need > 1)  # NaN ideal rate: no model, no abort
            passed = left <= 0
            stop = finished | hopeless | passed
            # --- at maximum allocation on every resource: halve the bid (lines 4-5) ----------
            at_max = np.ones(n, dtype=bool)
            frac = np.ones(n)
            for j in range(R):
                s = b.vm_size[j]
                at_max &= est[j] >= (1 - tol) * s
                frac = np.where(s > 0, frac * pymin(1.0, est[j] / s), frac)
            halved = np.empty((R, n))
            for j in range(R):
                halved[j] = pymax(b.bid[j] / 2, b.bid_min[j])
            # --- the progress rates (VerticalDeadline.progress) -----------------------------
            rate = b.progress_rate
            no_rate = rate != rate
            p_est = np.where(b.ideal_rate != b.ideal_rate,  # no model: progress_rate or 0.0
                             np.where(no_rate, 0.0, rate), b.ideal_rate * frac)
            p_now = np.where(no_rate, p_est, rate)
            p_ref = np.where(left > 0, work / left, inf)
            # --- Scale-One-VM on p_est against p_ref (ScaleOneVM.step) ----------------------
            d = np.where(p_est < p_ref, 1, np.where(p_est > p_ref, -1, 0))
            turn = (d != 0) & (d != direction)
            direction = np.where(turn, d, direction)
            run = np.where(turn, 0.0, run) + 1
            t = gap(p_est, p_ref)
            hold = (t < t_diff) | (direction == 0)
            factor = np.where(run >= limit, AGGRESSIVE, pymin(1.0 + t, AGGRESSIVE))
            new = np.empty((R, n))
            wanted = np.zeros(n)
            for j in range(R):
                bid, floor = b.bid[j], b.bid_min[j]
                kept = pymax(bid, floor)
                new[j] = np.where(hold, kept, np.where(direction > 0, kept * factor,
                                                       pymax(bid / factor, floor)))
                wanted = new[j].copy() if j == 0 else wanted + new[j]
            cap = spend_cap(b, left, horizon)
            short = ~at_max & (wanted > cap * (1 + 1e-12))
            suspend = ~stop & short & (p_now < p_ref) & (p_est < p_ref)
        names = b.resources
        floors = dict(zip(names, b.bid_min.tolist(), strict=True))
        for i in np.flatnonzero(~at_max & (wanted > cap)).tolist():  # scale_to: the scalar
            scaled = scale_to(dict(zip(names, new[:, i].tolist(), strict=True)),
                              float(cap[i]), floors)
            new[:, i] = [scaled[r] for r in names]
        new = np.where(at_max, halved, new)
        stop_l, fin, hope = stop.tolist(), finished.tolist(), hopeless.tolist()
        stops: list[str | None] = [None] * n
        for i in np.flatnonzero(stop).tolist():
            stops[i] = ("finished" if fin[i] else
                        "aborted while running: the deadline can no longer be met" if hope[i]
                        else "stopped: the deadline has passed")
        est_l, max_l, susp_l = est.T.tolist(), at_max.tolist(), suspend.tolist()
        dir_l, run_l, wanted_l, short_l = (direction.tolist(), run.tolist(), wanted.tolist(),
                                           short.tolist())
        cost = np.zeros(n)
        for j in range(R):
            cost = cost + b.prices[j] * b.vm_size[j]
        cost_l = cost.tolist()
        for i, c in enumerate(controllers):  # the state the scalar calls leave
            ctl: VerticalDeadline = c  # type: ignore[assignment]
            ctl.alloc_est.value.update(zip(names, est_l[i], strict=True))
            if stop_l[i]:
                continue
            if max_l[i]:
                ctl.short = False
                continue
            scaler = ctl.scaler
            scaler.direction, scaler.run, scaler.wanted = int(dir_l[i]), int(run_l[i]), \
                wanted_l[i]
            ctl.short = short_l[i]
            if susp_l[i]:
                ctl.suspended_at = b.time
                ctl.suspend_cost = cost_l[i]
                ctl.suspensions += 1
        return BatchDemand(stops, susp_l, new)

    def one(self, c: Controller, fx: Sequence[float], ctx: Rows, balance: float, nvms: float,
            work: float, rate: float, ideal_rate: float, perf: float | None,
            bids: Sequence[float], allocs: Sequence[float]) -> Row:
        """:meth:`decide` of one row (the plain form: :class:`BatchedPolicy.one
        <merkat.control.batched.base.BatchedPolicy>`)."""
        ctl: VerticalDeadline = c  # type: ignore[assignment]
        names, prices, floors = ctx.resources, ctx.prices, ctx.bid_min
        now, R = ctx.time, len(names)
        inf, nan = _INF, _NAN
        scaler, value = ctl.scaler, ctl.alloc_est.value
        # on_monitor: the EWMA estimate of the allocation (Ewma.update)
        if R == 1:  # (one traded resource: no slices, no loops)
            renewal, deadline, size, t_diff, limit, alpha, tol, horizon, abort = fx
            a = allocs[0]
            old = value.get(names[0], nan)
            e = float(a) if old != old else alpha * a + (1 - alpha) * old
            est = [e]
            at_max = e >= (1 - tol) * size
            frac = 1.0
            if size > 0:
                x = e / size
                frac = frac * (x if x < 1.0 else 1.0)
        else:
            renewal, deadline = fx[0], fx[1]
            t_diff, limit, alpha, tol, horizon, abort = fx[2 + R:8 + R]
            est = []
            for r, a in zip(names, allocs, strict=True):
                old = value.get(r, nan)
                est.append(float(a) if old != old else alpha * a + (1 - alpha) * old)
            at_max = True
            frac = 1.0
            for j in range(R):
                s = fx[2 + j]
                at_max = at_max and est[j] >= (1 - tol) * s
                if s > 0:
                    x = est[j] / s
                    frac = frac * (x if x < 1.0 else 1.0)
        # stop_reason
        left = deadline - now
        finished = work <= 0
        hopeless = abort != 0 and need_row(work, ideal_rate, left) > 1
        stop = finished or hopeless or left <= 0
        # the progress rates (VerticalDeadline.progress)
        no_rate = rate != rate
        p_est = ((0.0 if no_rate else rate) if ideal_rate != ideal_rate
                 else ideal_rate * frac)
        p_now = p_est if no_rate else rate
        p_ref = work / left if left > 0 else inf
        # Scale-One-VM on p_est against p_ref (ScaleOneVM.step)
        d = 1 if p_est < p_ref else (-1 if p_est > p_ref else 0)
        direction, run = scaler.direction, float(scaler.run)
        if d != 0 and d != direction:
            direction, run = d, 0.0
        run = run + 1
        t = gap_row(p_est, p_ref)
        hold = t < t_diff or direction == 0
        if run >= limit:
            factor = AGGRESSIVE
        else:
            factor = 1.0 + t  # pymin(1.0 + t, AGGRESSIVE)
            factor = AGGRESSIVE if factor > AGGRESSIVE else factor
        new: list[float] = []
        wanted = 0.0
        for j in range(R):
            b, floor = bids[j], floors[j]
            kept = floor if floor > b else b
            if hold:
                x = kept
            elif direction > 0:
                x = kept * factor
            else:
                x = b / factor
                x = floor if floor > x else x
            new.append(x)
            wanted = x if j == 0 else wanted + x
        cap = spend_cap_row(balance, renewal, nvms, left, ctx.period, horizon)
        short = not at_max and wanted > cap * (1 + 1e-12)
        susp = not stop and short and p_now < p_ref and p_est < p_ref
        if at_max:
            new = [floor if floor > b / 2 else b / 2  # pymax(b / 2, floor)
                   for b, floor in zip(bids, floors, strict=True)]
        elif wanted > cap:  # scale_to: the scalar
            scaled = scale_to(dict(zip(names, new, strict=True)), cap,
                              dict(zip(names, floors, strict=True)))
            new = [scaled[r] for r in names]
        cost = 0.0  # a full VM's cost (_vm_cost), kept when it suspends
        if susp:
            for j in range(R):
                cost = cost + prices[j] * fx[2 + j]
        # the state the scalar call leaves (nothing raises after this)
        if R == 1:
            value[names[0]] = est[0]
        else:
            value.update(zip(names, est, strict=True))
        if stop:
            return ("finished" if finished else
                    "aborted while running: the deadline can no longer be met" if hopeless
                    else "stopped: the deadline has passed"), susp, new
        if at_max:
            ctl.short = False
            return None, susp, new
        scaler.direction, scaler.run, scaler.wanted = int(direction), int(run), wanted
        ctl.short = short
        if susp:
            ctl.suspended_at = now
            ctl.suspend_cost = cost
            ctl.suspensions += 1
        return None, susp, new


BATCHED.register(BatchedVerticalDeadline())
