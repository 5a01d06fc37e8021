"""The controller interface: Merkat Alg. 4's callbacks around one pure decision per period.

Merkat Alg. 4 runs a loop per application: start the virtual clusters (line 1), resume if
needed (2-3), then repeatedly process monitor messages (9), reconfigure (10-11), suspend when
needed (12-14) and finally shut down (16). Here the loop belongs to the platform; each period
it calls :meth:`Controller.decide` once, which dispatches to the same callbacks:

=================  =====================================  =====================================
phase              callbacks, in order                    Merkat Alg. 4
=================  =====================================  =====================================
waiting (no VM)    :meth:`on_start`                       line 1, §4.2.2 start condition
suspended          :meth:`stop_reason`, :meth:`on_resume` lines 2-3
running            :meth:`on_monitor`, :meth:`stop_reason`, lines 9, 16, 10-11, 12-14
                   :meth:`reconfigure`, :meth:`needs_suspend`
=================  =====================================  =====================================

A controller's state (estimates, direction history, back-off counters, its random generator)
lives in the object and changes only inside :meth:`decide`; the same observations and seed
give the same demands.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import ClassVar

import numpy as np

from merkat.control.formulas import current_bid, scale_to, spend_limit, start_bid
from merkat.control.params import COUNT, SEED, SHARE, Param, Rule, declare, integer
from merkat.control.types import Action, Amounts, Demand, Observation, Phase, new_demand
from merkat.seeds import Stream

Seed = int | np.random.SeedSequence | np.random.Generator | Stream


def make_rng(seed: Seed) -> np.random.Generator:
    """An explicit generator: an int, a ``SeedSequence`` (a run's stream of this controller,
    :func:`merkat.seeds.controller`) or a :class:`~merkat.seeds.Stream` gives a fresh one, a
    Generator is used as is."""
    if isinstance(seed, np.random.Generator):
        return seed
    return np.random.default_rng(seed.sequence() if isinstance(seed, Stream) else seed)


class Ewma:
    """Exponentially weighted moving average per resource (Themis Table I, alloc_est).

    est ← alpha·x + (1 - alpha)·est; the first sample initialises the estimate.
    """

    def __init__(self, alpha: float) -> None:
        if not 0 < alpha <= 1:
            raise ValueError(f"EWMA weight must be in (0, 1], got {alpha}")
        self.alpha = alpha
        self.value: dict[str, float] = {}

    def update(self, sample: Amounts) -> dict[str, float]:
        for r, x in sample.items():
            old = self.value.get(r)
            self.value[r] = x if old is None else self.alpha * x + (1 - self.alpha) * old
        return dict(self.value)


class Controller(ABC):
    """One application's controller. Subclasses implement :meth:`reconfigure` at least.

    ``horizon``: periods over which the balance is spread when there is no deadline
    (:func:`~merkat.control.formulas.spend_limit`). ``start_fraction``: the default start
    bid buys this fraction of the VM size at the current price. ``seed``: the controller's own
    random generator (:attr:`rng`); every policy accepts one, those that draw use it.

    ``reads_price_history``: a policy (or an instance, by its parameters) that predicts from
    past prices sets it True to receive
    :attr:`Observation.price_history <merkat.control.types.Observation.price_history>`; for
    the others it is empty. What a controller cannot see cannot change its decisions: a
    simulation whose policies ignore the history can be cut wherever the cluster is empty and
    its pieces run in parallel (:mod:`merkat.worlds.merkat.parallel`). ``price_history_periods``: how
    many periods of prices (the current one included) such a controller reads; the platform
    keeps at least that many (``Platform.history_size`` grows to the longest asked for).
    """

    name: ClassVar[str] = "controller"
    reads_price_history: bool = False
    price_history_periods: int = 0
    applies_to: ClassVar[tuple[str, ...]] = ("rigid", "task-farm")
    """What the policy can drive: ``trace`` (the rigid jobs of ``merkat sim run``), ``rigid``,
    ``task-farm`` (elastic master-worker applications), ``moldable`` (the trace jobs of
    ``merkat sim run --moldable``, which may run on more or fewer VMs than they asked for)
    (shown by ``merkat policy list``)."""
    needs: ClassVar[str] = "nothing"
    """What the policy reads of the application, in words (``merkat policy list``)."""
    PARAMS: ClassVar[Mapping[str, Param]] = declare(
        horizon=integer(1, COUNT), start_fraction=SHARE, seed=SEED)
    """The type and range of each keyword parameter (:mod:`merkat.control.params`): a
    subclass declares every parameter it adds; the registry checks a policy's parameters
    against it (``check_params``) before the constructor runs."""
    PARAM_RULES: ClassVar[tuple[Rule, ...]] = ()
    """The checks that read several parameters (``low <= high``)."""

    def __init__(self, *, horizon: int = 1, start_fraction: float = 1.0,
                 seed: Seed = 0) -> None:
        if horizon < 1:
            raise ValueError(f"horizon must be >= 1, got {horizon}")
        if not 0 < start_fraction <= 1:
            raise ValueError(f"start_fraction must be in (0, 1], got {start_fraction}")
        self.horizon = horizon
        self.start_fraction = start_fraction
        # a Stream is made on the first draw (a bad seed of another kind raises here)
        self._seed: Stream | None = seed if isinstance(seed, Stream) else None
        self._rng: np.random.Generator | None = None if self._seed else make_rng(seed)

    @property
    def rng(self) -> np.random.Generator:
        """The controller's own generator; from a :class:`~merkat.seeds.Stream` seed, made on
        first use (most controllers never draw: a trace's job costs ~35 µs less), the same
        draws as made at once."""
        rng = self._rng
        if rng is None:
            assert self._seed is not None
            rng = self._rng = make_rng(self._seed)
            self._seed = None
        return rng

    @rng.setter
    def rng(self, rng: np.random.Generator) -> None:
        self._rng, self._seed = rng, None

    # --- the one decision ---------------------------------------------------------------

    def decide(self, obs: Observation) -> Demand:
        """The demand for the next period, from this observation and the controller's state."""
        phase = obs.phase
        if phase is Phase.WAITING:
            return self.on_start(obs)
        if phase is Phase.SUSPENDED:
            reason = self.stop_reason(obs)
            if reason is not None:
                return Demand(Action.STOP, reason=reason)
            return self.on_resume(obs)
        self.on_monitor(obs)
        reason = self.stop_reason(obs)
        if reason is not None:
            return Demand(Action.STOP, reason=reason)
        demand = self.reconfigure(obs)
        if demand.action is Action.NONE and self.needs_suspend(obs, demand):
            return Demand(Action.SUSPEND, nvms=len(obs.vms), reason="cannot afford the SLO")
        return demand

    # --- callbacks (Merkat Alg. 4) -------------------------------------------------------

    def on_start(self, obs: Observation) -> Demand:
        """Start condition (Merkat §4.2.2). Default: start ``size`` VMs at once, bidding what
        buys ``start_fraction`` of the VM size, within the budget."""
        return Demand(Action.START, nvms=obs.size,
                      new_vm_bid=self.affordable(obs, start_bid(obs, self.start_fraction,
                                                                obs.size), obs.size),
                      reason="start")

    def on_monitor(self, obs: Observation) -> None:  # noqa: B027 - optional callback
        """ProcessMonitorMessage (Alg. 4 line 9): update estimates. Default: nothing."""

    def stop_reason(self, obs: Observation) -> str | None:
        """Why the application must shut down now (Alg. 4 line 16, Merkat §4.2.4), or None.

        Default: when all its work is done.
        """
        left = obs.metrics.work_left
        return "finished" if left is not None and left <= 0 else None

    @abstractmethod
    def reconfigure(self, obs: Observation) -> Demand:
        """The scaling policy (Alg. 4 lines 10-11): bids and VM count for a running app."""

    def needs_suspend(self, obs: Observation, demand: Demand) -> bool:
        """NeedsSuspend (Alg. 4 line 12), given the demand :meth:`reconfigure` proposed.
        Default: never."""
        return False

    def on_resume(self, obs: Observation) -> Demand:
        """ResumeApplication (Alg. 4 lines 2-3). Default: resume at once with current bids."""
        return self.keep(obs, Action.RESUME, "resume")

    # --- helpers -------------------------------------------------------------------------

    def bid_max(self, obs: Observation) -> float:
        """The application's spend limit this period, over all its VMs (Themis Table I)."""
        return spend_limit(obs, self.horizon)

    def vm_bid_max(self, obs: Observation, nvms: int) -> float:
        """The spend limit of one VM when ``nvms`` VMs share it (Themis: B per task), in whole
        micro-credits rounded down: the bank bills each VM's bid rounded to the micro-credit,
        so ``nvms`` such bids never add up to more than the budget (a bill one micro-credit
        over the balance is unpaid and the application is suspended)."""
        return math.floor(self.bid_max(obs) * 1e6 / max(1, nvms)) / 1e6

    def affordable(self, obs: Observation, bid: Amounts, nvms: int) -> dict[str, float]:
        """``bid`` scaled down to one VM's share of the budget, never under the reserve."""
        return scale_to(bid, self.vm_bid_max(obs, nvms), obs.bid_min)

    @staticmethod
    def uniform(obs: Observation, bid: Amounts, action: Action = Action.NONE,
                reason: str = "") -> Demand:
        """Every VM of the application bids ``bid``; the VM count is unchanged. The VMs share
        one (read-only) bid mapping."""
        same = dict(bid)
        vms = obs.vms
        return new_demand(action=action, nvms=len(vms),
                          bids=dict.fromkeys([vm.id for vm in vms], same), new_vm_bid=same,
                          reason=reason)

    @staticmethod
    def wait(obs: Observation, reason: str) -> Demand:
        """No life-cycle change and no bid: stay queued, or stay suspended."""
        return Demand(Action.NONE, nvms=len(obs.vms), reason=reason)

    def keep(self, obs: Observation, action: Action = Action.NONE, reason: str = "") -> Demand:
        """Change nothing: the current bids and VM count."""
        return self.uniform(obs, current_bid(obs), action, reason)
