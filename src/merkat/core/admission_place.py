"""The placement of an admission point's newcomers from the kept state
(:mod:`merkat.core.admission_keep`, :class:`~merkat.core.admission_state.Kept`): worst-fit
over the kept per-node sums, only the nodes that receive a newcomer re-cleared
(:func:`~merkat.market.host_shares.node_shares`), only the rows whose allocation changed
drafted (:func:`touched_runs`), and the state updated for the next point of the same period
(:func:`place_kept`); what it gives the decision (:class:`Placed`, :class:`Placement`,
:class:`KeptPlacement`: its arrays but the allocation made at their first read).
The reference is :func:`merkat.core.admission._full` (every row read, every node cleared):
``tests/test_admission_kept.py`` compares the two at every point of random runs."""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from merkat.core.admission_plan import Rows
from merkat.core.admission_state import Kept, same_bits
from merkat.core.draft import draft
from merkat.core.market_input import Run
from merkat.core.model import App, AppConst, AppNext
from merkat.market import NO_HOST, RESOURCES
from merkat.market.host_shares import SAFE_BOUND, node_shares
from merkat.market.placement import loads_of, worst_fit_new, worst_fit_sums
from merkat.market.share import FloatArray, IntArray
from merkat.market.types import row_max


@dataclass(frozen=True)
class Placement:
    """An admission's clearing of the rows it drafts: each row's host and allocation (what
    :func:`~merkat.core.plan.make_plan` reads), its bid and host before."""

    host: IntArray
    allocation: FloatArray
    bid: FloatArray  # the market's input: bids and hosts before
    before: IntArray


LAZY = True
"""Whether a kept point's :class:`Placement` arrays other than the allocation are made at
their first read (:class:`KeptPlacement`; twenty-fifth session). Its plan and bills are made
from the placement's lists (:mod:`~merkat.core.admission_plan`), so only the usage (read
when charging by use), the reference's fallback and the tests read the hosts, bids and hosts
before. False: made at once (the reference)."""


class KeptPlacement:
    """A kept point's :class:`Placement`: the allocation made at once (the kept state's
    sum reads it), the hosts, bids and hosts before made from the placement's lists at
    their first read: the arrays :class:`Placement` would hold, the same values and dtypes
    (``tests/test_admission_kept.py`` compares them with the full path's). The lists are
    the touched rows' hosts and bids and the newcomers' hosts and bid rows, none changed
    once given."""

    def __init__(self, allocation: FloatArray, t_host: list[int], t_bid: list[list[float]],
                 new_host: list[int], new_bid: list[list[float]]) -> None:
        self.allocation = allocation
        self._lists = (t_host, t_bid, new_host, new_bid)

    @cached_property
    def host(self) -> IntArray:
        t_host, _, new_host, _ = self._lists
        return np.array(t_host + new_host, dtype=np.int64)

    @cached_property
    def bid(self) -> FloatArray:
        _, t_bid, _, new_bid = self._lists
        flat: list[float] = []
        for row in t_bid:
            flat += row
        for row in new_bid:
            flat += row
        return np.array(flat, dtype=np.float64).reshape(-1, self.allocation.shape[1])

    @cached_property
    def before(self) -> IntArray:
        t_host, _, new_host, _ = self._lists
        return np.array(t_host + [NO_HOST] * len(new_host), dtype=np.int64)

    def arrays(self) -> Placement:
        """The :class:`Placement` of the same arrays."""
        return Placement(self.host, self.allocation, self.bid, self.before)


@dataclass(frozen=True)
class Placed:
    """What an admission point's placement gives its decision: the running applications'
    VMs whose allocation changes (``touched``, runs of those VMs only), the newcomers that
    fit (``fits``), the clearing of the touched rows then the newcomers' (``placement``) and
    the sum of every row's allocation (``allocated``, the reference's
    ``allocation.sum(axis=0)`` over all rows); from the kept path, the placement's lists
    too (``rows``: its plan and bills are made from them, :mod:`~merkat.core.admission_plan`),
    else None."""

    touched: list[Run]
    fits: list[Run]
    placement: Placement | KeptPlacement
    allocated: FloatArray
    rows: Rows | None = None


def touched_runs(apps: Sequence[App], consts: Sequence[AppConst],
                 vmrows: Sequence[list[int]], ends: Sequence[int], rows: list[int],
                 drafted: dict[int, AppNext]) -> list[Run]:
    """The runs of the running applications' rows ``rows`` (ascending): each application
    holding one drafted, with the indexes of those VMs (per application: its record,
    constant parts, running VMs' indexes and end row); each next state is also put in
    ``drafted`` under its application's index."""
    runs: list[Run] = []
    last = -1
    mine: list[int] = []
    cur: list[int] = []
    start = 0
    for m in rows:
        a = bisect_right(ends, m)
        if a != last:
            mine = vmrows[a]
            start = ends[a] - len(mine)
            cur = []
            nx = drafted[a] = draft(apps[a])
            runs.append((nx, consts[a], cur))
            last = a
        cur.append(mine[m - start])
    return runs



def place_kept(k: Kept, newcomers: list[Run], new_apps: list[App]) -> Placed | None:
    """The admission point's placement from the kept state ``k`` (:meth:`~merkat.core.admission_keep.
    AdmissionKeep.valid`), or
    None when the proof does not hold for these newcomers (the caller takes the full
    path; nothing was changed). ``new_apps``: the newcomers' records. Plain Python over
    the newcomers and the rows of the nodes they go to; numpy only for worst-fit's
    ``argmin`` over the nodes and the arrays the plan reads."""
    n_res = len(k.traded)
    if n_res != 2:
        return None  # (the total bid's order below is row_sum's for two resources)
    reserve = k.reserve_l
    inf = math.inf
    ids: list[str] = []
    nb: list[list[float]] = []
    nc: list[list[float]] = []
    nm: list[list[float]] = []
    pos: list[bool] = []  # per newcomer: a VM of it has a minimum (worst-fit checks them)
    for nx, const, _ in newcomers:  # their rows, as market_rows reads them
        cap = [float(x) for x in const.cap_row]
        mn = [float(x) for x in const.min_row]
        if not all(x >= 0.0 for x in cap) or not all(0.0 <= x < inf for x in mn):
            return None  # (the reference's error to raise)
        pos.append(bool(nx.ids) and any(x > 0 for x in mn))
        last: dict[str, float] | None = None
        row: list[float] = []
        for b in nx.bids:
            if b is not last:
                last = b
                row = [float(b.get(r, 0.0)) for r in RESOURCES]
                for c in range(n_res):
                    x = row[c]
                    if not 0.0 <= x < inf or (x < reserve[c] and cap[c] > 0):
                        return None
            nb.append(row)
        ids += nx.ids
        nc += [cap] * len(nx.ids)
        nm += [mn] * len(nx.ids)
    m = len(ids)
    if len(set(ids)) != m or not k.ids.isdisjoint(ids):
        return None
    traded = k.traded
    for c in range(n_res):
        if not traded[c] and any(row[c] != 0.0 for row in nb):
            return None  # a resource newly traded: every node's column to clear
    rows = list(range(m))
    runs = list(range(len(newcomers)))
    hosts = k.hosts
    sums = k.sums
    while True:  # place them all, or only those whose VMs all fit (as the reference)
        check = not hosts.all_have_capacity or any([pos[a] for a in runs])
        bids = [nb[j] for j in rows]
        total = [(b[0] + b[1]) + 0.0 for b in bids]  # row_sum's, for two resources
        # (descending, ties in row order: a stable sort's reverse keeps them in order)
        order = sorted(range(len(rows)), key=total.__getitem__, reverse=True)
        if check:
            load = loads_of(hosts, sums)  # (node_load's, from the kept sums)
            got = worst_fit_new(hosts, load, row_max(load), k.mins, order, bids,
                                [nm[j] for j in rows])
        else:
            got = worst_fit_sums(sums, k.key, k.cap_rows, k.inv_rows, order, bids)
        fits: list[int] = []
        fit_rows: list[int] = []
        i = 0
        for a in runs:
            n = len(newcomers[a][0].ids)
            if NO_HOST not in got[i:i + n]:
                fits.append(a)
                fit_rows += rows[i:i + n]
            i += n
        if len(fits) == len(runs):
            new_host = got
            break
        runs, rows = fits, fit_rows
        if not runs:
            return None  # (none fits: the full path's answer, without a placement)
    n_new = len(rows)
    if n_new != m:
        nb = [nb[j] for j in rows]
        nc = [nc[j] for j in rows]
        nm = [nm[j] for j in rows]
        ids = [ids[j] for j in rows]
    cols_t = [c for c in range(n_res) if traded[c]]
    total_bid = list(k.total_bid)
    total_cap = list(k.total_cap)
    for c in cols_t:
        total_bid[c] += sum([b[c] for b in nb])
        total_cap[c] += sum([x[c] for x in nc if x[c] < inf])
        if not (total_bid[c] < SAFE_BOUND and total_cap[c] < SAFE_BOUND):
            return None
    # the nodes that receive a newcomer, cleared alone: their kept rows, then the new
    # ones; their sums are the kept ones plus the new rows' bids, in row order
    on_new: dict[int, list[int]] = {}
    for q, h in enumerate(new_host):
        on_new.setdefault(h, []).append(q)
    new_a = [[0.0] * n_new for _ in range(n_res)]  # per resource, per new row
    moved: dict[int, list[float]] = {}  # kept row -> its new allocation per resource
    new_sums: list[tuple[int, int, float]] = []
    on = k.on
    olds_of = {h: on.get(h, ()) for h in on_new}
    for olds in olds_of.values():
        for i in olds:
            moved[i] = [ka_c[i] for ka_c in k.alloc_c]
    for c in cols_t:
        kb, kc, na, cap_c = k.bid[c], k.cap[c], new_a[c], k.cap_g[c]
        for h, qs in on_new.items():
            olds = olds_of[h]
            tot = sums.item(h, c)
            b_h = [kb[i] for i in olds]
            for q in qs:
                x = nb[q][c]
                tot += x
                b_h.append(x)
            new_sums.append((h, c, tot))
            shares = node_shares(tot, cap_c[h], b_h,
                                 [kc[i] for i in olds] + [nc[q][c] for q in qs])
            if shares is None:
                return None  # a capped VM: every node to clear with the reference
            j = 0
            for i in olds:
                moved[i][c] = shares[j]
                j += 1
            for q in qs:
                na[q] = shares[j]
                j += 1
    # the running VMs whose allocation changed, where their application trades; and
    # those whose new allocation equals the old one with other bits (a zero's sign)
    ends, consts, ka = k.ends, k.consts, k.alloc_c
    touched: list[int] = []
    resigned: list[int] = []
    for i in sorted(moved):
        now = moved[i]
        for _, c in consts[bisect_right(ends, i)].columns:
            if c >= 0 and ka[c][i] != now[c]:
                touched.append(i)
                break
        else:
            if not all(same_bits(ka[c][i], now[c]) for c in range(n_res)):
                resigned.append(i)
    t = len(touched)
    t_host = [k.host[i] for i in touched]
    flat_a: list[float] = []
    for i in touched:
        flat_a += moved[i]
    for q in range(n_new):
        flat_a += [na_c[q] for na_c in new_a]
    allocation = np.array(flat_a, dtype=np.float64).reshape(-1, n_res)
    lazy = KeptPlacement(allocation, t_host, [[k.bid[c][i] for c in range(n_res)]
                                              for i in touched], new_host, nb)
    placement = lazy if LAZY else lazy.arrays()
    alloc = np.concatenate((k.alloc, allocation[t:]))
    if touched:
        alloc[touched] = allocation[:t]
    for i in resigned:
        alloc[i] = moved[i]
    allocated: FloatArray = alloc.sum(axis=0)
    drafted = k.drafted = {}
    result = Placed(touched_runs(k.apps, consts, k.vmrows, ends, touched, drafted),
                    [newcomers[a] for a in runs], placement, allocated,
                    Rows(t_host, [moved[i] for i in touched], new_host, new_a, nb))
    # the state after this point, as the next one will read it (checked there)
    n_old = len(k.host)
    for i in touched:
        k.cols[bisect_right(ends, i)] = None
    at = ends[-1] if ends else 0
    for a in runs:
        nx, const, _ = newcomers[a]
        drafted[len(k.apps)] = nx
        k.apps.append(new_apps[a])
        k.cols.append(None)
        k.src.append(None)
        k.consts.append(const)
        k.vmrows.append(list(range(len(nx.ids))))
        at += len(nx.ids)
        ends.append(at)
    k.ids.update(ids)
    k.row_ids += ids
    k.host += new_host
    for c in range(n_res):
        k.bid[c] += [b[c] for b in nb]
        k.cap[c] += [x[c] for x in nc]
        col = ka[c]
        for i, row in moved.items():
            col[i] = row[c]
        col += new_a[c]
    k.alloc = alloc
    for q, h in enumerate(new_host):
        on.setdefault(h, []).append(n_old + q)
    for h, c, tot in new_sums:
        sums[h, c] = tot
    if hosts.all_have_capacity:  # (row_max of loads_of's divisions, on those nodes)
        key, cap_rows = k.key, k.cap_rows
        for h in on_new:
            key[h] = max([x / y for x, y in zip(sums[h].tolist(), cap_rows[h],
                                                strict=True)])
    else:
        k.key = row_max(loads_of(hosts, sums))
    for q, h in enumerate(new_host):
        mn = nm[q]
        if any(mn):  # (adding zeros changes no sum: they never hold -0.0)
            for c in range(n_res):
                k.mins[h, c] += mn[c]
    k.total_bid, k.total_cap = total_bid, total_cap
    return result
