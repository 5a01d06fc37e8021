"""Tycoon eq. 1-2: Best Response against the closed form, an independent optimiser (scipy
SLSQP) on random instances (zero bids with a reserve, caps), budget conservation, damping."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from merkat.market.best_response import (
    BestResponseError,
    best_response,
    damped,
    utility,
)


def _slsqp(budget: float, w: np.ndarray, y: np.ndarray, c: np.ndarray | None) -> float:
    """The optimum of eq. 1-2 (capped: x_j ≤ x̄_j, spend ≤ X) found by SLSQP, best of a few
    starts, made feasible."""
    from scipy.optimize import minimize

    n = w.size
    xbar = np.full(n, budget)
    if c is not None:
        with np.errstate(divide="ignore"):
            xbar = np.minimum(xbar, np.where(c < w, c * y / np.maximum(w - c, 1e-300), budget))

    def neg(x: np.ndarray) -> float:
        return -float(np.sum(w * x / (x + y)))

    def grad(x: np.ndarray) -> np.ndarray:
        return np.asarray(-(w * y / (x + y) ** 2))

    cons = [{"type": "ineq", "fun": lambda x: budget - x.sum(), "jac": lambda x: -np.ones(n)}]
    if c is None:
        cons = [{"type": "eq", "fun": lambda x: x.sum() - budget, "jac": lambda x: np.ones(n)}]
    best = -np.inf
    rng = np.random.default_rng(0)
    for start in (np.full(n, budget / n), rng.dirichlet(np.ones(n)) * budget):
        x0 = np.minimum(start, xbar)
        res = minimize(neg, x0, jac=grad, bounds=list(zip(np.zeros(n), xbar, strict=True)),
                       constraints=cons, method="SLSQP", options={"ftol": 1e-13, "maxiter": 1000})
        # SLSQP may overspend by its tolerance (~1e-8), which is worth λ·1e-8 of utility when
        # the budget is small: judge the feasible point it found (within bounds and budget).
        x = np.clip(res.x, 0.0, xbar)
        x *= min(1.0, budget / x.sum()) if x.sum() > 0 else 1.0
        best = max(best, -neg(x))
    return best


def test_closed_form_worked_example() -> None:
    # w = (1, 2, 3), y = 1, X = 10: t = (X + Σy)/Σ√(w·y) = 13/(1 + √2 + √3), x_j = √w_j·t − 1.
    r = best_response(10.0, [1, 2, 3], [1, 1, 1])
    t = 13 / (1 + np.sqrt(2) + np.sqrt(3))
    assert r.bids == pytest.approx([t - 1, np.sqrt(2) * t - 1, np.sqrt(3) * t - 1])
    assert r.bids.sum() == pytest.approx(10.0) and r.unspent == 0.0
    # A host not worth its price gets nothing: w/y = 0.01 below the water level.
    r = best_response(1.0, [1, 1], [1, 100])
    assert r.bids.tolist() == [1.0, 0.0]


def test_reserve_price_and_caps_exact() -> None:
    # Two hosts of 2 CPUs, the VM uses at most 1: x̄ = c·y/(w − c) = y. Host 2 is empty (y = 0):
    # the reserve 0.5 stands in. Budget 10 > Σx̄ = 2.5: every cap binds, 7.5 unspent.
    r = best_response(10.0, [2, 2, 2], [1, 1, 0], caps=[1, 1, 1], reserve=0.5)
    assert r.bids.tolist() == [1.0, 1.0, 0.5] and r.unspent == 7.5 and r.utility == 3.0
    with pytest.raises(BestResponseError, match="reserve"):
        best_response(1.0, [1, 1], [1, 0])
    with pytest.raises(BestResponseError, match="budget"):
        best_response(-1.0, [1], [1])
    with pytest.raises(BestResponseError, match="others"):
        best_response(1.0, [1, 1], [1])


hosts = st.lists(
    st.tuples(st.floats(0.1, 10), st.one_of(st.just(0.0), st.floats(0.01, 20)), st.floats(0.05, 12)),
    min_size=1,
    max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(hosts, st.floats(0.01, 100), st.floats(0.05, 2))
def test_best_response_is_optimal_against_slsqp(
    hs: list[tuple[float, float, float]], budget: float, reserve: float
) -> None:
    w, y0, _ = (np.array(c) for c in zip(*hs, strict=True))
    y = np.maximum(y0, reserve)
    r = best_response(budget, w, y0, reserve=reserve)
    assert (r.bids >= 0).all()
    assert r.bids.sum() == pytest.approx(budget, rel=1e-9)  # budget conservation
    ref = _slsqp(budget, w, y, None)
    assert r.utility >= ref - 1e-7 * max(1.0, ref)
    assert r.utility == pytest.approx(utility(r.bids, w, y), rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(hosts, st.floats(0.01, 100), st.floats(0.05, 2))
@example(  # a small budget: SLSQP's overspending used to look like a better optimum
    [(6.979212063313343, 0.0, 2.111827961804416), (6.71875, 0.0, 6.359375),
     (6.359375, 0.0, 1.0), (8.083486903708863, 0.0, 2.0)], 0.01, 0.05)
def test_capped_best_response_is_optimal_against_slsqp(
    hs: list[tuple[float, float, float]], budget: float, reserve: float
) -> None:
    w, y0, c = (np.array(v) for v in zip(*hs, strict=True))
    y = np.maximum(y0, reserve)
    r = best_response(budget, w, y0, caps=c, reserve=reserve)
    assert (r.bids >= 0).all()
    assert r.bids.sum() + r.unspent == pytest.approx(budget, rel=1e-9)
    # No bid above the cap's useful bid.
    with np.errstate(divide="ignore"):
        xbar = np.where(c < w, c * y / np.maximum(w - c, 1e-300), np.inf)
    assert (r.bids <= xbar * (1 + 1e-9) + 1e-12).all()
    ref = _slsqp(budget, w, y, c)
    assert r.utility >= ref - 1e-6 * max(1.0, ref)


@settings(deadline=None)
@given(hosts, st.floats(0.01, 100), st.floats(0.05, 1.0))
def test_damped_update_conserves_the_budget(
    hs: list[tuple[float, float, float]], budget: float, beta: float
) -> None:
    w, y, _ = (np.array(c) for c in zip(*hs, strict=True))
    previous = np.full(w.size, budget / w.size)
    target = best_response(budget, w, y, reserve=0.1).bids
    x = damped(previous, target, beta)
    assert x.sum() == pytest.approx(budget, rel=1e-9) and (x >= 0).all()
    assert utility(x, w, np.maximum(y, 0.1)) >= utility(previous, w, np.maximum(y, 0.1)) - 1e-9
    with pytest.raises(BestResponseError):
        damped(previous, target, 0.0)
