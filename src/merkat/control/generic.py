"""Generic scaling policies: Themis Fig. 3 (Scale-One-VM, Scale-Multi-VMs) and Merkat Alg. 1-3.

Each policy is a small stateful *scaler* (the paper's pseudo-code, one method ``step``) and a
:class:`~merkat.control.base.Controller` that feeds it from the observation's generic metric
(``metrics.performance`` against ``metrics.reference``, in ``metrics.sense``). The derived
policies (``deadline.py``, ``slo.py``) reuse the scalers with their own metrics.
"""

from __future__ import annotations

import math

from merkat.control.base import Controller, Seed
from merkat.control.formulas import (
    app_alloc,
    current_bid,
    gap,
    judge,
    scale_to,
    share_cost,
    split_budget,
    start_bid,
    vm_upper_bound,
)
from merkat.control.params import COUNT, FRACTION, LOW_HIGH, THRESHOLDS, declare, integer, number
from merkat.control.steer import STEER_PARAMS, ShareSteer, check_steer
from merkat.control.types import Action, Amounts, Demand, Observation, Sense

AGGRESSIVE = 2.0
"""The aggressive factor of Themis Fig. 3 line 15, also the cap on 1 + T (docs/control.md)."""


def _check_limit(limit: int) -> None:
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")


# --- Themis Fig. 3, lines 1-20 ---------------------------------------------------------------


class ScaleOneVM:
    """Scale-One-VM (Themis Fig. 3 lines 1-20, Table I): one multiplicative bid step per period.

    The direction flips when v crosses v_ref (lines 2-7); ``run`` counts the periods spent in
    the current direction, this one included (``step`` of line 8). Under the gap threshold
    ``t_diff`` the bid does not change (lines 10-11). The factor is 1 + T, at most 2 (lines
    12-13; the paper's "T < 2" read as "1 + T < 2"), and 2 once the direction has lasted
    ``limit`` periods (lines 14-15). Up: ``min(factor·bid, bid_max)``; down:
    ``max(bid/factor, bid_min)`` (lines 16-19), per resource, the sum bounded by ``bid_max``.
    ``wanted`` is the sum the step wanted before the ``bid_max`` bound (for suspend rules).
    """

    def __init__(self, t_diff: float = 0.05, limit: int = 3) -> None:
        _check_limit(limit)
        self.t_diff = t_diff
        self.limit = limit
        self.direction = 0
        self.run = 0
        self.wanted = 0.0

    def step(self, bid: Amounts, v: float, v_ref: float, sense: Sense, bid_min: Amounts,
             bid_max: float) -> dict[str, float]:
        d = judge(v, v_ref, sense)
        if d != 0 and d != self.direction:  # lines 2-7
            self.direction, self.run = d, 0
        self.run += 1  # line 8
        t = gap(v, v_ref)  # line 9
        floors = {r: bid_min.get(r, 0.0) for r in bid}
        if t < self.t_diff or self.direction == 0:  # lines 10-11 (still within the bounds)
            held = {r: max(b, floors[r]) for r, b in bid.items()}
            self.wanted = sum(held.values())
            return scale_to(held, bid_max, floors)
        factor = AGGRESSIVE if self.run >= self.limit else min(1.0 + t, AGGRESSIVE)
        if self.direction > 0:  # line 17
            up = {r: max(b, floors[r]) * factor for r, b in bid.items()}
            self.wanted = sum(up.values())
            return scale_to(up, bid_max, floors)
        down = {r: max(b / factor, floors[r]) for r, b in bid.items()}  # line 19
        self.wanted = sum(down.values())
        return scale_to(down, bid_max, floors)


# --- Themis Fig. 3, lines 22-42 --------------------------------------------------------------


class ScaleMultiVMs:
    """Scale-Multi-VMs (Themis Fig. 3 lines 22-42): additive, then doubling, VM count steps.

    Two thresholds (``low``, ``high``, fractions of the reference, see
    :func:`~merkat.control.formulas.judge`) give the direction (lines 23-30). Within the
    current direction the step grows by one VM per period (1, 2, ...) and doubles once the
    direction has lasted ``limit`` periods (lines 31-34): with limit 3, steps 1, 2, 4, 8...
    Between the thresholds nothing changes and the run restarts (the paper would keep scaling
    in the old direction; docs/control.md). Each VM bids alloc_ref·P per resource (line 36);
    the count stays within [1, nvms_max], nvms_max = min(⌊bid_max / bid⌋, T_nvms) (line 37).
    """

    def __init__(self, limit: int = 3, low: float = 0.75, high: float = 1.0) -> None:
        _check_limit(limit)
        judge(1.0, 1.0, Sense.LOWER_IS_BETTER, low, high)  # validates the thresholds
        self.limit = limit
        self.low, self.high = low, high
        self.direction = 0
        self.run = 0
        self.factor = 0

    def step(self, nvms: int, v: float, v_ref: float, sense: Sense, prices: Amounts,
             size: Amounts, bid_min: Amounts, bid_max: float,
             t_nvms: int) -> tuple[int, dict[str, float]]:
        d = judge(v, v_ref, sense, self.low, self.high)
        if d != self.direction:  # lines 23-30 (and the dead zone)
            self.direction, self.run, self.factor = d, 0, 0
        if d != 0:
            self.run += 1  # line 31
            self.factor = self.factor + 1 if self.run < self.limit else 2 * self.factor  # 32-35
        bid = {r: max(a * prices.get(r, 0.0), bid_min.get(r, 0.0)) for r, a in size.items()}
        per_vm = sum(bid.values())
        if per_vm <= 0 or math.isinf(bid_max):
            cap = t_nvms
        else:
            cap = min(math.floor(bid_max / per_vm), t_nvms)  # line 37
        if d > 0:
            nvms = min(nvms + self.factor, cap)  # line 39
        elif d < 0:
            nvms = nvms - self.factor  # line 41
        nvms = max(1, min(nvms, cap))
        if cap < 1:  # not even one VM at full size: one VM with what the budget allows
            bid = scale_to(bid, bid_max, bid_min)
        return nvms, bid


# --- Merkat Alg. 1 ---------------------------------------------------------------------------


class MerkatVerticalScaler:
    """Merkat Alg. 1: per-resource bid steps with damping, then the budget re-split.

    ``direction`` (+1 more, -1 less, from :func:`judge`) and ``t`` (the gap) come from the
    metric. For each resource r (lines 8-18, with the decisions of docs/control.md):

    - decrease when (direction < 0 and alloc_r > alloc_min_r) or share_r > alloc_max_r
      (share_r = bid_r / P_r, what the bid buys uncapped: the VM is overpaying);
    - else increase when (direction > 0 and alloc_r < alloc_max_r) or alloc_r < alloc_min_r.

    The factor is min(2, 1 + T) (the paper's max(2, 1 + T) would never be under 2); an
    overpaying resource uses at least share/alloc_max and one under its minimum at least
    alloc_min/alloc, both capped at 2. When the step reverses the last change of that bid
    (``history``, lines 10 and 15) the change is halved: factor 1 + (f - 1)/2. Decreases stop
    at bid_min (line 13).

    Lines 19-25: if the bids exceed bid_max, resources at their maximum allocation keep their
    bid and the others share the rest in proportion to w_r = 1 - alloc_r/alloc_max_r; if all
    are at maximum, the bids are scaled down together. ``wanted``: the sum before this re-split.
    """

    def __init__(self) -> None:
        self.history: dict[str, int] = {}
        self.wanted = 0.0

    def _factor(self, r: str, base: float, sign: int) -> float:
        f = min(AGGRESSIVE, max(1.0, base))
        if self.history.get(r, 0) == -sign:  # reverses the last change: damp (lines 10, 15)
            f = 1.0 + (f - 1.0) / 2.0
        return f

    def step(self, bid: Amounts, direction: int, t: float, alloc: Amounts, alloc_min: Amounts,
             alloc_max: Amounts, prices: Amounts, bid_min: Amounts,
             bid_max: float) -> dict[str, float]:
        new: dict[str, float] = {}
        for r, b in bid.items():
            floor = bid_min.get(r, 0.0)
            a, amin, amax = alloc.get(r, 0.0), alloc_min.get(r, 0.0), alloc_max.get(r, 0.0)
            if amax <= 0:  # the VM does not use this resource: keep the reserve
                new[r] = floor
                continue
            price = prices.get(r, 0.0)
            share = b / price if price > 0 else (math.inf if b > 0 else 0.0)
            over = share > amax
            if (direction < 0 and a > amin) or over:  # lines 9-13
                base = max(1.0 + t if direction < 0 else 1.0, share / amax if over else 1.0)
                new[r] = max(b / self._factor(r, base, -1), floor)
            elif (direction > 0 and a < amax) or a < amin:  # lines 14-18
                under = amin / a if a > 0 else AGGRESSIVE
                base = max(1.0 + t if direction > 0 else 1.0, under if a < amin else 1.0)
                new[r] = max(b, floor) * self._factor(r, base, +1)
            else:
                new[r] = max(b, floor)
        self.wanted = sum(new.values())
        if self.wanted > bid_max:  # lines 19-25
            new = self.resplit(new, bid_max, alloc, alloc_max, bid_min)
        for r in new:
            change = (new[r] > bid[r]) - (new[r] < bid[r])
            if change:
                self.history[r] = change
        return new

    @staticmethod
    def resplit(bid: Amounts, bid_max: float, alloc: Amounts, alloc_max: Amounts,
                bid_min: Amounts) -> dict[str, float]:
        """Merkat Alg. 1 lines 19-25: fit ``bid`` under ``bid_max``, favouring the resources
        furthest from their maximum allocation."""
        saturated = [r for r in bid if alloc.get(r, 0.0) >= alloc_max.get(r, 0.0)]
        others = [r for r in bid if r not in saturated]
        if not others:
            return scale_to(bid, bid_max, bid_min)
        floors_others = sum(bid_min.get(r, 0.0) for r in others)
        kept = scale_to({r: bid[r] for r in saturated}, max(0.0, bid_max - floors_others),
                        bid_min)  # line 22: the saturated bid stays, as far as it fits
        weights = {r: 1.0 - alloc.get(r, 0.0) / alloc_max[r] for r in others}  # line 24
        rest = split_budget(bid_max - sum(kept.values()), weights, bid_min)  # line 25
        return {r: kept[r] if r in kept else rest[r] for r in bid}


# --- controllers on the generic metric -------------------------------------------------------


def release_order(obs: Observation, count: int) -> tuple[str, ...]:
    """The VMs to release first (Merkat Alg. 2 line 9 "pick vm to release"): idle ones, then
    the newest."""
    ranked = sorted(enumerate(obs.vms), key=lambda iv: (iv[1].busy, -iv[0]))
    return tuple(vm.id for _, vm in ranked[:max(0, count)])


def resize(obs: Observation, nvms: int, bid: Amounts, reason: str = "") -> Demand:
    """A demand for ``nvms`` VMs all bidding ``bid``, releasing the surplus VMs."""
    release = release_order(obs, len(obs.vms) - nvms)
    kept = [vm for vm in obs.vms if vm.id not in release]
    return Demand(Action.NONE, nvms=nvms, bids={vm.id: dict(bid) for vm in kept},
                  new_vm_bid=dict(bid), release=release, reason=reason)


BEST_EFFORT_FRACTION = 0.25
"""Past its deadline, a generic policy bids what buys this share of the VM size (best-effort's
start fraction, Merkat §5.3.1) until the work is done (docs/policies.md)."""


def deadline_metric(obs: Observation) -> tuple[float, float, Sense] | None:
    """The metric of an application that reports only its progress (a rigid job of a trace):
    v = the measured progress rate, v_ref = the rate that finishes the work left exactly at
    the deadline (work left / time to deadline), higher is better. None before a rate is
    measured, without a deadline or a work count, or once the deadline has passed."""
    m = obs.metrics
    rate, work, left = m.progress_rate, m.work_left, obs.time_to_deadline
    if rate is None or work is None or left is None or left <= 0:
        return None
    return rate, work / left, Sense.HIGHER_IS_BETTER


def late(obs: Observation) -> bool:
    """Past the deadline with work left."""
    left, work = obs.time_to_deadline, obs.metrics.work_left
    return left is not None and left <= 0 and work is not None and work > 0


class _MetricController(Controller):
    """A controller on the generic metric v (``metrics.performance``) and v_ref; for an
    application that reports none, its progress rate against the rate its deadline needs
    (:func:`deadline_metric`). Past the deadline it keeps going at the best-effort bid."""

    needs = "a performance metric (v, v_ref), or a progress rate and a deadline"

    def metric(self, obs: Observation) -> tuple[float, float, Sense] | None:
        m = obs.metrics
        if m.performance is None or m.reference is None:
            return deadline_metric(obs)
        return m.performance, m.reference, m.sense

    def late_demand(self, obs: Observation) -> Demand | None:
        """Past the deadline with work left (and no metric of its own): the best-effort bid on
        the VMs it has, or None when on time."""
        if obs.metrics.performance is not None or not late(obs):
            return None
        n = max(1, len(obs.vms))
        bid = self.affordable(obs, start_bid(obs, BEST_EFFORT_FRACTION, n), n)
        return self.uniform(obs, bid, reason="past the deadline: best effort")

    def reconfigure(self, obs: Observation) -> Demand:
        """Past the deadline: :meth:`late_demand`; without a metric: keep; else
        :meth:`on_metric`."""
        if (demand := self.late_demand(obs)) is not None:
            return demand
        metric = self.metric(obs)
        if metric is None:
            return self.keep(obs, reason="no metric")
        return self.on_metric(obs, *metric)

    def on_metric(self, obs: Observation, v: float, ref: float, sense: Sense) -> Demand:
        """The policy's step on the metric ``v`` against ``ref`` (subclasses)."""
        raise NotImplementedError


class ScaleOneVMController(_MetricController):
    """``scale-one-vm``: Themis' generic vertical policy on the generic metric."""

    name = "scale-one-vm"
    applies_to = ("trace", "rigid", "task-farm")
    PARAMS = declare(Controller.PARAMS, t_diff=number(0), limit=integer(1, COUNT))

    def __init__(self, *, t_diff: float = 0.05, limit: int = 3, horizon: int = 1,
                 start_fraction: float = 1.0, seed: Seed = 0) -> None:
        super().__init__(horizon=horizon, start_fraction=start_fraction, seed=seed)
        self.scaler = ScaleOneVM(t_diff, limit)

    def on_metric(self, obs: Observation, v: float, ref: float, sense: Sense) -> Demand:
        bid = self.scaler.step(current_bid(obs), v, ref, sense, obs.bid_min,
                               self.vm_bid_max(obs, len(obs.vms)))
        return self.uniform(obs, bid)


class ScaleMultiVMsController(_MetricController):
    """``scale-multi-vms``: Themis' generic horizontal policy on the generic metric."""

    name = "scale-multi-vms"
    applies_to = ("task-farm", "moldable")  # changes the VM count: not a rigid job's
    PARAMS = declare(Controller.PARAMS, THRESHOLDS, limit=integer(1, COUNT))
    PARAM_RULES = (LOW_HIGH,)

    def __init__(self, *, limit: int = 3, low: float = 0.75, high: float = 1.0,
                 horizon: int = 1, start_fraction: float = 1.0, seed: Seed = 0) -> None:
        super().__init__(horizon=horizon, start_fraction=start_fraction, seed=seed)
        self.scaler = ScaleMultiVMs(limit, low, high)

    def on_metric(self, obs: Observation, v: float, ref: float, sense: Sense) -> Demand:
        nvms, bid = self.scaler.step(len(obs.vms), v, ref, sense, obs.prices, obs.vm_size,
                                     obs.bid_min, self.bid_max(obs), obs.nvms_max)
        return resize(obs, nvms, bid)


class MerkatVertical(_MetricController):
    """``merkat-vertical``: Merkat Alg. 1 (CPU and memory) on the generic metric.

    ``low``/``high``: the thresholds v_low, v_high as fractions of v_ref; ``alloc_min``:
    alloc_min as a fraction of the VM size. All VMs bid alike (per-VM limit bid_max / nvms).
    ``steer="share"`` (``margin``): an application with a deadline and no metric of its own
    bids each period for the share its work left needs (:mod:`merkat.control.steer`).
    """

    name = "merkat-vertical"
    applies_to = ("trace", "rigid", "task-farm")
    PARAMS = declare(Controller.PARAMS, THRESHOLDS, STEER_PARAMS, alloc_min=FRACTION)
    PARAM_RULES = (LOW_HIGH,)

    def __init__(self, *, low: float = 0.75, high: float = 1.0, alloc_min: float = 0.0,
                 horizon: int = 1, start_fraction: float = 1.0, steer: str = "scale",
                 margin: float = 0.25, seed: Seed = 0) -> None:
        super().__init__(horizon=horizon, start_fraction=start_fraction, seed=seed)
        check_steer(steer, margin)
        self.share = ShareSteer(margin) if steer == "share" else None
        judge(1.0, 1.0, Sense.LOWER_IS_BETTER, low, high)
        if not 0 <= alloc_min <= 1:
            raise ValueError(f"alloc_min must be in [0, 1], got {alloc_min}")
        self.low, self.high, self.alloc_min = low, high, alloc_min
        self.scaler = MerkatVerticalScaler()

    def vertical_step(self, obs: Observation, direction: int, t: float) -> dict[str, float]:
        """One Alg. 1 step for the whole application."""
        size = obs.vm_size
        return self.scaler.step(current_bid(obs), direction, t, app_alloc(obs),
                                {r: self.alloc_min * s for r, s in size.items()}, size,
                                obs.prices, obs.bid_min, self.vm_bid_max(obs, len(obs.vms)))

    def on_start(self, obs: Observation) -> Demand:
        if self.share is not None:  # steer="share": for the share its deadline needs
            return self.share.start(obs, self.vm_bid_max(obs, obs.size), self.start_fraction)
        return super().on_start(obs)

    def reconfigure(self, obs: Observation) -> Demand:
        if self.share is not None and obs.metrics.performance is None and \
                obs.time_to_deadline is not None and not late(obs):  # steer="share"
            return self.share.reconfigure(obs, self.vm_bid_max(obs, len(obs.vms)))
        return super().reconfigure(obs)

    def on_metric(self, obs: Observation, v: float, ref: float, sense: Sense) -> Demand:
        direction = judge(v, ref, sense, self.low, self.high)
        return self.uniform(obs, self.vertical_step(obs, direction, gap(v, ref)))


class MerkatHorizontal(_MetricController):
    """``merkat-horizontal``: Merkat Alg. 2 with the Alg. 3 upper bound.

    One VM more when the metric is worse than ``high``·v_ref, one fewer when better than
    ``low``·v_ref (Alg. 2 lines 1-10); then the count is capped by the largest N the budget
    buys at full VM size (Alg. 3, binary search) and every VM bids its share of Alg. 3's bids
    (line 5 divided by N). If not even one VM is affordable, one VM stays with the bids that
    buy one full VM, scaled down to the budget.
    """

    name = "merkat-horizontal"
    applies_to = ("task-farm", "moldable")  # changes the VM count: not a rigid job's
    PARAMS = declare(Controller.PARAMS, THRESHOLDS)
    PARAM_RULES = (LOW_HIGH,)

    def __init__(self, *, low: float = 0.75, high: float = 1.0, horizon: int = 1,
                 start_fraction: float = 1.0, seed: Seed = 0) -> None:
        super().__init__(horizon=horizon, start_fraction=start_fraction, seed=seed)
        judge(1.0, 1.0, Sense.LOWER_IS_BETTER, low, high)
        self.low, self.high = low, high

    def horizontal_step(self, obs: Observation, direction: int) -> tuple[int, dict[str, float]]:
        nvms = len(obs.vms)
        if direction > 0:  # Alg. 2 lines 6-7 (Merkat's sign is the opposite of ours)
            nvms += 1
        elif direction < 0:  # lines 8-10
            nvms = max(1, nvms - 1)
        nvms = min(nvms, obs.nvms_max)
        bid_max = self.bid_max(obs)
        n, total = vm_upper_bound(obs.prices, obs.vm_size, obs.capacity, bid_max, nvms)
        if n == 0:
            one = {r: min(share_cost(obs.prices.get(r, 0.0), a, obs.capacity.get(r, 0.0)),
                          bid_max) for r, a in obs.vm_size.items()}
            return 1, scale_to({r: max(b, obs.bid_min.get(r, 0.0)) for r, b in one.items()},
                               bid_max, obs.bid_min)
        return n, {r: max(b / n, obs.bid_min.get(r, 0.0)) for r, b in total.items()}

    def on_metric(self, obs: Observation, v: float, ref: float, sense: Sense) -> Demand:
        nvms, bid = self.horizontal_step(obs, judge(v, ref, sense, self.low, self.high))
        return resize(obs, nvms, bid)
