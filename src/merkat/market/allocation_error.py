"""The allocation error (Merkat §3.1, SLO paper §2): how far a VM's enforceable allocation is
from its ideal one.

The *allocation error* of VM i for resource r is ``e_r = (a_r - â_r) / a_r``, with ``a`` the
enforceable allocation (proportional share among the VMs of its node: :func:`enforceable`) and
``â`` the ideal one (the cluster as one host). A VM's error is ``max_r |e_r|``
(:func:`vm_errors`); :func:`rel_error` is one ``|e|`` in plain Python, bit for bit as the
arrays'. The load balancer (:mod:`merkat.market.balance`) minimises these errors.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from merkat.market.share import proportional_share
from merkat.market.types import FloatArray, Hosts, IntArray, VMs, bid_on, row_max

ERROR_LIMIT = 1e3
"""|e| is clipped here: a VM that gets nothing while its ideal share is positive (a = 0 < â)
has an unbounded relative error; 1,000 (100,000 %) ranks it above any real error."""


def allocation_errors(actual: FloatArray, ideal: FloatArray) -> FloatArray:
    """Per-resource errors ``(a - â) / a`` (0 when both are 0; clipped to ±ERROR_LIMIT)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        e = np.where(actual > 0, (actual - ideal) / actual, np.where(ideal > 0, -ERROR_LIMIT, 0.0))
    return np.clip(e, -ERROR_LIMIT, ERROR_LIMIT)


def vm_errors(actual: FloatArray, ideal: FloatArray,
              columns: Sequence[int] | None = None) -> FloatArray:
    """A VM's error: the largest ``|e_r|`` over its resources.

    ``columns``: when the caller knows that both arrays are 0 in every other column (a
    resource nobody bids on has no allocation, and its ideal share is 0), the resources
    that can make an error; each other column's error is then ``+0.0``, which the largest
    does not change (``np.maximum(x, 0.0)`` is ``x`` for ``x >= 0`` and NaN), so one such
    column is computed alone (:func:`column_errors`: ~8 numpy calls on one column instead
    of ~15 on all). ``tests/test_market_clear.py`` compares both."""
    if columns is not None and len(columns) <= 1:
        if not columns:
            return np.zeros(actual.shape[0])
        k = columns[0]
        return column_errors(actual[:, k], ideal[:, k])
    return row_max(np.abs(allocation_errors(actual, ideal)))


def column_errors(actual: FloatArray, ideal: FloatArray) -> FloatArray:
    """``|allocation_errors|`` of one resource (1-D arrays), bit for bit: ``|clip(e, -L,
    L)|`` is ``min(|e|, L)`` (NaN kept by both), and where ``actual`` is not positive the
    error is ``L`` or 0 as there."""
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.abs((actual - ideal) / actual)
    e = np.where(actual > 0, q, np.where(ideal > 0, ERROR_LIMIT, 0.0))
    out: FloatArray = np.minimum(e, ERROR_LIMIT)
    return out


def enforceable(hosts: Hosts, vms: VMs, host: IntArray) -> tuple[FloatArray, FloatArray]:
    """Per-node proportional share: allocations ``(n, R)`` (0 when unplaced) and node prices.
    A resource nobody bids on is not cleared: its allocations and prices stay 0, which is
    what :func:`~merkat.market.share.proportional_share` gives a market without a bid."""
    alloc, prices, _ = enforceable_capped(hosts, vms, host)
    return alloc, prices


def enforceable_capped(hosts: Hosts, vms: VMs,
                       host: IntArray) -> tuple[FloatArray, FloatArray, bool]:
    """:func:`enforceable`, and whether some VM of some node was capped (the water-filling
    went past its first step somewhere: an admission point then cannot clear a node alone,
    :mod:`merkat.market.host_shares`)."""
    n, n_res = len(vms), len(hosts.capacity[0]) if len(hosts) else vms.bid.shape[1]
    alloc = np.zeros((n, n_res))
    prices = np.zeros((len(hosts), n_res))
    placed = np.flatnonzero(host >= 0)
    if placed.size == 0 or len(hosts) == 0:
        return alloc, prices, False
    traded = bid_on(vms.bid)
    capped = False
    for r in range(n_res):
        if not traded[r]:
            continue
        s = proportional_share(
            vms.bid[placed, r], vms.cap[placed, r], hosts.capacity[:, r], host[placed]
        )
        alloc[placed, r] = s.allocation
        prices[:, r] = s.price
        capped = capped or bool(s.capped.any())
    return alloc, prices, capped


def rel_error(a: float, ideal: float) -> float:
    """``|e|`` of one allocation as :func:`allocation_errors` computes it (the same IEEE
    operations, so the same value), in plain Python."""
    if a > 0:
        e = (a - ideal) / a
        # = abs(min(max(e, -ERROR_LIMIT), ERROR_LIMIT)), without the calls (NaN stays NaN)
        if e > ERROR_LIMIT:
            return ERROR_LIMIT
        if e < -ERROR_LIMIT:
            return ERROR_LIMIT
        return abs(e)
    return ERROR_LIMIT if ideal > 0 else 0.0
