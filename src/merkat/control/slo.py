"""The SLO paper's four policies (§3, Alg. 1) and best-effort (Merkat §5.3.1).

All four run Merkat Alg. 1 (CPU and memory) on their own metric and differ in four rules:

- deadline-strict: tracks the predicted time left against the time to deadline; starts and
  resumes when the price buys 75 % of the VM size, or more if the deadline needs more;
  suspends when the predicted time exceeds the time left and the bid it wants exceeds
  bid_max; stops when the deadline is out of reach (t_ideal > time left).
- deadline-partial: tracks the same; starts at 25 %; suspends when its allocation is under
  ``min_fraction`` (25 %) of the VM and the bid it wants exceeds bid_max; stops at the
  deadline (partial results are measured then).
- performance-strict: tracks its allocation against the full VM size; starts at 75 %;
  suspends like deadline-partial; stops when the deadline is out of reach.
- performance-partial: tracks its allocation; starts at 25 %; suspends like deadline-partial;
  stops at the deadline.
- best-effort: no tracking, a fixed bid; starts at 25 %; never suspends; stops when done.

"Starts at x %" means one VM's share of bid_max buys x % of the VM size on every resource at
the current price (SLO Alg. 1 lines 1-7, :func:`~merkat.control.formulas.start_bid`); when it
does not, the application retries after a random 1..``max_wait`` periods. Suspensions wait a
random back-off first (lines 9-15). Every random draw comes from the controller's own
generator (``seed``).
"""

from __future__ import annotations

import math
from enum import Enum
from typing import ClassVar

from merkat.control.base import Controller, Seed
from merkat.control.deadline import needed_fraction
from merkat.control.forecast import FORECAST_PARAMS, FORECAST_RULES, PriceForecast
from merkat.control.formulas import alloc_fraction, app_alloc, current_bid, gap, judge, start_bid
from merkat.control.generic import MerkatVerticalScaler
from merkat.control.params import COUNT, FRACTION, LOW_HIGH, THRESHOLDS, declare, integer, number
from merkat.control.steer import STEER_PARAMS, ShareSteer, check_steer
from merkat.control.types import Action, Amounts, Demand, Observation, Sense


class SLOKind(Enum):
    """The four user types of the SLO paper (§3, "User and SLO Modeling")."""

    DEADLINE_STRICT = "deadline-strict"
    DEADLINE_PARTIAL = "deadline-partial"
    PERFORMANCE_STRICT = "performance-strict"
    PERFORMANCE_PARTIAL = "performance-partial"

    @property
    def strict(self) -> bool:
        """Strict results: only a complete run before the deadline has value."""
        return self in (SLOKind.DEADLINE_STRICT, SLOKind.PERFORMANCE_STRICT)

    @property
    def tracks_deadline(self) -> bool:
        """Deadline users track the deadline; performance users track a full allocation."""
        return self in (SLOKind.DEADLINE_STRICT, SLOKind.DEADLINE_PARTIAL)


class SLOController(Controller):
    """The common algorithm of the four SLO policies; :attr:`kind` selects the variant.

    Parameters: ``start_fraction`` (default 0.75 strict, 0.25 partial: SLO paper §3,
    "Application Policies"); ``min_fraction``: the minimum allocation under which partial and
    performance policies suspend, also Alg. 1's alloc_min (0.25; the paper says 30 % once and
    25 % once, docs/control.md); ``low``/``high``: Merkat Alg. 1's thresholds as fractions of
    the reference; ``backoff_max``: the random back-off before suspending is uniform in
    0..backoff_max periods (SLO Alg. 1 lines 9-15, max_iterations); ``max_wait``: a postponed
    start or resume retries after a uniform 1..max_wait periods (Alg. 1 line 7, t_wait);
    ``seed``: an int or a numpy Generator — give each application its own, or applications in
    the same situation back off in lockstep (docs/control.md, "Seeds"). ``forecast="ar"``
    (``forecast_order``, ``probability``, ``forecast_horizon``, ``forecast_history``): start and
    resume bids at the price expected with probability p next period (or the highest over the
    next ``forecast_horizon`` periods) instead of the last price (:mod:`merkat.control.forecast`).
    ``steer="share"`` (``margin``; deadline policies): start at once and bid each period for
    the share the work left needs by the deadline (:mod:`merkat.control.steer`); the suspend
    rule is then off (``short`` stays False).
    """

    kind: ClassVar[SLOKind] = SLOKind.DEADLINE_STRICT
    applies_to = ("trace", "rigid", "task-farm")
    needs = "progress (work left, progress or ideal rate) and a deadline"
    PARAMS = declare(Controller.PARAMS, THRESHOLDS, FORECAST_PARAMS, STEER_PARAMS,
                     start_fraction=number(0, 1, lo_open=True, none=True),
                     min_fraction=FRACTION, backoff_max=integer(0, COUNT),
                     max_wait=integer(1, COUNT))
    PARAM_RULES = (LOW_HIGH, *FORECAST_RULES)

    def __init__(self, *, start_fraction: float | None = None, min_fraction: float = 0.25,
                 low: float = 0.75, high: float = 1.0, backoff_max: int = 3, max_wait: int = 3,
                 horizon: int = 1, forecast: str = "last", forecast_order: int = 2,
                 probability: float = 0.5, forecast_horizon: int | str = 1,
                 forecast_history: int | None = None, steer: str = "scale",
                 margin: float = 0.25, seed: Seed = 0) -> None:
        if start_fraction is None:
            start_fraction = 0.75 if self.kind.strict else 0.25
        super().__init__(horizon=horizon, start_fraction=start_fraction, seed=seed)
        check_steer(steer, margin)
        self.share = ShareSteer(margin) if steer == "share" and self.kind.tracks_deadline \
            else None
        self.forecaster = PriceForecast(forecast, forecast_order, probability, forecast_horizon,
                                        forecast_history)
        self.reads_price_history = self.forecaster.reads_history
        self.price_history_periods = self.forecaster.periods
        judge(1.0, 1.0, Sense.LOWER_IS_BETTER, low, high)
        if not 0 <= min_fraction <= 1:
            raise ValueError(f"min_fraction must be in [0, 1], got {min_fraction}")
        if backoff_max < 0 or max_wait < 1:
            raise ValueError("backoff_max must be >= 0 and max_wait >= 1")
        self.min_fraction, self.low, self.high = min_fraction, low, high
        self.backoff_max, self.max_wait = backoff_max, max_wait
        self.scaler = MerkatVerticalScaler()
        self.next_try: float | None = None  # postponed start/resume: next attempt
        self.backoff: int | None = None  # drawn max_iterations of the pending suspension
        self.waited = 0  # suspend_iterations
        self.short = False  # this period, Alg. 1 wanted more than bid_max
        self._alloc_min: tuple[Amounts, dict[str, float]] | None = None

    # --- start and resume: SLO Alg. 1 lines 1-7 -------------------------------------------

    def target_fraction(self, obs: Observation) -> float:
        """T_alloc of StartResume: the start fraction; for deadline-strict, at least what the
        deadline needs ("resumes if the price drops enough to finish within the deadline")."""
        f = self.start_fraction
        need = needed_fraction(obs)
        if self.kind is SLOKind.DEADLINE_STRICT and need is not None:
            f = max(f, need)
        return f

    def start_resume(self, obs: Observation, action: Action) -> Demand:
        if self.share is not None:  # steer="share": at once, for the share it needs
            n = obs.size if action is Action.START else len(obs.vms)
            return self.share.start(obs, self.vm_bid_max(obs, n), self.target_fraction(obs),
                                    action)
        if self.next_try is not None and obs.time < self.next_try:
            return self.wait(obs, f"waiting until {self.next_try:g}")
        nvms = obs.size if action is Action.START else len(obs.vms)
        bid = start_bid(self.forecaster.expected(obs), self.target_fraction(obs), nvms)
        if sum(bid.values()) < self.vm_bid_max(obs, nvms):  # line 4
            self.next_try = None
            if action is Action.START:
                return Demand(Action.START, nvms=nvms, new_vm_bid=bid, reason="start")
            return self.uniform(obs, bid, Action.RESUME, "price dropped: resume")
        delay = int(self.rng.integers(1, self.max_wait + 1))  # line 7
        self.next_try = obs.time + delay * obs.period
        return self.wait(obs, f"price too high: retry at {self.next_try:g}")

    def on_start(self, obs: Observation) -> Demand:
        reason = self.stop_reason(obs)
        if reason is not None:
            return Demand(Action.STOP, reason=f"aborted: {reason}")
        return self.start_resume(obs, Action.START)

    def on_resume(self, obs: Observation) -> Demand:
        return self.start_resume(obs, Action.RESUME)

    # --- stop ------------------------------------------------------------------------------

    def stop_reason(self, obs: Observation) -> str | None:
        """Finished; strict: the deadline is out of reach even at full size; partial: the
        deadline has come (partial results are measured then)."""
        reason = super().stop_reason(obs)
        if reason is not None:
            return reason
        left = obs.time_to_deadline
        if left is None:
            return None
        if self.kind.strict:
            need = needed_fraction(obs)
            if need is not None and need > 1:
                return "the deadline can no longer be met"
            return None
        return "deadline reached" if left <= 0 else None

    # --- running: Merkat Alg. 1 on the SLO's metric ----------------------------------------

    def metric(self, obs: Observation) -> tuple[float, float, Sense]:
        """(v, v_ref, sense): deadline users compare the predicted time left with the time to
        deadline; performance users compare their allocation with the full VM size."""
        if not self.kind.tracks_deadline:
            return alloc_fraction(app_alloc(obs), obs.vm_size), 1.0, Sense.HIGHER_IS_BETTER
        m, left = obs.metrics, obs.time_to_deadline
        work = m.work_left
        rate = m.progress_rate
        if rate is None and m.ideal_rate is not None:
            rate = m.ideal_rate * alloc_fraction(app_alloc(obs), obs.vm_size)
        if work is None or rate is None or left is None:
            return 1.0, 1.0, Sense.LOWER_IS_BETTER  # nothing to track: hold
        predicted = 0.0 if work == 0 else (math.inf if rate <= 0 else work / rate)
        return predicted, left, Sense.LOWER_IS_BETTER

    def reconfigure(self, obs: Observation) -> Demand:
        if self.share is not None:  # steer="share" (merkat.control.steer)
            self.short = False
            return self.share.reconfigure(obs, self.vm_bid_max(obs, len(obs.vms)))
        v, ref, sense = self.metric(obs)
        direction = judge(v, ref, sense, self.low, self.high)
        size = obs.vm_size
        cap = self.vm_bid_max(obs, len(obs.vms))
        bid = self.scaler.step(current_bid(obs), direction, gap(v, ref), app_alloc(obs),
                               self.alloc_min(size), size, obs.prices, obs.bid_min, cap)
        self.short = self.scaler.wanted > cap * (1 + 1e-12)
        return self.uniform(obs, bid)

    def alloc_min(self, size: Amounts) -> Amounts:
        """Alg. 1's alloc_min: ``min_fraction`` of the VM size (kept while the size mapping
        is the same object, as it is from one observation to the next)."""
        cached = self._alloc_min
        if cached is None or cached[0] is not size:
            cached = self._alloc_min = (size, {r: self.min_fraction * s for r, s in size.items()})
        return cached[1]

    # --- suspend: SLO Alg. 1 lines 9-15 ----------------------------------------------------

    def suspend_condition(self, obs: Observation) -> bool:
        """Worse than the SLO's threshold and unable to afford better (the text of §3; the
        pseudo-code's ``value < T`` and ``bid < bid_max`` are inverted)."""
        if not self.short:
            return False
        if self.kind is SLOKind.DEADLINE_STRICT:
            v, ref, sense = self.metric(obs)
            return judge(v, ref, sense, self.low, self.high) > 0
        return alloc_fraction(app_alloc(obs), obs.vm_size) < self.min_fraction

    def needs_suspend(self, obs: Observation, demand: Demand) -> bool:
        return self.back_off(self.suspend_condition(obs))

    def back_off(self, condition: bool) -> bool:
        """Lines 9-15 given the suspend condition of this period: suspend once it has held
        for the random back-off (drawn when it starts to hold), reset when it does not."""
        if not condition:
            self.backoff, self.waited = None, 0
            return False
        if self.backoff is None:
            self.backoff = int(self.rng.integers(0, self.backoff_max + 1))
        if self.waited < self.backoff:  # lines 11-13
            self.waited += 1
            return False
        self.backoff, self.waited = None, 0  # line 15
        return True


class DeadlineStrict(SLOController):
    """``deadline-strict``: results by the deadline or nothing (SLO paper §3)."""

    name = "deadline-strict"
    kind = SLOKind.DEADLINE_STRICT


class DeadlinePartial(SLOController):
    """``deadline-partial``: work done by the deadline has value (SLO paper §3)."""

    name = "deadline-partial"
    kind = SLOKind.DEADLINE_PARTIAL


class PerformanceStrict(SLOController):
    """``performance-strict``: as fast as possible, complete results (SLO paper §3)."""

    name = "performance-strict"
    kind = SLOKind.PERFORMANCE_STRICT


class PerformancePartial(SLOController):
    """``performance-partial``: as fast as possible, partial results accepted (§3)."""

    name = "performance-partial"
    kind = SLOKind.PERFORMANCE_PARTIAL


class BestEffort(Controller):
    """``best-effort`` (Merkat §5.3.1): start when the price is low enough, never adapt.

    Starts when one VM's share of bid_max buys ``start_fraction`` of the VM size at the
    current price (else retries next period), then bids that start cost forever: no
    scaling, no stop before the work is done.

    ``max_price`` (credits per core per period; default None, no limit): the highest CPU
    price the application runs at. It does not start, and it suspends, while the CPU price is
    above it; it resumes (and starts) once the price *with its own bid back in the market*
    (the price plus its CPU bid over the CPU capacity) is at most the limit, so its own
    return does not push the price over the limit and suspend it again. Not in Merkat (its
    best-effort applications never suspend); the smallest price limit a user of a shared
    machine expects (docs/control.md, decision 23).
    """

    name = "best-effort"
    applies_to = ("trace", "rigid", "task-farm")
    needs = "nothing (a fixed bid)"
    PARAMS = declare(Controller.PARAMS, max_price=number(0, lo_open=True, none=True))

    def __init__(self, *, start_fraction: float = 0.25, max_price: float | None = None,
                 horizon: int = 1, seed: Seed = 0) -> None:
        super().__init__(horizon=horizon, start_fraction=start_fraction, seed=seed)
        if max_price is not None and (isinstance(max_price, bool)
                                      or not isinstance(max_price, int | float)
                                      or not math.isfinite(max_price) or max_price <= 0):
            raise ValueError(f"max_price must be a positive number of credits per core per "
                             f"period, got {max_price!r}")
        self.max_price = None if max_price is None else float(max_price)
        self.bid: dict[str, float] | None = None

    def over_limit(self, obs: Observation, bid: Amounts | None) -> str | None:
        """Why the CPU price is too high for this application (None when it is not, or
        without a limit): the price seen, plus its own CPU bid over the capacity when ``bid``
        is the bid it would return with."""
        limit, price = self.max_price, obs.prices.get("cpu")
        if limit is None or price is None:
            return None
        capacity = obs.capacity.get("cpu", 0.0)
        with_bid = price + (bid.get("cpu", 0.0) / capacity if bid and capacity > 0 else 0.0)
        if with_bid > limit * (1 + 1e-9):
            return f"cpu price {with_bid:.4g} above the limit {limit:g}"
        return None

    def on_start(self, obs: Observation) -> Demand:
        bid = start_bid(obs, self.start_fraction, obs.size)
        if sum(bid.values()) <= self.vm_bid_max(obs, obs.size):
            high = self.over_limit(obs, {r: b * obs.size for r, b in bid.items()})
            if high is not None:
                return self.wait(obs, high)
            self.bid = bid
            return Demand(Action.START, nvms=obs.size, new_vm_bid=bid, reason="start")
        return self.wait(obs, "price too high")

    def fixed(self, obs: Observation) -> Amounts:
        return current_bid(obs) if self.bid is None else self.bid

    def reconfigure(self, obs: Observation) -> Demand:
        high = self.over_limit(obs, None)
        if high is not None:
            return Demand(Action.SUSPEND, nvms=len(obs.vms), reason=f"suspend: {high}")
        return self.uniform(obs, self.fixed(obs))

    def on_resume(self, obs: Observation) -> Demand:
        bid = self.fixed(obs)
        high = self.over_limit(obs, {r: b * len(obs.vms) for r, b in bid.items()})
        if high is not None:
            return self.wait(obs, f"suspended: {high}")
        return self.uniform(obs, bid, Action.RESUME, "resume")
