"""The batched form of ``merkat-vertical`` (:class:`~merkat.control.generic.MerkatVertical`,
``steer="scale"``) on an application that reports its progress and a deadline (a trace job):
see :mod:`merkat.control.batched`."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from merkat.control.base import Controller
from merkat.control.batched.base import BATCHED, Batch, BatchDemand, gap, pymax, spend_cap
from merkat.control.batched.slo import alg1_rows, history_rows, resplit_rows
from merkat.control.generic import MerkatVertical


class BatchedMerkatVertical:
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
            work = pymax(0.0, b.work_total - b.work_done)
            left = b.deadline - b.time
            finished = work <= 0
            declined = ~finished & ((b.performance == b.performance) | ((left <= 0) & (work > 0)))
            rate = b.progress_rate
            stepped = ~finished & ~declined & (rate == rate) & (left > 0)
            ref = work / left  # deadline_metric: higher is better
            direction = np.where(rate < ref / high, 1, np.where(rate > ref / low, -1, 0))
            t = gap(rate, ref)
            cap = spend_cap(b, left, horizon)
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


BATCHED.register(BatchedMerkatVertical())
