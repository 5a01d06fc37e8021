"""Tycoon §4 prediction: running and smoothed moments, slot table, normal guarantees, AR(k),
portfolio — exact numbers from the paper's equations and properties."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from merkat.predict import ar, moments, normal, portfolio, slots

prices = st.lists(st.floats(0.01, 1000, allow_nan=False), min_size=2, max_size=60)


# --- running sums (§4.2) ---------------------------------------------------------------------
@settings(deadline=None)
@given(prices, prices)
def test_running_moments_match_numpy_and_merge(a: list[float], b: list[float]) -> None:
    ra, rb = moments.RunningMoments().extend(a), moments.RunningMoments().extend(b)
    both = ra.merge(rb)
    allx = np.array(a + b)
    assert both.count == len(allx)
    assert both.mean == pytest.approx(allx.mean(), rel=1e-9)
    assert both.variance() == pytest.approx(allx.var(), rel=1e-6, abs=1e-6 * allx.max() ** 2)
    assert both.variance(1) == pytest.approx(allx.var(ddof=1), rel=1e-6, abs=1e-6 * allx.max() ** 2)


def test_running_moments_one_at_a_time_and_errors() -> None:
    r = moments.RunningMoments()
    for x in (2.0, 4.0, 6.0):
        r = r.add(x)
    assert (r.mean, r.variance(), r.variance(1)) == (4.0, 8 / 3, 4.0)
    with pytest.raises(ValueError):
        _ = moments.RunningMoments().mean
    with pytest.raises(ValueError):
        moments.RunningMoments().add(1.0).variance(1)


# --- smoothed moments (§4.5) -----------------------------------------------------------------
def test_smoothed_moments_worked_example() -> None:
    # n = 2 → α = 1/2; x = 1, 3: μ1 = (1, 2), μ2 = (1, 5), μ3 = (1, 14), μ4 = (1, 41);
    # σ = √(5 − 4) = 1, γ1 = 14 − 3·2·5 + 2·8 = 0, γ2 = 41 − 4·14·2 + 6·5·4 − 3·16 − 3 = −2.
    out = moments.smoothed_moments([1.0, 3.0], 2)
    assert out["mean"].tolist() == [1.0, 2.0]
    assert out["std"].tolist() == [0.0, 1.0]
    assert out["skewness"][1] == pytest.approx(0.0, abs=1e-12)
    assert out["kurtosis"][1] == pytest.approx(-2.0)
    s = moments.SmoothedMoments(2).add(1.0).add(3.0)
    assert s.raw == (2.0, 5.0, 14.0, 41.0)
    assert s.shape().kurtosis == pytest.approx(-2.0)


@settings(max_examples=50, deadline=None)
@given(prices, st.floats(1, 50))
def test_smoothed_moments_equal_the_direct_weighted_sums(xs: list[float], n: float) -> None:
    # μ_{i,p} = α^i·x_0^p + Σ_{k=1}^{i} (1 − α)·α^{i−k}·x_k^p, computed directly.
    x = np.array(xs)
    a = 1 - 1 / n
    i = x.size - 1
    wts = np.array([a**i] + [(1 - a) * a ** (i - k) for k in range(1, i + 1)])
    direct = [float(wts @ x**p) for p in range(1, 5)]
    got = moments.smoothed_raw_moments(x, n)[-1]
    assert got == pytest.approx(direct, rel=1e-9)
    stream = moments.SmoothedMoments(n)
    for v in xs:
        stream = stream.add(v)
    assert list(stream.raw) == pytest.approx(direct, rel=1e-9)
    sh = stream.shape()
    vec = moments.smoothed_moments(x, n)
    assert sh.std == pytest.approx(vec["std"][-1], rel=1e-6, abs=1e-6 * x.max())


def test_window_one_ignores_the_past_and_large_window_is_the_sample() -> None:
    x = np.array([5.0, 1.0, 7.0])
    out = moments.smoothed_moments(x, 1)
    assert out["mean"].tolist() == x.tolist() and out["std"].tolist() == [0, 0, 0]
    with pytest.raises(ValueError):
        moments.smoothed_moments(x, 0.5)


# --- slot table (§4.5) -----------------------------------------------------------------------
def test_slot_table_lag_and_weights() -> None:
    t = slots.SlotTable(window=4, slots=2)
    for k in range(4):
        t.add(float(k % 2))
        assert t.weight() == 1.0
    t.add(0.0)  # array 2 starts at snapshot n: |n1 − n2| = n from now on
    assert t.sizes == [5, 1] and t.weight() == pytest.approx(0.75)
    for _ in range(3):
        t.add(0.0)
    assert t.sizes == [8, 4] and t.weight() == 0.0  # array 1 holds 2n: array 2 alone
    t.add(1.0)  # array 1 starts again
    assert t.sizes == [1, 5] and t.weight() == pytest.approx(0.25)
    edges, props = t.distribution()
    assert edges.tolist() == [0.0, 0.5, 1.0]
    # array 1: {1} → (0, 1); array 2: 0,0,0,0,1 → (0.8, 0.2); r = 0.25·(0,1) + 0.75·(0.8,0.2)
    assert props == pytest.approx([0.6, 0.4])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-100, 100), min_size=1, max_size=200), st.integers(1, 30))
def test_slot_table_is_a_distribution(xs: list[float], n: int) -> None:
    t = slots.SlotTable(window=n, slots=7)
    for x in xs:
        t.add(x)
        assert abs(t.sizes[0] - t.sizes[1]) == n or t.seen <= n
    edges, props = t.distribution()
    assert props.sum() == pytest.approx(1.0) and (props >= 0).all()
    assert edges[0] == min(xs) and edges[-1] == max(xs)


def test_slot_table_tracks_the_window_after_a_shift() -> None:
    t = slots.SlotTable(window=50, slots=10)
    for _ in range(200):
        t.add(0.0)
    for _ in range(200):
        t.add(10.0)
    _, props = t.distribution()
    assert props[-1] == pytest.approx(1.0) and t.mean() == pytest.approx(9.5)


# --- normal guarantees (eq. 3-6) -------------------------------------------------------------
def test_price_quantile_and_probability() -> None:
    assert normal.price_at(0.5, 10.0, 2.0) == pytest.approx(10.0)
    p1 = NormalDist().cdf(1.0)
    assert normal.price_at(p1, 10.0, 2.0) == pytest.approx(12.0)
    assert normal.probability(12.0, 10.0, 2.0) == pytest.approx(p1)
    with pytest.raises(ValueError):
        normal.price_at(1.0, 1.0, 1.0)


def test_single_host_guarantee_closed_form_and_simulation() -> None:
    # One host, w = 1: bid X buys X/(X + y_p) with probability p (y_p = μ + σ·Φ⁻¹(p)).
    mu, sd, p, x = 10.0, 3.0, 0.9, 5.0
    yp = mu + sd * NormalDist().inv_cdf(p)
    u = normal.utility_at(x, [1.0], [mu], [sd], p)
    assert u == pytest.approx(x / (x + yp))
    draws = np.random.default_rng(7).normal(mu, sd, 200_000)
    assert np.mean(x / (x + draws) >= u - 1e-12) == pytest.approx(p, abs=0.005)
    # Budget for a share s with probability p: X = s·y_p/(1 − s).
    assert normal.budget_for(0.25, [1.0], [mu], [sd], p) == pytest.approx(0.25 * yp / 0.75)


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0.5, 4), st.floats(0.5, 20), st.floats(0, 5)), min_size=1,
             max_size=8),
    st.floats(0.05, 0.95),
    st.floats(0.01, 0.9),
)
def test_budget_for_inverts_utility_at(hosts: list[tuple[float, float, float]], p: float,
                                       frac: float) -> None:
    w, mu, sd = (np.array(c) for c in zip(*hosts, strict=True))
    target = frac * w.sum()
    x = normal.budget_for(target, w, mu, sd, p, reserve=0.1)
    assert normal.utility_at(x, w, mu, sd, p, reserve=0.1) == pytest.approx(target, rel=1e-6)
    # More certainty costs more.
    if p < 0.9:
        assert normal.budget_for(target, w, mu, sd, p + 0.05, reserve=0.1) >= x * (1 - 1e-9)


def test_budget_for_deadline_and_unreachable() -> None:
    # 1 CPU-hour in 2 hours on one 1-CPU host: share 1/2 → rate y_p, total y_p·7200.
    rate = normal.budget_for_deadline(3600.0, 7200.0, [1.0], [2.0], [0.0], 0.5) / 7200
    assert rate == pytest.approx(2.0)
    assert normal.budget_for(1.0, [1.0], [2.0], [0.0], 0.5) == math.inf


# --- AR(k) (§4.3) ----------------------------------------------------------------------------
def _ar2(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = np.zeros(n)
    for t in range(2, n):
        x[t] = 0.6 * x[t - 1] - 0.3 * x[t - 2] + rng.normal()
    return x + 50.0


@pytest.mark.parametrize("method", ["adjusted", "mle"])
def test_levinson_matches_statsmodels_yule_walker(method: str) -> None:
    from statsmodels.regression.linear_model import yule_walker

    x = _ar2(2000, 1)
    for k in (1, 2, 6):
        model = ar.fit(x, k, method)  # type: ignore[arg-type]
        rho, sigma = yule_walker(x, k, method=method, result_object=False)
        assert np.max(np.abs(model.coefficients - rho)) < 1e-8
        assert model.sigma2 == pytest.approx(sigma**2, rel=1e-8)
    assert ar.fit(x, 2).coefficients == pytest.approx([0.6, -0.3], abs=0.05)


def test_levinson_matches_statsmodels_levinson_durbin_on_the_papers_autocorrelation() -> None:
    from statsmodels.tsa.stattools import levinson_durbin

    x = _ar2(500, 2)
    r = ar.autocorrelation(x, 6, "paper")
    # The paper's R(k): 1/(N − k)·Σ x_{n+k}·x_n on the raw prices.
    assert r[3] == pytest.approx(float(x[3:] @ x[:-3]) / (x.size - 3))
    _, coefs, _, _, _ = levinson_durbin(r, nlags=6, isacov=True)
    model = ar.fit(x, 6, "paper")
    assert np.max(np.abs(model.coefficients - coefs)) < 1e-8
    # Uncentred R: the coefficients sum to about 1 (close to "the price stays").
    assert model.coefficients.sum() == pytest.approx(1.0, abs=0.02)


def test_ar1_forecast_and_variance_exact() -> None:
    m = ar.ARModel(np.array([0.5]), mean=10.0, sigma2=4.0)
    assert m.forecast([10.0, 14.0], 3).tolist() == [12.0, 11.0, 10.5]
    assert m.forecast_variance(3).tolist() == pytest.approx([4.0, 5.0, 5.25])
    m2 = ar.ARModel(np.array([0.5, 0.25]), mean=0.0, sigma2=1.0)
    assert m2.forecast([4.0, 8.0], 2).tolist() == [5.0, 4.5]  # 0.5·8 + 0.25·4; 0.5·5 + 0.25·8
    assert m2.impulse_response(3).tolist() == [1.0, 0.5, 0.5]


def test_epsilon_and_backtest() -> None:
    assert ar.epsilon([1.0, 3.0], [2.0, 2.0]) == pytest.approx(0.25)
    x = _ar2(400, 3)
    res = ar.backtest(x, 200, 2, 1)
    assert res["epsilon_ar"] < res["epsilon_naive"]  # type: ignore[operator]
    sm = ar.backtest(x, 200, 2, 1, smoothing=True, lam=10.0)
    assert 0 < sm["epsilon_ar"] < 1  # type: ignore[operator]
    with pytest.raises(ValueError):
        ar.fit([1.0, 1.0, 1.0], 1)


def test_an_explosive_yule_walker_fit_is_replaced_by_the_stationary_mle_fit() -> None:
    # A smoothed step: the adjusted (1/(N − k)) autocorrelation is not positive definite and
    # its AR(6) has a root inside the unit circle; its forecasts grow without bound.
    x = ar.smooth(np.r_[np.zeros(10), np.ones(10)], 10.0)
    raw = ar.fit(x, 6, "adjusted")
    assert not raw.stationary and raw.method == "adjusted"
    assert abs(raw.forecast(x, 200)[-1]) > 1e3
    safe = ar.fit(x, 6, "adjusted", stationary=True)
    mle = ar.fit(x, 6, "mle")
    assert safe.stationary and safe.method == "mle"
    assert safe.coefficients.tolist() == mle.coefficients.tolist()
    # A stationary fit is kept as it is.
    y = _ar2(300, 4)
    assert ar.fit(y, 2, stationary=True).coefficients.tolist() == ar.fit(y, 2).coefficients.tolist()
    assert ar.ARModel(np.array([1.2]), 0.0, 1.0).stationary is False
    assert ar.ARModel(np.array([0.5, 0.3]), 0.0, 1.0).stationary is True


# --- portfolio (§4.4) ------------------------------------------------------------------------
def test_minimum_variance_diagonal_closed_form() -> None:
    var = np.array([1.0, 4.0, 4.0])
    pf = portfolio.minimum_variance([1.0, 2.0, 3.0], np.diag(var))
    assert pf.weights.tolist() == pytest.approx([2 / 3, 1 / 6, 1 / 6])
    assert pf.variance == pytest.approx(2 / 3)  # 1/Σ(1/σ²) = 1/1.5
    assert pf.mean == pytest.approx(2 / 3 + 2 / 6 + 3 / 6)


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 8), st.integers(0, 10_000))
def test_frontier_properties(n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    g = rng.normal(size=(n, n))
    cov = g @ g.T + 0.5 * np.eye(n)
    m = rng.uniform(1, 3, n)
    lo = portfolio.minimum_variance(m, cov)
    eq = np.full(n, 1 / n)
    assert lo.weights.sum() == pytest.approx(1.0)
    assert lo.variance <= float(eq @ cov @ eq) + 1e-12
    for pf in portfolio.efficient_frontier(m, cov, 5):
        assert pf.weights.sum() == pytest.approx(1.0)
        assert pf.variance == pytest.approx(float(pf.weights @ cov @ pf.weights), rel=1e-8)
        assert pf.variance >= lo.variance - 1e-12


def test_long_only_frontier_agrees_with_closed_form_when_positive() -> None:
    m, cov = np.array([1.0, 2.0, 3.0]), np.diag([1.0, 1.0, 1.0])
    closed = portfolio.frontier_portfolio(m, cov, 2.0)
    qp = portfolio.frontier_portfolio(m, cov, 2.0, long_only=True)
    assert qp.weights == pytest.approx(closed.weights, abs=1e-6)
    assert portfolio.returns([2.0, 4.0], 2.0).tolist() == [1.0, 0.5]
