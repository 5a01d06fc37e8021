"""The self-adjusting slot table of price proportions over a moving window (Tycoon §4.5).

Pure: no I/O, no clock. A window of ``n`` snapshots keeps two distribution arrays of slot
counts, lagged by ``n`` snapshots (|n₁ − n₂| = n once both run) and each holding at most 2n
snapshots: when an array is full it starts again empty, at which point the other holds exactly
n. The reported distribution merges them: r_j = w·s_{1,j} + (1 − w)·s_{2,j} with
w = 1 − |n₁ − n|/n, where s_{k,j} is the proportion of array k's prices in slot j. Whichever
array is nearest to holding exactly one window weighs most.

"Self-adjusting" (the paper does not say how; decision in docs/predict.md): the slots split the
range [lowest, highest] price seen into ``slots`` equal ranges; a price outside widens the range
and every count moves to the new slot holding its old slot's centre. Before the second array
starts (the first n snapshots) the first array alone is reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]


@dataclass
class SlotTable:
    """A moving-window price distribution over ``slots`` ranges for a window of ``window``
    snapshots. :meth:`add` one price per snapshot, :meth:`distribution` at any time."""

    window: int
    slots: int = 10
    lo: float = 0.0
    hi: float = 0.0
    counts: list[FloatArray] = field(default_factory=list)
    sizes: list[int] = field(default_factory=lambda: [0, 0])
    seen: int = 0

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError(f"window must be >= 1 snapshot, got {self.window}")
        if self.slots < 1:
            raise ValueError(f"slots must be >= 1, got {self.slots}")
        if not self.counts:
            self.counts = [np.zeros(self.slots), np.zeros(self.slots)]

    def edges(self) -> FloatArray:
        return np.linspace(self.lo, self.hi, self.slots + 1)

    def centres(self) -> FloatArray:
        e = self.edges()
        return (e[:-1] + e[1:]) / 2

    def _slot(self, x: float | FloatArray) -> NDArray[np.intp]:
        width = self.hi - self.lo
        if width <= 0:
            return np.zeros(np.shape(x), dtype=np.intp)
        k = np.floor((np.asarray(x) - self.lo) / width * self.slots).astype(np.intp)
        return np.clip(k, 0, self.slots - 1)

    def _widen(self, x: float) -> None:
        old = self.centres()
        self.lo, self.hi = min(self.lo, x), max(self.hi, x)
        target = self._slot(old)
        for k in range(2):
            moved = np.zeros(self.slots)
            np.add.at(moved, target, self.counts[k])
            self.counts[k] = moved

    def add(self, price: float) -> None:
        """Record one snapshot's price."""
        x = float(price)
        if not np.isfinite(x):
            raise ValueError(f"price must be finite, got {price}")
        if self.seen == 0:
            self.lo = self.hi = x
        elif x < self.lo or x > self.hi:
            self._widen(x)
        n = self.window
        active = [0] if self.seen < n else [0, 1]
        for k in active:
            if self.sizes[k] >= 2 * n:
                self.counts[k][:] = 0.0
                self.sizes[k] = 0
            self.counts[k][self._slot(x)] += 1.0
            self.sizes[k] += 1
        self.seen += 1

    def weight(self) -> float:
        """w, the share of array 1 in the report."""
        if self.seen <= self.window:
            return 1.0
        return 1.0 - abs(self.sizes[0] - self.window) / self.window

    def distribution(self) -> tuple[FloatArray, FloatArray]:
        """(slot edges, proportions r_j summing to 1)."""
        if self.seen == 0:
            raise ValueError("no prices: the distribution of an empty history is undefined")
        w = self.weight()
        props = np.zeros(self.slots)
        for k, share in ((0, w), (1, 1.0 - w)):
            if share > 0 and self.sizes[k] > 0:
                props += share * self.counts[k] / self.sizes[k]
        return self.edges(), props / props.sum()

    def mean(self) -> float:
        """The mean price of the reported distribution (slot centres weighted by r_j)."""
        _, props = self.distribution()
        if self.hi == self.lo:
            return self.lo
        return float(self.centres() @ props)
