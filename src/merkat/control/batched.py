"""Batched policies: every running application of one built-in policy decided in one numpy
pass (issue 28).

What it replaces: for a *running* application (every VM active) of a policy registered here,
the scalar :meth:`Controller.decide <merkat.control.base.Controller.decide>` —
``on_monitor``, ``stop_reason``, ``reconfigure``, ``needs_suspend`` — called once per
application with an :class:`~merkat.control.types.Observation`. A :class:`Batch` holds the
observations of ``n`` such applications as arrays (one row per application, one column per
resource it trades); :meth:`BatchedPolicy.decide` computes every row's demand at once and
moves the controllers' own state exactly as the scalar calls would. The scalar path stays the
reference and runs everything else: waiting and suspended applications (start, resume),
controllers whose parameters the batch does not cover (``accepts``), custom controllers and
plugins (the ``Controller`` protocol), all in the same period. The platform's gather and
dispatch are :mod:`merkat.core.batch`.

Equivalence: each row is computed with the scalar path's operations in the scalar path's
order (IEEE-754 element-wise operations are the same in numpy and in Python; Python's
``max(a, b)``/``min(a, b)`` are written :func:`pymax`/:func:`pymin`, which keep their tie and
NaN rules), so the demands, and the whole run, are bit for bit those of the scalar path.
``tests/test_batched.py`` pins it: one period and short runs with batched and scalar
controllers side by side against the all-scalar run, every policy here.

Rare branches go back to the scalar helpers per row, on the same values: Merkat Alg. 1's
budget re-split (:meth:`MerkatVerticalScaler.resplit
<merkat.control.generic.MerkatVerticalScaler.resplit>`), the SLO back-off's random draws
(:meth:`SLOController.back_off <merkat.control.slo.SLOController.back_off>`).

Pure like the rest of ``control/``: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np
import numpy.typing as npt

from merkat.control.base import Controller
from merkat.control.generic import AGGRESSIVE, MerkatVerticalScaler
from merkat.control.slo import (
    DeadlinePartial,
    DeadlineStrict,
    PerformancePartial,
    PerformanceStrict,
    SLOController,
    SLOKind,
)
from merkat.registry import Registry

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

SUSPEND = "cannot afford the SLO"
"""The reason of a suspension a batch decides (the scalar path's, :meth:`Controller.decide
<merkat.control.base.Controller.decide>`)."""


def pymax(a: Any, b: Any) -> Any:
    """Python's ``max(a, b)`` element-wise: ``b`` where ``b > a``, else ``a`` (the first of
    equal values, and ``a`` when either is NaN and ``b > a`` is false)."""
    return np.where(b > a, b, a)


def pymin(a: Any, b: Any) -> Any:
    """Python's ``min(a, b)`` element-wise: ``b`` where ``b < a``, else ``a``."""
    return np.where(b < a, b, a)


@dataclass(frozen=True)
class Batch:
    """The observations of ``n`` running applications (every VM active) of one policy that
    trade the same ``resources`` (in :attr:`Observation.resources
    <merkat.control.types.Observation.resources>` order), as arrays with one column per
    application. NaN stands for a value not reported (``None``).

    ``prices``, ``capacity``, ``bid_min``: ``(R,)``; ``vm_size``, ``bid`` (the current bid,
    :func:`~merkat.control.formulas.mean_bid` over the VMs) and ``alloc`` (the smallest
    allocation, :func:`~merkat.control.formulas.least_alloc`): ``(R, n)``; ``balance``
    (credits), ``renewal``, ``deadline``, ``nvms`` (VM count), ``work_done``, ``work_total``,
    ``progress_rate``, ``ideal_rate``: ``(n,)``; ``state``: ``(k, n)``, what
    :meth:`BatchedPolicy.state` read of each controller."""

    time: float
    period: float
    resources: tuple[str, ...]
    prices: FloatArray
    capacity: FloatArray
    bid_min: FloatArray
    vm_size: FloatArray
    bid: FloatArray
    alloc: FloatArray
    balance: FloatArray
    renewal: FloatArray
    deadline: FloatArray
    nvms: FloatArray
    work_done: FloatArray
    work_total: FloatArray
    progress_rate: FloatArray
    ideal_rate: FloatArray
    state: FloatArray

    def __len__(self) -> int:
        return len(self.balance)


@dataclass
class BatchDemand:
    """A batch's demands, one row each: ``stop`` (the reason, or None), else ``suspend``
    (suspend every VM, :data:`SUSPEND`), else every VM bids ``bid`` (``(R, n)``, the batch's
    resources) and the VM count is unchanged."""

    stop: list[str | None]
    suspend: list[bool]
    bid: FloatArray


class BatchedPolicy(Protocol):
    """The batched form of one registered policy (:data:`BATCHED`, by the policy's name)."""

    name: str

    def accepts(self, controller: Controller) -> bool:
        """Whether this batch decides for ``controller`` when its application runs (its exact
        class and the parameters the batch covers); else the scalar path does."""

    def state(self, controller: Controller, resources: tuple[str, ...]) -> list[float]:
        """What a batch reads of ``controller``'s state and parameters, as numbers (a column
        of :attr:`Batch.state`)."""

    def decide(self, controllers: Sequence[Controller], batch: Batch) -> BatchDemand:
        """Every row's demand (row ``i`` is ``controllers[i]``'s application), moving each
        controller's state as its scalar :meth:`~merkat.control.base.Controller.decide`
        would."""


BATCHED: Registry[BatchedPolicy] = Registry("batched policy")
"""The batched forms, by the name of the policy they batch (``control/registry.py``'s
``POLICIES``)."""


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

    def state(self, controller: Controller, resources: tuple[str, ...]) -> list[float]:
        c: SLOController = controller  # type: ignore[assignment]
        hist = c.scaler.history
        return [c.low, c.high, c.min_fraction, c.horizon, *[hist.get(r, 0) for r in resources]]

    def decide(self, controllers: Sequence[Controller], batch: Batch) -> BatchDemand:
        b = batch
        kind = self.kind
        R, n = b.vm_size.shape
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
            t = _gap(v, ref)
            # --- vm_bid_max (spend_limit over the VMs) ------------------------------------
            periods = np.ceil(left / b.period)
            periods = np.where(left > 0, np.where(periods > 1.0, periods, 1.0), horizon)
            bal = np.where(b.balance > 0.0, b.balance, 0.0)
            limit = pymin(bal, (bal + b.renewal * (periods - 1)) / periods)
            nvms = np.where(b.nvms > 1.0, b.nvms, 1.0)
            cap = np.floor(limit * 1e6 / nvms) / 1e6
            # --- Merkat Alg. 1's step, per resource (MerkatVerticalScaler.step) -----------
            new = np.empty((R, n))
            wanted = np.zeros(n)
            for j in range(R):
                new[j] = _alg1(b.bid[j], direction, t, b.alloc[j], min_fraction * b.vm_size[j],
                               b.vm_size[j], b.prices[j], b.bid_min[j], history[j])
                wanted = new[j].copy() if j == 0 else wanted + new[j]
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
            names = b.resources
            floors = dict(zip(names, b.bid_min.tolist(), strict=True))
            for i in np.flatnonzero(over).tolist():
                if stops[i] is None:
                    split = MerkatVerticalScaler.resplit(
                        dict(zip(names, new[:, i].tolist(), strict=True)), float(cap[i]),
                        dict(zip(names, b.alloc[:, i].tolist(), strict=True)),
                        dict(zip(names, b.vm_size[:, i].tolist(), strict=True)), floors)
                    new[:, i] = [split[r] for r in names]
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


def _alloc_fraction(alloc: FloatArray, size: FloatArray) -> FloatArray:
    """:func:`~merkat.control.formulas.alloc_fraction` row-wise (columns: the resources):
    the smallest ``a/s`` over the resources with ``s > 0``, in order (1 when none)."""
    out: FloatArray = np.full(alloc.shape[1], np.nan)
    for a, s in zip(alloc, size, strict=True):
        x = np.where(s > 0, a / s, np.nan)
        out = np.where(out != out, x, np.where(x < out, x, out))
    return np.where(out != out, 1.0, out)


def _gap(v: FloatArray, ref: FloatArray) -> FloatArray:
    """:func:`~merkat.control.formulas.gap` row-wise."""
    zero = np.where(v == 0, 0.0, np.inf)
    inf = np.where(v == ref, 0.0, 1.0)
    plain = np.abs((ref - v) / ref)
    return np.where(ref == 0, zero, np.where(np.isinf(ref), inf, plain))


def _factor(base: FloatArray, history: Any, sign: int) -> FloatArray:
    """:meth:`MerkatVerticalScaler._factor` row-wise."""
    f = pymin(AGGRESSIVE, pymax(1.0, base))
    out: FloatArray = np.where(history == -sign, 1.0 + (f - 1.0) / 2.0, f)
    return out


def _alg1(b: FloatArray, direction: Any, t: FloatArray, a: FloatArray, amin: FloatArray,
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
