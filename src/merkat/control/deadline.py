"""Themis' derived deadline policies (Fig. 4, §IV-A): Vertical-Deadline and Horizontal-Deadline.

Vertical-Deadline drives a rigid application (fixed VMs, progress in lock-step) with
Scale-One-VM on its progress rate, suspends when the budget cannot keep it on track, and
postpones, then aborts, at submission when the price is too high. Horizontal-Deadline drives a
task farm with Scale-Multi-VMs on the makespan bound.
"""

from __future__ import annotations

import math

from merkat.control.base import Controller, Ewma, Seed
from merkat.control.forecast import FORECAST_PARAMS, FORECAST_RULES, PriceForecast
from merkat.control.formulas import app_alloc, current_bid, makespan_bound, start_bid
from merkat.control.generic import ScaleMultiVMs, ScaleOneVM, resize
from merkat.control.params import (
    COUNT,
    FLAG,
    FRACTION,
    LOW_HIGH,
    THRESHOLDS,
    declare,
    integer,
    number,
)
from merkat.control.steer import STEER_PARAMS, ShareSteer, check_steer
from merkat.control.types import Action, Amounts, Demand, Metrics, Observation, Phase, Sense


def needed_fraction(obs: Observation) -> float | None:
    """The share of the VM size that finishes exactly at the deadline: t_ideal / time left.

    None without a deadline or a performance model; 1 (or more) when already too late.
    """
    ideal, left = obs.ideal_time_left, obs.time_to_deadline
    if ideal is None or left is None:
        return None
    return _fraction(ideal, left)


def _fraction(ideal: float, left: float) -> float:
    """t_ideal / time left; when no time is left, infinite (0 with no work left)."""
    if left <= 0:
        return math.inf if ideal > 0 else 0.0
    return ideal / left


class VerticalDeadline(Controller):
    """``vertical-deadline``: Themis Fig. 4 lines 1-7 with §IV-A's suspend and postpone rules.

    - **Start** (postpone-then-abort, §IV-A): with slack = time to deadline - t_ideal, abort
      (STOP) when slack < 0; start when one VM's share of the budget buys the needed fraction
      t_ideal / time-left of the VM size at the current price (its bid is that cost);
      otherwise postpone for ``postpone_fraction``·slack and try again.
    - **Running** (Fig. 4): p_ref = work left / time to deadline (line 3); p_est = the ideal
      rate times the EWMA allocation estimate's fraction of the VM size (the performance
      model of §IV-A), or the measured rate without a model (line 2). If the estimate already
      reaches the VM size on every resource (within ``max_alloc_tol``), halve the bid, never
      under bid_min (lines 4-5); else Scale-One-VM(bid, p_est, p_ref) on a progress rate
      (line 7).
    - **Suspend** (§IV-A): when Scale-One-VM wanted more than bid_max and both the current
      and the predicted progress are under p_ref.
    - **Resume**: after ``resume_wait`` × 2^(k-1) periods since its k-th suspension, once a VM
      costs less than when it was suspended ("when the price drops"), when the needed fraction is
      affordable again; STOP while suspended once the deadline is out of reach.
    - ``forecast="ar"`` (with ``forecast_order``, ``probability``, ``forecast_horizon``,
      ``forecast_history``): start and resume bids are computed at the price expected with
      probability p next period (or the highest over the next ``forecast_horizon`` periods)
      instead of the last price (:mod:`merkat.control.forecast`, Tycoon eq. 5-6).
    - ``abort_hopeless=True``: also stop a *running* application once the needed fraction
      exceeds 1 (the SLO paper's strict stop rule; default False, Themis §IV-A aborts at
      submission and while suspended only).
    - ``steer="share"`` (the live service's default; ``margin``): start at once and bid each
      period for the share the work left needs by the deadline, from the measured rate,
      instead of Scale-One-VM's steps; never suspend, report what the budget cannot buy
      (:mod:`merkat.control.steer`). ``steer="scale"`` (default) is the rule above.
    """

    name = "vertical-deadline"
    applies_to = ("trace", "rigid")
    needs = "progress (work done, work total, ideal rate) and a deadline"
    PARAMS = declare(Controller.PARAMS, FORECAST_PARAMS, STEER_PARAMS, t_diff=number(0),
                     limit=integer(1, COUNT), ewma_alpha=number(0, 1, lo_open=True),
                     max_alloc_tol=number(0, 1, hi_open=True), postpone_fraction=FRACTION,
                     resume_wait=integer(0, COUNT), abort_hopeless=FLAG)
    PARAM_RULES = FORECAST_RULES

    def __init__(self, *, t_diff: float = 0.05, limit: int = 3, ewma_alpha: float = 0.5,
                 max_alloc_tol: float = 0.01, postpone_fraction: float = 0.1,
                 resume_wait: int = 2, horizon: int = 1, start_fraction: float = 1.0,
                 forecast: str = "last", forecast_order: int = 2, probability: float = 0.5,
                 forecast_horizon: int | str = 1, forecast_history: int | None = None,
                 steer: str = "scale", margin: float = 0.25, abort_hopeless: bool = False,
                 seed: Seed = 0) -> None:
        super().__init__(horizon=horizon, start_fraction=start_fraction, seed=seed)
        check_steer(steer, margin)
        self.share = ShareSteer(margin) if steer == "share" else None
        self.abort_hopeless = bool(abort_hopeless)
        self.forecaster = PriceForecast(forecast, forecast_order, probability, forecast_horizon,
                                        forecast_history)
        self.reads_price_history = self.forecaster.reads_history
        self.price_history_periods = self.forecaster.periods
        if not 0 <= max_alloc_tol < 1:
            raise ValueError(f"max_alloc_tol must be in [0, 1), got {max_alloc_tol}")
        if not 0 <= postpone_fraction <= 1:
            raise ValueError(f"postpone_fraction must be in [0, 1], got {postpone_fraction}")
        if resume_wait < 0:
            raise ValueError(f"resume_wait must be >= 0, got {resume_wait}")
        self.scaler = ScaleOneVM(t_diff, limit)
        self.alloc_est = Ewma(ewma_alpha)
        self.max_alloc_tol = max_alloc_tol
        self.postpone_fraction = postpone_fraction
        self.resume_wait = resume_wait
        self.next_try: float | None = None
        self.suspended_at: float | None = None
        self.suspend_cost = math.inf  # a full VM's cost at the prices it was suspended at
        self.suspensions = 0  # how many times it was suspended (the resume wait doubles)
        self.short = False  # this period, Scale-One-VM wanted more than bid_max

    # --- start: postpone, then abort (Themis §IV-A) ----------------------------------------

    def on_start(self, obs: Observation) -> Demand:
        if self.share is not None:  # steer="share": start at once, for the share it needs
            f = needed_fraction(obs)
            if f is not None and f > 1:
                return Demand(Action.STOP, reason="aborted: the deadline can no longer be met")
            return self.share.start(obs, self.vm_bid_max(obs, obs.size), self.start_fraction)
        if self.next_try is not None and obs.time < self.next_try:
            return self.wait(obs, f"postponed until {self.next_try:g}")
        f = needed_fraction(obs)
        if f is None:
            return super().on_start(obs)
        ideal, left = obs.ideal_time_left, obs.time_to_deadline
        assert ideal is not None and left is not None
        slack = left - ideal
        if slack < 0:
            return Demand(Action.STOP, reason="aborted: the deadline can no longer be met")
        bid = start_bid(self.forecaster.expected(obs), max(f, 1e-9), obs.size)
        if sum(bid.values()) <= self.vm_bid_max(obs, obs.size):
            return Demand(Action.START, nvms=obs.size, new_vm_bid=bid, reason="start")
        self.next_try = obs.time + self.postpone_fraction * slack
        return self.wait(obs, f"price too high: postponed until {self.next_try:g}")

    # --- running: Fig. 4 lines 1-7 ---------------------------------------------------------

    def on_monitor(self, obs: Observation) -> None:
        self.alloc_est.update(app_alloc(obs))

    def progress(self, obs: Observation) -> tuple[float, float, float]:
        """(p_now, p_est, p_ref): measured, predicted and reference progress rates."""
        m, est = obs.metrics, self.alloc_est.value
        if m.ideal_rate is not None:
            frac = math.prod(min(1.0, est.get(r, 0.0) / s) for r, s in obs.vm_size.items()
                             if s > 0)
            p_est = m.ideal_rate * frac
        else:
            p_est = m.progress_rate or 0.0
        p_now = p_est if m.progress_rate is None else m.progress_rate
        left, work = obs.time_to_deadline, m.work_left
        if left is None or work is None:  # no deadline: hold
            return p_now, p_est, p_est
        p_ref = work / left if left > 0 else math.inf
        return p_now, p_est, p_ref

    def reconfigure(self, obs: Observation) -> Demand:
        if self.share is not None:  # steer="share" (merkat.control.steer)
            self.short = False
            return self.share.reconfigure(obs, self.vm_bid_max(obs, len(obs.vms)))
        bid, cap = current_bid(obs), self.vm_bid_max(obs, len(obs.vms))
        est = self.alloc_est.value
        at_max = all(est.get(r, 0.0) >= (1 - self.max_alloc_tol) * s
                     for r, s in obs.vm_size.items())
        if at_max:  # lines 4-5
            self.short = False
            new = {r: max(b / 2, obs.bid_min.get(r, 0.0)) for r, b in bid.items()}
            return self.uniform(obs, new, reason="at maximum allocation")
        _, p_est, p_ref = self.progress(obs)
        new = self.scaler.step(bid, p_est, p_ref, Sense.HIGHER_IS_BETTER, obs.bid_min, cap)
        self.short = self.scaler.wanted > cap * (1 + 1e-12)
        return self.uniform(obs, new)

    def needs_suspend(self, obs: Observation, demand: Demand) -> bool:
        if self.share is not None:  # it runs on what its budget buys, reported at risk
            return False
        p_now, p_est, p_ref = self.progress(obs)
        if self.short and p_now < p_ref and p_est < p_ref:
            self.suspended_at = obs.time
            self.suspend_cost = _vm_cost(obs.prices, obs.vm_size)
            self.suspensions += 1
            return True
        return False

    # --- suspended ---------------------------------------------------------------------------

    def stop_reason(self, obs: Observation) -> str | None:
        """Finished; suspended with the deadline out of reach; running past its deadline (a
        strict deadline: results after it are worth nothing, docs/policies.md)."""
        reason = super().stop_reason(obs)
        if reason is None and (obs.phase is Phase.SUSPENDED or self.abort_hopeless):
            f = needed_fraction(obs)
            if f is not None and f > 1:
                where = "while suspended" if obs.phase is Phase.SUSPENDED else "while running"
                return f"aborted {where}: the deadline can no longer be met"
        if reason is None:
            left = obs.time_to_deadline
            if left is not None and left <= 0:
                return "stopped: the deadline has passed"
        return reason

    def on_resume(self, obs: Observation) -> Demand:
        if self.share is not None:  # (suspended for want of money: resume when it can pay)
            return self.share.start(obs, self.vm_bid_max(obs, len(obs.vms)),
                                    self.start_fraction, Action.RESUME)
        if self._in_resume_wait(obs.time, obs.period):
            return self.wait(obs, "suspended")
        if _vm_cost(obs.prices, obs.vm_size) >= self.suspend_cost:  # "resumed when the price drops" (§IV-A)
            return self.wait(obs, "suspended: the price has not dropped")
        f = needed_fraction(obs)
        n = len(obs.vms)
        bid = start_bid(self.forecaster.expected(obs),
                        self.start_fraction if f is None else max(f, 1e-9), n)
        if sum(bid.values()) <= self.vm_bid_max(obs, n):
            self.suspended_at = None
            self.suspend_cost = math.inf
            return self.uniform(obs, bid, Action.RESUME, "price dropped: resume")
        return self.wait(obs, "suspended: price still too high")

    def _in_resume_wait(self, time: float, period: float) -> bool:
        """Whether ``resume_wait`` × 2^(k-1) periods since its k-th suspension are not over."""
        since = self.suspended_at if self.suspended_at is not None else -math.inf
        wait = self.resume_wait * 2 ** min(self.suspensions - 1, 16)
        return bool(time < since + wait * period)

    def still_suspended(self, time: float, period: float, deadline: float | None,
                        metrics: Metrics, prices: Amounts, vm_size: Amounts) -> bool:
        """Whether :meth:`decide` of a suspended application's observation with these values
        (``prices``: the observation's, restricted to what it trades) returns a NONE demand and
        changes no state: :meth:`stop_reason` finds no reason, and :meth:`on_resume` still
        waits (its resume wait not over, or a VM not cheaper than at the suspension). False
        whenever that is not certain (``steer="share"``, a resume to try): the caller then
        asks :meth:`decide` itself.

        What it replaces: for the suspended applications of a themis-fig5 run (most periods
        of most of them), an :class:`~merkat.control.types.Observation` and :meth:`decide`;
        the same comparisons on the same values, in the same order.
        ``tests/test_resting.py`` pins it against :meth:`decide` on random states and
        observations (NaN, infinities, ±0)."""
        if self.share is not None:
            return False
        # stop_reason: Controller's (finished), then needed_fraction > 1, then the deadline
        work = metrics.work_left
        if work is not None and work <= 0:
            return False
        left = None if deadline is None else deadline - time
        rate = metrics.ideal_rate
        if left is not None and work is not None and rate is not None:
            ideal = 0.0 if work == 0 else (math.inf if rate <= 0 else work / rate)
            if _fraction(ideal, left) > 1:
                return False
        if left is not None and left <= 0:
            return False
        # on_resume's two waits (Action.NONE, no state written)
        return (self._in_resume_wait(time, period)
                or _vm_cost(prices, vm_size) >= self.suspend_cost)


def _vm_cost(prices: Amounts, vm_size: Amounts) -> float:
    """What a full-size VM costs per period at ``prices``."""
    return sum(prices.get(r, 0.0) * s for r, s in vm_size.items())


class HorizontalDeadline(Controller):
    """``horizontal-deadline``: Themis Fig. 4 lines 9-13 on a task farm (workers are VMs).

    The finish time is bounded by ⌈(n-1)·T_avg/k⌉ + T_max for n tasks left on k workers
    (line 11, :func:`~merkat.control.formulas.makespan_bound`); Scale-Multi-VMs adds workers
    when the bound exceeds ``high``·(time to deadline) and releases them (idle ones first)
    when it is under ``low``·(time to deadline) (lines 12-13, garbled in the paper; the two
    thresholds are Scale-Multi-VMs' v_reflow, v_refhigh).
    """

    name = "horizontal-deadline"
    applies_to = ("task-farm",)
    needs = "a task queue (tasks left, average and longest task time) and a deadline"
    PARAMS = declare(Controller.PARAMS, THRESHOLDS, limit=integer(1, COUNT))
    PARAM_RULES = (LOW_HIGH,)

    def __init__(self, *, limit: int = 3, low: float = 0.75, high: float = 1.0,
                 horizon: int = 1, start_fraction: float = 1.0, seed: Seed = 0) -> None:
        super().__init__(horizon=horizon, start_fraction=start_fraction, seed=seed)
        self.scaler = ScaleMultiVMs(limit, low, high)

    def estimate(self, obs: Observation) -> float | None:
        """The makespan bound with the current workers, or None without task information."""
        m = obs.metrics
        if m.tasks_left is None or m.task_time_avg is None or m.task_time_max is None:
            return None
        return makespan_bound(m.tasks_left, m.task_time_avg, m.task_time_max, len(obs.vms))

    def reconfigure(self, obs: Observation) -> Demand:
        finish, left = self.estimate(obs), obs.time_to_deadline
        if finish is None or left is None:
            return self.keep(obs, reason="no task information or no deadline")
        nvms, bid = self.scaler.step(len(obs.vms), finish, left, Sense.LOWER_IS_BETTER,
                                     obs.prices, obs.vm_size, obs.bid_min, self.bid_max(obs),
                                     obs.nvms_max)
        return resize(obs, nvms, bid, reason=f"makespan bound {finish:g} s, {left:g} s left")
