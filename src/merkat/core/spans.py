"""Rows kept between calls, joined by spans: a cache of per-application rows (the running
VMs' rows of :mod:`merkat.core.running`, the market input of :mod:`merkat.core.market_input`)
keeps the last call's rows as one array per column and each application's place in it;
the next call's rows are the kept ones that are still valid, in their new order, beside the
rows built again. Applications kept one after another in both calls form one span, so a
call joins a few slices (one where nothing was built: the last arrays again, no copy)
instead of one piece per application (what this replaces: a ``concatenate`` of one chunk
per application, ~50 chunks at an admission point of a trace window)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


class Spans:
    """The rows of a call as spans ``[source, lo, hi)`` of its sources (0: the last call's
    arrays, 1: the rows built in this call), in order; consecutive rows of one source are
    merged into one span."""

    __slots__ = ("spans",)

    def __init__(self) -> None:
        self.spans: list[list[int]] = []

    def take(self, source: int, lo: int, hi: int) -> None:
        """Rows ``lo`` to ``hi`` of ``source`` next."""
        spans = self.spans
        if spans:
            last = spans[-1]
            if last[0] == source and last[2] == lo:
                last[2] = hi
                return
        spans.append([source, lo, hi])

    def joined(self, sources: Sequence[Any], empty: Any) -> Any:
        """The rows of ``sources`` (arrays, one per source) joined (``empty`` when none):
        the source itself when it is all of them (arrays are never changed once kept)."""
        spans = self.spans
        if not spans:
            return empty
        if len(spans) == 1:
            source, lo, hi = spans[0]
            whole = sources[source]
            return whole if lo == 0 and hi == len(whole) else whole[lo:hi]
        return np.concatenate([sources[s][lo:hi] for s, lo, hi in spans])

    def joined_list(self, sources: Sequence[list[Any]]) -> list[Any]:
        """The entries of ``sources`` (lists) joined: a new list."""
        out: list[Any] = []
        for s, lo, hi in self.spans:
            out += sources[s][lo:hi]
        return out
