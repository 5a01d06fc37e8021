"""The proportional share compiled (numba): one loop over the VMs instead of ~40 numpy calls.

What it replaces: the vectorised body of :func:`merkat.market.share.proportional_share`
(segmented and single-market), which stays the reference (:func:`~merkat.market.share.
proportional_share_numpy`) and the default. ``proportional_share`` calls
:func:`compiled_share` for markets of :data:`MIN_VMS` VMs or more when ``MERKAT_KERNELS=numba``
and numba can be imported (the optional extra ``merkat[kernels]``); the period clears every
node this way (the load balancer's start, the enforceable allocation, admissions).

Opt-in, not the default, because it does not pay in the default install
(docs/benchmarks.md, "The market's side of the period"): it saves ~30 % of a clearing
(~0.6 ms of ~2 ms on the recorded clearings of ``bench period --jobs 2000``), but importing
numba adds ~125 MiB of resident memory and loading the cached kernel ~45 MiB more (issue 28's
target is 500 MiB for the whole trace), and a cold start costs ~1 s of CPU per process (4.7 s
the first time, before the on-disk cache exists).

Bit for bit the reference: the same IEEE operations in the same order — the VMs sorted by
group then decreasing bid per unit of cap (ties in input order: a stable sort, as
``lexsort``), the running sums of bids and caps over the whole sorted array (as numpy's
``cumsum``, whose rounding a group's "bids before position j" inherits from the groups before
it), each group's total bid summed in input order (as ``bincount``), ``max(x, 0)`` keeping
NaN, the subnormal-price rule, non-finite allocations set to 0. ``tests/test_share_kernel.py``
runs both on random markets (caps binding or not, zero and infinite caps, zero capacity, empty
groups, subnormal prices) and compares every output array byte for byte, signs of zeros
included; ``themis-fig5 --jobs 300`` gives the same ``results.json`` with either.

Compiled on first use and cached on disk (``cache=True``: numba's cache beside this module,
or the user's cache directory when it is not writable).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

MIN_VMS = 24
"""Below this many VMs numpy's reference is called (the kernel's call costs more than it
saves, and the load balancer's small markets run in plain Python anyway)."""

_kernel: Any = None
_tried = False


def enabled() -> bool:
    """Whether :func:`~merkat.market.share.proportional_share` uses the compiled kernel:
    ``MERKAT_KERNELS=numba`` (read at each call) and numba importable. Unset, empty or
    ``numpy`` selects the reference; any other value is bad input (:class:`MarketError`
    naming the variable and the values it takes: a typo never silently falls back)."""
    choice = os.environ.get("MERKAT_KERNELS", "").strip().lower()
    if choice in ("", "numpy"):
        return False
    if choice != "numba":
        from merkat.market.types import MarketError

        raise MarketError("MERKAT_KERNELS", f"must be one of numpy, numba, got {choice!r} "
                          "(unset means numpy)")
    return available()


def available() -> bool:
    """Whether the kernel can run (numba importable; built or loaded on the first call)."""
    global _kernel, _tried
    if not _tried:
        _tried = True
        try:
            _kernel = _build()
        except ImportError:  # numba is an optional extra: merkat[kernels]
            _kernel = None
    return _kernel is not None


def compiled_share(b: Any, m: Any, cap_g: Any, g: Any, limit: float, tiny: float
                   ) -> tuple[Any, Any, Any, Any, Any]:
    """``(allocation, price, capped, uncapped_bids, capacity_left)`` of the segmented
    proportional share (``g``: each VM's group, int64; ``cap_g``: each group's capacity;
    ``limit``: ``1 + rtol``; ``tiny``: the smallest normal float): see the module docstring.
    Call only when :func:`available`."""
    n, n_groups = b.shape[0], cap_g.shape[0]
    allocation = np.zeros(n)
    capped = np.zeros(n, dtype=np.bool_)
    price = np.zeros(n_groups)
    uncapped = np.zeros(n_groups)
    left = cap_g.copy()
    _kernel(b, m, cap_g, g, limit, tiny, allocation, capped, price, uncapped, left)
    return allocation, price, capped, uncapped, left


def _build() -> Any:
    """The numba function (imported and compiled, or loaded from the cache, on first use)."""
    import numba

    @numba.njit(cache=True, error_model="numpy")
    def share(b: Any, m: Any, cap_g: Any, g: Any, limit: float, tiny: float, allocation: Any,
              capped: Any, price: Any, uncapped: Any, left: Any) -> None:  # pragma: no cover
        n = b.shape[0]
        n_groups = cap_g.shape[0]
        inf = np.inf
        ratio = np.empty(n)
        for i in range(n):
            ratio[i] = b[i] / m[i] if b[i] > 0 else 0.0
        counts = np.zeros(n_groups, np.int64)
        for i in range(n):
            counts[g[i]] += 1
        starts = np.empty(n_groups, np.int64)
        s = 0
        for k in range(n_groups):
            starts[k] = s
            s += counts[k]
        # by group (counting sort, stable), then by decreasing ratio (stable merge sort)
        order = np.empty(n, np.int64)
        fill = starts.copy()
        for i in range(n):
            order[fill[g[i]]] = i
            fill[g[i]] += 1
        for k in range(n_groups):
            a = starts[k]
            z = a + counts[k]
            if z - a > 1:
                seg = order[a:z].copy()
                key = np.empty(z - a)
                for t in range(z - a):
                    key[t] = -ratio[seg[t]]
                o = np.argsort(key, kind="mergesort")
                for t in range(z - a):
                    order[a + t] = seg[o[t]]
        total = np.zeros(n_groups)
        for i in range(n):  # in input order, as bincount
            total[g[i]] += b[i]
        cb = 0.0  # the running sums over the sorted array, as cumsum
        cm = 0.0
        for k in range(n_groups):
            a = starts[k]
            z = a + counts[k]
            if z == a:
                continue  # empty: price 0, no uncapped bid, all its capacity left
            base_b = cb
            base_m = cm
            first = z
            p_f = 0.0
            lb_f = 0.0
            lc_f = 0.0
            for j in range(a, z):
                i = order[j]
                if first == z:
                    lb = total[k] - (cb - base_b)
                    if lb < 0.0:  # = max(lb, 0.0), NaN kept
                        lb = 0.0
                    lc = cap_g[k] - (cm - base_m)
                    if lb <= 0.0:
                        p = 0.0
                    elif lc > 0.0:
                        p = lb / lc
                    else:
                        p = inf
                    if ratio[i] <= p * limit:
                        first = j
                        p_f = p
                        lb_f = lb
                        lc_f = lc
                cb += b[i]
                cm += 0.0 if m[i] == inf else m[i]
            if first < z:
                price[k] = p_f
                uncapped[k] = lb_f
                left[k] = lc_f
            else:  # every VM at its cap: no price, the rest of the capacity idle
                left[k] = cap_g[k] - (cm - base_m)
            gp = price[k]
            for j in range(a, z):
                i = order[j]
                if j < first:
                    capped[i] = True
                    x = 0.0 if m[i] == inf else m[i]
                elif gp > 0:
                    x = (b[i] / uncapped[k]) * left[k] if gp < tiny else b[i] / gp
                else:
                    x = 0.0
                allocation[i] = x if -inf < x < inf else 0.0

    return share
