"""The price a controller's bid should expect (Tycoon §4.3 and eq. 5-6; Merkat §7's future
work: "use price prediction to bid").

A deadline policy computes the bid that buys the share of its VM it needs at "the price". With
``forecast="last"`` (the papers' rule) that is the price of the last period. With
``forecast="ar"`` it is the price expected with probability ``probability`` next period: an
AR(``order``) model fitted by Yule-Walker/Levinson-Durbin (:mod:`merkat.predict.ar`) on the
prices the platform shows the controller (``Observation.price_history`` plus the current one)
gives the one-step forecast μ and its error variance σ²; the price is y_p = μ + σ·Φ⁻¹(p) (eq.
5), which in eq. 6 takes the place of the others' bids. p = 0.5 bids for the mean forecast; p
= 0.9 for a price exceeded one period in ten. ``forecast_horizon`` H > 1 bids for the highest
p-quantile of the next H periods' prices, max_h μ_h + σ_h·Φ⁻¹(p) (h-step forecasts and their
error variances; ``"deadline"``: H = the periods left to the deadline, the time a VM started
at its needed share runs); ``forecast_history`` is how many of the latest prices are fitted.

Decisions (docs/predict.md, "Forecasts in controllers"): fewer than ``min_points`` prices (4 ×
order, at least 8), or prices that do not vary, fall back to the last price; an explosive
fit (the adjusted autocorrelation of a short series need not be positive definite) is replaced
by the always-stationary ``mle`` fit; a negative expected price is 0; each resource is
forecast on its own. Pure: the same prices give the same
forecast (fits are cached by the series, so the applications of one period share them).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import lru_cache
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

from merkat.control.params import Rule, choice, declare, integer, number
from merkat.control.types import Amounts, Observation

if TYPE_CHECKING:
    from merkat.predict.ar import ARModel

FORECASTS = ("last", "ar")
HISTORY = 12
"""The default ``forecast_history`` (at least 4·order): the prices the platform shows by
default (its ``history_size`` periods, the current one included)."""
UNTIL_DEADLINE = "deadline"
ORDER_MAX = 64
"""The highest ``forecast_order`` (a fit is O(order²) per series and period)."""
PERIODS_MAX = 10_000
"""The most periods of prices a forecast reads or looks ahead (``forecast_history``,
``forecast_horizon``)."""

FORECAST_PARAMS = declare(
    forecast=choice(*FORECASTS),
    forecast_order=integer(1, ORDER_MAX),
    probability=number(0, 1, lo_open=True, hi_open=True),
    forecast_horizon=integer(1, PERIODS_MAX, words=(UNTIL_DEADLINE,)),
    forecast_history=integer(8, PERIODS_MAX, none=True),
)
"""The parameters of a policy that forecasts its prices (:class:`PriceForecast`'s)."""


def _history(p: Mapping[str, Any], name: str) -> str | None:
    history, order = p.get("forecast_history"), p.get("forecast_order")
    if history is None or not isinstance(order, int) or history >= max(8, 4 * order):
        return None
    if name == "forecast_order":
        return f"must be <= forecast_history / 4 ({history} / 4), got {order}"
    return (f"must be an integer >= max(8, 4 x forecast_order) = {max(8, 4 * order)}, "
            f"got {history!r}")


FORECAST_RULES = (Rule(("forecast_history", "forecast_order"), _history),)
"""``forecast_history`` covers the fit: at least max(8, 4 x ``forecast_order``) prices."""


@lru_cache(maxsize=256)
def _fit(series: tuple[float, ...], order: int) -> ARModel | None:
    """The stationary AR(``order``) fit of ``series``, or None when the prices do not vary
    or cannot be fitted (the caller keeps the last price)."""
    import numpy as np

    from merkat.predict.ar import fit

    x = np.asarray(series, dtype=np.float64)
    if float(x.max() - x.min()) <= 1e-12 * max(1.0, abs(float(x[-1]))):
        return None
    try:
        return fit(x, order, "adjusted", stationary=True)
    except ValueError:
        return None


def _expected(series: tuple[float, ...], order: int, z: float, steps: int = 1) -> float:
    """max over h = 1..``steps`` of μ_h + z·σ_h: the AR(``order``) h-step forecast of
    ``series`` and its error standard deviation (eq. 5 per step; one step: μ + z·σ)."""
    import numpy as np

    model = _fit(series, order)
    if model is None:
        return series[-1]
    x = np.asarray(series, dtype=np.float64)
    means = model.forecast(x, steps)
    sds = np.sqrt(np.maximum(model.forecast_variance(steps), 0.0))
    y = float(np.max(means + z * sds))
    return y if math.isfinite(y) and y > 0 else (0.0 if math.isfinite(y) else series[-1])


class PriceForecast:
    """``forecast``: ``last`` or ``ar``; ``order``: k of AR(k) (>= 1); ``probability``: p in
    (0, 1) of eq. 5 (the price is at most y_p with probability p); ``horizon``: the periods
    ahead the price is forecast (an int >= 1: the highest p-quantile of the next H periods'
    prices; ``"deadline"``: H = the periods left to the application's deadline, at least 1);
    ``history``: how many of the latest prices (the current one included) the model is fitted
    on (>= max(8, 4·order); default max(12, 4·order); the platform must show that many: ``Platform.history_size`` grows
    to the longest history a submitted controller asks for, :attr:`periods`)."""

    def __init__(self, forecast: str = "last", order: int = 2, probability: float = 0.5,
                 horizon: int | str = 1, history: int | None = None) -> None:
        if forecast not in FORECASTS:
            raise ValueError(f"forecast must be one of {', '.join(FORECASTS)}, got {forecast!r}")
        if isinstance(order, bool) or not isinstance(order, int) or order < 1:
            raise ValueError(f"forecast_order must be an int >= 1, got {order!r}")
        if not 0 < probability < 1:
            raise ValueError(f"probability must be in (0, 1), got {probability}")
        if horizon != UNTIL_DEADLINE and (
            isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 1
        ):
            raise ValueError(
                f"forecast_horizon must be an int >= 1 or {UNTIL_DEADLINE!r}, got {horizon!r}"
            )
        self.min_points = max(8, 4 * order)
        if history is None:
            history = max(HISTORY, self.min_points)
        if isinstance(history, bool) or not isinstance(history, int) or (
            history < self.min_points
        ):
            raise ValueError(f"forecast_history must be an int >= max(8, 4 x forecast_order) = "
                             f"{self.min_points}, got {history!r}")
        self.method = forecast
        self.order = order
        self.z = NormalDist().inv_cdf(probability)
        self.horizon = horizon
        self.history = history

    @property
    def reads_history(self) -> bool:
        return self.method != "last"

    @property
    def periods(self) -> int:
        """The periods of prices this forecast reads (0 under ``last``)."""
        return self.history if self.reads_history else 0

    def steps(self, obs: Observation) -> int:
        """H: the periods ahead the price is forecast for ``obs``."""
        if self.horizon != UNTIL_DEADLINE:
            assert isinstance(self.horizon, int)
            return self.horizon
        left = obs.time_to_deadline
        if left is None or not left > 0:
            return 1
        return max(1, math.ceil(left / obs.period - 1e-9))

    def prices(self, obs: Observation) -> Amounts:
        """The prices a bid made now should expect (``obs.prices`` under ``last``)."""
        hist = obs.price_history[max(0, len(obs.price_history) + 1 - self.history):]
        if self.method == "last" or len(hist) + 1 < self.min_points:
            return obs.prices
        steps = self.steps(obs)
        return {r: _expected((*(h.get(r, now) for h in hist), now), self.order, self.z, steps)
                for r, now in obs.prices.items()}

    def expected(self, obs: Observation) -> Observation:
        """``obs`` with :meth:`prices` in place of its prices (itself under ``last``)."""
        if self.method == "last":
            return obs
        from dataclasses import replace

        return replace(obs, prices=self.prices(obs))
