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
from merkat.market.types import row_sum


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
