"""The batched form of the four SLO policies (:mod:`merkat.control.slo`): see
:mod:`merkat.control.batched`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from merkat.control.base import Controller
from merkat.control.batched.base import (
    BATCHED,
    Batch,
    BatchDemand,
    FloatArray,
    gap,
    pymax,
    pymin,
    spend_cap,
)
from merkat.control.generic import AGGRESSIVE, MerkatVerticalScaler
from merkat.control.slo import (
    DeadlinePartial,
    DeadlineStrict,
    PerformancePartial,
    PerformanceStrict,
    SLOController,
    SLOKind,
)

# --- the SLO policies (merkat.control.slo): SLO Alg. 1 on Merkat Alg. 1 -----------------------


class BatchedSLO:
    """The four SLO policies of :mod:`merkat.control.slo` (``steer="scale"``) for running
    applications: ``stop_reason``, ``metric``/``judge``/``gap``, ``vm_bid_max``, Merkat
    Alg. 1's step (:class:`~merkat.control.generic.MerkatVerticalScaler`) and the suspend
    rule, row-wise."""

    controller_types: ClassVar[dict[SLOKind, type[SLOController]]] = {
        SLOKind.DEADLINE_STRICT: DeadlineStrict, SLOKind.DEADLINE_PARTIAL: DeadlinePartial,
        SLOKind.PERFORMANCE_STRICT: PerformanceStrict,
        SLOKind.PERFORMANCE_PARTIAL: PerformancePartial,
    }

    def __init__(self, kind: SLOKind) -> None:
        self.kind = kind
        self.name = kind.value
        self.cls = self.controller_types[kind]

    def accepts(self, controller: Controller) -> bool:
        return type(controller) is self.cls and getattr(controller, "share", None) is None

    fixed = 4

    def state(self, controller: Controller, resources: tuple[str, ...]) -> list[float]:
        c: SLOController = controller  # type: ignore[assignment]
        return [c.low, c.high, c.min_fraction, c.horizon, *self.live([c], resources)[0]]

    def live(self, controllers: Sequence[Controller], resources: tuple[str, ...]
             ) -> list[list[float]]:
        return history_rows(controllers, resources)

    def decide(self, controllers: Sequence[Controller], batch: Batch) -> BatchDemand:
        b = batch
        kind = self.kind
        n = b.vm_size.shape[1]
        low, high, min_fraction, horizon = b.state[:4]
        history = b.state[4:]
        inf = np.inf
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            # Metrics.work_left, Observation.time_to_deadline
            work = b.work_total - b.work_done
            work = np.where(work > 0.0, work, 0.0)
            left = b.deadline - b.time
            # --- stop_reason (finished first) ---------------------------------------------
            finished = work <= 0
            if kind.strict:  # needed_fraction > 1 (NaN: no performance model, no stop)
                ideal = np.where(b.ideal_rate <= 0, inf, work / b.ideal_rate)
                need = np.where(left <= 0, np.where(ideal > 0, inf, 0.0), ideal / left)
                stop = finished | (need > 1)
                late_reason = "the deadline can no longer be met"
            else:
                stop = finished | (left <= 0)
                late_reason = "deadline reached"
            # --- the metric and its direction (SLOController.metric, judge, gap) ----------
            frac = _alloc_fraction(b.alloc, b.vm_size)
            if kind.tracks_deadline:
                rate = b.progress_rate
                rate = np.where(rate != rate, b.ideal_rate * frac, rate)  # None: the model's
                v = np.where(work == 0, 0.0, np.where(rate <= 0, inf, work / rate))
                ref = left
                direction = np.where(v > high * ref, 1, np.where(v < low * ref, -1, 0))
            else:
                v, ref = frac, np.ones(n)
                direction = np.where(v < ref / high, 1, np.where(v > ref / low, -1, 0))
            t = gap(v, ref)
            cap = spend_cap(b, left, horizon)
            # --- Merkat Alg. 1's step, per resource (MerkatVerticalScaler.step) -----------
            new, wanted = alg1_rows(b, direction, t, min_fraction, history)
            short = wanted > cap * (1 + 1e-12)
            if kind is SLOKind.DEADLINE_STRICT:
                condition = short & (direction > 0)
            else:
                condition = short & (frac < min_fraction)
        stop_l = stop.tolist()
        stops: list[str | None] = [None] * n
        if any(stop_l):
            fin = finished.tolist()
            for i in np.flatnonzero(stop).tolist():
                stops[i] = "finished" if fin[i] else late_reason
        over = wanted > cap
        if over.any():  # lines 19-25, the budget re-split: the scalar helper on these rows
            resplit_rows(b, new, cap, [i for i in np.flatnonzero(over).tolist() if stops[i] is None])
        up, down = (new > b.bid).tolist(), (new < b.bid).tolist()
        wanted_l, short_l, cond_l = wanted.tolist(), short.tolist(), condition.tolist()
        suspend = [False] * n
        for i, c in enumerate(controllers):  # the state the scalar calls leave
            if stop_l[i]:
                continue
            scaler = c.scaler  # type: ignore[attr-defined]
            scaler.wanted = wanted_l[i]
            hist = scaler.history
            for j, r in enumerate(b.resources):
                if up[j][i]:
                    hist[r] = 1
                elif down[j][i]:
                    hist[r] = -1
            c.short = short_l[i]  # type: ignore[attr-defined]
            suspend[i] = c.back_off(cond_l[i])  # type: ignore[attr-defined]
        return BatchDemand(stops, suspend, new)


def history_rows(controllers: Sequence[Controller], resources: tuple[str, ...]
             ) -> list[list[float]]:
    """Per controller, its scaler's last direction per resource (Merkat Alg. 1's history)."""
    if len(resources) == 1:
        r = resources[0]
        return [[c.scaler.history.get(r, 0)] for c in controllers]  # type: ignore[attr-defined]
    return [[h.get(r, 0) for r in resources]
            for h in [c.scaler.history for c in controllers]]  # type: ignore[attr-defined]



def _alloc_fraction(alloc: FloatArray, size: FloatArray) -> FloatArray:
    """:func:`~merkat.control.formulas.alloc_fraction` row-wise (columns: the resources):
    the smallest ``a/s`` over the resources with ``s > 0``, in order (1 when none)."""
    out: FloatArray | None = None  # (none yet: the first resource's fraction is taken)
    for a, s in zip(alloc, size, strict=True):
        x = np.where(s > 0, a / s, np.nan)
        out = x if out is None else np.where(out != out, x, np.where(x < out, x, out))
    if out is None:
        return np.ones(alloc.shape[1])
    return np.where(out != out, 1.0, out)


def _factor(base: FloatArray, history: Any, sign: int) -> FloatArray:
    """:meth:`MerkatVerticalScaler._factor` row-wise."""
    f = pymin(AGGRESSIVE, pymax(1.0, base))
    out: FloatArray = np.where(history == -sign, 1.0 + (f - 1.0) / 2.0, f)
    return out


def alg1(b: FloatArray, direction: Any, t: FloatArray, a: FloatArray, amin: FloatArray,
          amax: FloatArray, price: float, floor: float, history: Any) -> FloatArray:
    """One resource's new bid of :meth:`MerkatVerticalScaler.step` (lines 8-18), row-wise."""
    share = b / price if price > 0 else np.where(b > 0, np.inf, 0.0)
    over = share > amax
    dec = ((direction < 0) & (a > amin)) | over
    base = pymax(np.where(direction < 0, 1.0 + t, 1.0), np.where(over, share / amax, 1.0))
    down = pymax(b / _factor(base, history, -1), floor)
    inc = ((direction > 0) & (a < amax)) | (a < amin)
    under = np.where(a > 0, amin / a, AGGRESSIVE)
    base = pymax(np.where(direction > 0, 1.0 + t, 1.0), np.where(a < amin, under, 1.0))
    kept = pymax(b, floor)
    up = kept * _factor(base, history, +1)
    out = np.where(dec, down, np.where(inc, up, kept))
    return np.where(amax <= 0, floor, out)


for _kind in SLOKind:
    BATCHED.register(BatchedSLO(_kind))


def alg1_rows(b: Batch, direction: FloatArray, t: FloatArray, min_fraction: Any,
              history: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Merkat Alg. 1's step (:func:`alg1`) for every row, resource by resource: the new bids
    (resources × rows) and each row's total over its resources, summed in the scalar path's
    order (the first resource, then each next one added)."""
    R, n = b.vm_size.shape
    new = np.empty((R, n))
    wanted = np.zeros(n)
    for j in range(R):
        new[j] = alg1(b.bid[j], direction, t, b.alloc[j], min_fraction * b.vm_size[j],
                      b.vm_size[j], b.prices[j], b.bid_min[j], history[j])
        wanted = new[j].copy() if j == 0 else wanted + new[j]
    return new, wanted


def resplit_rows(b: Batch, new: FloatArray, cap: FloatArray, rows: list[int]) -> None:
    """Alg. 1's lines 19-25 on ``rows`` (their bids over the spending cap): each row's bids
    re-split within its cap by the scalar helper
    (:meth:`~merkat.control.generic.MerkatVerticalScaler.resplit`), written into ``new``."""
    names = b.resources
    floors = dict(zip(names, b.bid_min.tolist(), strict=True))
    for i in rows:
        split = MerkatVerticalScaler.resplit(
            dict(zip(names, new[:, i].tolist(), strict=True)), float(cap[i]),
            dict(zip(names, b.alloc[:, i].tolist(), strict=True)),
            dict(zip(names, b.vm_size[:, i].tolist(), strict=True)), floors)
        new[:, i] = [split[r] for r in names]
