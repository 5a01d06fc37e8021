"""A controller for task-processing frameworks (Merkat §5.3.2): ``framework-horizontal``."""

from __future__ import annotations

from merkat.control.base import Controller, Seed
from merkat.control.formulas import judge
from merkat.control.generic import MerkatHorizontal, resize
from merkat.control.params import LOW_HIGH, THRESHOLDS, declare, number
from merkat.control.types import Demand, Observation


class FrameworkHorizontal(Controller):
    """Merkat's controller for a task-processing framework (§5.3.2): Alg. 2 + 3
    (``merkat-horizontal``) with Merkat's "VMs are kept idle for a specified time period,
    e.g., 10 minutes" (``keep_idle`` s; the template's ``keepidle`` 600, Fig. 5).

    Each period: direction from the framework's metric with the thresholds ``low``/``high``
    (:func:`~merkat.control.formulas.judge`); one VM more when behind (Alg. 2 lines 6-7); one
    VM fewer when ahead *and* some worker has been idle for ``keep_idle`` s (lines 8-10: "pick
    vm to release" picks an idle one; a busy worker is never released by the metric, so a
    job in progress is not killed because the queue is empty); then Alg. 3 caps the count at
    what the budget buys at full VM size, releasing idle workers first, then the newest. The
    policy itself is :class:`~merkat.control.generic.MerkatHorizontal`, reused as is.
    """

    name = "framework-horizontal"
    PARAMS = declare(Controller.PARAMS, THRESHOLDS, keep_idle=number(0))
    PARAM_RULES = (LOW_HIGH,)

    def __init__(self, *, keep_idle: float = 600.0, low: float = 0.75, high: float = 1.0,
                 horizon: int = 1, start_fraction: float = 1.0, seed: Seed = 0) -> None:
        super().__init__(horizon=horizon, start_fraction=start_fraction, seed=seed)
        if keep_idle < 0:
            raise ValueError(f"keep_idle must be >= 0 s, got {keep_idle}")
        self.keep_idle = keep_idle
        self.policy = MerkatHorizontal(low=low, high=high, horizon=horizon,
                                       start_fraction=start_fraction, seed=seed)
        self.idle_since: dict[str, float] = {}

    def on_start(self, obs: Observation) -> Demand:
        return self.policy.on_start(obs)

    def on_monitor(self, obs: Observation) -> None:
        seen = set()
        for vm in obs.vms:
            seen.add(vm.id)
            if vm.busy:
                self.idle_since.pop(vm.id, None)
            else:
                self.idle_since.setdefault(vm.id, obs.time)
        for gone in set(self.idle_since) - seen:
            del self.idle_since[gone]

    def reconfigure(self, obs: Observation) -> Demand:
        m = obs.metrics
        if m.performance is None or m.reference is None:
            return self.keep(obs, reason="no metric")
        direction = judge(m.performance, m.reference, m.sense, self.policy.low, self.policy.high)
        if direction < 0 and not any(obs.time - t >= self.keep_idle
                                     for t in self.idle_since.values()):
            direction = 0  # ahead, but no worker idle long enough to let go
        nvms, bid = self.policy.horizontal_step(obs, direction)
        return resize(obs, nvms, bid, reason=f"metric {m.performance:g} vs {m.reference:g}")
