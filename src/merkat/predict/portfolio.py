"""Markowitz mean-variance portfolios across hosts (Tycoon §4.4).

Pure: no I/O, no clock. The return of a host is the performance a credit buys there: delivered
capacity per credit, the inverse of its spot price times its capacity (:func:`returns`). With
the hosts' mean returns m and covariance Σ of returns, the closed forms (Merton 1972; the
"matrix equations" the paper takes from Halliwell) with A = 1ᵀΣ⁻¹1, B = 1ᵀΣ⁻¹m, C = mᵀΣ⁻¹m,
D = A·C − B² are:

- the minimum-variance ("risk free" in the paper) portfolio w = Σ⁻¹1/A, return B/A,
  variance 1/A (:func:`minimum_variance`);
- the efficient frontier: for a target return r, w = Σ⁻¹((C − r·B)·1 + (r·A − B)·m)/D with
  variance (A·r² − 2·B·r + C)/D (:func:`frontier_portfolio`, :func:`efficient_frontier`).

Weights sum to 1 and may be negative (a short position: bid less than nothing, impossible on a
real host). Decision (docs/predict.md): the closed forms are returned as they are; with
independent hosts (diagonal Σ) the minimum-variance weights are 1/σ_j² normalised, always
positive, and callers that need long-only weights use ``long_only=True`` on the frontier, which
solves the quadratic programme with scipy's SLSQP.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


def returns(prices: npt.ArrayLike, capacity: npt.ArrayLike = 1.0) -> FloatArray:
    """Delivered capacity per credit: capacity / price (prices > 0), elementwise."""
    p = np.asarray(prices, dtype=np.float64)
    if (p <= 0).any() or not np.isfinite(p).all():
        raise ValueError("prices must be finite and > 0 to define a return per credit")
    return np.asarray(np.asarray(capacity, dtype=np.float64) / p, dtype=np.float64)


@dataclass(frozen=True)
class Portfolio:
    """Weights (summing to 1), expected return and variance of return."""

    weights: FloatArray
    mean: float
    variance: float

    @property
    def std(self) -> float:
        return float(np.sqrt(max(self.variance, 0.0)))


def _checked(mean: npt.ArrayLike, cov: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
    m = np.asarray(mean, dtype=np.float64).ravel()
    s = np.asarray(cov, dtype=np.float64)
    if s.shape != (m.size, m.size):
        raise ValueError(f"covariance must be {m.size}x{m.size}, got {s.shape}")
    if m.size == 0:
        raise ValueError("need at least one host")
    if not np.allclose(s, s.T):
        raise ValueError("covariance must be symmetric")
    return m, s


def _constants(m: FloatArray, s: FloatArray) -> tuple[FloatArray, FloatArray, float, float, float]:
    ones = np.ones(m.size)
    try:
        inv1 = np.linalg.solve(s, ones)
        invm = np.linalg.solve(s, m)
    except np.linalg.LinAlgError:
        raise ValueError("covariance is singular: a host has no risk or hosts are collinear") from None
    return (
        np.asarray(inv1, dtype=np.float64),
        np.asarray(invm, dtype=np.float64),
        float(ones @ inv1),
        float(ones @ invm),
        float(m @ invm),
    )


def minimum_variance(mean: npt.ArrayLike, cov: npt.ArrayLike) -> Portfolio:
    """The minimum-variance portfolio w = Σ⁻¹1/(1ᵀΣ⁻¹1)."""
    m, s = _checked(mean, cov)
    inv1, _, a, b, _ = _constants(m, s)
    return Portfolio(inv1 / a, b / a, 1.0 / a)


def frontier_portfolio(
    mean: npt.ArrayLike, cov: npt.ArrayLike, target: float, *, long_only: bool = False
) -> Portfolio:
    """The least-variance portfolio of expected return ``target``."""
    m, s = _checked(mean, cov)
    if long_only:
        return _long_only(m, s, target)
    inv1, invm, a, b, c = _constants(m, s)
    d = a * c - b * b
    if d <= 1e-15 * max(1.0, a * c):
        raise ValueError("all hosts have the same mean return: the frontier is a single point")
    w = ((c - target * b) * inv1 + (target * a - b) * invm) / d
    return Portfolio(w, float(w @ m), float((a * target**2 - 2 * b * target + c) / d))


def _long_only(m: FloatArray, s: FloatArray, target: float) -> Portfolio:
    from scipy.optimize import minimize

    if not m.min() - 1e-12 <= target <= m.max() + 1e-12:
        raise ValueError(f"target {target} outside the hosts' returns [{m.min()}, {m.max()}]")
    n = m.size
    res = minimize(
        lambda w: float(w @ s @ w),
        np.full(n, 1.0 / n),
        jac=lambda w: 2 * s @ w,
        bounds=[(0.0, 1.0)] * n,
        constraints=[
            {"type": "eq", "fun": lambda w: float(w.sum() - 1.0)},
            {"type": "eq", "fun": lambda w: float(w @ m - target)},
        ],
        method="SLSQP",
        options={"ftol": 1e-14, "maxiter": 500},
    )
    w = np.clip(res.x, 0.0, None)
    w /= w.sum()
    return Portfolio(w, float(w @ m), float(w @ s @ w))


def efficient_frontier(
    mean: npt.ArrayLike, cov: npt.ArrayLike, points: int = 20, *, long_only: bool = False
) -> list[Portfolio]:
    """Portfolios on the efficient frontier, from the minimum-variance one to the best host's
    return, ``points`` of them."""
    m, s = _checked(mean, cov)
    lo = minimum_variance(m, s)
    start = max(lo.mean, float(m.min())) if long_only else lo.mean
    targets = np.linspace(start, float(m.max()), points)
    out = []
    for t in targets:
        if not long_only and abs(t - lo.mean) <= 1e-12 * max(1.0, abs(t)):
            out.append(lo)
        else:
            out.append(frontier_portfolio(m, s, float(t), long_only=long_only))
    return out


def sample_statistics(history: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
    """Mean returns and covariance (ddof=1) from a (snapshots × hosts) history of returns."""
    h = np.asarray(history, dtype=np.float64)
    if h.ndim != 2 or h.shape[0] < 2:
        raise ValueError("history must be a (snapshots x hosts) array with >= 2 snapshots")
    return h.mean(axis=0), np.atleast_2d(np.cov(h, rowvar=False))
