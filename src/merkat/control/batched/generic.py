"""The batched form of ``merkat-vertical`` (:class:`~merkat.control.generic.MerkatVertical`,
``steer="scale"``) on an application that reports its progress and a deadline (a trace job):
see :mod:`merkat.control.batched`."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from merkat.control.base import Controller
from merkat.control.batched import base
from merkat.control.batched.base import BATCHED, DECLINED, Batch, BatchDemand, PlainRows, Row, Rows
from merkat.control.batched.slo import alg1_row, alg1_rows, history_rows, resplit_one, resplit_rows
from merkat.control.generic import MerkatVertical


class BatchedMerkatVertical(PlainRows):
    """Merkat Alg. 1 on the progress rate against the rate the deadline needs
    (:func:`~merkat.control.generic.deadline_metric`), row-wise: stop when the work is done,
    keep the current bid without a measured rate, else one Alg. 1 step
    (:class:`~merkat.control.generic.MerkatVerticalScaler`). Declined (the scalar path
    decides): an application with a generic metric of its own (``metrics.performance``) or
    past its deadline with work left (its best-effort bid)."""

    name = "merkat-vertical"

    def accepts(self, controller: Controller) -> bool:
        return type(controller) is MerkatVertical and controller.share is None

    fixed = 4

    def state(self, controller: Controller, resources: tuple[str, ...]) -> list[float]:
        c: MerkatVertical = controller  # type: ignore[assignment]
        return [c.low, c.high, c.alloc_min, c.horizon, *self.live([c], resources)[0]]

    def live(self, controllers: Sequence[Controller], resources: tuple[str, ...]
             ) -> list[list[float]]:
        return history_rows(controllers, resources)

    def decide(self, controllers: Sequence[Controller], batch: Batch) -> BatchDemand:
        b = batch
        n = b.vm_size.shape[1]
        low, high, alloc_min, horizon = b.state[:4]
        history = b.state[4:]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            work = base.pymax(0.0, b.work_total - b.work_done)
            left = b.deadline - b.time
            finished = work <= 0
            declined = ~finished & ((b.performance == b.performance) | ((left <= 0) & (work > 0)))
            rate = b.progress_rate
            stepped = ~finished & ~declined & (rate == rate) & (left > 0)
            ref = work / left  # deadline_metric: higher is better
            direction = np.where(rate < ref / high, 1, np.where(rate > ref / low, -1, 0))
            t = base.gap(rate, ref)
            cap = base.spend_cap(b, left, horizon)
            new, wanted = alg1_rows(b, direction, t, alloc_min, history)
        names = b.resources
        resplit_rows(b, new, cap, np.flatnonzero(stepped & (wanted > cap)).tolist())  # 19-25
        up, down = (new > b.bid).tolist(), (new < b.bid).tolist()
        step_l, wanted_l = stepped.tolist(), wanted.tolist()
        for i, c in enumerate(controllers):  # the state the scalar calls leave
            if step_l[i]:
                scaler = c.scaler  # type: ignore[attr-defined]
                scaler.wanted = wanted_l[i]
                hist = scaler.history
                for j, r in enumerate(names):
                    if up[j][i]:
                        hist[r] = 1
                    elif down[j][i]:
                        hist[r] = -1
        bid = np.where(stepped, new, b.bid)  # no metric: the current bid (Controller.keep)
        stop: list[str | None] = ["finished" if f else None for f in finished.tolist()]
        return BatchDemand(stop, [False] * n, bid, declined.tolist())

    def one(self, c: Controller, fx: Sequence[float], ctx: Rows, balance: float, nvms: float,
            work: float, rate: float, ideal_rate: float, perf: float | None,
            bids: Sequence[float], allocs: Sequence[float]) -> Row:
        """:meth:`decide` of one row (the plain form: :class:`BatchedPolicy.one
        <merkat.control.batched.base.BatchedPolicy>`)."""
        left = fx[1] - ctx.time
        if work <= 0:
            return "finished", False, list(bids)
        if (perf is not None and perf == perf) or (left <= 0 and work > 0):
            return DECLINED
        if rate != rate or not left > 0:  # no metric: the current bid
            return None, False, list(bids)
        names = ctx.resources
        R = len(names)
        low, high, alloc_min, horizon = fx[2 + R:6 + R]
        ref = work / left  # deadline_metric: higher is better
        direction = 1 if rate < ref / high else (-1 if rate > ref / low else 0)
        t = base.gap_row(rate, ref)
        cap = base.spend_cap_row(balance, fx[0], nvms, left, ctx.period, horizon)
        scaler = c.scaler  # type: ignore[attr-defined]
        hist = scaler.history
        prices, floors = ctx.prices, ctx.bid_min
        new: list[float] = []
        wanted = 0.0
        for j in range(R):
            size = fx[2 + j]
            x = alg1_row(bids[j], direction, t, allocs[j], alloc_min * size, size, prices[j],
                         floors[j], hist.get(names[j], 0))
            new.append(x)
            wanted = x if j == 0 else wanted + x
        if wanted > cap:  # lines 19-25, the budget re-split: the scalar helper
            new = resplit_one(names, new, cap, allocs, fx[2:2 + R], floors)
        # the state the scalar call leaves (nothing raises after this)
        scaler.wanted = wanted
        for j, r in enumerate(names):
            if new[j] > bids[j]:
                hist[r] = 1
            elif new[j] < bids[j]:
                hist[r] = -1
        return None, False, new


BATCHED.register(BatchedMerkatVertical())
