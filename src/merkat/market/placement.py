"""Placement of new VMs: worst-fit decreasing (Themis §III-B).

VMs are taken in descending order of their total bid (credits per period over all resources);
each goes to the feasible node whose bid load is smallest. A node's bid load is, for each
resource, the sum of the bids placed on it divided by its capacity; nodes are compared on their
worst (largest) resource load, then on their index. A node is feasible for a VM when what is
already reserved there plus the VM's minimum fits its capacity for every resource, and the node
has capacity for every resource the VM bids on. A VM that fits nowhere stays unplaced.
"""

from __future__ import annotations

import heapq

import numpy as np

from merkat.market.types import NO_HOST, Hosts, IntArray, VMs, row_sum


def node_load(hosts: Hosts, vms: VMs, host: IntArray) -> np.ndarray:
    """Bid load per node and resource: placed bids / capacity (``inf`` on zero capacity)."""
    placed = host >= 0
    load = np.zeros_like(hosts.capacity)
    for r in range(hosts.capacity.shape[1]):
        load[:, r] = np.bincount(host[placed], weights=vms.bid[placed, r], minlength=len(hosts))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(hosts.capacity > 0, load / hosts.capacity, np.where(load > 0, np.inf, 0.0))


def worst_fit_decreasing(hosts: Hosts, vms: VMs) -> IntArray:
    """Return a host index for every VM: current hosts kept, new VMs placed (or ``NO_HOST``).

    Cost: O(n log h) for n new VMs on h nodes, with one heap of nodes keyed by their load.
    """
    host = vms.host.copy()
    new = np.flatnonzero(host == NO_HOST)
    if new.size == 0 or len(hosts) == 0:
        return host
    cap = hosts.capacity
    placed = host >= 0
    reserved = np.zeros_like(cap)
    for r in range(cap.shape[1]):
        reserved[:, r] = np.bincount(
            host[placed], weights=vms.minimum[placed, r], minlength=len(hosts)
        )
    free = (cap - reserved).tolist()
    load_r = node_load(hosts, vms, host).tolist()
    inv_cap = np.where(cap > 0, 1.0 / np.where(cap > 0, cap, 1.0), np.inf).tolist()

    total_bid = row_sum(vms.bid[new])
    order = new[np.argsort(-total_bid, kind="stable")]
    heap = [(max(lr), h) for h, lr in enumerate(load_r)]
    heapq.heapify(heap)
    bids = vms.bid[order].tolist()  # rows of the new VMs only, in placement order
    mins = vms.minimum[order].tolist()
    n_res = cap.shape[1]
    # Feasibility only needs checking when some VM has a minimum or some node lacks a resource.
    check = bool((vms.minimum[new] > 0).any() or (cap <= 0).any())
    for k, i in enumerate(order.tolist()):
        b, mn = bids[k], mins[k]
        if check:
            chosen = _pop_feasible(heap, b, mn, free, inv_cap, n_res)
            if chosen == NO_HOST:
                continue
        else:
            chosen = heap[0][1]
        host[i] = chosen
        lh, fh, ih = load_r[chosen], free[chosen], inv_cap[chosen]
        for r in range(n_res):
            fh[r] -= mn[r]
            if b[r]:
                lh[r] += b[r] * ih[r]
        if check:
            heapq.heappush(heap, (max(lh), chosen))
        else:
            heapq.heapreplace(heap, (max(lh), chosen))
    return host


def _pop_feasible(
    heap: list[tuple[float, int]],
    bid: list[float],
    minimum: list[float],
    free: list[list[float]],
    inv_cap: list[list[float]],
    n_res: int,
) -> int:
    """Pop and return the least loaded node that can hold the VM (``NO_HOST`` if none);
    the infeasible nodes popped on the way are pushed back."""
    skipped = []
    chosen = NO_HOST
    while heap:
        entry = heapq.heappop(heap)
        h = entry[1]
        fh, ih = free[h], inv_cap[h]
        if all(minimum[r] <= fh[r] and (bid[r] == 0 or ih[r] != np.inf) for r in range(n_res)):
            chosen = h
            break
        skipped.append(entry)
    for entry in skipped:
        heapq.heappush(heap, entry)
    return chosen
