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
    return loads_of(hosts, load)


def loads_of(hosts: Hosts, sums: np.ndarray) -> np.ndarray:
    """The bid loads of per-node bid sums ``sums`` (``(hosts, R)``: each node's placed bids
    summed in row order, as :func:`node_load`'s ``bincount``): ``sums / capacity``,
    ``inf`` where a node without the resource has a bid, 0 where it has none. A new
    array; an admission point's kept sums (:mod:`merkat.core.admission_keep`) give the
    loads :func:`node_load` would compute from every row."""
    with np.errstate(divide="ignore", invalid="ignore"):
        if hosts.all_have_capacity:  # (the usual: the same divisions, none of the where)
            out: np.ndarray = sums / hosts.capacity
            return out
        return np.where(hosts.capacity > 0, sums / hosts.capacity,
                        np.where(sums > 0, np.inf, 0.0))


def reserved_of(hosts: Hosts, vms: VMs, host: IntArray) -> np.ndarray:
    """Per node and resource, the minimums of the VMs placed there (``bincount`` in row
    order)."""
    placed = host >= 0
    reserved = np.zeros_like(hosts.capacity)
    for r in range(hosts.capacity.shape[1]):
        reserved[:, r] = np.bincount(host[placed], weights=vms.minimum[placed, r],
                                     minlength=len(hosts))
    return reserved


def worst_fit_decreasing(hosts: Hosts, vms: VMs) -> IntArray:
    """Return a host index for every VM: current hosts kept, new VMs placed (or ``NO_HOST``).

    Each new VM (in descending order of total bid, ties in index order) goes to the node
    with the smallest worst-resource load among those that can hold it, ties to the lowest
    index (:func:`worst_fit_new`). Cost: O(n h) in numpy's inner loop for n new VMs on h
    nodes.
    """
    host = vms.host.copy()
    new = np.flatnonzero(host == NO_HOST)
    if new.size == 0 or len(hosts) == 0:
        return host
    check = bool((vms.minimum[new] > 0).any()) or not hosts.all_have_capacity
    reserved = reserved_of(hosts, vms, host) if check else None
    load = node_load(hosts, vms, host)
    order = np.argsort(-row_sum(vms.bid[new]), kind="stable").tolist()
    host[new] = worst_fit_new(hosts, load, row_max(load), reserved, order,
                              vms.bid[new].tolist(),
                              vms.minimum[new].tolist() if check else [])
    return host


def worst_fit_new(hosts: Hosts, load: np.ndarray, key: np.ndarray,
                  reserved: np.ndarray | None, order: list[int], bids: list[list[float]],
                  mins: list[list[float]]) -> list[int]:
    """The hosts of new VMs (their bid and minimum rows ``bids`` and ``mins``; ``NO_HOST``
    for one that fits nowhere), taken in ``order`` (descending total bid, ties in row
    order), placed by worst-fit beside the placed ones: ``load`` is their bid loads
    (:func:`node_load`), ``key`` each node's worst-resource load (``row_max(load)``), both
    changed in place; ``reserved`` their minimums per node (None: no new VM has a minimum
    and every node has every resource, so nothing is checked, nor ``mins`` read). Each VM goes
    to the feasible
    node whose key is smallest, ties to the lowest index: one ``argmin`` over the nodes per
    VM (numpy), and only the chosen node's row updated, in plain Python floats (the same
    operations as a heap of ``(load, node)`` pairs gives, without building one)."""
    n_res = hosts.capacity.shape[1]
    out = [NO_HOST] * len(bids)
    inv_cap = hosts.inv_capacity  # (read only here)
    if reserved is not None:
        cap = hosts.capacity
        free = cap - reserved
        no_cap = ~(cap > 0)
    for i in order:
        b = bids[i]
        if reserved is not None:
            mn = mins[i]
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
        out[i] = chosen
        lh = load[chosen].tolist()
        ih = inv_cap[chosen].tolist()
        for r in range(n_res):
            if b[r]:
                lh[r] += b[r] * ih[r]
        load[chosen] = lh
        key[chosen] = max(lh)
        if reserved is not None:
            free[chosen] -= mn
    return out


def worst_fit_sums(sums: np.ndarray, key: np.ndarray, cap: list[list[float]],
                   inv_cap: list[list[float]], order: list[int],
                   bids: list[list[float]]) -> list[int]:
    """:func:`worst_fit_new` without minimums on a cluster whose every node has every
    resource (nothing to check), the loads read from per-node sums instead of an array of
    every node's: ``sums`` is each node's placed bids summed in row order (per resource;
    :func:`loads_of`'s input), ``key`` each node's worst-resource load
    (``row_max(loads_of(sums))``; copied, not changed), ``cap`` and ``inv_cap`` each node's
    capacity and its inverse (rows of plain floats). A chosen node's load row is its sums
    divided by its capacity (:func:`loads_of`'s divisions, in plain floats) the first time,
    then updated as :func:`worst_fit_new` updates it. What it replaces: an admission
    point's ``loads_of`` and ``row_max`` over every node and three numpy reads and writes
    per placed VM. ``tests/test_market_placement.py`` compares it with
    :func:`worst_fit_decreasing` on random markets."""
    key = key.copy()
    out = [NO_HOST] * len(bids)
    rows: dict[int, list[float]] = {}
    argmin = key.argmin
    for i in order:
        b = bids[i]
        chosen = int(argmin())
        out[i] = chosen
        lh = rows.get(chosen)
        if lh is None:
            lh = rows[chosen] = [x / y for x, y in zip(sums[chosen].tolist(), cap[chosen],
                                                       strict=True)]
        ih = inv_cap[chosen]
        for r, x in enumerate(b):
            if x:
                lh[r] += x * ih[r]
        key[chosen] = max(lh)
    return out
