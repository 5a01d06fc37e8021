"""Tycoon's Best Response bidding (Tycoon §2.2, eq. 1-2; Feldman, Lai and Zhang 2005).

Pure: no I/O, no clock. A user with budget ``X`` (a spending rate, credits per second) faces
``n`` hosts; host ``j`` is worth ``w_j`` to her (its capacity) and the others bid ``y_j`` on it.
A bid ``x_j`` buys the share ``x_j/(x_j + y_j)`` of the host. Best Response solves

    maximise  U = Σ_j w_j·x_j/(x_j + y_j)   subject to  Σ_j x_j = X,  x_j ≥ 0.      (1-2)

The objective is concave, so the KKT conditions are sufficient: with λ the budget's
multiplier, w_j·y_j/(x_j + y_j)² = λ where x_j > 0 and w_j/y_j ≤ λ where x_j = 0, hence
x_j = max(0, √(w_j·y_j)·t − y_j) with t = 1/√λ chosen so that the bids spend X. The hosts
funded are those with the highest w_j/y_j (a water-filling); t has the closed form
t = (X + Σ_active y_j)/Σ_active √(w_j·y_j).

**Capped variant.** A VM cannot use more than ``c_j`` of its host (e.g. one CPU of a dual-CPU
host), so its utility is min(w_j·x_j/(x_j + y_j), c_j): any bid above
x̄_j = c_j·y_j/(w_j − c_j) is wasted. The KKT conditions of the problem with 0 ≤ x_j ≤ x̄_j
give x_j = clip(√(w_j·y_j)·t − y_j, 0, x̄_j); when the caps bind everywhere (X ≥ Σ x̄_j) the
rest of the budget is left unspent (returned in :attr:`Response.unspent`).

**Empty hosts.** With y_j = 0 any positive bid buys the whole host and the optimum does not
exist; the host's reserve price stands in for the others' bids: y_j is replaced by
max(y_j, reserve). A zero others' bid without a reserve price is an error.

Both variants are solved exactly by one sweep over the 2n breakpoints of the piecewise-linear
spending Σ_j x_j(t): O(n log n), vectorised (10,000 hosts in about a millisecond).

**Damped update** (:func:`damped`): x ← x + β·(x_BR − x), a convex combination of two bids that
both spend the budget, so it spends it too; β = 1 is plain Best Response, smaller β avoids the
oscillations of simultaneous best responses. See docs/tycoon.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


class BestResponseError(ValueError):
    """Bad input to Best Response; ``field`` names the offending input."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True)
class Response:
    """The bids (one per host, in input order), the utility they buy at the others' bids, and
    the part of the budget left unspent (non-zero only when caps bind everywhere)."""

    bids: FloatArray
    utility: float
    unspent: float


def _arrays(
    weights: npt.ArrayLike, others: npt.ArrayLike, caps: npt.ArrayLike | None
) -> tuple[FloatArray, FloatArray, FloatArray]:
    w = np.asarray(weights, dtype=np.float64).ravel()
    y = np.asarray(others, dtype=np.float64).ravel()
    if w.shape != y.shape:
        raise BestResponseError("others", f"{y.size} values for {w.size} hosts")
    c = (
        np.full(w.shape, np.inf)
        if caps is None
        else np.broadcast_to(np.asarray(caps, dtype=np.float64), w.shape).astype(np.float64)
    )
    for name, a in (("weight", w), ("others", y), ("cap", c)):
        if np.isnan(a).any() or (a < 0).any():
            raise BestResponseError(name, "must be >= 0 (and not NaN)")
    if not np.isfinite(w).all() or not np.isfinite(y).all():
        raise BestResponseError("weight", "weights and others' bids must be finite")
    return w, y, c


def host_utility(
    bids: npt.ArrayLike,
    weights: npt.ArrayLike,
    others: npt.ArrayLike,
    caps: npt.ArrayLike | None = None,
) -> FloatArray:
    """Per-host utility min(w_j·x_j/(x_j + y_j), c_j) (0 where x_j = 0)."""
    x = np.asarray(bids, dtype=np.float64)
    w, y, c = _arrays(weights, others, caps)
    denom = x + y
    u = np.where(x > 0, w * x / np.where(denom > 0, denom, 1.0), 0.0)
    return np.minimum(u, c)


def utility(
    bids: npt.ArrayLike,
    weights: npt.ArrayLike,
    others: npt.ArrayLike,
    caps: npt.ArrayLike | None = None,
) -> float:
    """U = Σ_j min(w_j·x_j/(x_j + y_j), c_j): eq. 1's objective (capped when caps are given)."""
    return float(host_utility(bids, weights, others, caps).sum())


def best_response(
    budget: float,
    weights: npt.ArrayLike,
    others: npt.ArrayLike,
    *,
    caps: npt.ArrayLike | None = None,
    reserve: float = 0.0,
) -> Response:
    """Spread ``budget`` over the hosts to maximise eq. 1 (capped when ``caps`` are given).

    ``weights[j]`` = w_j ≥ 0, ``others[j]`` = y_j ≥ 0 (raised to ``reserve`` where lower),
    ``caps[j]`` = c_j (the most utility host j can give this user; ``inf`` or ≥ w_j: none).
    Hosts of weight 0 get nothing. The utility is computed at the effective others' bids.
    """
    if not np.isfinite(budget) or budget < 0:
        raise BestResponseError("budget", f"must be a finite number >= 0, got {budget}")
    if not np.isfinite(reserve) or reserve < 0:
        raise BestResponseError("reserve", f"must be a finite number >= 0, got {reserve}")
    w, y0, c = _arrays(weights, others, caps)
    y = np.maximum(y0, reserve)
    usable = (w > 0) & (c > 0)
    if (usable & (y <= 0)).any():
        j = int(np.flatnonzero(usable & (y <= 0))[0])
        raise BestResponseError(
            "others", f"host {j} has no bids and no reserve price (set a reserve > 0)"
        )
    x = solve(float(budget), w, y, c if caps is not None else None, usable)
    return Response(x, utility(x, w, y, c), float(budget - x.sum()) if caps is not None else 0.0)


def solve(
    budget: float,
    w: FloatArray,
    y: FloatArray,
    c: FloatArray | None = None,
    usable: npt.NDArray[np.bool_] | None = None,
) -> FloatArray:
    """The bids of :func:`best_response` on validated arrays (y > 0 where usable), without the
    checks and the utility: the inner loop of simulations."""
    n = w.size
    x = np.zeros(n)
    if usable is None:
        usable = (w > 0) if c is None else (w > 0) & (c > 0)
    if n == 0 or budget <= 0 or not usable.any():
        return x
    if usable.all():
        wa, ya = w, y
        ca = c
    else:
        idx = np.flatnonzero(usable)
        wa, ya = w[idx], y[idx]
        ca = None if c is None else c[idx]
    xa = _uncapped(budget, wa, ya) if ca is None else _capped(budget, wa, ya, ca)
    if usable.all():
        return xa
    x[idx] = xa
    return x


def _uncapped(budget: float, w: FloatArray, y: FloatArray) -> FloatArray:
    """Water-filling: hosts by w/y descending; the active prefix is the longest whose last
    host still gets a positive bid at t = (X + Σy)/Σ√(wy)."""
    a = np.sqrt(w * y)
    order = np.argsort(-(w / y))
    t = (budget + np.cumsum(y[order])) / np.cumsum(a[order])
    ok = a[order] * t > y[order]
    k = int(np.flatnonzero(ok)[-1]) if ok.any() else 0
    x = np.maximum(a * t[k] - y, 0.0)
    x[order[k + 1 :]] = 0.0
    s = float(x.sum())
    if s > 0:
        x *= budget / s  # exact spending despite rounding
    return np.asarray(x, dtype=np.float64)


def _capped(budget: float, wa: FloatArray, ya: FloatArray, ca: FloatArray) -> FloatArray:
    """x_j = clip(√(w_j·y_j)·t − y_j, 0, x̄_j): one sweep over the breakpoints."""
    with np.errstate(divide="ignore", invalid="ignore"):
        xbar = np.where(ca < wa, ca * ya / (wa - ca), np.inf)
    total_cap = float(xbar.sum())
    if budget >= total_cap:
        return np.asarray(xbar, dtype=np.float64)
    a = np.sqrt(wa * ya)
    start = ya / a
    end = (ya + xbar) / a
    finite = np.isfinite(end)
    times = np.concatenate([start, end[finite]])
    deltas = np.concatenate([a, -a[finite]])
    order = np.argsort(times)
    times, deltas = times[order], deltas[order]
    slope = np.cumsum(deltas)  # slope of the spending just after each breakpoint
    spent = np.concatenate([[0.0], np.cumsum(slope[:-1] * np.diff(times))])
    k = int(np.searchsorted(spent, budget, side="right")) - 1
    k = min(max(k, 0), times.size - 1)
    while k > 0 and slope[k] <= 0:  # a flat stretch (all capped): step back onto the ramp
        k -= 1
    t = times[k] + (budget - spent[k]) / slope[k]
    xa = np.clip(a * t - ya, 0.0, xbar)
    # Spend the budget exactly despite rounding: scale the interior bids by the residue.
    residue = budget - float(xa.sum())
    inner = (xa > 0) & (xa < xbar)
    if residue != 0 and inner.any():
        xa[inner] += residue * xa[inner] / xa[inner].sum()
    return np.asarray(xa, dtype=np.float64)


def damped(previous: npt.ArrayLike, target: npt.ArrayLike, beta: float) -> FloatArray:
    """x + β·(x_BR − x): move the bids a fraction β ∈ (0, 1] of the way to the best response.

    If both spend the same budget, so does the result (a convex combination)."""
    if not 0 < beta <= 1:
        raise BestResponseError("beta", f"must be in (0, 1], got {beta}")
    p = np.asarray(previous, dtype=np.float64)
    q = np.asarray(target, dtype=np.float64)
    if p.shape != q.shape:
        raise BestResponseError("previous", f"{p.size} bids for {q.size} hosts")
    return p + beta * (q - p)
