"""Tycoon's market: one continuous proportional-share auction per host (Tycoon §2.2, §3).

Pure: no I/O, no clock. Every host runs its own auction, re-cleared every interval (Tycoon:
10 s). A bid is a spending rate (credits per second) on one host; at most one VM per user per
host. :func:`clear_hosts` shares each host's capacity among its VMs in proportion to their bids,
with a per-VM cap (a VM cannot use more than its vCPUs; the capacity a capped VM cannot use goes
to the others: water-filling, :func:`~merkat.market.share.proportional_share` per host). The
host's spot price is the sum of its bids over its capacity (credits per CPU-second).

**Charging by use** (:func:`charges_by_use`, §3: "Tycoon only charges for resources actually
used, not bid for"): a VM whose bid entitles it to e = capacity·x/Σx pays its bid x·dt scaled by
the part of that entitlement it used, x·dt·min(1, used/e). A VM that uses all its entitlement
pays its bid; one that is capped at a single CPU of a host it would get two of pays half; an
idle VM pays nothing. The host's income never exceeds the sum of its bids.

The agent side is :mod:`merkat.market.best_response`; :func:`others_bids` gives it, for one
user, the y_j it faces.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from merkat.market.share import proportional_share

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

INTERVAL_S = 10.0
"""Tycoon's re-allocation interval (seconds)."""


@dataclass(frozen=True)
class HostClearing:
    """One interval's result: per VM its allocation and entitlement (capacity units); per host
    the total bids and the spot price (total bids / capacity)."""

    allocation: FloatArray
    entitlement: FloatArray
    total_bids: FloatArray
    price: FloatArray


def clear_hosts(
    capacity: npt.ArrayLike,
    host: npt.ArrayLike,
    bids: npt.ArrayLike,
    caps: npt.ArrayLike | None = None,
) -> HostClearing:
    """Clear every host's auction. ``capacity[j]`` per host; per VM its ``host`` index, its
    ``bids`` (≥ 0) and its ``caps`` (most it can use; ``inf`` or omitted: none)."""
    cap_h = np.asarray(capacity, dtype=np.float64)
    h = np.asarray(host, dtype=np.int64)
    b = np.asarray(bids, dtype=np.float64)
    if h.shape != b.shape:
        raise ValueError(f"host and bids differ in length ({h.size} vs {b.size})")
    if (b < 0).any() or not np.isfinite(b).all():
        raise ValueError("bids must be finite and >= 0")
    if h.size and (h.min() < 0 or h.max() >= cap_h.size):
        raise ValueError(f"host index out of range [0, {cap_h.size})")
    c = np.full(b.shape, np.inf) if caps is None else np.asarray(caps, dtype=np.float64)
    total = np.bincount(h, weights=b, minlength=cap_h.size).astype(np.float64)
    shares = proportional_share(b, c, cap_h, h)
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = np.where(total[h] > 0, cap_h[h] * b / total[h], 0.0)
        price = np.where(cap_h > 0, total / cap_h, np.where(total > 0, np.inf, 0.0))
    return HostClearing(shares.allocation, ent, total, price)


def charges_by_use(
    bids: npt.ArrayLike, used: npt.ArrayLike, entitlement: npt.ArrayLike, dt: float
) -> FloatArray:
    """x·dt·min(1, used/entitlement) per VM (0 where nothing is used or entitled)."""
    b = np.asarray(bids, dtype=np.float64)
    u = np.asarray(used, dtype=np.float64)
    e = np.asarray(entitlement, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = np.where(e > 0, np.minimum(1.0, u / e), 0.0)
    return np.asarray(b * dt * frac, dtype=np.float64)


def others_bids(total_bids: npt.ArrayLike, own: npt.ArrayLike) -> FloatArray:
    """y_j = host j's total bids minus the user's own (clipped at 0 against rounding)."""
    diff = np.asarray(total_bids, dtype=np.float64) - np.asarray(own, dtype=np.float64)
    return np.asarray(np.maximum(diff, 0.0), dtype=np.float64)
