"""The tabu search's state (:mod:`merkat.market.balance`): the mapping, every node's
clearing terms, every VM's allocation error, and the two operations of an iteration — choose
the destination of a VM (:meth:`Search.destination`) and move it (:meth:`Search.move`).

Numerics: every allocation, error and sum is computed by the same operations, on the same
values and in the same order as a straightforward numpy version (node clearings of up to
``_SMALL`` VMs in plain Python by :func:`proportional_share_small`, larger ones by
:func:`proportional_share`), so the search is deterministic and its result does not depend
on how the bookkeeping is stored. Per-VM state the loop reads one element at a time is kept
in Python lists (numpy's per-call overhead dominates on the few VMs of two nodes). The usual
market's shortcuts (one resource traded, no VM capped on the nodes concerned) live in
:mod:`merkat.market.balance_fast`, each pinned equal to this module's general path.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from merkat.market import balance_fast as fast
from merkat.market.allocation_error import ERROR_LIMIT, rel_error, vm_errors
from merkat.market.balance_arrays import stable_order, view
from merkat.market.share import (
    Shares,
    bid_ratio,
    first_share_of_added,
    proportional_share,
    proportional_share_small,
    segmented_share_small,
    share_of_last,
)
from merkat.market.types import (
    NO_HOST,
    BalanceParams,
    FloatArray,
    Hosts,
    IntArray,
    VMs,
    bid_on,
)

_SMALL = 48
"""Up to this many VMs, a node-level clearing in the search runs in plain Python."""

_SEGMENTED_PY = 160
"""Up to this many VMs, a segmented clearing of a few nodes (the candidates of a move, or the
two nodes of a move) runs in plain Python, bit for bit as numpy's
(:func:`~merkat.market.share.segmented_share_small`); above it numpy is faster."""

FAST_PATHS = True
"""Whether the search takes :mod:`merkat.market.balance_fast`'s shortcuts (the default);
``tests/test_market_balance.py`` turns them off to compare with the general path."""


class Search:
    """Mutable state of one tabu search; every update is local to the two nodes of a move
    (the module docstring says how its numbers are computed)."""

    def __init__(
        self, hosts: Hosts, vms: VMs, host: IntArray, ideal: FloatArray, params: BalanceParams,
        traded: Sequence[bool] | None = None,
    ) -> None:
        self.hosts, self.vms, self.ideal, self.params = hosts, vms, ideal, params
        self.host = host.copy()
        n_hosts, n_res = hosts.capacity.shape
        self.n_res = n_res
        self.placed = self.host >= 0
        # (bids are finite and >= 0: non-zero is > 0; ``traded``: the caller's bid_on)
        positive = bid_on(vms.bid) if traded is None else traded
        self.traded: list[int] = [r for r in range(n_res) if positive[r]]
        placed = np.flatnonzero(self.placed)
        self.bu = np.zeros((n_hosts, n_res))  # uncapped bids per node and resource
        self.cl = hosts.capacity.copy()  # capacity left to them
        alloc = np.zeros((len(vms), n_res))
        # The vectorised clearings of the starting mapping, per traded resource (None when the
        # nodes were cleared in plain Python): the enforceable allocation if nothing moves.
        self.start_shares: dict[int, Shares] | None = None
        self._fill_all(placed, alloc)
        # The resources that can make an error: those traded (the others have no
        # allocation) and those with an ideal share.
        nonzero = [r in self.traded or bool(ideal[:, r].any()) for r in range(n_res)]
        self.err_cols = [r for r in range(n_res) if nonzero[r]]
        self._nonzero, self._placed = nonzero, placed  # (prepare reads them)
        # (kept: when nothing moves, the clearing's allocation and errors are these)
        self.start_alloc, self.start_errors = alloc, vm_errors(alloc, ideal, self.err_cols)
        self.err = np.where(self.placed, self.start_errors, 0.0)
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
        self.start_shares = {}
        for r in self.traded:
            s = proportional_share(vms.bid[placed, r], vms.cap[placed, r], cap[:, r], group)
            alloc[placed, r], self.bu[:, r], self.cl[:, r] = (
                s.allocation,
                s.uncapped_bids,
                s.capacity_left,
            )
            self.start_shares[r] = s

    def start_enforceable(self) -> tuple[FloatArray, FloatArray] | None:
        """What :func:`enforceable` gives for the starting mapping, from the clearings already
        made (the same call on the same arrays), or None when they were not vectorised."""
        if self.start_shares is None:
            return None
        n_res = self.hosts.capacity.shape[1]
        prices = np.zeros((len(self.hosts), n_res))
        for r, s in self.start_shares.items():  # untraded resources: nothing, at price 0
            prices[:, r] = s.price
        # (the allocation _fill_all wrote: zeros, and each traded resource's shares)
        return self.start_alloc, prices

    def start_capped(self) -> bool | None:
        """``enforceable_capped``'s flag for :meth:`start_enforceable`'s clearings (None: not
        vectorised)."""
        return (None if self.start_shares is None
                else any(bool(s.capped.any()) for s in self.start_shares.values()))

    def rms(self) -> float:
        return math.sqrt(max(self.sumsq, 0.0) / self.n_placed)

    def prepare(self) -> None:
        """The state the moves need, built only when the search runs."""
        hosts, vms = self.hosts, self.vms
        n_hosts, n_res = hosts.capacity.shape
        # The per-VM columns the loop reads a few elements of (the moved VM's, the moved
        # nodes' VMs'): memoryviews on the arrays, read as Python numbers one at a time,
        # instead of lists of every VM (a float list of 900 VMs costs ~10-30 us to build;
        # a read ~45 ns more than a list's). The mapping's view writes the array itself.
        self.host_l: Any = view(self.host)
        # Per node, built on first use (:meth:`load`) from host-sorted lists: its members in
        # ascending VM index and, per traded resource, their bids, caps and bids per unit of
        # cap in the same order, the sum of the bids (left to right, as ``sum`` does) and the
        # largest bid per unit of cap (most candidate clearings need nothing else:
        # first_share_of_added).
        placed = self._placed  # (= np.flatnonzero(self.placed): the mapping has not moved)
        on = self.host[placed]
        by_node = placed[stable_order(on, n_hosts)]
        counts = np.bincount(on, minlength=n_hosts)
        ends = np.cumsum(counts)
        self.bounds: list[int] = [0, *ends.tolist()]
        # Every node's VM count (kept in step by balance_loop's moves, which read it).
        self.count: list[int] = counts.tolist()
        self.sorted_vms: Any = view(by_node)
        self.loaded = [False] * n_hosts
        unset = cast(list[list[Any]], [None] * n_hosts)  # each entry set by load() before use
        self.members: list[list[int]] = unset.copy()
        self.node_bids: dict[int, list[list[float]]] = {}
        self.node_caps: dict[int, list[list[float]]] = {}
        self.node_ratio: dict[int, list[list[float]]] = {}
        self.node_sum: dict[int, list[float]] = {}
        self.node_rmax: dict[int, list[float]] = {}
        self.sorted_cols: dict[int, tuple[Any, Any, Any]] = {}
        self.ratio_t: dict[int, Any] = {}  # per traded resource, every VM's bid per unit of cap
        self._ratio_sorted: dict[int, FloatArray] = {}
        self._by_node = by_node
        for r in self.traded:
            self.node_bids[r] = unset.copy()
            self.node_caps[r] = unset.copy()
            self.node_ratio[r] = unset.copy()
            self.node_sum[r] = [0.0] * n_hosts
            self.node_rmax[r] = [-math.inf] * n_hosts
            b_all, c_all = vms.bid[:, r], vms.cap[:, r]
            with np.errstate(divide="ignore", invalid="ignore"):  # = bid_ratio, VM by VM
                ratio_all = np.where(b_all > 0, np.where(c_all > 0, b_all / c_all, np.inf), 0.0)
            self.ratio_t[r] = view(ratio_all)
            ratio = ratio_all[by_node]  # (the same divisions, host-sorted)
            self._ratio_sorted[r] = ratio  # (load's host-sorted columns: built on first use)
            if FAST_PATHS and placed.size:
                # Every node's sum and largest ratio at once, as load() computes them (the
                # shortcuts read them of candidate nodes, which then need no lists):
                # bincount adds a node's bids in VM order from 0.0, as ``sum`` does its
                # list, and a maximum is exact. tests/test_market_balance.py compares.
                self.node_sum[r] = np.bincount(on, weights=vms.bid[placed, r],
                                               minlength=n_hosts).tolist()
                full = counts > 0
                rmax = np.full(n_hosts, -math.inf)
                rmax[full] = np.maximum.reduceat(ratio, (ends - counts)[full])
                self.node_rmax[r] = rmax.tolist()
        # Resources that can make an error: those bid on, or with an ideal share (any other
        # resource has a = â = 0 for every VM, an error of 0, and no say in a destination).
        self.err_res = [
            r for r in range(n_res)
            if r in self.traded or (self._nonzero[r] and bool(np.any(self.ideal[:, r] > 0)))
        ]  # (a column without a non-zero has none > 0)
        # Per resource that counts, one flat list over VMs.
        self.bid_t: dict[int, Any] = {r: view(vms.bid[:, r]) for r in self.err_res}
        self.cap_t: dict[int, Any] = {r: view(vms.cap[:, r]) for r in self.err_res}
        self.ideal_t: dict[int, Any] = {r: view(self.ideal[:, r]) for r in self.err_res}
        self.has_min = bool((vms.minimum > 0).any())
        self.min_t = {r: vms.minimum[:, r].tolist() for r in self.err_res} if self.has_min else {}
        self.cap_node: list[list[float]] = hosts.capacity_lists  # [r][node] (read only)
        self.free = hosts.capacity.copy()  # what each node can still hold (VM minimums)
        if self.has_min:
            for r in range(n_res):
                self.free[:, r] -= np.bincount(
                    on, weights=vms.minimum[placed, r], minlength=n_hosts
                )
        self.has_cap = hosts.has_capacity
        self.all_have_cap = hosts.everywhere
        self.bu_col = [self.bu[:, r] for r in range(n_res)]  # views, updated in place
        self.cl_col = [self.cl[:, r] for r in range(n_res)]
        # Selection score: the VM's error when it may move, -1 otherwise (tabu, unplaced, or
        # a move would exceed the migration budget). Kept up to date locally.
        self.initial_l: Any = view(vms.host)
        self.migrations = 0
        self.is_tabu = [False] * len(vms)
        self.score = np.where(self.placed, self.err, -1.0)
        self.fast = fast.Shortcuts(self, _SMALL) if FAST_PATHS else None

    def load(self, h: int) -> None:
        """Build node ``h``'s lists from the starting mapping (before any move touches it)."""
        self.loaded[h] = True
        a, z = self.bounds[h], self.bounds[h + 1]
        self.members[h] = self.sorted_vms[a:z].tolist()
        for r in self.traded:
            cols = self.sorted_cols.get(r)
            if cols is None:  # (the usual market's loop never asks: it reads the VMs' columns)
                by = self._by_node
                cols = self.sorted_cols[r] = (view(self.vms.bid[by, r]), view(self.vms.cap[by, r]),
                                              view(self._ratio_sorted[r]))
            b_s, c_s, q_s = cols
            nb = self.node_bids[r][h] = b_s[a:z].tolist()
            self.node_caps[r][h] = c_s[a:z].tolist()
            nq = self.node_ratio[r][h] = q_s[a:z].tolist()
            if a < z:  # else no bid (sum 0) and no ratio (-inf), as initialised
                self.node_sum[r][h] = sum(nb)
                self.node_rmax[r][h] = max(nq)

    def set_tabu(self, v: int, tabu: bool) -> None:
        """Mark ``v`` (placed) tabu or not, and update its selection score."""
        self.is_tabu[v] = tabu
        self.score[v] = -1.0 if tabu else self.err[v]

    def costs_migration(self, v: int) -> bool:
        """Whether moving ``v`` now would add one migration to the period's count."""
        init = self.initial_l[v]
        return bool(init != NO_HOST and self.host_l[v] == init)

    def destination(self, v: int) -> int:
        """The node (not v's own) minimising v's error, among the best few by estimate.

        Every node is ranked by a closed-form estimate of v's allocation there (v's bid over
        the node's uncapped bids plus v's, times the capacity left to them, capped); the best
        ``params.candidates`` are then cleared exactly and the best of them is returned.
        (The usual market's searches run :mod:`merkat.market.balance_loop`, whose
        destination keeps the estimates and clears by the first step: the same answer.)
        """
        nodes = self._candidates(v)
        if not nodes:
            return NO_HOST
        loaded = self.loaded
        for h in nodes:
            if not loaded[h]:
                self.load(h)
        errs = self._exact(v, nodes)
        best = 0
        for g in range(1, len(errs)):
            if errs[g] < errs[best]:
                best = g
        return nodes[best]

    def _candidates(self, v: int) -> list[int]:
        """The ``params.candidates`` nodes with the lowest estimated error for ``v`` (their
        estimate finite), in ascending order; [] when no node but v's own can hold it."""
        src = self.host_l[v]
        n_nodes = self.cl.shape[0]
        # v's estimated error per node: the largest over its resources (every term is >= 0,
        # so the first resource's array is the running maximum; 0 when no resource counts).
        score: FloatArray | None = None
        feasible: npt.NDArray[np.bool_] | None = None  # None: every node but src
        # (numpy's divide/invalid warnings are off for the whole search: see search_mapping)
        for r in self.err_res:  # elsewhere v bids nothing and has no ideal share
            b = self.bid_t[r][v]
            if b > 0:
                est = np.minimum(
                    self.cap_t[r][v], b * self.cl_col[r] / (self.bu_col[r] + b)
                )
                if not self.all_have_cap[r]:
                    fits = self.has_cap[:, r]
                    feasible = fits.copy() if feasible is None else feasible & fits
                e = np.where(est > 0, np.abs(1.0 - self.ideal_t[r][v] / est), ERROR_LIMIT)
            elif self.ideal_t[r][v] > 0:  # pragma: no cover - ideal is 0 when the bid is 0
                e = np.full(n_nodes, ERROR_LIMIT)
            else:
                continue
            if score is None:
                score = e  # a new array (np.where, np.full): updated in place below
            else:
                np.maximum(score, e, out=score)
            if self.has_min and self.min_t[r][v] > 0:
                fits = self.free[:, r] >= self.min_t[r][v]
                feasible = fits if feasible is None else feasible & fits
        if score is None:
            score = np.zeros(n_nodes)
        if feasible is None:
            score[src] = np.inf
            n_ok = n_nodes - 1
        else:
            feasible[src] = False
            score[~feasible] = np.inf
            n_ok = int(np.count_nonzero(feasible))
        if n_ok <= 0:
            return []
        return fast.lowest(score, min(self.params.candidates, n_ok))

    def _exact(self, v: int, nodes: list[int]) -> list[float]:
        """v's error on each of ``nodes`` (loaded), each cleared exactly with v added last."""
        sizes = [len(self.members[h]) + 1 for h in nodes]
        total = sum(sizes)
        errs = [0.0] * len(nodes)
        if total <= _SMALL:
            for r in self.err_res:
                i_v = self.ideal_t[r][v]
                if r in self.traded:
                    nb, nc, cap_r = self.node_bids[r], self.node_caps[r], self.cap_node[r]
                    sums, rmaxs = self.node_sum[r], self.node_rmax[r]
                    b_v, c_v = self.bid_t[r][v], self.cap_t[r][v]
                    r_v = bid_ratio(b_v, c_v)
                    for g, h in enumerate(nodes):
                        rm = rmaxs[h] if rmaxs[h] > r_v else r_v
                        a = first_share_of_added(sums[h] + b_v, rm, b_v, cap_r[h])
                        if a is None:
                            a = share_of_last(nb[h] + [b_v], nc[h] + [c_v], cap_r[h])
                        err = rel_error(a, i_v)
                        if err > errs[g]:
                            errs[g] = err
                else:
                    err = rel_error(0.0, i_v)
                    errs = [max(x, err) for x in errs]
            return errs
        # One segmented clearing of all the candidates: in plain Python up to
        # _SEGMENTED_PY VMs (the same bits as numpy's), in numpy above.
        in_python = total <= _SEGMENTED_PY
        if not in_python:
            rows = [self.members[h] + [v] for h in nodes]
            members = np.fromiter((j for row in rows for j in row), dtype=np.int64,
                                  count=total)
            group = np.repeat(np.arange(len(nodes)), sizes)
            cap = self.hosts.capacity[nodes]
            last = np.cumsum(sizes) - 1
        for r in self.err_res:
            i_v = self.ideal_t[r][v]
            if r not in self.traded:
                mine = [0.0] * len(nodes)
            elif in_python:
                nb, nc, cap_r = self.node_bids[r], self.node_caps[r], self.cap_node[r]
                b_v, c_v = self.bid_t[r][v], self.cap_t[r][v]
                shares = segmented_share_small([nb[h] + [b_v] for h in nodes],
                                               [nc[h] + [c_v] for h in nodes],
                                               [cap_r[h] for h in nodes])[0]
                mine = [row[-1] for row in shares]
            else:
                mine = proportional_share(
                    self.vms.bid[members, r], self.vms.cap[members, r], cap[:, r], group
                ).allocation[last].tolist()
            for g, a in enumerate(mine):
                err = rel_error(a, i_v)
                if err > errs[g]:
                    errs[g] = err
        return errs

    def _pair_shares(self, r: int, src: int, dst: int) -> list[float]:
        """Resource ``r``'s allocations on nodes ``src`` and ``dst`` (their members in order),
        each node's uncapped bids and capacity left updated: the two nodes cleared one by one
        in plain Python up to ``_SMALL`` VMs, as one segmented clearing in plain Python up to
        ``_SEGMENTED_PY`` (numpy's bits), in numpy above."""
        nb = self.node_bids[r]
        n = len(nb[src]) + len(nb[dst])
        if self.fast is not None:
            got = self.fast.pair_shares(r, src, dst, n > _SMALL)
            if got is not None:
                return got
            got = self._pair_general(r, src, dst, n)
            self.fast.synced(r, (src, dst))
            return got
        return self._pair_general(r, src, dst, n)

    def _pair_general(self, r: int, src: int, dst: int, n: int) -> list[float]:
        """:meth:`_pair_shares` without the shortcut (``n``: the two nodes' VMs)."""
        nb, nc, cap_r = self.node_bids[r], self.node_caps[r], self.cap_node[r]
        if n <= _SMALL:
            a_src, _, self.bu[src, r], self.cl[src, r] = proportional_share_small(
                nb[src], nc[src], cap_r[src])
            a_dst, _, self.bu[dst, r], self.cl[dst, r] = proportional_share_small(
                nb[dst], nc[dst], cap_r[dst])
            return a_src + a_dst
        if n <= _SEGMENTED_PY:
            shares, bu, cl = segmented_share_small(
                [nb[src], nb[dst]], [nc[src], nc[dst]], [cap_r[src], cap_r[dst]])
            self.bu[src, r], self.bu[dst, r] = bu
            self.cl[src, r], self.cl[dst, r] = cl
            return shares[0] + shares[1]
        nodes = np.array([src, dst])
        m_arr = np.array(self.members[src] + self.members[dst], dtype=np.int64)
        group = np.repeat([0, 1], [len(nb[src]), len(nb[dst])])
        s = proportional_share(self.vms.bid[m_arr, r], self.vms.cap[m_arr, r],
                               self.hosts.capacity[nodes, r], group)
        self.bu[nodes, r], self.cl[nodes, r] = s.uncapped_bids, s.capacity_left
        allocation: list[float] = s.allocation.tolist()
        return allocation

    def move(self, v: int, dst: int) -> None:
        src = self.host_l[v]
        init = self.initial_l[v]
        if init != NO_HOST:  # leaving the initial host costs one, coming back refunds it
            self.migrations += int(dst != init) - int(src != init)
        if not self.loaded[src]:
            self.load(src)
        if not self.loaded[dst]:
            self.load(dst)
        ms, md = self.members[src], self.members[dst]
        k_v = ms.index(v)
        del ms[k_v]
        md.append(v)
        for r in self.traded:
            nb, nc, nq = self.node_bids[r], self.node_caps[r], self.node_ratio[r]
            del nb[src][k_v], nc[src][k_v], nq[src][k_v]
            b_v = self.bid_t[r][v]
            r_v = bid_ratio(b_v, self.cap_t[r][v])
            nb[dst].append(b_v)
            nc[dst].append(self.cap_t[r][v])
            nq[dst].append(r_v)
            sums, rmaxs = self.node_sum[r], self.node_rmax[r]
            sums[src] = sum(nb[src])
            rmaxs[src] = max(nq[src], default=-math.inf)
            sums[dst] = sums[dst] + b_v  # = sum(nb[dst]): v is last
            if r_v > rmaxs[dst]:  # = max(rmaxs[dst], r_v)
                rmaxs[dst] = r_v
        self.host[v] = dst
        self.host_l[v] = dst
        if self.has_min:
            self.free[src] += self.vms.minimum[v]
            self.free[dst] -= self.vms.minimum[v]
        m = ms + md
        if self.fast is not None and self.fast.simple:  # one resource makes errors
            got = self.fast.move_errors(self._pair_shares(self.fast.r, src, dst), m)
        else:
            got = [0.0] * len(m)
            for r in self.err_res:
                ideal_r = self.ideal_t[r]
                alloc = self._pair_shares(r, src, dst) if r in self.traded else [0.0] * len(m)
                for k, j in enumerate(m):
                    e = rel_error(alloc[k], ideal_r[j])
                    if e > got[k]:
                        got[k] = e
        new = got
        if self.fast is not None:
            self.fast.moved(src, dst)
        idx = np.array(m, dtype=np.int64)
        new_err = np.array(new)
        old_err = self.err[idx]
        self.sumsq += float(np.dot(new_err, new_err) - np.dot(old_err, old_err))
        self.err[idx] = new_err
        score = self.score
        score[idx] = new_err  # then -1 for the tabu VMs (a few, if any, of the two nodes)
        is_tabu = self.is_tabu
        for j in m:
            if is_tabu[j]:
                score[j] = -1.0
