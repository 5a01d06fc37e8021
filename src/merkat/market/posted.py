"""Posted prices adapted to demand (grid-cloud model §3.4, eq. 5) — pure code.

A provider posts one price per resource (CPU per MI, memory per MB, disk per GB) and every
``s`` seconds moves it by the ratio of the resource's demand to the provider's total:

    P(t') = P(t) · (1 + (r^d(t') − r) / r) ^ (r^d(t') / r^d(t))   if r^d(t') > 0 and r^d(t) > 0
    P(t') = P(t) · (1 + (r^d(t') − r) / r)                          if r^d(t') > 0 and r^d(t) = 0
    P(t') = P(t) / 2                                                if r^d(t') = 0

where ``r`` is the provider's total amount of the resource and ``r^d`` the amount demanded by
the tasks in the provider (running or queued). ``1 + (r^d − r)/r`` is simply ``r^d / r``: the
price rises while demand exceeds the total, falls while it is below, and the exponent sharpens
the move when demand changed fast since the previous period.

Contract: :func:`adapt` is eq. 5 exactly (no floor, no cap). Eq. 5 is multiplicative, so a
price that reaches 0 (float underflow after long idle spells) would stay 0 for ever;
:class:`PostedPrices` therefore keeps every price at or above a per-resource ``floor``
(default: 10⁻⁹ of the initial price) and, since a jump after a near-zero demand can
overflow, at or below a ``ceiling`` (default: 10¹² times the initial price); see
``docs/gridcloud.md``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field


def _check(name: str, value: float, *, positive: bool = False) -> None:
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        kind = "positive" if positive else "non-negative"
        raise ValueError(f"{name} must be a finite {kind} number, got {value!r}")


def adapt(price: float, demand_prev: float, demand_now: float, capacity: float) -> float:
    """Eq. 5: the price of one resource after one adaptation period.

    ``price`` is P(t), ``demand_prev`` r^d(t), ``demand_now`` r^d(t') and ``capacity`` r (the
    provider's total of the resource). Raises ValueError on negative, non-finite input or a
    non-positive capacity. A result beyond the float range is ``inf``.
    """
    _check("price", price)
    _check("demand_prev", demand_prev)
    _check("demand_now", demand_now)
    _check("capacity", capacity, positive=True)
    if demand_now == 0:
        return price / 2
    ratio = 1 + (demand_now - capacity) / capacity
    if demand_prev == 0:
        return price * ratio
    try:
        return float(price * ratio ** (demand_now / demand_prev))
    except OverflowError:  # a huge jump after a near-zero demand
        return math.inf


@dataclass
class PostedPrices:
    """The posted prices of one provider, one per resource, adapted by :func:`adapt`.

    ``prices`` maps a resource name to its current price; ``capacity`` to the provider's total
    (same units as the demand); ``floor`` to the lowest price eq. 5 may reach (missing: 10⁻⁹ of
    the initial price), ``ceiling`` to the highest (missing: 10¹² times the initial price). :meth:`update` takes the demand now, remembers it as r^d(t) for the
    next call and returns the new prices. The first call uses ``initial_demand`` (default 0:
    the second case of eq. 5).
    """

    prices: dict[str, float]
    capacity: Mapping[str, float]
    floor: dict[str, float] = field(default_factory=dict)
    ceiling: dict[str, float] = field(default_factory=dict)
    demand: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for r, p in self.prices.items():
            _check(f"price of {r}", p, positive=True)
            if r not in self.capacity:
                raise ValueError(f"no capacity for resource {r!r}")
            _check(f"capacity of {r}", self.capacity[r], positive=True)
            self.floor.setdefault(r, p * 1e-9)
            self.ceiling.setdefault(r, p * 1e12)
            self.demand.setdefault(r, 0.0)

    def update(self, demand_now: Mapping[str, float]) -> dict[str, float]:
        """Adapt every price to ``demand_now`` (r^d(t') per resource); return the new prices."""
        for r, p in self.prices.items():
            d = float(demand_now[r])
            new = adapt(p, self.demand[r], d, self.capacity[r])
            self.prices[r] = min(self.ceiling[r], max(self.floor[r], new))
            self.demand[r] = d
        return dict(self.prices)
