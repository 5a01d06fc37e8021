"""Price prediction (Tycoon §4): pure functions and small value types, no I/O and no clock.

- :mod:`~merkat.predict.moments` — running mean/variance from running sums (§4.2) and
  exponentially smoothed moments over a window (§4.5: mean, sd, skewness, kurtosis);
- :mod:`~merkat.predict.slots` — the self-adjusting slot table of price proportions with two
  lagged distributions merged by weight (§4.5);
- :mod:`~merkat.predict.normal` — normal-quantile guarantees (eq. 3-6) and budgets for a
  deadline;
- :mod:`~merkat.predict.ar` — AR(k) by Yule-Walker/Levinson-Durbin, forecasts, smoothing,
  the paper's error ε (§4.3, §5.4);
- :mod:`~merkat.predict.portfolio` — Markowitz minimum-variance portfolio and efficient
  frontier across hosts (§4.4).

Import the submodule you need (they import numpy/scipy).
"""
