"""An admission point whose cost grows with its newcomers, not with the running VMs: what
the last admission point of the same period computed, kept and updated, or, at the first
point after a period, what the period's clearing computed.

The reference (:func:`merkat.core.admission.admit`'s full path) reads every running VM's
rows from the records (:class:`~merkat.core.running.RunningRows`), places the newcomers by
worst-fit over all rows (every node's bid load summed again), re-clears every node
(:func:`~merkat.market.allocation_error.enforceable`) and compares every row's allocation
with its record to find the VMs whose share changed. Two thirds of a trace's admission
points follow another admission point of the same period, and between the two nothing
changed but what the first one decided. :class:`AdmissionKeep` keeps, after each
admission point, the rows as they then are (the running VMs' and the placed newcomers',
in the order the next point reads them), each node's bids and minimums summed in that
order, each row's allocation, and every application's VM columns; the next point of the
same period, when it finds the records as predicted, then

- places only the newcomers, against the kept loads (:func:`~merkat.market.placement.
  worst_fit_new`: ``np.bincount`` adds a node's weights one after another in row order, so
  a kept sum plus the new rows' bids in order is the sum over every row);
- re-clears only the nodes that receive a newcomer (:func:`~merkat.market.host_shares.
  node_shares`: when no VM of any node is capped, a node's shares depend only on its own
  VMs in row order; the kept state says whether that held for every node, and each
  re-cleared node checks it again);
- drafts, plans and bills only the VMs of those nodes whose allocation changed, and the
  newcomers, as the full path does.

**The first point after a period** (issue 28, eighteenth session) starts from the period
itself: the period's commit rewrote every record, but when it wrote them as decided (the
decision the clearing made, not withheld, no operation of its plan failed:
:meth:`AdmissionKeep.handed`), the running rows are the clearing's placed rows in the same
order with the same values, and its final allocation is the full path's clearing of every
node, bit for bit (:func:`~merkat.core.admission_state.kept_of_period`; whether a VM is
capped proved at once by :func:`~merkat.market.host_shares.none_capped`). The period hands
over references only (:meth:`AdmissionKeep.decided`, :class:`~merkat.core.admission_state.
Handed`); the state is made when a point with newcomers reads it. An application whose
columns are still its next state's very lists is taken as checked; one whose lists were
replaced since (a started VM's state, any other writer) is checked by value
(:func:`~merkat.core.admission_state.same_rows`). Only with the default mechanism
(proportional share: its clearing's allocation is ``enforceable`` on the final mapping).

**When it is taken.** Only when the proof holds; otherwise the full path runs (and keeps
its answer for the next point): another period since (``Platform.index``) whose commit did
not write the period as decided (withheld applications, failed operations), another cluster
or reserve, a running application added, gone, reordered or with other constant parts, a
record written other than as the last point decided (checked by identity of the column
lists: for the applications that point touched or started, the lists of the next states it
drafted, as its plan left them, which the settle installs as they are, ``Kept.drafted``;
checked by value when the settle or any writer replaced one), a capped VM, sums near overflow, a resource newly traded, a newcomer's row the
reference would refuse (a bid under the reserve, an invalid or repeated value: its error is
the full path's), one node in the cluster, or the compiled kernels (``MERKAT_KERNELS``).
``FAST`` turns it off (the reference). ``tests/test_admission_kept.py`` runs random runs with
arrivals, ends, suspends, migrations and refused placements both ways and compares every
admission's placement, touched rows and decision, and the kept state with a fresh
computation after every admission point and every period's commit (runs with a backend
failing operations and withheld bills too, after every commit and every settle, against the
same runs with ``FAST`` off);
``tests/test_market_placement.py`` the kept sums, one node's shares and
:func:`~merkat.market.host_shares.none_capped` with the whole cluster's."""

from __future__ import annotations

import math
import operator
from bisect import bisect_right
from collections.abc import Container, Sequence
from dataclasses import dataclass

import numpy as np

from merkat.control.types import AppStatus
from merkat.core.admission_state import (
    Full,
    Handed,
    Kept,
    kept_of,
    kept_of_period,
    same_bits,
    same_rows,
)
from merkat.core.draft import draft
from merkat.core.market_input import Run
from merkat.core.model import App, AppConst, AppNext, Decision
from merkat.core.running import Running
from merkat.market import NO_HOST, RESOURCES, Hosts
from merkat.market.host_shares import SAFE_BOUND, node_shares
from merkat.market.placement import loads_of, worst_fit_new, worst_fit_sums
from merkat.market.share import FloatArray, IntArray
from merkat.market.types import row_max

FAST = True
"""Take the kept state's path when it is proved (False: every point takes the full path)."""

MAX_NEW = 32
"""The most new VMs a point places from the kept state: its cost grows by ~20-30 µs a new VM
(a node chosen, its shares in plain Python, the next point's check of the rows it touched),
the full path's is ~500 µs and ~1 µs a running VM (numpy); above this the full path is not
slower (the fig5 0.2 run's points, ~40 new VMs among ~1,000 running ones, cost as much both
ways: docs/benchmarks.md, "Issue 28, seventeenth session: the admission points"). 32, not
24 (nineteenth session): a 32-VM job's point (HPC2N's usual large job) on w150000 cost
0.9-1.4 ms kept against 1.3-1.6 ms by the full path (whose answer the next point must also
convert), while 40 and more new VMs cost 1.8-2.1 ms kept against 1.6 ms."""


@dataclass(frozen=True)
class Placement:
    """An admission's clearing of the rows it drafts: each row's host and allocation (what
    :func:`~merkat.core.plan.make_plan` reads), its bid and host before."""

    host: IntArray
    allocation: FloatArray
    bid: FloatArray  # the market's input: bids and hosts before
    before: IntArray


@dataclass(frozen=True)
class Placed:
    """What an admission point's placement gives its decision: the running applications'
    VMs whose allocation changes (``touched``, runs of those VMs only), the newcomers that
    fit (``fits``), the clearing of the touched rows then the newcomers' (``placement``) and
    the sum of every row's allocation (``allocated``, the reference's
    ``allocation.sum(axis=0)`` over all rows)."""

    touched: list[Run]
    fits: list[Run]
    placement: Placement
    allocated: FloatArray


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


class AdmissionKeep:
    """The state kept from one admission point to the next (see the module docstring)."""

    def __init__(self) -> None:
        self.kept: Kept | Full | Handed | None = None
        # the period's decision and its clearing, until its commit (decided)
        self._decided: tuple[Decision, list[Run], tuple[str, ...], FloatArray, FloatArray,
                             FloatArray, IntArray, FloatArray, bool | None] | None = None
        # per cluster: each node's capacity per resource, by resource and by node, and its
        # inverse by node (a cluster's capacity is never written)
        self._cap: tuple[Hosts | None, list[list[float]], list[list[float]],
                         list[list[float]]] = (None, [], [], [])

    def forget(self) -> None:
        """No kept state: the next point takes the full path."""
        self.kept = None

    def record(self, hosts: Hosts, reserve: FloatArray, index: int, here: Running,
               touched: list[int], fits: list[Run], fit_apps: list[App], bid: FloatArray,
               cap: FloatArray, minimum: FloatArray, host: IntArray, alloc: FloatArray,
               capped: bool) -> None:
        """Keep the full path's answer: ``here`` (the running rows it read), the rows whose
        allocation it changed, the newcomers that fit (records ``fit_apps``; their rows
        after ``here``'s) and every row's bid, cap, minimum, host and allocation (the
        reference's arrays) and whether a VM was capped. Kept as given; read only if a next
        point comes."""
        self.kept = Full(hosts, reserve, index, here, [a.columns for a, _, _ in here.apps],
                          touched, fits, fit_apps, bid, cap, minimum, host,
                          alloc, capped) if FAST else None

    def decided(self, decision: Decision, runs: list[Run], ids: tuple[str, ...],
                bid: FloatArray, cap: FloatArray, minimum: FloatArray, host: IntArray,
                alloc: FloatArray, capped: bool | None = None) -> None:
        """A period's ``decision``, its market's ``runs`` and input rows (``ids``, ``bid``,
        ``cap``, ``minimum``) and its clearing's final ``host`` and ``alloc`` (``capped``: the
        clearing's ``Clearing.capped``, None when not known): held until its commit
        (:meth:`handed`). References only: nothing is computed here."""
        self._decided = ((decision, runs, ids, bid, cap, minimum, host, alloc, capped) if FAST
                         else None)

    def handed(self, hosts: Hosts, reserve: FloatArray, index: int, decision: Decision,
               apps: dict[str, App], failed: bool) -> None:
        """The period's commit of ``decision`` (``failed``: some operation of its plan
        failed), the next period being ``index``: when it is the decision :meth:`decided`
        held, committed as decided (not withheld, nothing failed), the first admission point
        after it starts from its clearing (:class:`Handed`, made a :class:`Kept` by
        :func:`kept_of_period` when a point with newcomers reads it); otherwise no state is
        kept (the full path)."""
        d, self._decided = self._decided, None
        if d is None or d[0] is not decision or failed or not FAST:
            self.kept = None
            return
        _, runs, ids, bid, cap, minimum, host, alloc, capped = d
        self.kept = Handed(hosts, reserve, index, runs, apps, ids, bid, cap, minimum, host,
                           alloc, capped)

    # --- the next point ----------------------------------------------------------------

    def valid(self, hosts: Hosts, reserve: FloatArray, index: int,
              apps: list[App]) -> Kept | None:
        """The kept state when it holds for an admission point of these running ``apps``
        (in row order) on ``hosts`` with ``reserve`` in period ``index``, else None (and
        it is forgotten). Checks every application's columns: the very lists kept, or, for
        those the last point touched or started (or any other whose lists were replaced),
        rows equal to the kept ones, value by value. The reference of :meth:`valid_among`."""
        k = self._current(hosts, reserve, index)
        if k is None:
            return None
        if apps != k.apps or not all(map(operator.is_, [a.const for a in apps], k.consts)):
            self.kept = None
            return None
        cols = [a.columns for a in apps]
        if not all(map(operator.is_, cols, k.cols)):
            return self._by_value(k, [i for i, (now, was) in enumerate(
                zip(cols, k.cols, strict=True)) if now is not was])
        return k

    def valid_among(self, hosts: Hosts, reserve: FloatArray, index: int,
                    active: Sequence[App], skip: Container[str]) -> Kept | None:
        """:meth:`valid` for the running applications among ``active`` whose id is not in
        ``skip`` (the point's drafts), found in the same pass that checks them: each is the
        kept record in turn with the kept constant parts and, unless its columns are the
        kept ones, the kept rows (:func:`same_rows`, after every identity held, as
        :meth:`valid`). What it replaces: the list of the running applications built at
        every point (:func:`merkat.core.admission.running_here`) and four passes over it;
        the same answer and state (``tests/test_admission_kept.py``, at every point)."""
        k = self._current(hosts, reserve, index)
        if k is None:
            return None
        apps, consts, kcols = k.apps, k.consts, k.cols
        n = len(apps)
        running = AppStatus.RUNNING
        j = 0
        odd: list[int] = []
        for a in active:
            if a.status is not running or a.spec.id in skip:
                continue
            if j == n or a is not apps[j] or a.const is not consts[j]:
                self.kept = None
                return None
            if a.columns is not kcols[j]:
                odd.append(j)
            j += 1
        if j != n:
            self.kept = None
            return None
        return self._by_value(k, odd) if odd else k

    def _by_value(self, k: Kept, odd: list[int]) -> Kept | None:
        """``k`` once the applications ``odd`` (ascending, columns not the kept lists) give
        the kept rows (their columns then kept), else None (forgotten)."""
        apps, kcols, src = k.apps, k.cols, k.src
        for i in odd:
            now = apps[i].columns
            if not same_rows(k, i, now):
                self.kept = None
                return None
            kcols[i] = src[i] = now
        return k

    def _current(self, hosts: Hosts, reserve: FloatArray, index: int) -> Kept | None:
        """The kept state as a :class:`Kept` (made of the full path's answer or the
        period's clearing on first read, the last point's drafted lists taken as ``src``)
        when it is for ``hosts``, ``reserve`` and period ``index``, else None (forgotten)."""
        k = self.kept
        if (not FAST or k is None or k.hosts is not hosts or k.index != index
                or k.reserve is not reserve):
            self.kept = None
            return None
        if not isinstance(k, Kept):
            if self._cap[0] is not hosts:
                self._cap = (hosts, hosts.capacity.T.tolist(), hosts.capacity.tolist(),
                             hosts.inv_capacity.tolist())
            k = self.kept = (kept_of(k, *self._cap[1:]) if isinstance(k, Full)
                             else kept_of_period(k, *self._cap[1:]))
            if k is None:
                return None
        if k.drafted:  # (the last point's next states, as its plan left them)
            for i, nx in k.drafted.items():
                k.src[i] = (nx.ids, nx.states, nx.bids, nx.hosts, nx.fresh, nx.allocs)
            k.drafted = {}
        return k

    def place(self, k: Kept, newcomers: list[Run], new_apps: list[App]) -> Placed | None:
        """The admission point's placement from the kept state ``k`` (:meth:`valid`), or
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
        for nx, const, _ in newcomers:  # their rows, as market_rows reads them
            cap = [float(x) for x in const.cap_row]
            mn = [float(x) for x in const.min_row]
            if not all(x >= 0.0 for x in cap) or not all(0.0 <= x < inf for x in mn):
                return None  # (the reference's error to raise)
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
            check = not hosts.all_have_capacity or any(x > 0 for j in rows for x in nm[j])
            bids = [nb[j] for j in rows]
            total = [(b[0] + b[1]) + 0.0 for b in bids]  # row_sum's, for two resources
            order = sorted(range(len(rows)), key=lambda q: -total[q])
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
        flat_b: list[float] = []
        for i in touched:
            flat_a += moved[i]
            flat_b += [k.bid[c][i] for c in range(n_res)]
        for q in range(n_new):
            flat_a += [na_c[q] for na_c in new_a]
        for row in nb:
            flat_b += row
        allocation = np.array(flat_a, dtype=np.float64).reshape(-1, n_res)
        placement = Placement(
            np.array(t_host + new_host, dtype=np.int64), allocation,
            np.array(flat_b, dtype=np.float64).reshape(-1, n_res),
            np.array(t_host + [NO_HOST] * n_new, dtype=np.int64))
        alloc = np.concatenate((k.alloc, allocation[t:]))
        if touched:
            alloc[touched] = allocation[:t]
        for i in resigned:
            alloc[i] = moved[i]
        allocated: FloatArray = alloc.sum(axis=0)
        drafted = k.drafted = {}
        result = Placed(touched_runs(k.apps, consts, k.vmrows, ends, touched, drafted),
                        [newcomers[a] for a in runs], placement, allocated)
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
