"""Worst-fit decreasing (merkat.market.placement) against its definition: a heap of
(worst-resource load, node) pairs, popped until a node can hold the VM (the code before the
argmin form); the same hosts on random markets, with memory minimums, nodes without some
resource, VMs without a bid for one, ties of load and of bid."""

from __future__ import annotations

import heapq

import numpy as np
import pytest

from merkat.market import NO_HOST, Hosts, VMs, worst_fit_decreasing
from merkat.market.placement import node_load
from merkat.market.types import row_max, row_sum


def _reference(hosts: Hosts, vms: VMs) -> np.ndarray:
    host = vms.host.copy()
    new = np.flatnonzero(host == NO_HOST)
    if new.size == 0 or len(hosts) == 0:
        return host
    cap = hosts.capacity
    placed = host >= 0
    reserved = np.zeros_like(cap)
    for r in range(cap.shape[1]):
        reserved[:, r] = np.bincount(host[placed], weights=vms.minimum[placed, r],
                                     minlength=len(hosts))
    free = (cap - reserved).tolist()
    load = node_load(hosts, vms, host).tolist()
    inv_cap = np.where(cap > 0, 1.0 / np.where(cap > 0, cap, 1.0), np.inf).tolist()
    order = new[np.argsort(-row_sum(vms.bid[new]), kind="stable")]
    heap = [(max(lr), h) for h, lr in enumerate(load)]
    heapq.heapify(heap)
    for i in order.tolist():
        b, mn = vms.bid[i].tolist(), vms.minimum[i].tolist()
        skipped, chosen = [], NO_HOST
        while heap:
            entry = heapq.heappop(heap)
            h = entry[1]
            if all(mn[r] <= free[h][r] and (b[r] == 0 or inv_cap[h][r] != np.inf)
                   for r in range(len(b))):
                chosen = h
                break
            skipped.append(entry)
        for entry in skipped:
            heapq.heappush(heap, entry)
        if chosen == NO_HOST:
            continue
        host[i] = chosen
        for r in range(len(b)):
            free[chosen][r] -= mn[r]
            if b[r]:
                load[chosen][r] += b[r] * inv_cap[chosen][r]
        heapq.heappush(heap, (max(load[chosen]), chosen))
    return host


@pytest.mark.parametrize("seed", range(60))
def test_worst_fit_decreasing_matches_the_heap_definition(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_hosts, n = int(rng.integers(1, 12)), int(rng.integers(1, 60))
    cap = rng.choice([0.0, 1.0, 2.0, 4.0], size=(n_hosts, 2), p=[0.1, 0.3, 0.3, 0.3])
    if seed % 3 == 0:
        cap[:] = 1.0  # equal nodes: every choice is a tie of load
    bid = rng.choice([0.0, 0.5, 1.0, 2.0], size=(n, 2), p=[0.2, 0.3, 0.3, 0.2])
    minimum = np.where(rng.random((n, 2)) < 0.3, rng.choice([0.5, 1.0], size=(n, 2)), 0.0)
    if seed % 2:
        minimum[:] = 0.0  # the path without feasibility checks
        cap[cap == 0.0] = 1.0
    host = np.where(rng.random(n) < 0.5, rng.integers(0, n_hosts, n), NO_HOST)
    hosts = Hosts(tuple(f"h{k}" for k in range(n_hosts)), cap)
    vms = VMs(tuple(f"v{k}" for k in range(n)), bid, np.full((n, 2), 4.0), host, minimum)
    got = worst_fit_decreasing(hosts, vms)
    assert got.tolist() == _reference(hosts, vms).tolist()
    assert (got[host >= 0] == host[host >= 0]).all()


@pytest.mark.parametrize("seed", range(12))
def test_node_load_skips_only_what_sums_to_zero(seed: int) -> None:
    """node_load leaves a resource nobody bids on at 0 without summing it: the same bytes
    as every resource's bincount (zero and -0.0 bids, hosts without capacity, unplaced
    VMs)."""
    rng = np.random.default_rng(seed)
    n_hosts, n = int(rng.integers(1, 12)), int(rng.integers(0, 40))
    cap = rng.choice([0.0, 1.0, 4.0], (n_hosts, 2))
    bid = np.zeros((n, 2))
    bid[:, seed % 2] = rng.choice([0.0, -0.0, 0.5, 2.0], n)
    host = rng.integers(-1, n_hosts, n)
    hosts = Hosts(tuple(f"h{i}" for i in range(n_hosts)), cap)
    vms = VMs(tuple(f"v{i}" for i in range(n)), bid, np.ones((n, 2)), host)
    placed = host >= 0
    load = np.zeros_like(cap)
    for r in range(2):
        load[:, r] = np.bincount(host[placed], weights=bid[placed, r], minlength=n_hosts)
    with np.errstate(divide="ignore", invalid="ignore"):
        want = np.where(cap > 0, load / cap, np.where(load > 0, np.inf, 0.0))
    assert node_load(hosts, vms, host).tobytes() == want.tobytes()


# --- what an admission point keeps (merkat.core.admission_keep, merkat.market.host_shares) ---

@pytest.mark.parametrize("seed", range(40))
def test_kept_sums_plus_the_new_rows_are_the_sums_of_every_row(seed: int) -> None:
    """``np.bincount`` adds a node's weights one after another in row order: the sums of
    the first rows, then each new row's bid added in order (plain floats), are the sums of
    every row, bit for bit (what lets an admission point keep each node's summed bids), and
    the loads :func:`loads_of` derives from them are :func:`node_load`'s."""
    from merkat.market.placement import loads_of

    rng = np.random.default_rng(seed)
    n_hosts, n = int(rng.integers(2, 12)), int(rng.integers(1, 120))
    host = rng.integers(0, n_hosts, n)
    w = rng.choice([0.0, -0.0, 1e-300, 0.1, 1.0 / 3.0, 7.0, 1e300, 2.5e-7], n) * \
        rng.uniform(0.5, 2.0, n)
    cut = int(rng.integers(0, n + 1))
    sums = np.bincount(host[:cut], weights=w[:cut], minlength=n_hosts)
    kept = sums.tolist()
    for h, x in zip(host[cut:].tolist(), w[cut:].tolist(), strict=True):
        kept[h] += x
    every = np.bincount(host, weights=w, minlength=n_hosts)
    assert np.array(kept).tobytes() == every.tobytes()
    cap = rng.choice([0.0, 1.0, 2.0, 48.0], (n_hosts, 2))
    hosts = Hosts(tuple(f"h{k}" for k in range(n_hosts)), cap)
    bid = np.stack((np.abs(w), np.zeros(n)), axis=1)
    vms = VMs(tuple(f"v{i}" for i in range(n)), bid, np.full((n, 2), np.inf), host)
    sums2 = np.zeros((n_hosts, 2))
    sums2[:, 0] = np.bincount(host, weights=bid[:, 0], minlength=n_hosts)
    assert loads_of(hosts, sums2).tobytes() == node_load(hosts, vms, host).tobytes()


@pytest.mark.parametrize("seed", range(60))
def test_worst_fit_from_kept_sums_is_worst_fit_decreasing(seed: int) -> None:
    """:func:`worst_fit_sums` (the loads read from per-node sums, a chosen node's row
    computed when first chosen) places the new VMs where :func:`worst_fit_decreasing` does,
    on random markets of nodes with every resource (ties of load and of bid, VMs without a
    bid, nodes chosen several times)."""
    from merkat.market.placement import loads_of, worst_fit_sums

    rng = np.random.default_rng(seed)
    n_hosts, n = int(rng.integers(1, 12)), int(rng.integers(1, 80))
    cap = rng.choice([1.0, 2.0, 3.0, 1024.0], (n_hosts, 2))
    hosts = Hosts(tuple(f"h{k}" for k in range(n_hosts)), cap)
    bid = rng.choice([0.0, 0.5, 1.0, 1.0 / 3.0, 2.0], (n, 2)) * rng.choice([1.0, 1.5], (n, 2))
    host = np.where(rng.random(n) < 0.7, rng.integers(0, n_hosts, n), NO_HOST)
    vms = VMs(tuple(f"v{i}" for i in range(n)), bid, np.full((n, 2), np.inf), host)
    want = worst_fit_decreasing(hosts, vms)
    placed = host >= 0
    sums = np.zeros((n_hosts, 2))
    for c in range(2):
        sums[:, c] = np.bincount(host[placed], weights=bid[placed, c], minlength=n_hosts)
    new = np.flatnonzero(host == NO_HOST)
    order = np.argsort(-row_sum(bid[new]), kind="stable").tolist()
    key = row_max(loads_of(hosts, sums))
    got = worst_fit_sums(sums, key, cap.tolist(), hosts.inv_capacity.tolist(), order,
                         bid[new].tolist())
    assert got == want[new].tolist()


def _market(rng: np.random.Generator, regime: int) -> tuple[Hosts, VMs]:
    """A random market: regime 0 the trace's (one-core VMs capped at 1 on one-core nodes),
    1 caps far above any share (nothing capped), 2 anything (caps that bind, zero caps and
    capacities, subnormal and huge bids)."""
    n_hosts, n = int(rng.integers(2, 10)), int(rng.integers(1, 60))
    bid = rng.choice([0.0, -0.0, 1e-310, 0.01, 1.0, 3.0, 1e250], (n, 2),
                     p=[0.1, 0.05, 0.05, 0.3, 0.3, 0.15, 0.05]) * rng.uniform(0.5, 2.0, (n, 2))
    if regime == 0:
        cap = np.ones((n_hosts, 2))
        caps = np.ones((n, 2))
    elif regime == 1:
        cap = rng.choice([1.0, 2.0, 4.0], (n_hosts, 2))
        caps = rng.choice([np.inf, 1e300], (n, 2))
    else:
        cap = rng.choice([0.0, 1.0, 2.0, 4.0, 1e-6], (n_hosts, 2),
                         p=[0.1, 0.4, 0.2, 0.2, 0.1])
        caps = rng.choice([np.inf, 0.0, 0.5, 1.0, 4.0, 1e-300], (n, 2),
                          p=[0.3, 0.05, 0.2, 0.3, 0.1, 0.05])
    hosts = Hosts(tuple(f"h{k}" for k in range(n_hosts)), cap)
    host = rng.integers(0, n_hosts, n)
    return hosts, VMs(tuple(f"v{i}" for i in range(n)), bid, caps, host)


@pytest.mark.parametrize("seed", range(300))
def test_one_node_cleared_alone_is_the_whole_clusters_share(seed: int) -> None:
    """:func:`node_shares` of each node (its VMs in row order, its bids summed in that
    order) against :func:`enforceable` of the whole cluster, on random markets (caps that
    bind or not, zero and subnormal bids, zero capacities, empty nodes, many VMs on one
    node): when no VM of any node is capped, every node's shares are the cluster's, byte
    for byte; a node with a capped VM answers None; ``enforceable_capped`` says capped
    exactly when some node answers None, and :func:`none_capped` (the whole cluster's
    check at once, numpy) exactly when none does."""
    from merkat.market.allocation_error import enforceable_capped
    from merkat.market.host_shares import node_shares, none_capped
    from merkat.market.types import bid_on

    rng = np.random.default_rng(seed)
    hosts, vms = _market(rng, seed % 3)
    with np.errstate(over="ignore"):  # (the reference's bid / cap of a subnormal cap)
        alloc, _, capped = enforceable_capped(hosts, vms, vms.host)
    host = vms.host.tolist()
    none = False
    for c in range(2):
        if not (vms.bid[:, c] != 0).any():
            continue  # (not traded: enforceable leaves it at 0)
        total = np.bincount(vms.host, weights=vms.bid[:, c], minlength=len(hosts))
        for h in range(len(hosts)):
            rows = [i for i in range(len(host)) if host[i] == h]
            got = node_shares(float(total[h]), float(hosts.capacity[h, c]),
                              vms.bid[rows, c].tolist(), vms.cap[rows, c].tolist())
            if got is None:
                none = True
            elif not capped:
                assert np.array(got).tobytes() == alloc[rows, c].tobytes(), (h, c)
    assert none == capped
    sums = np.stack([np.bincount(vms.host, weights=vms.bid[:, c], minlength=len(hosts))
                     for c in range(2)], axis=1)
    assert none_capped(hosts.capacity, vms.host, vms.bid, vms.cap, sums,
                       bid_on(vms.bid)) is not none
    assert not capped or seed % 3 == 2  # (regimes 0 and 1 compare every node)



@pytest.mark.parametrize("seed", range(120))
def test_a_clearing_says_whether_a_vm_was_capped(seed: int) -> None:
    """``Clearing.capped`` (what the first admission point after a period reads instead of
    :func:`none_capped`) is ``enforceable_capped``'s flag on the clearing's final mapping,
    whether the search's starting clearings were reused or not, on random markets (caps that
    bind or not, new and placed VMs, one or two resources traded)."""
    from merkat.market import NO_HOST
    from merkat.market.allocation_error import enforceable_capped
    from merkat.market.clear import clear

    rng = np.random.default_rng(seed)
    n_hosts, n = int(rng.integers(2, 12)), int(rng.integers(1, 40))
    hosts = Hosts(tuple(f"h{k}" for k in range(n_hosts)),
                  rng.choice([1.0, 2.0, 4.0], (n_hosts, 2)))
    bid = rng.uniform(0.01, 5.0, (n, 2)) * (rng.random((n, 2)) < [1.0, 0.3 * (seed % 2)])
    cap = rng.choice([0.5, 1.0, 2.0, np.inf], (n, 2))
    host = np.where(rng.random(n) < 0.3, NO_HOST, rng.integers(0, n_hosts, n))
    vms = VMs(tuple(f"v{i}" for i in range(n)), bid, cap, host)
    c = clear(hosts, vms)
    alloc, _, capped = enforceable_capped(hosts, vms, c.host)
    assert c.allocation.tobytes() == alloc.tobytes()
    assert c.capped is None or c.capped == capped
