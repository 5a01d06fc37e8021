"""One market clearing: the step every scheduling period calls once.

``clear`` follows the paper's order, top-down:

1. refuse bids under the reserve price;
2. **ideal** allocations and prices: proportional share with caps, the cluster as one host;
3. **placement** of new VMs by worst-fit decreasing;
4. **load balancing** by tabu search when some VM's allocation error exceeds the threshold;
5. **enforceable** allocations: the same rule on each node among the VMs placed there, and the
   allocation errors of the final mapping.

Pure: no I/O, no clock, deterministic for the same input.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from merkat.market.allocation_error import enforceable_capped, vm_errors
from merkat.market.balance import BalanceResult, search_mapping
from merkat.market.placement import worst_fit_decreasing
from merkat.market.share import proportional_share
from merkat.market.share_capped import every_vm_capped
from merkat.market.types import (
    NO_HOST,
    RESOURCES,
    BalanceParams,
    FloatArray,
    Hosts,
    IntArray,
    MarketError,
    VMs,
    bid_on,
)


@dataclass(frozen=True)
class Migration:
    """VM ``vm`` moves from host index ``src`` to host index ``dst``."""

    vm: int
    src: int
    dst: int


@dataclass(frozen=True)
class Clearing:
    """What a period's clearing decided.

    ``price[r]``: the market price of resource r (credits per unit per period), from the ideal
    allocation. ``ideal`` and ``allocation``: ``(n, R)`` arrays (allocation 0 when unplaced).
    ``host``: final host index per VM (``NO_HOST`` when it fits nowhere). ``error``: each VM's
    allocation error (NaN when unplaced). ``node_price``: ``(h, R)`` per-node prices.
    ``timings``: seconds spent in each phase (measured by the caller's clock if any; the
    market itself only uses ``time.perf_counter`` deltas, never wall-clock time).
    ``capped``: whether some VM of some node was capped in the clearing of ``allocation``
    (:func:`~merkat.market.allocation_error.enforceable_capped`'s flag: False proves what
    :func:`~merkat.market.host_shares.none_capped` checks), None when not known.
    """

    price: FloatArray
    ideal: FloatArray
    allocation: FloatArray
    host: IntArray
    error: FloatArray
    node_price: FloatArray
    migrations: tuple[Migration, ...]
    balance: BalanceResult
    timings: dict[str, float] = field(default_factory=dict)
    capped: bool | None = None


def check_reserve(vms: VMs, reserve_price: FloatArray) -> None:
    """Raise :class:`MarketError` naming the first VM whose bid is under the reserve price.

    Only the resources a VM can use are held to it: a VM capped at 0 on a resource (a CPU-only
    application's memory) bids nothing for it and gets none."""
    under = (vms.bid < reserve_price[None, :]) & (vms.cap > 0)
    if not under.any():  # (the usual: argwhere only to name the first)
        return
    low = np.argwhere(under)
    if low.size:
        i, r = (int(x) for x in low[0])
        raise MarketError(
            f"vms[{i}].bid.{RESOURCES[r]}",
            f"VM {vms.ids[i]!r} bids {vms.bid[i, r]:g} for {RESOURCES[r]}, under the reserve "
            f"price {reserve_price[r]:g}",
        )


def ideal_allocation(hosts: Hosts, vms: VMs, traded: Sequence[bool] | None = None
                     ) -> tuple[FloatArray, FloatArray]:
    """Proportional share of the whole cluster as one host: allocations ``(n, R)``, prices.
    A resource on which every VM is provably capped (an underloaded cluster) takes the caps
    and price 0 without the sort (:func:`~merkat.market.share_capped.every_vm_capped`).
    ``traded``: :func:`~merkat.market.types.bid_on` of ``vms.bid`` when the caller has it;
    a resource nobody bids on is then left at 0 allocation and price 0 without its market,
    which is what that market gives (no bid: ``every_vm_capped`` cannot prove anything,
    its smallest ratio being 0, and ``proportional_share`` allocates nothing at price 0)."""
    total = hosts.total  # (cached on the cluster: its capacity is never written)
    ideal = np.zeros_like(vms.bid)
    price = np.zeros(len(RESOURCES))
    for r in range(len(RESOURCES)):
        if traded is not None and not traded[r]:
            continue  # (an untraded resource: the zeros it would get; see above)
        if every_vm_capped(vms.bid[:, r], vms.cap[:, r], float(total[r])):
            ideal[:, r] = vms.cap[:, r]  # (price[r] stays 0.0)
            continue
        s = proportional_share(vms.bid[:, r], vms.cap[:, r], total[r])
        ideal[:, r], price[r] = s.allocation, s.price[0]
    return ideal, price


def clear(
    hosts: Hosts,
    vms: VMs,
    *,
    reserve_price: FloatArray | None = None,
    params: BalanceParams | None = None,
) -> Clearing:
    """Clear the market for one period (see the module docstring for the steps).

    Raises :class:`MarketError` for a bid under the reserve price or a host index out of range.
    """
    params = params or BalanceParams()
    reserve = np.zeros(len(RESOURCES)) if reserve_price is None else np.asarray(reserve_price)
    hv = vms.host
    if hv.size and (int(hv.min()) < NO_HOST or int(hv.max()) >= len(hosts)):  # (the usual:
        bad = np.flatnonzero((hv < NO_HOST) | (hv >= len(hosts)))  # none, by two reductions)
        i = int(bad[0])
        raise MarketError(f"vms[{i}].host", f"host index {vms.host[i]} is not a known host")
    check_reserve(vms, reserve)
    traded = bid_on(vms.bid)  # (read by the ideal allocation and the search's start)
    clock = time.perf_counter
    t0 = clock()
    ideal, price = ideal_allocation(hosts, vms, traded)
    t1 = clock()
    host = worst_fit_decreasing(hosts, vms)
    t2 = clock()
    start = host
    result, search = search_mapping(hosts, vms, host, ideal, params, traded)
    host = result.host
    t3 = clock()
    # The mapping the search started from is often kept: its node clearings are then reused.
    # (A search that did not run hands back a copy of its start: the same mapping.)
    kept = not result.ran or np.array_equal(host, start)
    reused = search.start_enforceable() if kept else None
    capped: bool | None
    if reused is not None:  # (and their errors: vm_errors of the same arrays)
        allocation, node_price = reused
        errors = search.start_errors
        capped = search.start_capped()
    else:
        allocation, node_price, capped = enforceable_capped(hosts, vms, host)
        # (the search's resources that can make an error: enforceable's allocation is 0 in
        # the others, as its starting clearing's)
        errors = vm_errors(allocation, ideal, search.err_cols)
    error = np.where(host >= 0, errors, np.nan)
    migrations: tuple[Migration, ...] = ()
    if result.ran:  # (else every placed VM is where it was: worst-fit moves none)
        moved = np.flatnonzero((vms.host != NO_HOST) & (host != vms.host))
        migrations = tuple(
            Migration(i, src, dst)
            for i, src, dst in zip(
                moved.tolist(), vms.host[moved].tolist(), host[moved].tolist(), strict=True
            )
        )
    t4 = clock()
    timings = {"allocate_s": (t1 - t0) + (t4 - t3), "place_s": t2 - t1, "balance_s": t3 - t2}
    return Clearing(price, ideal, allocation, host, error, node_price, migrations, result, timings,
                    capped)
