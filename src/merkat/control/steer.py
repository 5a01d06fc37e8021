"""Steering a deadline by the share it needs (``steer="share"``): the live service's rule.

Themis Fig. 4 and Merkat Alg. 1 move a bid by a multiplicative step each period, judged on a
modelled progress rate (the ideal rate times the EWMA of the allocation). In the simulator the
model is exact and periods are 5 minutes; live, with 5-40 s periods, a few readings of a real
process and a start that costs a period, that rule reacts late: it holds while the model says
"on track" and the work falls behind, then doubles each period and misses the deadline with
its money unspent (issue 26, point 3).

With ``steer="share"`` a deadline controller instead, every period, from the latest readings:

1. measures its **speed** (units of work per second at the full VM size): the work done over
   its last :data:`WINDOW` observations over the VM-fractions × seconds it was allocated
   meanwhile (within [0.1, 2] × the ideal rate when it has a performance model); until it is
   measured, the ideal rate: it acts on the model from the first reading;
2. computes the **share it needs**: the rate that finishes the work left one period before the
   deadline (the end is seen at the next period) over its speed;
3. **bids for that share plus a safety margin** (``margin``, 25 % by default) at the current
   prices, against the other VMs' bids (the price times the capacity, less its own bid):
   x = others × A / (C − A) per resource (Merkat eq. 1 inverted), never under the reserve.

So the bid follows the shortfall in one step (a rate 30 % short asks for 30 % more share), and
falls when the application is ahead. What the budget cannot buy (the bid above the spend limit,
or more than the whole VM) is reported: :attr:`ShareSteer.at_risk` holds the reason (the live
service turns it into a ``deadline-at-risk`` event) and the application runs on at what its
budget buys (it never suspends itself: a suspended application makes no progress).

The simulator's runs keep ``steer="scale"`` (the papers' rules, the pinned results); the live
service gives the deadline policies ``steer="share"`` unless a template says otherwise
(:func:`live_params`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from itertools import pairwise
from typing import Any

from merkat.control.formulas import alloc_fraction, app_alloc, current_bid, scale_to
from merkat.control.params import choice, declare, number
from merkat.control.types import Action, Amounts, Demand, Observation, new_demand

STEERS = ("scale", "share")
"""The values of a deadline controller's ``steer`` parameter."""
STEER_PARAMS = declare(steer=choice(*STEERS), margin=number(0, 10))
"""The parameters of a policy that can steer by share (``steer``, ``margin``)."""

MOST = 0.9
"""The largest part of a resource the rule bids for: in a proportional share the bid for a
part A of capacity C grows as 1/(C - A), so the whole of it has no price."""

STEERED = ("vertical-deadline", "merkat-vertical", "deadline-strict")
"""The policies the live service steers by share by default (:func:`live_params`)."""


def check_steer(steer: str, margin: float) -> None:
    """Refuse an unknown ``steer`` or a margin outside [0, 10]."""
    if steer not in STEERS:
        raise ValueError(f"steer must be one of {', '.join(STEERS)}, got {steer!r}")
    if not 0 <= margin <= 10:
        raise ValueError(f"margin must be in [0, 10], got {margin}")


def live_params(policy: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """A template's controller parameters as the live service uses them: the deadline
    policies steer by share unless ``steer`` is given."""
    out = dict(params)
    if policy in STEERED:
        out.setdefault("steer", "share")
    return out


def share_bid(obs: Observation, fraction: float, nvms: int) -> dict[str, float]:
    """Per-VM bid for ``nvms`` VMs to each get ``fraction`` of the VM size (together at most
    :data:`MOST` of the capacity), against the other VMs' bids at the last clearing (the price
    times the capacity, less this application's own bid when it was not capped), never under
    the reserve."""
    own = current_bid(obs) if obs.vms else {}
    alloc = app_alloc(obs) if obs.vms else {}
    out: dict[str, float] = {}
    for r in obs.resources:
        size = obs.vm_size[r]
        cap = obs.capacity.get(r, 0.0)
        want = min(nvms * fraction * size, MOST * cap)
        others = obs.prices.get(r, 0.0) * cap
        if own and alloc.get(r, 0.0) < size * (1 - 1e-6):  # uncapped: its bid is in the price
            others -= nvms * own.get(r, 0.0)
        others = max(0.0, others)
        if want <= 0:
            cost = 0.0
        elif want >= cap:
            cost = math.inf
        else:
            cost = others * want / (cap - want)
        out[r] = max(cost / nvms, obs.bid_min.get(r, 0.0))
    return out


WINDOW = 4
"""Observations (periods) over which the speed is measured (module doc, step 1)."""


class ShareSteer:
    """The share rule's state for one application (module doc): the work done and allocation
    of its last :data:`WINDOW` observations, its measured speed, and what it last reported
    (``at_risk``: None while the budget buys the share it needs)."""

    def __init__(self, margin: float = 0.25) -> None:
        self.margin = margin
        self.history: list[tuple[float, float, float]] = []  # (time, work done, VM fraction)
        self.speed: float | None = None  # measured units/s at the full VM size
        self.at_risk: str | None = None
        self.needed: float | None = None  # the share it needs (fraction of the VM size)

    @property
    def efficiency(self) -> float | None:
        """The measured speed over the ideal rate (None before a measurement)."""
        return None if self.speed is None or self._ideal is None else self.speed / self._ideal

    _ideal: float | None = None

    def observe(self, obs: Observation) -> None:
        """Measure the speed: the work done over the last :data:`WINDOW` observations over
        the VM-fractions × seconds it was allocated meanwhile (the allocation an observation
        reports is the one of the period before it); within [0.1, 2] × the ideal rate."""
        m = obs.metrics
        self._ideal = m.ideal_rate or None
        frac = alloc_fraction(app_alloc(obs), obs.vm_size) if obs.vms else 0.0
        h = self.history
        h.append((obs.time, m.work_done, frac))
        del h[:-WINDOW]
        if len(h) < 2:
            return
        work = h[-1][1] - h[0][1]
        given = sum(f * (t - tp) for (tp, _, _), (t, _, f) in pairwise(h))
        if work <= 0 or given <= 0:
            return  # nothing measured yet (booting, or no reading): keep what it had
        speed = work / given
        if self._ideal:
            speed = min(2.0 * self._ideal, max(0.1 * self._ideal, speed))
        self.speed = speed

    def need(self, obs: Observation) -> float | None:
        """The fraction of the VM size that finishes the work left one period before the
        deadline at the measured speed (else the ideal rate): module doc, step 2; None
        without work, deadline or either speed; inf when late."""
        m, left = obs.metrics, obs.time_to_deadline
        work = m.work_left
        if work is None or left is None:
            return None
        if work <= 0:
            return 0.0
        horizon = left - obs.period
        if horizon <= 0:
            return math.inf
        speed = self.speed or m.ideal_rate
        if not speed:
            return None
        return work / horizon / speed

    def bid(self, obs: Observation, cap: float, nvms: int,
            default: float) -> dict[str, float]:
        """Each VM's bid for the share it needs with the margin (``default`` fraction when it
        cannot tell), within ``cap`` (one VM's spend limit); sets :attr:`at_risk`."""
        need = self.need(obs)
        self.needed = need
        f = default if need is None else min(1.0, need * (1 + self.margin))
        bid = share_bid(obs, max(f, 1e-9), nvms)
        total = sum(bid.values())
        risk = None
        if need is not None and need > 1:
            risk = (f"needs {need:.2f} of its VM size to finish by the deadline: more than "
                    "the whole VM")
        elif need is not None and total > cap * (1 + 1e-9):
            risk = (f"needs {need:.2f} of its VM size to finish by the deadline (a bid of "
                    f"{total:.4g}/period per VM); its budget allows {cap:.4g}")
        self.at_risk = risk
        return scale_to(bid, cap, obs.bid_min) if total > cap else bid

    def reconfigure(self, obs: Observation, cap: float) -> Demand:
        """The running application's demand: every VM bids for the share it needs."""
        self.observe(obs)
        bid = self.bid(obs, cap, len(obs.vms), 1.0)
        same: Amounts = dict(bid)
        reason = f"deadline at risk: {self.at_risk}" if self.at_risk else (
            f"needs {self.needed:.2f} of its VM size" if self.needed is not None else "")
        return new_demand(action=Action.NONE, nvms=len(obs.vms),
                          bids=dict.fromkeys([vm.id for vm in obs.vms], same),
                          new_vm_bid=same, reason=reason)

    def start(self, obs: Observation, cap: float, default: float,
              action: Action = Action.START) -> Demand:
        """Start (or resume) at once, bidding for the share it needs (module doc)."""
        n = obs.size if action is Action.START else len(obs.vms)
        bid = self.bid(obs, cap, n, default)
        if action is Action.START:
            return Demand(Action.START, nvms=n, new_vm_bid=bid, reason="start")
        same = dict(bid)
        return new_demand(action=action, nvms=n, bids=dict.fromkeys([v.id for v in obs.vms],
                                                                    same),
                          new_vm_bid=same, reason="resume")
