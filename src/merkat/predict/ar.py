"""AR(k) price prediction (Tycoon §4.3): autocorrelation, Yule-Walker by Levinson-Durbin,
forecasts with their error variance, optional smoothing, and the paper's error ε (§5.4).

Pure: no I/O, no clock. Three conventions for the autocorrelation R(k) (``method``):

- ``paper`` — the formula as printed: R(k) = 1/(N − |k|)·Σ_{n=0}^{N−|k|−1} x_{n+|k|}·x_n on the
  prices themselves (not centred), while the forecast is centred on the mean μ;
- ``adjusted`` — the same unbiased 1/(N − k) sum on x − μ (statsmodels' ``yule_walker`` with
  ``method="adjusted"``);
- ``mle`` — the biased 1/N sum on x − μ (statsmodels' ``method="mle"``; always a stationary
  model).

The printed formula does not centre x, so with prices far from zero R(k) ≈ μ² for every lag and
the coefficients sum to nearly 1 (a model close to "the price stays"). We keep it as ``paper``
for fidelity and default to ``adjusted`` (docs/predict.md). In every convention the Yule-Walker
system L·α = r with L_{ij} = R(i − j), r_i = R(i + 1) is solved by Levinson-Durbin
(:func:`scipy.linalg.solve_toeplitz`) and the innovation variance is σ² = R(0) − αᵀr.

Forecast (the paper's sum runs j = 0..k, a typo for k terms): x̂_{N+1} = μ + Σ_{j=1}^{k}
α_j·(x_{N+1−j} − μ), iterated for h steps on its own forecasts; its error variance is
σ²·Σ_{i<h} ψ_i², ψ the model's impulse response (ψ_0 = 1, ψ_i = Σ_j α_j·ψ_{i−j}).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]
Method = Literal["paper", "adjusted", "mle"]
METHODS: tuple[str, ...] = ("paper", "adjusted", "mle")


def _series(prices: Sequence[float] | FloatArray) -> FloatArray:
    x = np.asarray(prices, dtype=np.float64)
    if x.ndim != 1:
        raise ValueError("prices must be a 1-D series")
    if not np.isfinite(x).all():
        raise ValueError("prices must be finite numbers")
    return x


def autocorrelation(
    prices: Sequence[float] | FloatArray, lags: int, method: Method = "adjusted"
) -> FloatArray:
    """R(0..lags) in the convention ``method`` (see the module docstring)."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    x = _series(prices)
    n = x.size
    if lags < 0 or lags >= n:
        raise ValueError(f"need more than {lags} prices for {lags} lags, got {n}")
    z = x if method == "paper" else x - x.mean()
    sums = np.array([z[k:] @ z[: n - k] for k in range(lags + 1)])
    if method == "mle":
        return np.asarray(sums / n, dtype=np.float64)
    return np.asarray(sums / (n - np.arange(lags + 1)), dtype=np.float64)


@dataclass(frozen=True)
class ARModel:
    """An AR(k) model: coefficients α_1..α_k, the mean μ it is centred on, and the innovation
    variance σ²."""

    coefficients: FloatArray
    mean: float
    sigma2: float
    method: str = "adjusted"

    @property
    def order(self) -> int:
        return int(self.coefficients.size)

    @property
    def stationary(self) -> bool:
        """True when every root of 1 − Σ α_j·z^j lies outside the unit circle (the forecasts
        then decay to μ instead of growing without bound)."""
        if not self.order:
            return True
        roots = np.roots(np.r_[1.0, -self.coefficients])
        return bool(np.abs(roots).max() < 1.0)

    def to_json(self) -> dict[str, object]:
        return {
            "coefficients": [float(a) for a in self.coefficients],
            "mean": float(self.mean),
            "sigma2": float(self.sigma2),
            "order": self.order,
            "method": self.method,
        }

    def forecast(self, history: Sequence[float] | FloatArray, steps: int = 1) -> FloatArray:
        """The next ``steps`` values after ``history`` (its last k values are used)."""
        if steps < 1:
            raise ValueError(f"steps must be >= 1, got {steps}")
        x = _series(history)
        k = self.order
        if x.size < k:
            raise ValueError(f"an AR({k}) forecast needs at least {k} past prices, got {x.size}")
        lagged = list(x[x.size - k :] - self.mean) if k else []
        out = np.empty(steps)
        for h in range(steps):
            nxt = float(sum(a * lagged[-1 - j] for j, a in enumerate(self.coefficients)))
            out[h] = self.mean + nxt
            if k:
                lagged.append(nxt)
        return out

    def impulse_response(self, steps: int) -> FloatArray:
        """ψ_0..ψ_{steps−1}."""
        psi = np.zeros(steps)
        psi[0] = 1.0
        for i in range(1, steps):
            m = min(i, self.order)
            psi[i] = float(self.coefficients[:m] @ psi[i - 1 :: -1][:m])
        return psi

    def forecast_variance(self, steps: int) -> FloatArray:
        """The error variance of the 1..steps-ahead forecasts: σ²·Σ_{i<h} ψ_i²."""
        return np.asarray(self.sigma2 * np.cumsum(self.impulse_response(steps) ** 2))


def fit(
    prices: Sequence[float] | FloatArray,
    order: int,
    method: Method = "adjusted",
    *,
    stationary: bool = False,
) -> ARModel:
    """Fit AR(``order``) by Yule-Walker, solved by Levinson-Durbin.

    The ``paper`` and ``adjusted`` autocorrelations need not form a positive-definite Toeplitz
    matrix (short or smooth series), and the model they give can then be explosive. With
    ``stationary``, such a model is replaced by the ``mle`` fit (1/N sums: always stationary);
    the returned model's ``method`` says which was used."""
    if stationary and method != "mle":
        model = fit(prices, order, method)
        return model if model.stationary else fit(prices, order, "mle")
    from scipy.linalg import solve_toeplitz

    if order < 0:
        raise ValueError(f"order must be >= 0, got {order}")
    x = _series(prices)
    r = autocorrelation(x, order, method)
    mu = float(x.mean())
    if order == 0:
        return ARModel(np.zeros(0), mu, float(r[0]), method)
    if r[0] <= 0:
        raise ValueError("the prices are constant: an AR model needs some variation")
    alpha = np.asarray(solve_toeplitz(r[:order], r[1 : order + 1]), dtype=np.float64)
    sigma2 = float(r[0] - alpha @ r[1 : order + 1])
    return ARModel(alpha, mu, sigma2, method)


def smooth(prices: Sequence[float] | FloatArray, lam: float | None = None) -> FloatArray:
    """A cubic smoothing spline through the prices (§5.4), evaluated at the same points
    (unit spacing); ``lam`` None lets generalised cross-validation choose the smoothing (slow:
    seconds for a few hundred points — pass a fixed ``lam`` in loops)."""
    from scipy.interpolate import make_smoothing_spline

    x = _series(prices)
    if x.size < 5:
        return x.copy()
    t = np.arange(x.size, dtype=np.float64)
    return np.asarray(make_smoothing_spline(t, x, lam=lam)(t), dtype=np.float64)


def epsilon(predicted: Sequence[float] | FloatArray, measured: Sequence[float] | FloatArray) -> float:
    """§5.4: ε = Σ_i σ_i/(μ_d·n), σ_i the standard deviation of the pair (prediction i,
    measurement i) — |x̂_i − x_i|/2 (population; decision in docs/predict.md) — and μ_d the
    mean measured price."""
    p, m = _series(predicted), _series(measured)
    if p.size != m.size or p.size == 0:
        raise ValueError("predicted and measured must be non-empty and of the same length")
    mu = float(m.mean())
    if mu == 0:
        raise ValueError("the mean measured price is 0: epsilon is undefined")
    return float(np.abs(p - m).mean() / 2 / mu)


def backtest(
    prices: Sequence[float] | FloatArray,
    train: int,
    order: int,
    horizon: int,
    *,
    method: Method = "adjusted",
    smoothing: bool = False,
    lam: float | None = None,
    stationary: bool = False,
) -> dict[str, object]:
    """§5.4's check: fit on the first ``train`` prices, then at every later point t forecast
    t + ``horizon`` from the prices up to t (smoothed causally, on the past only, when
    ``smoothing``), against the naive forecast "the price stays"; ``stationary`` as in
    :func:`fit`. Returns both ε, the model,
    and the series (measured, AR, naive) at the validated points."""
    x = _series(prices)
    if not order < train < x.size - horizon:
        raise ValueError(
            f"need order < train < len(prices) - horizon ({order} < {train} < {x.size - horizon})"
        )
    base = smooth(x[:train], lam) if smoothing else x[:train]
    model = fit(base, order, method, stationary=stationary)
    points = np.arange(train - 1, x.size - horizon)
    ar = np.empty(points.size)
    for i, t in enumerate(points):
        past = x[max(0, t + 1 - train) : t + 1]
        if smoothing:
            past = smooth(past, lam)
        ar[i] = model.forecast(past, horizon)[-1]
    measured = x[points + horizon]
    naive = x[points]
    return {
        "model": model,
        "epsilon_ar": epsilon(ar, measured),
        "epsilon_naive": epsilon(naive, measured),
        "time_index": points + horizon,
        "measured": measured,
        "ar": ar,
        "naive": naive,
    }
