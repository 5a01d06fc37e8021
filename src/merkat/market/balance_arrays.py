"""The tabu search's array helpers (:mod:`merkat.market.balance_state`,
:mod:`merkat.market.balance_loop`): its per-VM columns read and written one element at a
time through a memoryview (:func:`view`), and the VMs ordered by node (:func:`stable_order`).
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import numpy.typing as npt

from merkat.market.types import IntArray


def view(a: npt.NDArray[Any]) -> Any:
    """A memoryview of 1-D array ``a`` (no copy): indexing it gives one element as a Python
    int or float, the same value ``a.tolist()`` holds, and writing it writes ``a``. The
    search's per-VM columns, of which a loop reads a few elements: building a list of every
    VM (``tolist``, ~10-30 us for 900 floats) costs more than the reads it saves (a view's
    read is ~45 ns slower than a list's)."""
    return memoryview(cast(Any, a))


def stable_order(keys: IntArray, bound: int) -> IntArray:
    """``np.argsort(keys, kind="stable")`` for keys in ``[0, bound)``: a stable sort's
    permutation is the only one that sorts the keys and keeps equal keys in index order, so
    every stable algorithm gives it; numpy's radix sort, taken for keys of 16 bits, is ~3x
    faster than its merge sort of 64-bit keys (~900 VMs). ``tests/test_market_balance.py``
    compares both."""
    if bound <= 32767:
        return np.argsort(keys.astype(np.int16), kind="stable")
    return np.argsort(keys, kind="stable")
