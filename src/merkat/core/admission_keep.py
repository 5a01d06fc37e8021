"""An admission point whose cost grows with its newcomers, not with the running VMs: what
the last admission point of the same period computed, kept and updated, or, at the first
point after a period, what the period's clearing computed. This module keeps the state and
proves it holds (:class:`AdmissionKeep`); :mod:`~merkat.core.admission_state` holds its
forms and builds it, :mod:`~merkat.core.admission_place` places the newcomers from it.

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

import operator
from collections.abc import Container, Sequence

from merkat.control.types import AppStatus
from merkat.core.admission_place import Placed, Placement, place_kept
from merkat.core.admission_state import (
    Full,
    Handed,
    Kept,
    kept_of,
    kept_of_period,
    same_rows,
)
from merkat.core.market_input import Run
from merkat.core.model import App, Decision
from merkat.core.running import Running
from merkat.market import Hosts
from merkat.market.share import FloatArray, IntArray

__all__ = ["FAST", "MAX_NEW", "AdmissionKeep", "Placed", "Placement"]

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
        the same answer and state (``tests/test_admission_kept.py``, at every point). An
        empty ``skip`` is not read (:func:`merkat.core.admission.admit` passes one when no
        queued application is running, which its drafts then cannot hide)."""
        k = self._current(hosts, reserve, index)
        if k is None:
            return None
        apps, consts, kcols = k.apps, k.consts, k.cols
        n = len(apps)
        running = AppStatus.RUNNING
        j = 0
        odd: list[int] = []
        for a in active:
            if a.status is not running or (skip and a.spec.id in skip):
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
        path; nothing was changed): :func:`~merkat.core.admission_place.place_kept`."""
        return place_kept(k, newcomers, new_apps)
