"""Proportional share with per-VM caps: the allocation rule of the market (Merkat eq. 1).

For one resource of capacity ``C`` and bids ``b_i`` the rule is ``p = sum(b) / C`` and
``a_i = b_i / p``. With a maximum useful allocation ``m_i`` per VM (its cap) the rule becomes a
work-conserving water-filling: the VMs whose proportional share would exceed their cap get the
cap, and the capacity left is shared again among the others in proportion to their bids. The
price is then ``uncapped bids / capacity left to them``.

The function here is *segmented*: it clears many independent markets (one per group) in one
vectorised pass. Group ``0`` of a single group is the ideal allocation (the cluster as one host);
one group per node is the enforceable allocation.

Degenerate cases (decided in ``docs/market.md``, tested in ``tests/test_market_share.py``):

* a VM that bids 0 gets 0; a market whose bids are all 0 has price 0 and allocates nothing;
* when every VM with a positive bid is capped (demand below supply), the price is 0 and the
  unallocated capacity stays idle (nobody values it);
* a market of zero capacity allocates nothing and its price is ``inf`` when anyone bids;
* an empty market (no VMs) has price 0;
* a price below the smallest normal float (:data:`_TINY`, e.g. bids of 1e-300 on a capacity of
  1e12) has lost digits: an uncapped VM then gets ``(b_i / uncapped_bids) * capacity_left`` (the
  same quantity, computed without the subnormal), so no share exceeds the capacity.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from merkat.market import share_kernel

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

# Relative tolerance when comparing a VM's bid per unit of cap with a candidate price, so that
# a VM whose share equals its cap exactly is treated the same on both sides of rounding noise.
_RTOL = 1e-12

# Below this a price is subnormal (fewer significant digits): shares are computed from the two
# terms of the price instead (see the module docstring).
_TINY = float(np.finfo(np.float64).tiny)


@dataclass(frozen=True)
class Shares:
    """Result of one segmented proportional-share clearing.

    ``allocation[i]`` is VM ``i``'s amount of the resource; ``price[g]`` is group ``g``'s price
    (credits per unit per period); ``capped[i]`` tells whether VM ``i`` received its cap;
    ``uncapped_bids[g]`` and ``capacity_left[g]`` are the two terms of the price.
    """

    allocation: FloatArray
    price: FloatArray
    capped: npt.NDArray[np.bool_]
    uncapped_bids: FloatArray
    capacity_left: FloatArray


def proportional_share(
    bids: npt.ArrayLike,
    caps: npt.ArrayLike,
    capacity: npt.ArrayLike,
    group: npt.ArrayLike | None = None,
) -> Shares:
    """Clear one proportional-share market per group, with caps (water-filling).

    ``bids`` and ``caps`` are per VM (``bids >= 0``, ``caps >= 0``; ``inf`` means uncapped).
    ``capacity`` is a scalar or one value per group; ``group[i]`` is VM ``i``'s group in
    ``[0, len(capacity))`` (all zeros when omitted). Returns allocations, per-group prices and
    the capped mask. Pure and vectorised: O(n log n) for n VMs whatever the number of groups.
    """
    b = np.asarray(bids, dtype=np.float64)
    m = np.asarray(caps, dtype=np.float64)
    cap_g = np.atleast_1d(np.asarray(capacity, dtype=np.float64))
    n, n_groups = b.shape[0], cap_g.shape[0]
    if n == 0 or not b.any():
        # No VM, or no bid at all (an untraded resource): nothing is allocated, every price is
        # 0 and all the capacity is left (what the general rule below gives, without the work).
        return Shares(np.zeros(n), np.zeros(n_groups), np.zeros(n, dtype=np.bool_),
                      np.zeros(n_groups), cap_g.copy())
    if n >= share_kernel.MIN_VMS and n_groups > 0 and share_kernel.enabled():
        # (group indices checked: the compiled loop does not check its bounds)
        g = np.zeros(n, dtype=np.int64) if group is None else np.asarray(group, dtype=np.int64)
        if group is None or (g.shape == (n,) and g.min() >= 0 and g.max() < n_groups):
            return Shares(*share_kernel.compiled_share(b, m, cap_g, g, 1.0 + _RTOL, _TINY))
    fast = uncapped_share(b, m, cap_g, group)
    return fast if fast is not None else proportional_share_numpy(b, m, cap_g, group)


_SAFE_SUM = 1e300
"""Bids (and finite caps) summing below this keep every running sum of the reference finite
(non-negative terms: a prefix is at most the total), so a market's first position subtracts
its own running sum from itself exactly (``x - x == 0.0``)."""


def _shares_at(b: FloatArray, price: float, left_b: float, left_c: float) -> FloatArray:
    """One market's uncapped shares at ``price``: ``b / price``; below the smallest normal
    price, ``(b / left_b) * left_c`` (the same shares without dividing by a subnormal);
    none at price 0. (The caller sets numpy's error state.)"""
    if price >= _TINY:
        return b / price
    if price > 0:
        return (b / left_b) * left_c
    return np.zeros(b.shape[0])


def uncapped_share(
    b: FloatArray, m: FloatArray, cap_g: FloatArray, group: npt.ArrayLike | None
) -> Shares | None:
    """:func:`proportional_share_numpy`'s answer, bit for bit, when **no VM of any market is
    capped** (each VM's bid per unit of cap within its market's price ``sum(bids) /
    capacity``, the water-filling's first step), else None (the caller runs the reference).

    What it replaces: the reference's sort by market and bid per unit of cap, its running
    sums and its search for each market's first uncapped position (~45 numpy calls, a third
    of them the ``lexsort``) by ~15 calls without a sort, for the usual market of the
    period (one-core VMs on one-core hosts are never capped: every clearing of a node, the
    load balancer's start, the final mapping's and the admission points'). Why it is the
    same: when a market's first VM (the highest bid per unit of cap) is not capped, the
    reference takes that position's price, whose terms are the market's total bid (summed in
    input order, as ``bincount``) minus its running sum minus itself (0.0 while the sums are
    finite, :data:`_SAFE_SUM`) and its capacity minus 0.0, and gives every VM ``bid /
    price`` (the subnormal rule and the non-finite-to-0 rule alike); these are the same
    IEEE operations on the same values, only not sorted. ``tests/test_market_share.py``
    compares both, every output array byte for byte, on random markets."""
    n, n_groups = b.shape[0], cap_g.shape[0]
    if group is None or n_groups == 1:
        if n_groups != 1:
            return None  # (the reference's odd case: one market, several capacities)
        g = np.zeros(n, dtype=np.int64)
        single = True
    else:
        g = np.asarray(group, dtype=np.int64)
        if g.shape != (n,) or n_groups == 0:
            return None
        single = False
    total_b = np.bincount(g, weights=b, minlength=n_groups)
    if total_b.shape[0] != n_groups:
        return None  # a group out of range: the reference's error
    if not single:
        # (one market's first position has no running sum before it: nothing to check)
        if not b.sum() < _SAFE_SUM:
            return None
        if not np.sum(m, where=m < np.inf) < _SAFE_SUM:
            return None
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        left_b, left_c, price, ratio = first_step(b, m, total_b, cap_g)
        if single:
            p0 = float(price[0])
            if not (ratio <= p0 * (1.0 + _RTOL)).all():
                return None
            share = _shares_at(b, p0, left_b[0], left_c[0])
        else:
            if not (ratio <= (price * (1.0 + _RTOL))[g]).all():
                return None
            gp = price[g]
            share = np.where(gp > 0, b / gp, 0.0)
            sub = (gp > 0) & (gp < _TINY)
            if sub.any():
                share[sub] = (b[sub] / left_b[g[sub]]) * left_c[g[sub]]
    allocation = np.where(np.isfinite(share), share, 0.0)
    return Shares(allocation, price, np.zeros(n, dtype=np.bool_), left_b, left_c)


def first_step(b: FloatArray, m: FloatArray, total_b: npt.NDArray[Any], cap_g: FloatArray
               ) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """The water-filling's first step per market (``total_b``: its bids summed, ``cap_g``: its
    capacity): what is left to share of bids and of capacity, the price, and each VM's bid per
    unit of its cap (``b``, ``m``); no VM is capped when every ratio is within its market's
    price times ``1 + _RTOL`` (:func:`uncapped_share`, :func:`~merkat.market.host_shares.
    none_capped`). Call it under ``np.errstate(divide=, invalid=, over="ignore")``."""
    left_b = np.maximum(total_b - 0.0, 0.0)
    left_c = cap_g - 0.0
    ratio = np.where(b > 0, b / m, 0.0)
    price = np.where(left_b <= 0.0, 0.0, np.where(left_c > 0.0, left_b / left_c, np.inf))
    return left_b, left_c, price, ratio


def proportional_share_numpy(
    b: FloatArray, m: FloatArray, cap_g: FloatArray, group: npt.ArrayLike | None
) -> Shares:
    """The reference of :func:`proportional_share` (its arguments converted, at least one
    positive bid), vectorised with numpy; :mod:`merkat.market.share_kernel` is its compiled
    twin, tested equal byte for byte."""
    n, n_groups = b.shape[0], cap_g.shape[0]
    price = np.zeros(n_groups)
    uncapped_bids = np.zeros(n_groups)
    capacity_left = cap_g.copy()
    allocation = np.zeros(n)
    capped = np.zeros(n, dtype=np.bool_)
    single = group is None or n_groups == 1

    # Bid per unit of cap: the VMs with the highest ratio reach their cap first.
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(b > 0, b / m, 0.0)  # cap 0 with a bid > 0 -> inf: capped first (at 0)

    if single:
        # One market: the same arithmetic as the segmented case below with every VM in group 0
        # (a stable sort on the ratio alone gives the same order as the lexsort on (group,
        # ratio); subtracting the group's starting prefix sum, 0.0, changes nothing).
        order = np.argsort(-ratio, kind="stable")
        sb, sm, sr = b[order], m[order], ratio[order]
        sm0 = np.where(np.isinf(sm), 0.0, sm)
        csb = np.concatenate(([0.0], np.cumsum(sb)))
        csm = np.concatenate(([0.0], np.cumsum(sm0)))
        before_b, before_m = csb[:-1], csm[:-1]
        total_b = np.bincount(np.zeros(n, dtype=np.int64), weights=b, minlength=1)
        left_b = np.maximum(total_b[0] - before_b, 0.0)
        left_c = cap_g[0] - before_m
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            p = np.where(left_b <= 0.0, 0.0, np.where(left_c > 0.0, left_b / left_c, np.inf))
        ok = sr <= p * (1.0 + _RTOL)
        first0 = int(ok.argmax()) if ok.any() else n
        if first0 < n:
            price[0], uncapped_bids[0], capacity_left[0] = p[first0], left_b[first0], left_c[first0]
        else:
            # Every VM at its cap: no bid is left to set a price; the rest stays idle.
            capacity_left[0] = cap_g[0] - (csm[n] - csm[0])
        s_capped = np.arange(n) < first0
        gp0 = price[0]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            s_share = _shares_at(sb, gp0, uncapped_bids[0], capacity_left[0])
            s_alloc = np.where(s_capped, sm0, s_share)
        s_alloc = np.where(np.isfinite(s_alloc), s_alloc, 0.0)
        allocation[order] = s_alloc
        capped[order] = s_capped
        return Shares(allocation, price, capped, uncapped_bids, capacity_left)

    g = np.asarray(group, dtype=np.int64)
    order = np.lexsort((-ratio, g))
    sb, sm, sg, sr = b[order], m[order], g[order], ratio[order]
    counts = np.bincount(g, minlength=n_groups)
    starts = np.cumsum(counts) - counts

    # Bids and caps of the VMs before position j in its group (the candidates to be capped).
    sm0 = np.where(np.isinf(sm), 0.0, sm)
    csb = np.concatenate(([0.0], np.cumsum(sb)))
    csm = np.concatenate(([0.0], np.cumsum(sm0)))
    j = np.arange(n)
    st = starts[sg]
    before_b = csb[:-1] - csb[st]
    before_m = csm[:-1] - csm[st]
    total_b = np.bincount(g, weights=b, minlength=n_groups)

    left_b = np.maximum(total_b[sg] - before_b, 0.0)
    left_c = cap_g[sg] - before_m
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        p = np.where(left_b <= 0.0, 0.0, np.where(left_c > 0.0, left_b / left_c, np.inf))
    # Position j is the first uncapped VM of its group when its ratio does not exceed the
    # price that would hold if all VMs before it were capped (the mediant argument makes the
    # first such position the unique consistent one).
    ok = sr <= p * (1.0 + _RTOL)
    first = np.full(n_groups, -1, dtype=np.int64)
    nonempty = counts > 0
    idx = np.where(ok, j, n)
    first[nonempty] = np.minimum.reduceat(idx, starts[nonempty])
    all_capped = nonempty & (first == n)
    ends = starts + counts

    # Per-group price and the two terms it is made of.
    sel = nonempty & ~all_capped
    fs = first[sel]
    price[sel] = p[fs]
    uncapped_bids[sel] = left_b[fs]
    capacity_left[sel] = left_c[fs]
    if np.any(all_capped):
        # Every VM at its cap: no bid is left to set a price; the rest of capacity stays idle.
        last_cap = csm[ends[all_capped]] - csm[starts[all_capped]]
        capacity_left[all_capped] = cap_g[all_capped] - last_cap

    first_of = np.where(all_capped, ends, first)[sg]
    s_capped = j < first_of
    gp = price[sg]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        s_share = np.where(gp > 0, sb / gp, 0.0)
        if np.any((gp > 0) & (gp < _TINY)):
            sub = (gp > 0) & (gp < _TINY)
            s_share[sub] = (sb[sub] / uncapped_bids[sg[sub]]) * capacity_left[sg[sub]]
        s_alloc = np.where(s_capped, sm0, s_share)
    s_alloc = np.where(np.isfinite(s_alloc), s_alloc, 0.0)
    allocation[order] = s_alloc
    capped[order] = s_capped
    return Shares(allocation, price, capped, uncapped_bids, capacity_left)


def proportional_share_small(
    bids: list[float], caps: list[float], capacity: float
) -> tuple[list[float], float, float, float]:
    """The same rule as :func:`proportional_share` for one market of a few VMs, in plain
    Python (numpy's per-call overhead dominates below a few dozen VMs; the load balancer
    clears single nodes thousands of times per period).

    Returns ``(allocations, price, uncapped_bids, capacity_left)``. Tested equal to the
    vectorised version on random markets.
    """
    order, first, price, left_b, left_c = _small_market(bids, caps, capacity)
    alloc = [0.0] * len(bids)
    inf = math.inf
    for pos, i in enumerate(order):
        if pos < first:
            alloc[i] = 0.0 if caps[i] == inf else caps[i]
        elif 0.0 < price < inf:
            alloc[i] = _share(bids[i], price, left_b, left_c)
    return alloc, price, left_b, left_c


def segmented_share_small(
    rows_b: list[list[float]], rows_m: list[list[float]], capacities: list[float]
) -> tuple[list[list[float]], list[float], list[float]]:
    """:func:`proportional_share` of a few markets in plain Python, bit for bit.

    ``rows_b[g]`` and ``rows_m[g]`` are the bids and caps of market ``g`` (of capacity
    ``capacities[g]``), in input order. Returns, per market, its VMs' allocations in input
    order, and the market's uncapped bids and capacity left: what ``proportional_share`` gives
    for the concatenated rows with one group per row. The same IEEE operations run in the same
    order, including the prefix sums that run across markets (numpy's ``cumsum`` adds left to
    right over the whole sorted array, so a market's "bids before position j" is a difference
    of two running sums, whose rounding depends on the markets before it). The load balancer
    clears a few candidate nodes per move, where numpy's per-call overhead dominates.
    """
    inf = math.inf
    limit = 1.0 + _RTOL
    allocs: list[list[float]] = []
    uncapped: list[float] = []
    left: list[float] = []
    cb = cm = 0.0  # the running sums over every market so far (csb, csm at a position)
    for bids, caps, cap in zip(rows_b, rows_m, capacities, strict=True):
        n = len(bids)
        ratio = [(b / m if m > 0 else inf) if b > 0 else 0.0
                 for b, m in zip(bids, caps, strict=True)]
        order = sorted(range(n), key=ratio.__getitem__, reverse=True) if n > 1 else list(range(n))
        total = 0.0
        for b in bids:  # as numpy's bincount sums a group's weights: in input order
            total += b
        base_b, base_m = cb, cm
        first, price, left_b, left_c = n, 0.0, 0.0, cap
        for pos, i in enumerate(order):
            if first == n:
                lb = total - (cb - base_b)
                if lb < 0.0:  # = max(lb, 0.0) (NaN stays NaN)
                    lb = 0.0
                lc = cap - (cm - base_m)
                p = 0.0 if lb <= 0.0 else (lb / lc if lc > 0.0 else inf)
                if ratio[i] <= p * limit:
                    first, price, left_b, left_c = pos, p, lb, lc
            cb += bids[i]
            m = caps[i]
            cm += 0.0 if m == inf else m
        if first == n:  # every VM at its cap: no price, the rest of the capacity is idle
            left_b, left_c = 0.0, cap - (cm - base_m)
        alloc = [0.0] * n
        for pos, i in enumerate(order):
            if pos < first:
                m = caps[i]
                a = 0.0 if m == inf else m
            elif price > 0.0:
                a = bids[i] / price if price >= _TINY else (bids[i] / left_b) * left_c
            else:
                a = 0.0
            alloc[i] = a if -inf < a < inf else 0.0  # (NaN: 0.0 too)
        allocs.append(alloc)
        uncapped.append(left_b)
        left.append(left_c)
    return allocs, uncapped, left


def share_of_last(bids: list[float], caps: list[float], capacity: float) -> float:
    """The allocation of the last VM of a small market: ``proportional_share_small(bids,
    caps, capacity)[0][-1]`` without the others' (the load balancer asks, for each candidate
    node, what a VM would get there)."""
    order, first, price, left_b, left_c = _small_market(bids, caps, capacity)
    last = len(bids) - 1
    if order.index(last) < first:
        c = caps[last]
        return 0.0 if c == math.inf else c
    return _share(bids[last], price, left_b, left_c) if 0.0 < price < math.inf else 0.0


def _share(bid: float, price: float, left_b: float, left_c: float) -> float:
    """An uncapped VM's share ``bid / price`` (``price`` positive and finite; computed from the
    price's two terms when it is subnormal)."""
    return bid / price if price >= _TINY else (bid / left_b) * left_c


def first_share_of_added(
    total_b: float, ratio_max: float, bid: float, capacity: float
) -> float | None:
    """:func:`share_of_last` in O(1) when no VM of the market is capped, else None.

    ``total_b`` is ``sum(bids)`` (which Python sums left to right, so ``sum(others) + bid``
    when the VM is added last); ``ratio_max`` the largest bid per unit of cap among the VMs.
    This is the first step of the water-filling: if the VM with the highest ratio is not
    capped at the price all bids set, nobody is, and the VM gets ``bid / price``.
    """
    left_b = total_b - 0.0
    if left_b < 0.0:  # = max(total_b - 0.0, 0.0) without the call (NaN stays NaN)
        left_b = 0.0
    left_c = capacity - 0.0
    if left_b <= 0.0:
        p = 0.0
    elif left_c > 0.0:
        p = left_b / left_c
    else:
        p = math.inf
    if ratio_max <= p * (1.0 + _RTOL):
        return _share(bid, p, left_b, left_c) if 0.0 < p < math.inf else 0.0
    return None


def bid_ratio(bid: float, cap: float) -> float:
    """A VM's bid per unit of cap, as the water-filling orders VMs (0 without a bid)."""
    return (bid / cap if cap > 0 else math.inf) if bid > 0 else 0.0


def _small_market(
    bids: list[float], caps: list[float], capacity: float
) -> tuple[list[int], int, float, float, float]:
    """Water-filling on one small market: ``(order, first, price, uncapped_bids,
    capacity_left)``, where ``order`` lists the VMs by decreasing bid per unit of cap (ties in
    input order) and the VMs before position ``first`` are capped."""
    n = len(bids)
    inf = math.inf
    ratio = [(b / m if m > 0 else inf) if b > 0 else 0.0 for b, m in zip(bids, caps, strict=True)]
    # Decreasing ratio, ties in input order (sorted is stable, also with reverse=True).
    order = sorted(range(n), key=ratio.__getitem__, reverse=True) if n > 1 else list(range(n))
    total_b = sum(bids)
    before_b = before_m = 0.0
    left_b, left_c = 0.0, capacity
    for pos, i in enumerate(order):
        left_b = total_b - before_b
        if left_b < 0.0:  # = max(total_b - before_b, 0.0), as in first_share_of_added
            left_b = 0.0
        left_c = capacity - before_m
        if left_b <= 0.0:
            p = 0.0
        elif left_c > 0.0:
            p = left_b / left_c  # as the vectorised rule (inf if it overflows)
        else:
            p = inf
        if ratio[i] <= p * (1.0 + _RTOL):
            return order, pos, p, left_b, left_c
        before_b += bids[i]
        if caps[i] != inf:
            before_m += caps[i]
    # Every VM capped (or none): no price, the rest is idle.
    return order, n, 0.0, 0.0, capacity - before_m

