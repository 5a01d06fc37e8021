"""Price statistics from running sums and exponentially smoothed moments (Tycoon §4.2, §4.5).

Pure: no I/O, no clock. Two ways to summarise a price stream without storing it:

- :class:`RunningMoments` — count, Σx and Σx² (§4.2, "we only need to keep track of running
  sums"): the mean and variance of everything seen. ``merge`` adds two summaries (hosts, shards).
- :class:`SmoothedMoments` / :func:`smoothed_moments` — the four raw moments smoothed over a
  window of ``n`` snapshots (§4.5): μ_{0,p} = x_0^p, μ_{i,p} = α·μ_{i−1,p} + (1 − α)·x_i^p with
  α = 1 − 1/n; then σ = √(μ₂ − μ₁²), skewness γ₁ = (μ₃ − 3μ₁μ₂ + 2μ₁³)/σ³ and excess kurtosis
  γ₂ = (μ₄ − 4μ₃μ₁ + 6μ₂μ₁² − 3μ₁⁴)/σ⁴ − 3. Window 1 ignores the past, as the paper says.

Decisions (docs/predict.md): the variance of :class:`RunningMoments` is the population one
(``ddof=0``) unless ``ddof=1`` is asked; a smoothed variance that rounds below zero is 0; when σ
is 0 the skewness and kurtosis are reported as 0 (a constant price has no shape).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class RunningMoments:
    """Count, sum and sum of squares of the prices seen (immutable; ``add`` returns a new one)."""

    count: int = 0
    total: float = 0.0
    total_sq: float = 0.0

    def add(self, x: float) -> RunningMoments:
        return RunningMoments(self.count + 1, self.total + x, self.total_sq + x * x)

    def extend(self, xs: Iterable[float]) -> RunningMoments:
        a = np.asarray(list(xs), dtype=float)
        return RunningMoments(
            self.count + int(a.size), self.total + float(a.sum()), self.total_sq + float(a @ a)
        )

    def merge(self, other: RunningMoments) -> RunningMoments:
        return RunningMoments(
            self.count + other.count, self.total + other.total, self.total_sq + other.total_sq
        )

    @property
    def mean(self) -> float:
        if self.count == 0:
            raise ValueError("no prices: the mean of an empty history is undefined")
        return self.total / self.count

    def variance(self, ddof: int = 0) -> float:
        """Σ(x − mean)²/(count − ddof), from the sums (clipped at 0 against rounding)."""
        if self.count - ddof <= 0:
            raise ValueError(f"need more than {ddof} prices for a variance with ddof={ddof}")
        ss = self.total_sq - self.total * self.total / self.count
        return max(ss, 0.0) / (self.count - ddof)

    def std(self, ddof: int = 0) -> float:
        return math.sqrt(self.variance(ddof))


def alpha_of(window: float) -> float:
    """α = 1 − 1/n for a window of n ≥ 1 snapshots."""
    if not window >= 1:
        raise ValueError(f"window must be >= 1 snapshot, got {window}")
    return 1.0 - 1.0 / window


@dataclass(frozen=True)
class Shape:
    """Mean, standard deviation, skewness and excess kurtosis of one snapshot."""

    mean: float
    std: float
    skewness: float
    kurtosis: float


def shape_of(m1: float, m2: float, m3: float, m4: float) -> Shape:
    """The paper's σ, γ₁, γ₂ from the four raw moments."""
    var = max(m2 - m1 * m1, 0.0)
    sd = math.sqrt(var)
    if sd <= 1e-12 * max(1.0, abs(m1)):
        return Shape(m1, 0.0, 0.0, 0.0)
    skew = (m3 - 3 * m1 * m2 + 2 * m1**3) / sd**3
    kurt = (m4 - 4 * m3 * m1 + 6 * m2 * m1 * m1 - 3 * m1**4) / sd**4 - 3.0
    return Shape(m1, sd, skew, kurt)


@dataclass(frozen=True)
class SmoothedMoments:
    """The smoothed raw moments μ₁..μ₄ after ``count`` snapshots (immutable, streaming)."""

    window: float
    count: int = 0
    raw: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)

    def add(self, x: float) -> SmoothedMoments:
        powers = (x, x * x, x**3, x**4)
        if self.count == 0:
            return SmoothedMoments(self.window, 1, powers)
        a = alpha_of(self.window)
        raw = tuple(a * m + (1 - a) * p for m, p in zip(self.raw, powers, strict=True))
        return SmoothedMoments(self.window, self.count + 1, raw)  # type: ignore[arg-type]

    def shape(self) -> Shape:
        if self.count == 0:
            raise ValueError("no prices: the moments of an empty history are undefined")
        return shape_of(*self.raw)


def smoothed_raw_moments(prices: Sequence[float] | FloatArray, window: float) -> FloatArray:
    """μ_{i,p} for every snapshot i and p = 1..4, shape (len(prices), 4).

    The recursion is a first-order IIR filter, run by :func:`scipy.signal.lfilter` with the
    initial state chosen so that μ_{0,p} = x_0^p.
    """
    from scipy.signal import lfilter

    x = np.asarray(prices, dtype=float)
    if x.ndim != 1 or x.size == 0:
        raise ValueError("prices must be a non-empty 1-D sequence")
    a = alpha_of(window)
    out = np.empty((x.size, 4))
    for p in range(1, 5):
        xp = x**p
        y, _ = lfilter([1 - a], [1.0, -a], xp, zi=[a * xp[0]])
        out[:, p - 1] = y
    return out


def smoothed_moments(prices: Sequence[float] | FloatArray, window: float) -> dict[str, FloatArray]:
    """Mean, std, skewness and excess kurtosis at every snapshot (arrays of len(prices))."""
    m = smoothed_raw_moments(prices, window)
    m1, m2, m3, m4 = m[:, 0], m[:, 1], m[:, 2], m[:, 3]
    var = np.maximum(m2 - m1 * m1, 0.0)
    sd = np.sqrt(var)
    flat = sd <= 1e-12 * np.maximum(1.0, np.abs(m1))
    safe = np.where(flat, 1.0, sd)
    skew = np.where(flat, 0.0, (m3 - 3 * m1 * m2 + 2 * m1**3) / safe**3)
    kurt = np.where(
        flat, 0.0, (m4 - 4 * m3 * m1 + 6 * m2 * m1 * m1 - 3 * m1**4) / safe**4 - 3.0
    )
    return {"mean": m1, "std": sd, "skewness": skew, "kurtosis": kurt}
