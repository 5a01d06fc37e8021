"""Allocation error and load balancing by tabu search (Themis Fig. 2, Merkat §3.1).

The *allocation error* of VM i for resource r is ``e_r = (a_r - â_r) / a_r``, with ``a`` the
enforceable allocation (proportional share among the VMs of its node) and ``â`` the ideal one
(the cluster as one host). A VM's error is ``max_r |e_r|``.

The search starts from the current mapping and, at each iteration, moves the VM with the largest
error that is not tabu to the node that minimises that VM's error; the VM becomes tabu for the
next ``tabu_size`` moves. The best mapping seen is kept, judged by the standard deviation of the
VM errors about their target 0 (their root mean square). The search stops when every error is
within the threshold, after ``max_no_improve`` iterations without a better mapping, when the VM
to move would take the period over its migration budget (the SLO paper: "if reaching a better
solution involves a number of migrations higher than a threshold"), or after
``max_iterations``. The result is
never worse than the starting mapping and never uses more migrations than the budget.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from merkat.market.share import proportional_share, proportional_share_small
from merkat.market.types import NO_HOST, BalanceParams, FloatArray, Hosts, IntArray, VMs

_SMALL = 48
"""Up to this many VMs, a node-level clearing in the search runs in plain Python."""

ERROR_LIMIT = 1e3
"""|e| is clipped here: a VM that gets nothing while its ideal share is positive (a = 0 < â)
has an unbounded relative error; 1,000 (100,000 %) ranks it above any real error."""


def allocation_errors(actual: FloatArray, ideal: FloatArray) -> FloatArray:
    """Per-resource errors ``(a - â) / a`` (0 when both are 0; clipped to ±ERROR_LIMIT)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        e = np.where(actual > 0, (actual - ideal) / actual, np.where(ideal > 0, -ERROR_LIMIT, 0.0))
    return np.clip(e, -ERROR_LIMIT, ERROR_LIMIT)


def vm_errors(actual: FloatArray, ideal: FloatArray) -> FloatArray:
    """A VM's error: the largest ``|e_r|`` over its resources."""
    out: FloatArray = np.abs(allocation_errors(actual, ideal)).max(axis=1)
    return out


def enforceable(hosts: Hosts, vms: VMs, host: IntArray) -> tuple[FloatArray, FloatArray]:
    """Per-node proportional share: allocations ``(n, R)`` (0 when unplaced) and node prices."""
    n, n_res = len(vms), len(hosts.capacity[0]) if len(hosts) else vms.bid.shape[1]
    alloc = np.zeros((n, n_res))
    prices = np.zeros((len(hosts), n_res))
    placed = np.flatnonzero(host >= 0)
    if placed.size == 0 or len(hosts) == 0:
        return alloc, prices
    for r in range(n_res):
        s = proportional_share(
            vms.bid[placed, r], vms.cap[placed, r], hosts.capacity[:, r], host[placed]
        )
        alloc[placed, r] = s.allocation
        prices[:, r] = s.price
    return alloc, prices


@dataclass(frozen=True)
class BalanceResult:
    """The best mapping found, and how the search went."""

    host: IntArray
    iterations: int
    rms_before: float
    rms_after: float
    ran: bool


class _Search:
    """Mutable state of one tabu search; every update is local to the two nodes of a move."""

    def __init__(
        self, hosts: Hosts, vms: VMs, host: IntArray, ideal: FloatArray, params: BalanceParams
    ) -> None:
        self.hosts, self.vms, self.ideal, self.params = hosts, vms, ideal, params
        self.host = host.copy()
        n_hosts, n_res = hosts.capacity.shape
        self.placed = self.host >= 0
        order = np.argsort(self.host, kind="stable")
        counts = np.bincount(self.host[self.placed], minlength=n_hosts)
        first = int(np.count_nonzero(~self.placed))
        bounds = np.concatenate(([0], np.cumsum(counts))) + first
        self.members = [order[bounds[h] : bounds[h + 1]] for h in range(n_hosts)]
        self.traded: list[bool] = [bool(np.any(vms.bid[:, r] > 0)) for r in range(n_res)]
        self.alloc = np.zeros((len(vms), n_res))
        self.bu = np.zeros((n_hosts, n_res))  # uncapped bids per node and resource
        self.cl = np.zeros((n_hosts, n_res))  # capacity left to them
        placed = np.flatnonzero(self.placed)
        self.alloc[placed], self.bu[:], self.cl[:] = self.fill(
            np.arange(n_hosts), self.host[placed], placed
        )
        self.free = hosts.capacity.copy()
        for r in range(n_res):
            self.free[:, r] -= np.bincount(
                self.host[placed], weights=vms.minimum[placed, r], minlength=n_hosts
            )
        self.has_cap = hosts.capacity > 0
        self.err = np.where(self.placed, vm_errors(self.alloc, ideal), 0.0)
        self.n_placed = max(int(placed.size), 1)
        self.sumsq = float(np.dot(self.err, self.err))
        # Selection score: the VM's error when it may move, -1 otherwise (tabu, unplaced, or
        # a move would exceed the migration budget). Kept up to date locally.
        self.initial = vms.host
        self.migrations = 0
        self.is_tabu = np.zeros(len(vms), dtype=np.bool_)
        self.score = np.full(len(vms), -1.0)
        self.refresh(np.arange(len(vms)))

    def rms(self) -> float:
        return float(np.sqrt(max(self.sumsq, 0.0) / self.n_placed))

    def refresh(self, idx: IntArray) -> None:
        """Recompute the selection score of VMs ``idx``."""
        ok = self.placed[idx] & ~self.is_tabu[idx]
        self.score[idx] = np.where(ok, self.err[idx], -1.0)

    def costs_migration(self, v: int) -> bool:
        """Whether moving ``v`` now would add one migration to the period's count."""
        init = int(self.initial[v])
        return init != NO_HOST and int(self.host[v]) == init

    def fill(
        self, nodes: IntArray, group: IntArray, members: IntArray
    ) -> tuple[FloatArray, FloatArray, FloatArray]:
        """Proportional share on ``nodes``: VM ``members[j]`` sits on ``nodes[group[j]]``.

        Returns the members' allocations and each node's uncapped bids and capacity left.
        """
        vms, cap = self.vms, self.hosts.capacity[nodes]
        n_res = cap.shape[1]
        alloc = np.zeros((members.size, n_res))
        bu, cl = np.zeros((nodes.size, n_res)), cap.copy()
        traded = [r for r in range(n_res) if self.traded[r]]
        if members.size <= _SMALL:
            # A few VMs: clear each node in plain Python (numpy's call overhead dominates).
            bids, caps = vms.bid[members].T.tolist(), vms.cap[members].T.tolist()
            rows: list[list[int]] = [[] for _ in range(nodes.size)]
            for j, g in enumerate(group.tolist()):
                rows[g].append(j)
            for r in traded:
                b_r, c_r, col = bids[r], caps[r], alloc[:, r]
                for g, js in enumerate(rows):
                    a, _, bu[g, r], cl[g, r] = proportional_share_small(
                        [b_r[j] for j in js], [c_r[j] for j in js], float(cap[g, r])
                    )
                    col[js] = a
            return alloc, bu, cl
        for r in traded:
            s = proportional_share(vms.bid[members, r], vms.cap[members, r], cap[:, r], group)
            alloc[:, r], bu[:, r], cl[:, r] = s.allocation, s.uncapped_bids, s.capacity_left
        return alloc, bu, cl

    def destination(self, v: int) -> int:
        """The node (not v's own) minimising v's error, among the best few by estimate.

        Every node is ranked by a closed-form estimate of v's allocation there (v's bid over
        the node's uncapped bids plus v's, times the capacity left to them, capped); the best
        ``params.candidates`` are then cleared exactly and the best of them is returned.
        """
        src = int(self.host[v])
        b, c, ideal, minimum = self.vms.bid[v], self.vms.cap[v], self.ideal[v], self.vms.minimum[v]
        score = np.zeros(self.cl.shape[0])
        feasible = np.ones(self.cl.shape[0], dtype=np.bool_)
        with np.errstate(divide="ignore", invalid="ignore"):
            for r in range(self.cl.shape[1]):
                if b[r] > 0:
                    est = np.minimum(c[r], b[r] * self.cl[:, r] / (self.bu[:, r] + b[r]))
                    feasible &= self.has_cap[:, r]
                    e = np.where(est > 0, np.abs(1.0 - ideal[r] / est), ERROR_LIMIT)
                elif ideal[r] > 0:  # pragma: no cover - ideal is 0 when the bid is 0
                    e = np.full(score.shape, ERROR_LIMIT)
                else:
                    continue
                np.maximum(score, e, out=score)
                if minimum[r] > 0:
                    feasible &= self.free[:, r] >= minimum[r]
        feasible[src] = False
        score[~feasible] = np.inf
        n_ok = int(np.count_nonzero(feasible))
        if n_ok == 0:
            return NO_HOST
        k = min(self.params.candidates, n_ok)
        cands = np.argpartition(score, k - 1)[:k] if k < score.size else np.arange(score.size)
        cands = np.sort(cands[np.isfinite(score[cands])])
        # Evaluate every candidate exactly in one segmented clearing: node cands[g] with v added.
        parts = [self.members[h] for h in cands.tolist()]
        sizes = np.array([p.size + 1 for p in parts])
        members = np.concatenate([np.append(p, v) for p in parts])
        group = np.repeat(np.arange(cands.size), sizes)
        alloc, _, _ = self.fill(cands, group, members)
        mine = alloc[np.cumsum(sizes) - 1]
        errs = vm_errors(mine, np.broadcast_to(ideal, mine.shape))
        return int(cands[int(np.argmin(errs))])

    def move(self, v: int, dst: int) -> None:
        src = int(self.host[v])
        init = int(self.initial[v])
        if init != NO_HOST:  # leaving the initial host costs one, coming back refunds it
            self.migrations += int(dst != init) - int(src != init)
        self.members[src] = self.members[src][self.members[src] != v]
        self.members[dst] = np.append(self.members[dst], v)
        self.host[v] = dst
        self.free[src] += self.vms.minimum[v]
        self.free[dst] -= self.vms.minimum[v]
        m = np.concatenate((self.members[src], self.members[dst]))
        group = np.repeat([0, 1], [self.members[src].size, self.members[dst].size])
        nodes = np.array([src, dst])
        alloc, self.bu[nodes], self.cl[nodes] = self.fill(nodes, group, m)
        new_err = vm_errors(alloc, self.ideal[m])
        self.sumsq += float(np.dot(new_err, new_err) - np.dot(self.err[m], self.err[m]))
        self.alloc[m] = alloc
        self.err[m] = new_err
        self.refresh(m)


def balance(
    hosts: Hosts, vms: VMs, host: IntArray, ideal: FloatArray, params: BalanceParams
) -> BalanceResult:
    """Tabu-search load balancing from mapping ``host`` (see the module docstring).

    ``vms.host`` is the mapping at the start of the period: moving a VM away from it costs one
    migration, moving it back refunds it, and VMs new this period (``NO_HOST`` there) move
    freely. Returns the best mapping found (``host`` itself when balancing is not needed).
    """
    search = _Search(hosts, vms, host, ideal, params)
    rms0 = search.rms()
    if len(hosts) < 2 or not np.any(search.err[search.placed] > params.error_threshold):
        return BalanceResult(host.copy(), 0, rms0, rms0, ran=False)

    best_host, best_rms = search.host.copy(), rms0
    tabu: deque[int] = deque()
    no_improve, it = 0, 0
    while it < params.max_iterations:
        v = int(np.argmax(search.score))
        if search.score[v] < 0:
            break  # every placed VM is tabu
        if search.costs_migration(v) and search.migrations >= params.max_migrations:
            break  # the better mapping would need more migrations than the budget allows
        it += 1
        dst = search.destination(v)
        if dst != NO_HOST:
            search.move(v, dst)
        # v becomes tabu; the oldest tabu VM is released when the list is full.
        tabu.append(v)
        search.is_tabu[v] = True
        touched = [v]
        if len(tabu) > params.tabu_size:
            old = tabu.popleft()
            search.is_tabu[old] = False
            touched.append(old)
        search.refresh(np.array(touched))
        rms = search.rms()
        if dst != NO_HOST and rms < best_rms * (1.0 - 1e-9):
            best_host, best_rms, no_improve = search.host.copy(), rms, 0
            if not np.any(search.err[search.placed] > params.error_threshold):
                break
        else:
            no_improve += 1
            if no_improve >= params.max_no_improve:
                break
    return BalanceResult(best_host, it, rms0, best_rms, ran=True)
