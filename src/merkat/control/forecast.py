"""The price a controller's bid should expect (Tycoon §4.3 and eq. 5-6; Merkat §7's future
work: "use price prediction to bid").

A deadline policy computes the bid that buys the share of its VM it needs at "the price". With
``forecast="last"`` (the papers' rule) that is the price of the last period. With
``forecast="ar"`` it is the price expected with probability ``probability`` next period: an
AR(``order``) model fitted by Yule-Walker/Levinson-Durbin (:mod:`merkat.predict.ar`) on the
prices the platform shows the controller (``Observation.price_history`` plus the current one)
gives the one-step forecast μ and its error variance σ²; the price is y_p = μ + σ·Φ⁻¹(p) (eq.
5), which in eq. 6 takes the place of the others' bids. p = 0.5 bids for the mean forecast; p
= 0.9 for a price exceeded one period in ten.

Decisions (docs/predict.md, "Forecasts in controllers"): fewer than ``min_points`` prices (4 ×
order, at least 8), or prices that do not vary, fall back to the last price; an explosive
fit (the adjusted autocorrelation of a short series need not be positive definite) is replaced
by the always-stationary ``mle`` fit; a negative expected price is 0; each resource is forecast on its own. Pure: the same prices give the same
forecast (fits are cached by the series, so the applications of one period share them).
"""

from __future__ import annotations

import math
from functools import lru_cache
from statistics import NormalDist

from merkat.control.types import Amounts, Observation

FORECASTS = ("last", "ar")


@lru_cache(maxsize=256)
def _expected(series: tuple[float, ...], order: int, z: float) -> float:
    import numpy as np

    from merkat.predict.ar import fit

    x = np.asarray(series, dtype=np.float64)
    if float(x.max() - x.min()) <= 1e-12 * max(1.0, abs(float(x[-1]))):
        return series[-1]
    try:
        model = fit(x, order, "adjusted", stationary=True)
    except ValueError:
        return series[-1]
    mean = float(model.forecast(x, 1)[0])
    sd = math.sqrt(max(model.sigma2, 0.0))
    y = mean + z * sd
    return y if math.isfinite(y) and y > 0 else (0.0 if math.isfinite(y) else series[-1])


class PriceForecast:
    """``forecast``: ``last`` or ``ar``; ``order``: k of AR(k) (>= 1); ``probability``: p in
    (0, 1) of eq. 5 (the price is at most y_p with probability p)."""

    def __init__(self, forecast: str = "last", order: int = 2, probability: float = 0.5) -> None:
        if forecast not in FORECASTS:
            raise ValueError(f"forecast must be one of {', '.join(FORECASTS)}, got {forecast!r}")
        if order < 1:
            raise ValueError(f"forecast_order must be >= 1, got {order}")
        if not 0 < probability < 1:
            raise ValueError(f"probability must be in (0, 1), got {probability}")
        self.method = forecast
        self.order = order
        self.z = NormalDist().inv_cdf(probability)
        self.min_points = max(8, 4 * order)

    @property
    def reads_history(self) -> bool:
        return self.method != "last"

    def prices(self, obs: Observation) -> Amounts:
        """The prices a bid made now should expect (``obs.prices`` under ``last``)."""
        hist = obs.price_history
        if self.method == "last" or len(hist) + 1 < self.min_points:
            return obs.prices
        return {r: _expected((*(h.get(r, now) for h in hist), now), self.order, self.z)
                for r, now in obs.prices.items()}

    def expected(self, obs: Observation) -> Observation:
        """``obs`` with :meth:`prices` in place of its prices (itself under ``last``)."""
        if self.method == "last":
            return obs
        from dataclasses import replace

        return replace(obs, prices=self.prices(obs))
