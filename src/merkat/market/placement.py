"""Placement of new VMs: worst-fit decreasing (Themis §III-B).

VMs are taken in descending order of their total bid (credits per period over all resources);
each goes to the feasible node whose bid load is smallest. A node's bid load is, for each
resource, the sum of the bids placed on it divided by its capacity; nodes are compared on their
worst (largest) resource load, then on their index. A node is feasible for a VM when what is
already reserved there plus the VM's minimum fits its capacity for every resource, and the node
has capacity for every resource the VM bids on. A VM that fits nowhere stays unplaced.
"""

from __future__ import annotations

import numpy as np

from merkat.market.types import NO_HOST, Hosts, IntArray, VMs, bid_on, row_max, row_sum


def node_load(hosts: Hosts, vms: VMs, host: IntArray) -> np.ndarray:
    """Bid load per node and resource: placed bids / capacity (``inf`` on zero capacity).
    A resource nobody bids on is left at 0 (what its sums of zero bids give: +0.0)."""
    placed = host >= 0
    load = np.zeros_like(hosts.capacity)
    traded = bid_on(vms.bid)
    on = host[placed]
    for r in range(hosts.capacity.shape[1]):
        if traded[r]:
            load[:, r] = np.bincount(on, weights=vms.bid[placed, r], minlength=len(hosts))
    with np.errstate(divide="ignore", invalid="ignore"):
        if hosts.all_have_capacity:  # (the usual: the same divisions, none of the where)
            out: np.ndarray = load / hosts.capacity
            return out
        return np.where(hosts.capacity > 0, load / hosts.capacity, np.where(load > 0, np.inf, 0.0))


def worst_fit_decreasing(hosts: Hosts, vms: VMs) -> IntArray:
    """Return a host index for every VM: current hosts kept, new VMs placed (or ``NO_HOST``).

    Each new VM (in descending order of total bid, ties in index order) goes to the node
    with the smallest worst-resource load among those that can hold it, ties to the lowest
    index: one ``argmin`` over the nodes' loads per VM (numpy), and only the chosen node's
    row updated, in plain Python floats (the same operations as a heap of ``(load, node)``
    pairs gives, without building one over every node for a few new VMs). Cost: O(n h) in
    numpy's inner loop for n new VMs on h nodes.
    """
    host = vms.host.copy()
    new = np.flatnonzero(host == NO_HOST)
    if new.size == 0 or len(hosts) == 0:
        return host
    cap = hosts.capacity
    placed = host >= 0
    n_res = cap.shape[1]
    load = node_load(hosts, vms, host)
    key = row_max(load)  # each node's worst-resource load
    inv_cap = hosts.inv_capacity  # (read only here)
    total_bid = row_sum(vms.bid[new])
    order = new[np.argsort(-total_bid, kind="stable")]
    bids = vms.bid[order].tolist()  # rows of the new VMs only, in placement order
    # Feasibility only needs checking when some VM has a minimum or some node lacks a resource.
    check = bool((vms.minimum[new] > 0).any()) or not hosts.all_have_capacity
    if check:
        mins = vms.minimum[order].tolist()
        reserved = np.zeros_like(cap)
        for r in range(n_res):
            reserved[:, r] = np.bincount(
                host[placed], weights=vms.minimum[placed, r], minlength=len(hosts)
            )
        free = cap - reserved
        no_cap = ~(cap > 0)
    for k, i in enumerate(order.tolist()):
        b = bids[k]
        if check:
            mn = mins[k]
            fits = np.ones(len(hosts), dtype=np.bool_)
            for r in range(n_res):
                fits &= free[:, r] >= mn[r]
                if b[r]:
                    fits &= ~no_cap[:, r]
            ok = np.flatnonzero(fits)
            if ok.size == 0:
                continue
            chosen = int(ok[key[ok].argmin()])
        else:
            chosen = int(key.argmin())
        host[i] = chosen
        lh = load[chosen].tolist()
        ih = inv_cap[chosen].tolist()
        for r in range(n_res):
            if b[r]:
                lh[r] += b[r] * ih[r]
        load[chosen] = lh
        key[chosen] = max(lh)
        if check:
            free[chosen] -= mn
    return host
