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

import math
from collections import deque
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

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
    """Mutable state of one tabu search; every update is local to the two nodes of a move.

    Numerics: every allocation, error and sum is computed by the same operations, on the same
    values and in the same order as a straightforward numpy version (node clearings of up to
    ``_SMALL`` VMs in plain Python by :func:`proportional_share_small`, larger ones by
    :func:`proportional_share`), so the search is deterministic and its result does not depend
    on how the bookkeeping is stored. Per-VM state the loop reads one element at a time is
    kept in Python lists (numpy's per-call overhead dominates on the few VMs of two nodes).
    """

    def __init__(
        self, hosts: Hosts, vms: VMs, host: IntArray, ideal: FloatArray, params: BalanceParams
    ) -> None:
        self.hosts, self.vms, self.ideal, self.params = hosts, vms, ideal, params
        self.host = host.copy()
        n_hosts, n_res = hosts.capacity.shape
        self.n_res = n_res
        self.placed = self.host >= 0
        self.traded: list[int] = [r for r in range(n_res) if bool(np.any(vms.bid[:, r] > 0))]
        placed = np.flatnonzero(self.placed)
        self.bu = np.zeros((n_hosts, n_res))  # uncapped bids per node and resource
        self.cl = hosts.capacity.copy()  # capacity left to them
        alloc = np.zeros((len(vms), n_res))
        self._fill_all(placed, alloc)
        self.err = np.where(self.placed, vm_errors(alloc, ideal), 0.0)
        self.n_placed = max(int(placed.size), 1)
        self.sumsq = float(np.dot(self.err, self.err))

    def _fill_all(self, placed: IntArray, alloc: FloatArray) -> None:
        """The proportional share on every node for the current mapping."""
        vms, cap = self.vms, self.hosts.capacity
        group = self.host[placed]
        if placed.size <= _SMALL:
            # A few VMs: clear each occupied node in plain Python (an empty node keeps no
            # uncapped bid and all its capacity, which is what the rule gives it).
            bids, caps = vms.bid[placed].T.tolist(), vms.cap[placed].T.tolist()
            rows: dict[int, list[int]] = {}
            for j, g in enumerate(group.tolist()):
                rows.setdefault(g, []).append(j)
            capf = cap.tolist()
            for r in self.traded:
                b_r, c_r = bids[r], caps[r]
                for g, js in rows.items():
                    a, _, self.bu[g, r], self.cl[g, r] = proportional_share_small(
                        [b_r[j] for j in js], [c_r[j] for j in js], capf[g][r]
                    )
                    alloc[placed[js], r] = a
            return
        for r in self.traded:
            s = proportional_share(vms.bid[placed, r], vms.cap[placed, r], cap[:, r], group)
            alloc[placed, r], self.bu[:, r], self.cl[:, r] = (
                s.allocation,
                s.uncapped_bids,
                s.capacity_left,
            )

    def rms(self) -> float:
        return math.sqrt(max(self.sumsq, 0.0) / self.n_placed)

    def prepare(self) -> None:
        """The state the moves need, built only when the search runs."""
        hosts, vms = self.hosts, self.vms
        n_hosts, n_res = hosts.capacity.shape
        self.host_l: list[int] = self.host.tolist()
        self.members: list[list[int]] = [[] for _ in range(n_hosts)]
        for i in np.flatnonzero(self.placed).tolist():  # ascending VM index on each node
            self.members[self.host_l[i]].append(i)
        # Per resource, one flat list over VMs (no list per VM: fewer objects to allocate).
        self.bid_t: list[list[float]] = vms.bid.T.tolist()
        self.cap_t: list[list[float]] = vms.cap.T.tolist()
        self.min_t: list[list[float]] = vms.minimum.T.tolist()
        self.ideal_t: list[list[float]] = self.ideal.T.tolist()
        self.capf: list[list[float]] = hosts.capacity.tolist()
        placed = np.flatnonzero(self.placed)
        self.free = hosts.capacity.copy()
        for r in range(n_res):
            self.free[:, r] -= np.bincount(
                self.host[placed], weights=vms.minimum[placed, r], minlength=n_hosts
            )
        self.has_cap = hosts.capacity > 0
        self.all_have_cap = [bool(self.has_cap[:, r].all()) for r in range(n_res)]
        # Selection score: the VM's error when it may move, -1 otherwise (tabu, unplaced, or
        # a move would exceed the migration budget). Kept up to date locally.
        self.initial_l: list[int] = vms.host.tolist()
        self.migrations = 0
        self.is_tabu = [False] * len(vms)
        self.score = np.where(self.placed, self.err, -1.0)

    def set_tabu(self, v: int, tabu: bool) -> None:
        """Mark ``v`` (placed) tabu or not, and update its selection score."""
        self.is_tabu[v] = tabu
        self.score[v] = -1.0 if tabu else self.err[v]

    def costs_migration(self, v: int) -> bool:
        """Whether moving ``v`` now would add one migration to the period's count."""
        init = self.initial_l[v]
        return init != NO_HOST and self.host_l[v] == init

    def destination(self, v: int) -> int:
        """The node (not v's own) minimising v's error, among the best few by estimate.

        Every node is ranked by a closed-form estimate of v's allocation there (v's bid over
        the node's uncapped bids plus v's, times the capacity left to them, capped); the best
        ``params.candidates`` are then cleared exactly and the best of them is returned.
        """
        src = self.host_l[v]
        res = range(self.n_res)
        b = [self.bid_t[r][v] for r in res]
        c = [self.cap_t[r][v] for r in res]
        ideal = [self.ideal_t[r][v] for r in res]
        minimum = [self.min_t[r][v] for r in res]
        n_nodes = self.cl.shape[0]
        score = np.zeros(n_nodes)
        feasible: npt.NDArray[np.bool_] | None = None  # None: every node but src
        with np.errstate(divide="ignore", invalid="ignore"):
            for r in range(self.n_res):
                if b[r] > 0:
                    est = np.minimum(c[r], b[r] * self.cl[:, r] / (self.bu[:, r] + b[r]))
                    if not self.all_have_cap[r]:
                        feasible = self.has_cap[:, r].copy() if feasible is None else feasible
                        feasible &= self.has_cap[:, r]
                    e = np.where(est > 0, np.abs(1.0 - ideal[r] / est), ERROR_LIMIT)
                elif ideal[r] > 0:  # pragma: no cover - ideal is 0 when the bid is 0
                    e = np.full(score.shape, ERROR_LIMIT)
                else:
                    continue
                np.maximum(score, e, out=score)
                if minimum[r] > 0:
                    fits = self.free[:, r] >= minimum[r]
                    feasible = fits if feasible is None else feasible & fits
        if feasible is None:
            score[src] = np.inf
            n_ok = n_nodes - 1
        else:
            feasible[src] = False
            score[~feasible] = np.inf
            n_ok = int(np.count_nonzero(feasible))
        if n_ok <= 0:
            return NO_HOST
        k = min(self.params.candidates, n_ok)
        cands = np.argpartition(score, k - 1)[:k] if k < score.size else np.arange(score.size)
        nodes: list[int] = np.sort(cands[np.isfinite(score[cands])]).tolist()
        # Evaluate every candidate exactly: node h with v added.
        rows = [self.members[h] + [v] for h in nodes]
        sizes = [len(row) for row in rows]
        total = sum(sizes)
        if total <= _SMALL:
            mine = [[0.0] * self.n_res for _ in nodes]
            for r in self.traded:
                b_r, c_r = self.bid_t[r], self.cap_t[r]
                for g, h in enumerate(nodes):
                    row = rows[g]
                    a = proportional_share_small(
                        [b_r[j] for j in row], [c_r[j] for j in row], self.capf[h][r]
                    )[0]
                    mine[g][r] = a[-1]
        else:
            # One segmented clearing of all the candidates.
            members = np.fromiter(
                (j for row in rows for j in row), dtype=np.int64, count=total
            )
            group = np.repeat(np.arange(len(nodes)), sizes)
            cap = self.hosts.capacity[nodes]
            alloc = np.zeros((total, self.n_res))
            for r in self.traded:
                alloc[:, r] = proportional_share(
                    self.vms.bid[members, r], self.vms.cap[members, r], cap[:, r], group
                ).allocation
            mine = alloc[np.cumsum(sizes) - 1].tolist()
        if not mine:
            raise ValueError("no candidate destination with a finite estimate")
        best, best_err = 0, _vm_error(mine[0], ideal)
        for g in range(1, len(mine)):
            err_g = _vm_error(mine[g], ideal)
            if err_g < best_err:
                best, best_err = g, err_g
        return nodes[best]

    def move(self, v: int, dst: int) -> None:
        src = self.host_l[v]
        init = self.initial_l[v]
        if init != NO_HOST:  # leaving the initial host costs one, coming back refunds it
            self.migrations += int(dst != init) - int(src != init)
        ms, md = self.members[src], self.members[dst]
        ms.remove(v)
        md.append(v)
        self.host[v] = dst
        self.host_l[v] = dst
        if any(self.min_t[r][v] for r in range(self.n_res)):
            self.free[src] += self.vms.minimum[v]
            self.free[dst] -= self.vms.minimum[v]
        m = ms + md
        n_src = len(ms)
        if len(m) <= _SMALL:
            alloc = [[0.0] * self.n_res for _ in m]
            for r in self.traded:
                b_r, c_r = self.bid_t[r], self.cap_t[r]
                for h, part, offset in ((src, ms, 0), (dst, md, n_src)):
                    a, _, self.bu[h, r], self.cl[h, r] = proportional_share_small(
                        [b_r[j] for j in part], [c_r[j] for j in part], self.capf[h][r]
                    )
                    for k, x in enumerate(a):
                        alloc[offset + k][r] = x
        else:
            nodes = np.array([src, dst])
            m_arr = np.array(m, dtype=np.int64)
            group = np.repeat([0, 1], [n_src, len(md)])
            cap = self.hosts.capacity[nodes]
            full = np.zeros((len(m), self.n_res))
            for r in self.traded:
                s = proportional_share(
                    self.vms.bid[m_arr, r], self.vms.cap[m_arr, r], cap[:, r], group
                )
                full[:, r] = s.allocation
                self.bu[nodes, r], self.cl[nodes, r] = s.uncapped_bids, s.capacity_left
            alloc = full.tolist()
        ideal_t, is_tabu, res = self.ideal_t, self.is_tabu, range(self.n_res)
        new = [_vm_error(alloc[k], [ideal_t[r][j] for r in res]) for k, j in enumerate(m)]
        idx = np.array(m, dtype=np.int64)
        new_err = np.array(new)
        old_err = self.err[idx]
        self.sumsq += float(np.dot(new_err, new_err) - np.dot(old_err, old_err))
        self.err[idx] = new_err
        self.score[idx] = [-1.0 if is_tabu[j] else new[k] for k, j in enumerate(m)]


def _vm_error(actual: list[float], ideal: list[float]) -> float:
    """:func:`vm_errors` of one VM in plain Python: the same operations, so the same value."""
    worst = 0.0
    for a, i in zip(actual, ideal, strict=True):
        if a > 0:
            e = (a - i) / a
        elif i > 0:
            e = -ERROR_LIMIT
        else:
            continue
        e = abs(min(max(e, -ERROR_LIMIT), ERROR_LIMIT))
        if e > worst:
            worst = e
    return worst


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

    search.prepare()
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
        search.set_tabu(v, True)
        if len(tabu) > params.tabu_size:
            search.set_tabu(tabu.popleft(), False)
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
