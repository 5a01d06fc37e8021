"""Merkat §3.2's combined controller: vertical scaling first, then horizontal.

Merkat §3.2: "an application can scale its resource demand first vertically. Then, when the
allocation of its VMs is already at maximum, it can increase its VM number incrementally until
the upper bound is reached or the application performance value drops." The paper gives no
pseudo-code for it; :class:`MerkatCombined` composes Alg. 1 (:class:`MerkatVertical`) and
Alg. 2 + 3 (:class:`MerkatHorizontal`) as decided in docs/control.md (decision 24):

- **needs more** (the metric worse than ``high``·v_ref): while the VMs are under their maximum
  allocation, one Alg. 1 step (bids up, the VM count unchanged). Once every VM gets its full
  size (within ``max_alloc_tol``), one VM more (Alg. 2), its count capped by Alg. 3's upper
  bound at full VM size and by ``nvms_max``; every VM bids its share of Alg. 3's bids. At the
  upper bound, or once a VM added did not improve the metric ("the performance value drops"),
  it goes back to Alg. 1 steps, until the metric is on the right side again.
- **needs less** (better than ``low``·v_ref): shed first, the reverse of the way up — one VM
  fewer (idle ones first) while it has more than one, bids unchanged; with one VM left, an
  Alg. 1 step down. A VM released frees a whole VM of capacity and its bid at once, where a
  lower bid only lowers the price; and the last VMs added are the first released.
- **within the thresholds**: an Alg. 1 step (it only corrects a VM that overpays or is under
  its minimum allocation).
"""

from __future__ import annotations

from merkat.control.base import Controller, Seed
from merkat.control.formulas import app_alloc, current_bid, gap, judge
from merkat.control.generic import MerkatHorizontal, MerkatVertical, _MetricController, resize
from merkat.control.params import FRACTION, LOW_HIGH, THRESHOLDS, declare, number
from merkat.control.types import Demand, Observation, Sense


class MerkatCombined(_MetricController):
    """``merkat-combined``: Merkat §3.2, vertical (Alg. 1) then horizontal (Alg. 2 + 3).

    ``low``/``high``: the thresholds as fractions of v_ref; ``alloc_min``: Alg. 1's minimum
    allocation as a fraction of the VM size; ``max_alloc_tol``: a VM whose allocation is within
    this fraction of its size is "at maximum". See the module docstring for the rule.
    """

    name = "merkat-combined"
    applies_to = ("task-farm", "moldable")  # changes the VM count: a rigid job's is fixed
    needs = ("a performance metric (v, v_ref), or a progress rate and a deadline; an "
             "application that can use more or fewer VMs")
    PARAMS = declare(Controller.PARAMS, THRESHOLDS, alloc_min=FRACTION,
                     max_alloc_tol=number(0, 1, hi_open=True))
    PARAM_RULES = (LOW_HIGH,)

    def __init__(self, *, low: float = 0.75, high: float = 1.0, alloc_min: float = 0.0,
                 max_alloc_tol: float = 0.01, horizon: int = 1, start_fraction: float = 1.0,
                 seed: Seed = 0) -> None:
        super().__init__(horizon=horizon, start_fraction=start_fraction, seed=seed)
        if not 0 <= max_alloc_tol < 1:
            raise ValueError(f"max_alloc_tol must be in [0, 1), got {max_alloc_tol}")
        self.vertical = MerkatVertical(low=low, high=high, alloc_min=alloc_min,
                                       horizon=horizon, start_fraction=start_fraction)
        self.horizontal = MerkatHorizontal(low=low, high=high, horizon=horizon,
                                           start_fraction=start_fraction)
        self.low, self.high, self.max_alloc_tol = low, high, max_alloc_tol
        self.added_at: tuple[int, float] | None = None  # (VMs before, v) at the last scale-out
        self.no_gain = False  # a VM added did not improve the metric: no more until it recovers

    def at_max(self, obs: Observation) -> bool:
        """Every VM gets its full size on every resource (within ``max_alloc_tol``)."""
        alloc = app_alloc(obs)
        return bool(obs.active_vms) and all(
            alloc.get(r, 0.0) >= (1 - self.max_alloc_tol) * s for r, s in obs.vm_size.items())

    def _judge_last_add(self, obs: Observation, v: float, sense: Sense) -> None:
        """After a scale-out: the metric did not get better ("the performance value drops")."""
        if self.added_at is None:
            return
        before_n, before_v = self.added_at
        if len(obs.vms) > before_n:
            better = v > before_v if sense is Sense.HIGHER_IS_BETTER else v < before_v
            self.no_gain = not better
        self.added_at = None

    def on_metric(self, obs: Observation, v: float, ref: float, sense: Sense) -> Demand:
        self._judge_last_add(obs, v, sense)
        direction = judge(v, ref, sense, self.low, self.high)
        n = len(obs.vms)
        if direction <= 0:
            self.no_gain = False
        if direction > 0 and not self.no_gain and self.at_max(obs):
            grown, bid = self.horizontal.horizontal_step(obs, +1)
            if grown > n:
                self.added_at = (n, v)
                return resize(obs, grown, bid, reason="at maximum allocation: one VM more")
        if direction < 0 and n > 1:
            return resize(obs, n - 1, current_bid(obs), reason="over-provisioned: one VM fewer")
        bid = self.vertical.vertical_step(obs, direction, gap(v, ref))
        return self.uniform(obs, bid)
