"""Normal-distribution price and performance guarantees (Tycoon §4.2, eq. 3-6).

Pure: no I/O, no clock. The others' bid on host j (its "price" y) is taken as normal,
Y ~ N(μ_j, σ_j²) (eq. 3), with μ and σ from :class:`~merkat.predict.moments.RunningMoments` or a
smoothed window. Then

- eq. 4: p = Φ((y − μ)/σ), the probability that the price is at most y (:func:`probability`);
- eq. 5: y_p = μ + σ·Φ⁻¹(p), the price not exceeded with probability p (:func:`price_at`);
- eq. 6: U(X, p) ≥ Σ_j w_j·x_j/(x_j + μ_j + σ_j·Φ⁻¹(p)), the utility a budget X buys with
  probability at least p, x being Best Response's bids for X (:func:`utility_at`);
- inverted: the smallest budget whose eq.-6 utility reaches a target (:func:`budget_for`), and
  the budget that finishes ``work`` before a deadline with probability p
  (:func:`budget_for_deadline`: the utility must reach work/deadline).

Decisions (docs/predict.md): the bids x in eq. 6 are Best Response's against the pessimistic
prices y_p (the user plans for them; with the mean prices instead the bound is lower and the
budget recommendation higher); "with probability p" holds per host (the paper does not model
the joint law of the hosts' prices); y_p is floored at the reserve price (a negative price
quantile means "free" in the normal model but a host is never cheaper than its reserve).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

from merkat.market.best_response import Response, best_response

_STD = NormalDist()


def _check_p(p: float) -> float:
    if not 0 < p < 1:
        raise ValueError(f"probability must be in (0, 1), got {p}")
    return p


def probability(y: float, mean: float, std: float) -> float:
    """Eq. 4: P(Y ≤ y) = Φ((y − μ)/σ) (a step at μ when σ = 0)."""
    if std < 0:
        raise ValueError(f"std must be >= 0, got {std}")
    if std == 0:
        return 1.0 if y >= mean else 0.0
    return _STD.cdf((y - mean) / std)


def price_at(p: float, mean: npt.ArrayLike, std: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Eq. 5: y_p = μ + σ·Φ⁻¹(p), elementwise."""
    z = _STD.inv_cdf(_check_p(p))
    mu = np.asarray(mean, dtype=np.float64)
    sd = np.asarray(std, dtype=np.float64)
    if (sd < 0).any():
        raise ValueError("std must be >= 0")
    return np.asarray(mu + sd * z, dtype=np.float64)


def guaranteed(
    budget: float,
    weights: npt.ArrayLike,
    mean: npt.ArrayLike,
    std: npt.ArrayLike,
    p: float,
    *,
    caps: npt.ArrayLike | None = None,
    reserve: float = 0.0,
) -> Response:
    """Best Response for ``budget`` against the prices y_p of eq. 5; its utility is eq. 6's
    bound U(X, p)."""
    y = np.maximum(price_at(p, mean, std), reserve)
    return best_response(budget, weights, y, caps=caps, reserve=reserve)


def utility_at(
    budget: float,
    weights: npt.ArrayLike,
    mean: npt.ArrayLike,
    std: npt.ArrayLike,
    p: float,
    *,
    caps: npt.ArrayLike | None = None,
    reserve: float = 0.0,
) -> float:
    """Eq. 6: the utility ``budget`` buys with probability at least ``p`` (per host)."""
    return guaranteed(budget, weights, mean, std, p, caps=caps, reserve=reserve).utility


def budget_for(
    target: float,
    weights: npt.ArrayLike,
    mean: npt.ArrayLike,
    std: npt.ArrayLike,
    p: float,
    *,
    caps: npt.ArrayLike | None = None,
    reserve: float = 0.0,
    rtol: float = 1e-10,
) -> float:
    """The smallest budget X with U(X, p) ≥ ``target`` (``inf`` if no budget reaches it:
    the utility is below Σ w_j, or Σ c_j with caps, for every finite budget).

    U(X, p) is increasing and continuous in X, so the root is bracketed and found by
    :func:`scipy.optimize.brentq`.
    """
    from scipy.optimize import brentq

    w = np.asarray(weights, dtype=np.float64)
    if target <= 0:
        return 0.0
    ceiling = float(np.minimum(w, np.inf if caps is None else np.asarray(caps, float)).sum())
    if target >= ceiling:
        return math.inf

    def gap(x: float) -> float:
        return utility_at(x, w, mean, std, p, caps=caps, reserve=reserve) - target

    hi = 1.0
    while gap(hi) < 0:
        hi *= 2.0
        if hi > 1e300:
            return math.inf
    return float(brentq(gap, 0.0, hi, rtol=rtol, xtol=1e-300))


def budget_for_deadline(
    work: float,
    deadline: float,
    weights: Sequence[float] | npt.ArrayLike,
    mean: npt.ArrayLike,
    std: npt.ArrayLike,
    p: float,
    *,
    caps: npt.ArrayLike | None = None,
    reserve: float = 0.0,
) -> float:
    """The total budget that completes ``work`` (capacity·seconds, e.g. CPU-seconds) within
    ``deadline`` seconds with probability ``p``: a spending rate X whose eq.-6 utility reaches
    work/deadline, held for the deadline: X·deadline. Prices are credits per second."""
    if work < 0 or deadline <= 0:
        raise ValueError("work must be >= 0 and deadline > 0")
    rate = budget_for(work / deadline, weights, mean, std, p, caps=caps, reserve=reserve)
    return rate * deadline
