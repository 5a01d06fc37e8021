"""The ideal allocation's shortcut when every VM is capped: an underloaded cluster.

:func:`every_vm_capped` answers, with a few numpy reductions and no sort, whether
:func:`~merkat.market.share.proportional_share` of **one** market would cap every VM (the
water-filling's ``first == n``: each VM gets its cap, the price is 0). That is the usual
ideal allocation of a cluster with more capacity than its VMs can use (w150000: 1,189 of its
1,568 clearings), where the reference sorts the VMs, takes two running sums and tests every
position (~45 numpy calls) to find it.

What it replaces: ``proportional_share(bids, caps, capacity)``'s allocation and price in
:func:`~merkat.market.clear.ideal_allocation` (the two outputs it reads); the reference is
still called whenever the answer is not proved. ``tests/test_market_share.py`` compares the
two byte for byte on random markets around the bound.

Why it is the same (the reference's steps in
:func:`~merkat.market.share.proportional_share_numpy`, single market): position ``j`` of the
VMs sorted by decreasing bid per unit of cap is the first uncapped one when ``ratio_j <= p_j
(1 + 1e-12)``, with ``p_j = left_b / left_c`` the bids left over the capacity left by the
caps before ``j``. Exactly, ``left_b <= ratio_j T`` and ``left_c = s + T`` with ``T`` the caps
from ``j`` on (every later VM has a ratio at most ``ratio_j``) and ``s = C - sum(caps)`` the
capacity nobody can use, so ``p_j <= ratio_j (1 - s / C)``. When every bid is positive, every
cap finite and non-negative (``+0.0``: ratio ``inf``, capped at 0), ``n <= 1e5``, ``s >=
C / 1000`` and ``min(ratio) s > 1e4 (n + 1) eps sum(bids)``, the rounding of the running sums
(relative ``2 n eps C / s <= 1e-7`` on ``left_c``, absolute ``(2n + 1) eps sum(bids)`` on
``left_b``) stays far below that ``1 / 1000`` margin: no position is uncapped. The reference
then gives each VM ``where(isinf(cap), 0, cap)`` (here: ``cap``, finite) and the price
``0.0``. Zero bids (ratio 0 meets any price), infinite caps (ratio 0), ``-0.0`` caps (ratio
``-inf``), tiny ratios (below ``1e-200``: subnormal prices) and huge sums are left to the
reference.
"""

from __future__ import annotations

import numpy as np

from merkat.market.types import FloatArray

_EPS = float(np.finfo(np.float64).eps)
_HUGE = 1e200  # capacities and bid sums below it: no overflow in the bound's products
_MIN_RATIO = 1e-200  # ratios above it: no subnormal price in the reference
_SLACK = 1e-3  # the share of the capacity no cap can take, at least
_MAX_VMS = 100_000


def every_vm_capped(b: FloatArray, m: FloatArray, capacity: float) -> bool:
    """True when :func:`~merkat.market.share.proportional_share` ``(b, m, capacity)`` (one
    market; ``b``, ``m`` 1-D float arrays) provably caps every VM: its allocation is then
    ``m`` and its price ``0.0`` (module docstring). False means "not proved": ask the
    reference."""
    n = b.shape[0]
    if not 0 < n <= _MAX_VMS or not 0.0 < capacity <= _HUGE:
        return False
    total_m = float(m.sum())
    slack = capacity - total_m - 2 * n * _EPS * capacity  # (a lower bound: m.sum()'s rounding)
    if not slack >= capacity * _SLACK:
        return False
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(b > 0, b / m, 0.0)  # (the reference's ratio, the same operations)
    q = float(ratio.min())
    if not q > _MIN_RATIO:
        return False
    total_b = float(b.sum())
    return total_b <= _HUGE and q * slack > 1e4 * (n + 1) * _EPS * total_b
