"""Whether an application's balance pays its VMs' new bids as they are (issue 28): the
batched decision's budget check (:mod:`merkat.core.batch`, :mod:`merkat.core.batch_slo`),
the answer :func:`~merkat.core.bids.within_budget` would give without its draft, copies and
sums. ``tests/test_batched_gather.py`` pins each against it at the micro-credit's edge."""

from __future__ import annotations

import math
from collections.abc import Sequence

from merkat.core.model import to_micro
from merkat.defaults import MICRO

__all__ = ["fits", "fits_one", "pays", "pays_one", "pays_summed", "pays_total"]

_FITS_VMS = 4
"""Up to this many VMs, whether an application's balance pays its new bids as they are is
found by :func:`fits` (the VM after VM sum), the rest by :func:`pays` (O(1) where certain)."""

_EXACT = float(2 ** 53)  # balances (micro-credits) a float holds exactly


def fits_one(x: float, nvms: int, balance: int) -> bool:
    """:func:`fits` of one traded resource's bid ``x`` (its VMs' mapping's one value)."""
    if not balance < _EXACT:
        return False
    x = 0.0 + x
    total = x
    for _ in range(1, nvms):
        total = total + x
    if total - total != 0:  # not finite
        return False
    if total <= 0:
        return True
    y = total * MICRO
    return y - y == 0 and round(y) <= balance


def fits(values: Sequence[float], nvms: int, balance: int) -> bool:
    """Whether :func:`~merkat.core.bids.within_budget` leaves the bids of ``nvms`` VMs (at
    most :data:`_FITS_VMS`), each bidding ``values`` (in the traded resources' order), as they
    are: their total, summed as it sums them (each VM's values from 0, then VM after VM), is
    finite and at most ``balance`` (micro-credits, rounded as :func:`to_micro
    <merkat.core.model.to_micro>` rounds). False for a balance a float does not hold exactly
    (within_budget decides). ``tests/test_batched_gather.py`` pins it against within_budget
    at the micro-credit's edge."""
    x = 0.0 + values[0]
    for y in values[1:]:
        x = x + y
    return fits_one(x, nvms, balance)  # (0.0 + x is x: a sum from 0.0 is never -0.0)


def pays_one(x: float, nvms: int, balance: int) -> bool:
    """:func:`pays` of one traded resource's bid ``x`` (``sum`` of its mapping: 0 + x)."""
    return pays_total(0.0 + x, nvms, balance)


def pays(bid: dict[str, float], nvms: int, balance: int) -> bool:
    """Whether :func:`~merkat.core.bids.within_budget` leaves ``nvms`` VMs each bidding
    ``bid`` as they are (the next state :func:`~merkat.core.draft.bidding` makes is then
    :meth:`Decider.rebid <merkat.core.reconcile.Decider.rebid>`'s): the same sums in the same
    order (the mapping's values from 0, then VM after VM; :func:`pays_summed`), finite and at
    most ``balance`` (micro-credits). What it replaces, for applications of more than
    :data:`_FITS_VMS` VMs: a :func:`~merkat.core.draft.draft` of every VM column,
    ``set_uniform`` and ``within_budget``; ``tests/test_batched_gather.py`` pins it against
    them.

    O(1) where the answer is certain: the VM after VM sum of ``nvms`` copies of a finite
    ``x > 0`` is within ``nvms²·ε·x`` of ``nvms·x`` (recursive summation's error bound), so
    a product clear of the balance by that much (and a micro-credit) answers as the sum
    would; ``x <= 0`` sums to at most 0. Otherwise (not finite, near the balance, near an
    overflow) the sum itself (:func:`pays_summed`): the answer is the same bool either way
    (``tests/test_batched_gather.py``, hypothesis, balances at the boundary)."""
    return pays_total(sum(bid.values()), nvms, balance)


def pays_total(x: float, nvms: int, balance: int) -> bool:
    """:func:`pays` of a VM's bids summed, ``x``."""
    y = nvms * x
    if x - x == 0 and -1e300 < y < 1e300:  # finite, and so is every partial sum
        if x <= 0:
            return True  # (a sum of copies of x <= 0 is <= 0)
        slack = y * (nvms * nvms * 2.3e-16 + 1e-15)
        if (y + slack) * MICRO + 1 <= balance:
            return True
        if (y - slack) * MICRO - 1 > balance:
            return False
    return pays_summed(x, nvms, balance)


def pays_summed(x: float, nvms: int, balance: int) -> bool:
    """:func:`pays` by its sums: ``nvms`` copies of ``x`` (a VM's bids summed) added VM
    after VM, as :func:`~merkat.core.bids.within_budget` adds them (the reference)."""
    total = 0.0
    for _ in range(nvms):
        total += x
    return math.isfinite(total) and (total <= 0 or to_micro(total) <= balance)
