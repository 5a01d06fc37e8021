"""The small formulas every policy shares: metric sense, gap, costs, budget split, bounds.

Each function is pure and cites the rule it implements; the decisions where the papers are
garbled are written in ``docs/control.md``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import repeat
from operator import itemgetter

from merkat.control.types import Amounts, Observation, Sense

# --- the metric's sense, written once -------------------------------------------------------


def judge(v: float, ref: float, sense: Sense, low: float = 1.0, high: float = 1.0) -> int:
    """Direction of the resource change the metric asks for: +1 more, -1 less, 0 hold.

    The thresholds are fractions of the reference, stated for a lower-is-better metric
    (an iteration or execution time, Merkat Alg. 1 lines 3-7): worse when ``v > high·ref``,
    better when ``v < low·ref`` (Merkat §3.2: "drops below the lower threshold, e.g. 75 % of
    the remaining time to deadline"). For a higher-is-better metric (a progress rate or an
    allocation, Themis Fig. 3) the thresholds are mirrored through the reciprocal: worse when
    ``v < ref/high``, better when ``v > ref/low``. With ``low == high == 1`` this is the plain
    comparison of Themis Fig. 3 lines 2-7.

    +1 is Themis' sign (Table I: "a positive value corresponds to an increase"); Merkat Alg. 1
    uses the opposite sign, which we do not copy.
    """
    if not 0 < low <= high:
        raise ValueError(f"thresholds need 0 < low <= high, got low={low}, high={high}")
    if sense is Sense.LOWER_IS_BETTER:
        if v > high * ref:
            return 1
        if v < low * ref:
            return -1
        return 0
    if v < ref / high:
        return 1
    if v > ref / low:
        return -1
    return 0


def gap(v: float, ref: float) -> float:
    """T = |(v_ref - v) / v_ref| (Themis Fig. 3 line 9; Merkat Alg. 1 line 2 is garbled).

    A zero reference gives 0 when v is 0 too and infinity otherwise; an infinite reference
    (a rate a deadline that has passed would need) gives 1, never NaN.
    """
    if ref == 0:
        return 0.0 if v == 0 else math.inf
    if math.isinf(ref):  # the limit of |(ref - v)/ref|: 1, or 0 when v is the same infinity
        return 0.0 if v == ref else 1.0
    return abs((ref - v) / ref)


# --- the price of an allocation (inverting proportional share) --------------------------------


def share_cost(price: float, alloc: float, capacity: float) -> float:
    """The bid that buys ``alloc`` when the other bids total ``price·capacity``.

    x/(x + P·C)·C = A  gives  x = P·A / (1 - A/C)  (Merkat eq. 1, inverted as in Alg. 3).
    Infinite when ``alloc >= capacity`` (and ``alloc > 0``): no bid buys the whole resource.
    """
    if alloc <= 0:
        return 0.0
    if alloc >= capacity:
        return math.inf
    return price * alloc / (1.0 - alloc / capacity)


def start_bid(obs: Observation, fraction: float, nvms: int) -> dict[str, float]:
    """Per-VM bid for ``nvms`` VMs to each receive ``fraction`` of the VM size on every resource.

    The "initial payment" of the SLO paper's Alg. 1 line 2 and the initial bid of Themis §IV-A:
    per resource r, ``share_cost(P_r, nvms·fraction·size_r, C_r) / nvms``, never under the
    reserve ``bid_min[r]``. The fraction applies to every resource (docs/control.md, "what the
    price buys 75 % CPU means").
    """
    out: dict[str, float] = {}
    for r in obs.resources:
        total = share_cost(obs.prices.get(r, 0.0), nvms * fraction * obs.vm_size[r],
                           obs.capacity.get(r, 0.0))
        out[r] = max(total / nvms, obs.bid_min.get(r, 0.0))
    return out


# --- the budget ------------------------------------------------------------------------------


def spend_limit(obs: Observation, horizon: int = 1) -> float:
    """bid_max: the credits the application may offer this period, over all its VMs.

    Themis Table I: Budget_remaining / time, "time decided according to the application type
    and SLO". We spread what the account will hold until the deadline (the balance, already
    renewed this period, plus ``renewal`` for each later period) evenly over the periods left:
    ``min(balance, (balance + renewal·(n-1)) / n)`` with ``n = ceil(time_to_deadline/period)``,
    or ``n = horizon`` without a deadline or once it has passed. Never more than the balance.
    """
    if horizon < 1:
        raise ValueError(f"horizon must be >= 1, got {horizon}")
    left = obs.time_to_deadline
    n = horizon if left is None or left <= 0 else max(1, math.ceil(left / obs.period))
    balance = max(0.0, obs.budget.balance)
    return min(balance, (balance + obs.budget.renewal * (n - 1)) / n)


def split_budget(total: float, weights: Mapping[str, float],
                 floors: Mapping[str, float]) -> dict[str, float]:
    """Split ``total`` among resources in proportion to ``weights``, none under its floor.

    Merkat Alg. 1 line 25 (garbled as bid_max / w[r]): bid[r] = bid_max · w_r / Σ w, a
    proportional share of the budget. A resource whose share would fall under its floor
    (``bid_min``) gets the floor and the rest is split again among the others. If even the
    floors do not fit, every resource gets its floor (the total then exceeds ``total``; the
    caller's suspend rule decides what to do).
    """
    out = {r: floors.get(r, 0.0) for r in weights}
    free = dict(weights)
    budget = total
    while free:
        wsum = sum(free.values())
        if budget <= sum(floors.get(r, 0.0) for r in free):
            break
        if wsum <= 0:
            for r in free:  # no preference left: equal split
                out[r] = budget / len(free)
            break
        share = {r: budget * (w / wsum) for r, w in free.items()}
        under = [r for r in free if share[r] < floors.get(r, 0.0)]
        if not under:
            out.update(share)
            break
        for r in under:
            budget -= floors.get(r, 0.0)
            del free[r]
    return out


def scale_to(bid: Amounts, limit: float, floors: Mapping[str, float]) -> dict[str, float]:
    """Scale a bid vector down (keeping its ratios) until its sum is at most ``limit``.

    Floors win over the limit. Used where a paper bounds one bid by bid_max (Themis Fig. 3
    line 17) and we bid for several resources.
    """
    total = sum(bid.values())
    if total <= limit:
        return dict(bid)
    if total <= 0:
        return {r: floors.get(r, 0.0) for r in bid}
    if math.isinf(total):
        # Some resource cannot be bought at any price (share_cost of the whole capacity): its
        # ratio is unbounded, so it takes the whole limit, the others their floors.
        return split_budget(limit, {r: 1.0 if math.isinf(b) else 0.0 for r, b in bid.items()},
                            floors)
    return split_budget(limit, bid, floors)


# --- Merkat Alg. 3 ---------------------------------------------------------------------------


def vm_upper_bound(prices: Amounts, alloc_max: Amounts, capacity: Amounts, bid_max: float,
                   nvms_max: int) -> tuple[int, dict[str, float]]:
    """Merkat Alg. 3: the largest N in [1, nvms_max] the budget buys at full VM size.

    Line 2-3: the largest N with Σ_r P_r·a_r·N / (1 - a_r·N/C_r) < bid_max (a_r = alloc_max),
    found by binary search (the left side grows with N). Line 5: the bids, returned as the
    *total* per resource for the N VMs (divide by N for one VM). Returns ``(0, {})`` when even
    one VM is out of reach.
    """

    def cost(n: int) -> dict[str, float]:
        return {r: share_cost(prices.get(r, 0.0), a * n, capacity.get(r, 0.0))
                for r, a in alloc_max.items()}

    def fits(n: int) -> bool:
        return sum(cost(n).values()) < bid_max

    if nvms_max < 1 or not fits(1):
        return 0, {}
    lo, hi = 1, nvms_max  # invariant: fits(lo); the answer is in [lo, hi]
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo, cost(lo)


# --- Themis Fig. 4 ---------------------------------------------------------------------------


def makespan_bound(ntasks: int, t_avg: float, t_max: float, workers: int) -> float:
    """Upper bound on a task farm's finish time (Themis Fig. 4 line 11, from ARIA).

    ⌈(n - 1)·T_avg / k⌉ + T_max for n >= 1 tasks on k workers; 0 with no task left; infinite
    with no worker.
    """
    if ntasks <= 0:
        return 0.0
    if workers <= 0:
        return math.inf
    return math.ceil((ntasks - 1) * t_avg / workers) + t_max


# --- reading the observation -----------------------------------------------------------------


def app_alloc(obs: Observation) -> dict[str, float]:
    """The application's allocation per resource: the smallest among its active VMs.

    A rigid application progresses in lock-step, so the slowest VM sets the pace.
    Zero when no VM is active.
    """
    active = obs.active_vms
    if not active:
        return dict.fromkeys(obs.resources, 0.0)
    return least_alloc([vm.alloc for vm in active], obs.resources)


def least_alloc(allocs: Sequence[Amounts], resources: Sequence[str]) -> dict[str, float]:
    """Per resource, the smallest of ``allocs`` (one per active VM, at least one; a resource
    a VM's mapping lacks counts as 0): :func:`least_alloc_of` each."""
    return {r: least_alloc_of(allocs, r) for r in resources}


def least_alloc_of(allocs: Sequence[Amounts], r: str) -> float:
    """:func:`least_alloc` of one resource ``r``, without the mapping (the batch's gather of a
    many-VM application of one traded resource, themis-fig5's)."""
    try:  # (the usual: every mapping has the resource) the same values in the same order,
        # read at C speed instead of a comprehension of .get (tests/test_control_formulas.py
        # pins both ways)
        least: float = min(map(itemgetter(r), allocs))
        return least
    except KeyError:
        return min([a.get(r, 0.0) for a in allocs])


def current_bid(obs: Observation) -> dict[str, float]:
    """The application's current bid per VM: the mean over its active VMs (they bid alike)."""
    active = obs.active_vms or obs.vms
    if not active:
        return {r: obs.bid_min.get(r, 0.0) for r in obs.resources}
    return mean_bid([vm.bid for vm in active], obs.resources)


def mean_bid(bids: Sequence[Amounts], resources: Sequence[str]) -> dict[str, float]:
    """Per resource, the mean of ``bids`` (one per active VM, at least one), summed in VM
    order: :func:`mean_bid_of` each."""
    return {r: mean_bid_of(bids, r) for r in resources}


def mean_bid_of(bids: Sequence[Amounts], r: str) -> float:
    """:func:`mean_bid` of one resource ``r``, without the mapping (the batch's gather of a
    many-VM application of one traded resource)."""
    n = len(bids)
    first = bids[0]
    if bids.count(first) == n:
        # The VMs bid alike (Controller.uniform shares one mapping): the same sum of the same
        # values, without one lookup per VM.
        return sum(repeat(first.get(r, 0.0), n)) / n
    return sum([b.get(r, 0.0) for b in bids]) / n


def alloc_fraction(alloc: Amounts, size: Amounts) -> float:
    """min_r alloc_r / size_r: how much of its VM size the application gets (1 = full)."""
    fracs = [alloc.get(r, 0.0) / s for r, s in size.items() if s > 0]
    return min(fracs, default=1.0)
