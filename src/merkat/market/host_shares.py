"""One node's proportional share in plain Python, bit for bit as the whole cluster's
:func:`~merkat.market.allocation_error.enforceable` gives it when no VM of any node is
capped: what an admission point recomputes on the few nodes that receive newcomers
(:mod:`merkat.core.admission_keep`) instead of re-clearing every node.

Why a node can be cleared alone: :func:`~merkat.market.share.proportional_share` of one
market per node takes :func:`~merkat.market.share.uncapped_share` when every VM of every
node passes the water-filling's first step (its bid per unit of cap within its node's
price ``total / capacity``) and the bids and finite caps sum below ``_SAFE_SUM``. Then a
node's allocations depend only on its own VMs, in row order: its total bid (``bincount``
adds a node's weights one after another, from +0.0, in row order), its price, and each
VM's ``bid / price``. :func:`node_shares` is those operations on Python floats (the same
IEEE operations, so the same bits), or None when a VM of the node is capped (the caller then
clears every node with the reference). ``tests/test_market_placement.py`` compares it
with ``enforceable`` byte for byte on random markets (caps, zero bids, empty nodes, zero
capacities, several VMs added to one node).

:func:`none_capped` is the same proof for a whole cluster at once (numpy): what the first
admission point after a period checks on the period's clearing
(:mod:`merkat.core.admission_state`'s :func:`~merkat.core.admission_state.kept_of_period`)
instead of clearing every node again with :func:`~merkat.market.allocation_error.
enforceable_capped` (its flag is True whenever this answers False; the test compares them on
random markets)."""

from __future__ import annotations

import math

import numpy as np

from merkat.market.share import _RTOL, _SAFE_SUM, _TINY, FloatArray, IntArray, first_step

SAFE_BOUND = _SAFE_SUM / 10.0
"""A running total of bids (or finite caps) kept in plain Python below this proves the
reference's numpy sum of the same terms is below ``_SAFE_SUM`` (the two sums differ by far
less than the factor 10 for any number of non-negative terms)."""


def node_price(total: float, capacity: float) -> tuple[float, float, float]:
    """A node's ``(price, uncapped bids, capacity left)`` at the water-filling's first step
    (nothing capped): ``uncapped_share``'s ``left_b = max(total - 0.0, 0.0)``, ``left_c =
    capacity - 0.0`` and its price."""
    left_b = total - 0.0
    if left_b < 0.0 or left_b == 0.0:  # = np.maximum(left_b, 0.0) (-0.0 gives +0.0; NaN kept)
        left_b = 0.0
    left_c = capacity - 0.0
    if left_b <= 0.0:
        price = 0.0
    elif left_c > 0.0:
        price = left_b / left_c  # (inf when it overflows, as numpy)
    else:
        price = math.inf
    return price, left_b, left_c


def node_shares(total: float, capacity: float, bids: list[float],
                caps: list[float]) -> list[float] | None:
    """The allocations of one node's VMs (``bids``, ``caps``: its VMs in row order;
    ``total``: their bids summed in that order from +0.0) when none is capped, else None.
    The reference is ``uncapped_share``'s multi-node branch for the node's group."""
    price, left_b, left_c = node_price(total, capacity)
    limit = price * (1.0 + _RTOL)
    inf = math.inf
    for b, m in zip(bids, caps, strict=True):
        if b > 0:
            # = np.where(b > 0, b / m, 0.0): b / 0.0 is inf (b / -0.0 is -inf)
            ratio = b / m if m != 0.0 else math.copysign(inf, m)
            if not ratio <= limit:
                return None
        elif not limit >= 0.0:  # (a ratio of 0.0 against a NaN price)
            return None
    if not price > 0.0:
        return [0.0] * len(bids)
    # (a subnormal price: the shares from its two terms)
    out = [(b / left_b) * left_c for b in bids] if price < _TINY else [b / price for b in bids]
    return [a if -inf < a < inf else 0.0 for a in out]


def none_capped(capacity: FloatArray, host: IntArray, bid: FloatArray, cap: FloatArray,
                sums: FloatArray, traded: list[bool]) -> bool:
    """Whether no VM of any node is capped: for each ``traded`` resource, every VM's bid per
    unit of cap (``bid``, ``cap``: ``(n, R)``, every row placed on ``host``) within its node's
    price at the water-filling's first step (``sums``: each node's bids summed in row order,
    ``np.bincount``'s; ``capacity``: ``(h, R)``). The test of
    :func:`~merkat.market.share.uncapped_share`'s multi-node branch, the same IEEE
    operations: True proves that branch gave every node's shares (so
    :func:`node_shares` gives each node's), False only that the proof failed."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for c, on in enumerate(traded):
            if not on:
                continue
            _, _, price, ratio = first_step(bid[:, c], cap[:, c], sums[:, c], capacity[:, c])
            if not (ratio <= (price * (1.0 + _RTOL))[host]).all():
                return False
    return True
