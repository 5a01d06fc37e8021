"""The batched form of the four SLO policies (:mod:`merkat.control.slo`): see
:mod:`merkat.control.batched`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from merkat.control.base import Controller
from merkat.control.batched.base import (
    BATCHED,
    Batch,
    BatchDemand,
    FloatArray,
    PlainRows,
    Row,
    Rows,
    gap,
    pymax,
    pymin,
    spend_cap,
    spend_cap_row,
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

_INF, _NAN = math.inf, math.nan

# --- the SLO policies (merkat.control.slo): SLO Alg. 1 on Merkat Alg. 1 -----------------------


class BatchedSLO(PlainRows):
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
        self.strict, self.tracks = kind.strict, kind.tracks_deadline
        self.dstrict = kind is SLOKind.DEADLINE_STRICT
        self.late_reason = ("the deadline can no longer be met" if kind.strict
                            else "deadline reached")

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

    def one(self, c: Controller, fx: Sequence[float], ctx: Rows, balance: float, nvms: float,
            work: float, rate: float, ideal_rate: float, perf: float | None,
            bids: Sequence[float], allocs: Sequence[float]) -> Row:
        """:meth:`decide` of one row (the plain form: :class:`BatchedPolicy.one
        <merkat.control.batched.base.BatchedPolicy>`; no division by zero is ever taken)."""
        names = ctx.resources
        R = len(names)
        if R == 1:  # (one traded resource, the trace jobs' CPU: no slices or loops)
            renewal, deadline, size, low, high, min_fraction, horizon = fx
            frac = allocs[0] / size if size > 0 else _NAN
        else:
            renewal, deadline = fx[0], fx[1]
            low, high, min_fraction, horizon = fx[2 + R:6 + R]
            frac = _NAN  # _alloc_fraction: the first resource's, then the smallest
            for a, size in zip(allocs, fx[2:2 + R], strict=True):
                x = a / size if size > 0 else _NAN
                if frac != frac or x < frac:
                    frac = x
        if frac != frac:  # (NaN: 1)
            frac = 1.0
        left = deadline - ctx.time
        finished = work <= 0
        if finished:
            stop = True
        elif self.strict:  # need_row, inlined
            ideal = _INF if ideal_rate <= 0 else work / ideal_rate
            need = (_INF if ideal > 0 else 0.0) if left <= 0 else ideal / left
            stop = need > 1
        else:
            stop = left <= 0
        if self.tracks:
            if rate != rate:
                rate = ideal_rate * frac
            v = 0.0 if work == 0 else (_INF if rate <= 0 else work / rate)
            ref = left
            direction = 1 if v > high * ref else (-1 if v < low * ref else 0)
        else:
            v, ref = frac, 1.0
            direction = 1 if v < ref / high else (-1 if v > ref / low else 0)
        # gap_row, inlined
        if ref == 0:
            t = 0.0 if v == 0 else _INF
        elif ref - ref != 0 and ref == ref:  # an infinite reference
            t = 0.0 if v == ref else 1.0
        else:
            t = abs((ref - v) / ref)
        cap = spend_cap_row(balance, renewal, nvms, left, ctx.period, horizon)
        scaler = c.scaler  # type: ignore[attr-defined]
        hist = scaler.history
        prices, floors = ctx.prices, ctx.bid_min
        if R == 1:
            wanted = alg1_row(bids[0], direction, t, allocs[0], min_fraction * size, size,
                              prices[0], floors[0], hist.get(names[0], 0))
            new = [wanted]
        else:
            new = []
            wanted = 0.0
            for j in range(R):
                size = fx[2 + j]
                x = alg1_row(bids[j], direction, t, allocs[j], min_fraction * size, size,
                             prices[j], floors[j], hist.get(names[j], 0))
                new.append(x)
                wanted = x if j == 0 else wanted + x
        short = wanted > cap * (1 + 1e-12)
        if stop:
            return ("finished" if finished else self.late_reason), False, new
        condition = short and (direction > 0 if self.dstrict else frac < min_fraction)
        if wanted > cap:  # lines 19-25, the budget re-split: the scalar helper
            new = resplit_one(names, new, cap, allocs, fx[2:2 + R], floors)
        # the state the scalar call leaves (nothing raises after this)
        scaler.wanted = wanted
        if R == 1:
            x = new[0]
            if x > bids[0]:
                hist[names[0]] = 1
            elif x < bids[0]:
                hist[names[0]] = -1
        else:
            for j, r in enumerate(names):
                if new[j] > bids[j]:
                    hist[r] = 1
                elif new[j] < bids[j]:
                    hist[r] = -1
        c.short = short  # type: ignore[attr-defined]
        if condition:
            condition = c.back_off(True)  # type: ignore[attr-defined]
        else:  # back_off(False), inlined (the exact class: accepts)
            c.backoff, c.waited = None, 0  # type: ignore[attr-defined]
        return None, condition, new


def resplit_one(names: Sequence[str], new: Sequence[float], cap: float,
                allocs: Sequence[float], sizes: Sequence[float], floors: Sequence[float]
                ) -> list[float]:
    """Alg. 1's lines 19-25 on one row on Python floats: its bids ``new`` re-split within
    ``cap`` by the scalar helper (:meth:`~merkat.control.generic.MerkatVerticalScaler.resplit`),
    per resource of ``names``."""
    split = MerkatVerticalScaler.resplit(
        dict(zip(names, new, strict=True)), cap, dict(zip(names, allocs, strict=True)),
        dict(zip(names, sizes, strict=True)), dict(zip(names, floors, strict=True)))
    return [split[r] for r in names]


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


def alg1_row(b: float, direction: float, t: float, a: float, amin: float, amax: float,
             price: float, floor: float, history: float) -> float:
    """:func:`alg1` of one row on Python floats (the branches numpy discards not computed;
    :func:`_factor`'s ``pymax``/``pymin`` written as their comparisons)."""
    if amax <= 0:
        return floor
    share = b / price if price > 0 else (_INF if b > 0 else 0.0)
    over = share > amax
    if (direction < 0 and a > amin) or over:
        f = 1.0 + t if direction < 0 else 1.0
        if over:
            y = share / amax
            if y > f:
                f = y
        if not f > 1.0:  # _factor(f, history, -1)
            f = 1.0
        elif not f < AGGRESSIVE:
            f = AGGRESSIVE
        if history == 1:
            f = 1.0 + (f - 1.0) / 2.0
        d = b / f
        return floor if floor > d else d
    kept = floor if floor > b else b
    if (direction > 0 and a < amax) or a < amin:
        f = 1.0 + t if direction > 0 else 1.0
        if a < amin:
            y = amin / a if a > 0 else AGGRESSIVE
            if y > f:
                f = y
        if not f > 1.0:  # _factor(f, history, +1)
            f = 1.0
        elif not f < AGGRESSIVE:
            f = AGGRESSIVE
        if history == -1:
            f = 1.0 + (f - 1.0) / 2.0
        return kept * f
    return kept


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
