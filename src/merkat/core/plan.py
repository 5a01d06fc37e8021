"""Step 4 of a period (:mod:`merkat.core.period`): from the market's clearing to the
backend's :class:`~merkat.core.backend.Plan` and the bills.

Used by the period and by admissions between periods (:mod:`merkat.core.admission`).
Pure: it updates the next states it is given (:class:`~merkat.core.model.AppNext`: host,
allocation), never a record, and returns the plan.
"""

from __future__ import annotations

import math
import operator
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate, repeat
from typing import Any

import numpy as np

from merkat.control.types import VMState
from merkat.core.backend import AllocColumn, Listed, Plan, VMPlacement
from merkat.core.bills import Bills as Bills  # (re-exported: where callers find them)
from merkat.core.bills import bills_of as bills_of
from merkat.core.draft import keep_leasts, own, own_allocs
from merkat.core.market_input import Run
from merkat.core.model import Ops
from merkat.core.run_table import RunTable
from merkat.market import NO_HOST
from merkat.market.share import FloatArray, IntArray


def make_plan(now: float, period: float, runs: Sequence[Run], result: Any, ops: Ops,
              before: IntArray) -> Plan:
    """The backend's plan for ``runs`` (each application's VMs that bid, in the order the
    market saw them, on hosts ``before``: the market's input) placed by the clearing
    ``result``: VMs placed for the first time are created or resumed, VMs on another host
    migrate, every placed VM's allocation is updated in its next state; ``ops`` adds the
    destroys and suspends decided before.

    The VMs whose host changes (placed for the first time, moved, or not placed: a new VM
    has no host) are found with numpy and visited alone; the others only take their
    allocation, application by application."""
    return _plan(now, period, runs, result, ops, before, None)[0]


def _plan(now: float, period: float, runs: Sequence[Run], result: Any, ops: Ops,
          before: IntArray, prior: Column | None,
          joined: tuple[list[str], list[dict[str, float]]] | None = None,
          table: RunTable | None = None) -> tuple[Plan, Column | None]:
    """:func:`make_plan`, and the one-column allocations it gave (None when it took the
    general path); ``prior``: the last plan's, for the same runs holding its mappings
    (:class:`Plans` checks it), or None; ``joined``: the runs' VM ids and allocation
    mappings joined (new lists, as :func:`_joined` gives them), when the caller has them;
    ``table``: the runs read once (:class:`~merkat.core.run_table.RunTable`: the row starts
    and the one-column check from its lists, no loop over the runs), or None."""
    create: list[VMPlacement] = []
    resume: list[VMPlacement] = []
    migrate: list[tuple[str, int, int]] = []
    allocations: dict[str, dict[str, float]] = {}
    host = result.host
    unplaced = host == NO_HOST
    changed = np.flatnonzero(unplaced | (host != before)).tolist()
    hosts: list[int] = host.tolist() if changed else []
    if changed:
        if table is not None:
            starts = table.starts()
        else:
            starts = []
            i = 0
            for nx, _, rows in runs:
                starts.append(i)
                i += len(nx.ids) if rows is None else len(rows)
        for i in changed:
            h = hosts[i]
            if h == NO_HOST:  # nowhere to go this period: stays queued (its allocation: below)
                continue
            r = bisect_right(starts, i) - 1
            nx, _, rows = runs[r]
            own(nx)  # (hosts and fresh written in place: copy on write)
            k = i - starts[r] if rows is None else rows[i - starts[r]]
            if nx.fresh[k]:
                (resume if nx.states[k] is VMState.RESUMING else create).append(
                    VMPlacement(nx.ids[k], nx.id, h)
                )
                nx.fresh[k] = False
            else:
                migrate.append((nx.ids[k], nx.hosts[k], h))
            nx.hosts[k] = h
            nx.moved = True
    # the unplaced rows, ascending: an application holds one when the next one not
    # before its first row is before its end (a pointer, not a slice of the mask per run)
    nowhere: list[int] = np.flatnonzero(unplaced).tolist()
    one = (None if nowhere else _one_column(runs) if table is None else table.one_column())
    column: Column | None = None
    if one is not None:  # the usual market: every VM placed, one resource, one column
        column = _one_column_allocations(runs, one[0], result.allocation[:, one[1]],
                                         prior if prior is not None and prior.one == one
                                         else None, joined, table)
        column.one = one
        allocations = column.allocations
    else:
        if not hosts:
            hosts = host.tolist()
        cols: list[list[float]] = result.allocation.T.tolist()  # one list per resource
    nowhere.append(len(host))
    p = 0
    i = 0
    for nx, const, rows in runs if one is None else ():
        columns, zero = const.columns, const.zero
        ids, allocs = nx.ids, nx.allocs
        shared = nx.base[5]  # (allocs is the record's until a write: copy on write)
        j = i + (len(ids) if rows is None else len(rows))
        at: Sequence[int] = range(j - i) if rows is None else rows  # each row's VM
        where: Sequence[int] = range(i, j)  # each row's market row
        while nowhere[p] < i:
            p += 1
        if nowhere[p] < j:
            mine, where = [], []
            for k, m in zip(at, range(i, j), strict=True):
                if hosts[m] == NO_HOST:  # gets nothing
                    if allocs[k] != zero:
                        if allocs is shared:
                            allocs = own_allocs(nx)
                        allocs[k] = zero
                else:
                    mine.append(k)
                    where.append(m)
            at = mine
        # a VM's allocation mapping is kept when equal (the controller's view stays valid)
        if len(columns) == 1 and columns[0][1] >= 0:  # one resource (CPU-only markets)
            r0, c0 = columns[0][0], cols[columns[0][1]]
            for k, a0 in zip(at, c0[i:j] if len(at) == j - i else [c0[m] for m in where],
                             strict=True):
                old = allocs[k]
                if old.get(r0) != a0 or len(old) != 1:
                    if allocs is shared:
                        allocs = own_allocs(nx)
                    allocs[k] = old = {r0: a0}
                allocations[ids[k]] = old
        else:
            for k, m in zip(at, where, strict=True):
                alloc = {r: cols[c][m] if c >= 0 else 0.0 for r, c in columns}
                if alloc != allocs[k]:
                    if allocs is shared:
                        allocs = own_allocs(nx)
                    allocs[k] = alloc
                allocations[ids[k]] = allocs[k]
        i = j
    return Plan(
        time=now,
        period=period,
        destroy=tuple(ops.destroy),
        suspend=tuple(ops.suspend),
        create=tuple(create),
        resume=tuple(resume),
        migrate=tuple(migrate),
        allocations=allocations,
        column=_carried(runs, column, table),
    ), column


LEASTS = True
"""Whether a plan that carries its column tells the controllers each run's least
allocation (:func:`~merkat.core.draft.keep_leasts`); False: none (the reference: each
controller takes the ``min`` over its application's mappings)."""


def _carried(runs: Sequence[Run], column: Column | None, table: RunTable | None
             ) -> AllocColumn | None:
    """The plan's :class:`~merkat.core.backend.AllocColumn` of ``column`` (the one-column
    allocations of ``runs``, every run whole: its rows are its VMs) from
    :data:`MIN_COLUMN_VMS` VMs, else None; with it (and :data:`LEASTS`), each run's least
    value, one ``np.minimum.reduceat`` over its spans, is kept for its allocation list
    (:func:`~merkat.core.draft.keep_leasts`), every run holding at least one VM (else none
    is), and handed to the backend in the column (``AllocColumn.lows``: the simulated
    backend's :func:`~merkat.backends.sim_pace.least_cpu` would take the same again)."""
    if column is None or len(column.values) < MIN_COLUMN_VMS:
        return None
    if table is not None:
        apps, sizes, starts = table.apps, table.sizes, table.starts()
    else:
        apps = [nx.id for nx, _, _ in runs]
        sizes = [len(nx.ids) for nx, _, _ in runs]
        starts = list(accumulate(sizes[:-1], initial=0)) if sizes else []
    r0, values = column.one[0], column.values
    if LEASTS and starts and 0 not in sizes:
        lows: list[float] = np.minimum.reduceat(values, starts).tolist()
        keep_leasts([nx.allocs for nx, _, _ in runs], r0, lows)
        return AllocColumn(r0, values, apps, starts, sizes, lows)  # (lows handed over)
    keep_leasts((), "", ())
    return AllocColumn(r0, values, apps, starts, sizes)


def _one_column(runs: Sequence[Run]) -> tuple[str, int] | None:
    """``(resource, market column)`` when every run holds all its application's VMs and
    every application trades that one resource, in the market (else None)."""
    if not runs:
        return None
    first = runs[0][1].columns
    if len(first) != 1 or first[0][1] < 0:
        return None
    for _, const, rows in runs:
        if rows is not None or const.columns != first:
            return None
    return first[0]


LISTED = True
"""Whether a one-column plan's ``allocations`` are its joined lists
(:class:`~merkat.core.backend.Listed`: the dict built only when read) instead of the dict
(False: the reference)."""


def _listed(ids: list[str], allocs: list[dict[str, float]], prior: Column | None = None,
            new: list[int] | None = None) -> dict[str, dict[str, float]] | Any:
    """The plan's ``allocations`` of ``ids`` and their ``allocs`` (new lists, not changed
    afterwards): :class:`~merkat.core.backend.Listed`, or the dict (:data:`LISTED` off).
    With ``prior`` (the last plan's column, the same VMs in the same order, its
    allocations a ``Listed``) and ``new`` (the positions whose mapping is not its) and
    :data:`CHANGED`, the ``Listed`` tells them (``since``: the last one's ``allocs``,
    ``changed``: ``new``)."""
    if not LISTED:
        return dict(zip(ids, allocs, strict=True))
    last: Any = prior.allocations if prior is not None and CHANGED else None
    if type(last) is Listed:
        return Listed(ids, allocs, last.allocs, new)
    return Listed(ids, allocs)


CHANGED = True
"""Whether a plan made with the last plan's column (:func:`_one_column_allocations`'
``prior``) tells the backend which VMs' mappings it changed (``Listed.since`` and
``Listed.changed``: the simulated backend then visits only those,
:meth:`SimBackend.apply <merkat.backends.sim.SimBackend.apply>`); False: it does not (the
reference: the backend visits every VM listed)."""


MIN_COLUMN_VMS = 256
"""The fewest VMs whose allocations :func:`_one_column_allocations` compares in numpy: the
pass costs ~15 µs whatever its size and ~60 ns per VM, the plain comprehension ~100 ns per
VM (a w3k plan lists ~130 VMs, a fig5 one ~900). Also the fewest a plan carries as its
:class:`~merkat.core.backend.AllocColumn`: the backend's pass over it has the same fixed
cost, and on the trace windows (~2 VMs an application) it cost more than the per-VM ``min``
it saves (w150000: +0.8 % instructions with every one-column plan's)."""


@dataclass
class Column:
    """The allocations a plan gave by :func:`_one_column_allocations`: the market's column
    ``one`` (resource, column), its values (a copy), the plan's ``allocations`` and the VMs'
    mappings after it, joined in market order (``allocs``: each is ``{resource: value}``
    with a value ``==`` to the column's, kept or made by the pass)."""

    values: FloatArray
    allocations: dict[str, dict[str, float]]
    allocs: list[dict[str, float]]
    one: tuple[str, int] = ("", -1)


def _one_column_allocations(runs: Sequence[Run], r0: str, col: FloatArray,
                            prior: Column | None = None,
                            joined: tuple[list[str], list[dict[str, float]]] | None = None,
                            table: RunTable | None = None) -> Column:
    """:func:`make_plan`'s allocations when :func:`_one_column` gives ``(r0, c)`` and every
    VM is placed (``col``: column c of the clearing's allocations, market order): every
    VM's mapping ``{r0: a}``, the one it holds kept when equal — the per-application loop's
    result, from one pass over the VMs joined in market order.

    From :data:`MIN_COLUMN_VMS` VMs it is a column operation instead of the per-VM test
    ``old.get(r0) != a or len(old) != 1``: the mappings' values are read at C speed
    (``map``), compared with the column in numpy (a missing value reads as NaN, which equals
    nothing, as ``None != a``; the sizes are read only of the mappings whose value is
    equal), and the runs' own lists take the changed mappings by a slice per application
    when many change (else each is found by ``bisect``). ``tests/test_plan.py`` checks both
    sizes against the per-application loop.

    With ``prior`` (the last plan's :class:`Column` for the same VMs in the same order, each
    holding the mapping that plan left it: :class:`Plans` checks both) no mapping is read:
    each holds ``{r0: v}`` with ``v == prior.values[m]``, so the per-VM test is
    ``prior.values[m] != a``, one numpy comparison of the two columns (``==`` on numbers is
    the same in Python and numpy, NaN included); when no value changed, the last plan's
    ``allocations`` are returned again (the same mapping: the backend then skips its per-VM
    pass, :meth:`SimBackend.apply <merkat.backends.sim.SimBackend.apply>`).
    ``tests/test_plan.py`` checks sequences of plans with and without ``prior``."""
    if joined is None:
        ids: list[str] = []
        allocs: list[dict[str, float]] = []
        for nx, _, _ in runs:
            ids += nx.ids
            allocs += nx.allocs
    else:
        ids, allocs = joined  # (new lists: the mappings are written into this one)
    n = len(allocs)
    if prior is not None:
        at = np.flatnonzero(prior.values != col)
        if not at.size:  # every mapping kept: the last plan's allocations
            return Column(prior.values, prior.allocations, allocs)
        new = at.tolist()
        for m, a in zip(new, col[at].tolist(), strict=True):
            allocs[m] = {r0: a}
    elif n < MIN_COLUMN_VMS:
        values: list[float] = col.tolist()
        new = [m for m, (old, a0) in enumerate(zip(allocs, values, strict=True))
               if old.get(r0) != a0 or len(old) != 1]
        for m in new:
            allocs[m] = {r0: values[m]}
    else:
        held = np.fromiter(map(dict.get, allocs, repeat(r0), repeat(math.nan)), float, n)
        same = held == col
        odd = [m for m in np.flatnonzero(same).tolist() if len(allocs[m]) != 1]  # other keys
        if odd:
            same[odd] = False
        at = np.flatnonzero(~same)
        new = at.tolist()
        for m, a in zip(new, col[at].tolist(), strict=True):
            allocs[m] = {r0: a}
    out = Column(col.copy(), {}, allocs)
    if not new:
        out.allocations = _listed(ids, allocs)
        return out
    if len(new) < len(runs):  # few: each one's run found by bisect
        if table is not None:
            starts = table.starts()  # (every run whole: its rows are its VMs)
        else:
            starts = []
            i = 0
            for nx, _, _ in runs:
                starts.append(i)
                i += len(nx.ids)
        for m in new:
            r = bisect_right(starts, m) - 1
            own_allocs(runs[r][0])[m - starts[r]] = allocs[m]  # (copy on write)
    else:  # many: the runs' lists take their slices (the mappings kept: the same)
        i = 0
        first, last = new[0], new[-1]
        for nx, _, _ in runs:
            j = i + len(nx.allocs)
            if j > first and i <= last:
                mine = allocs[i:j]
                if not all(map(operator.is_, mine, nx.allocs)):
                    nx.allocs = mine  # (a new list, when one changed: copy on write)
            i = j
    out.allocations = _listed(ids, allocs, prior, new)
    return out


class Plans:
    """:func:`make_plan` for a period, remembering the last plan: when the clearing is the
    last one (the same object: a quiet period, :meth:`Platform._clear
    <merkat.core.period.Platform._clear>`), no VM changes host, and the same applications
    hold the same VMs whose allocation mappings are the ones the last plan gave them
    (identity: a mapping is kept while its values do not change), every VM keeps its
    allocation and the plan's ``allocations`` are the last plan's (the same mapping, shared:
    plans are read, never changed); only the destroys and suspends are new. Checked with
    list comparisons over the runs joined (the applications, their rows and VM counts, the
    VM ids; the mappings by identity, or each run's allocation list by identity when it is
    the one the last plan left: :data:`LISTS`) instead of a visit per VM or per
    application. Not a record: a cache of a pure function (``tests/test_plan.py`` compares
    both)."""

    def __init__(self) -> None:
        self._last: tuple[Any, ...] | None = None
        # whether the last call gave the last plan's allocations again: it wrote into no
        # next state (the period reads it to skip looking for the ones it wrote into)
        self.reused = False

    def __call__(self, now: float, period: float, runs: Sequence[Run], result: Any, ops: Ops,
                 before: IntArray, table: RunTable | None = None) -> Plan:
        """``make_plan(now, period, runs, result, ops, before)``; for the same runs holding
        the last plan's mappings and a new clearing, its one-column allocations compared
        with the last ones (:func:`_one_column_allocations`' ``prior``). ``table``: the
        runs read once (:class:`~merkat.core.run_table.RunTable`: :func:`_joined`'s lists
        from it), or None (the reference: the runs read here)."""
        allocs: list[dict[str, float]] | None
        if table is None:
            key, allocs = _joined(runs)
        else:  # (the mappings joined only when needed: the lists' identities first)
            key, allocs = (table.apps, table.rows_of, table.sizes, table.ids), None
        last = self._last
        prior: Column | None = None
        if last is not None and key == last[1]:
            if LISTS and all(map(operator.is_, [nx.allocs for nx, _, _ in runs], last[5])):
                held = True  # (the very lists it left: the same mappings)
            else:
                if allocs is None:
                    allocs = table.allocs()  # type: ignore[union-attr]  # (table given)
                held = all(map(operator.is_, allocs, last[2]))
            if held:
                if last[0] is result and not (result.host != before).any():
                    self.reused = True
                    return Plan(time=now, period=period, destroy=tuple(ops.destroy),
                                suspend=tuple(ops.suspend), allocations=last[3].allocations)
                prior = last[4]
        self.reused = False
        if allocs is None:
            allocs = table.allocs()  # type: ignore[union-attr]  # (table given)
        plan, column = _plan(now, period, runs, result, ops, before, prior, (key[3], allocs),
                             table)
        self._last = (result, key, column.allocs if column is not None else
                      _joined(runs)[1] if table is None else table.allocs(), plan, column,
                      [nx.allocs for nx, _, _ in runs])
        return plan


LISTS = True
"""Whether :class:`Plans` first checks that the runs hold the very allocation lists the
last plan left them (one identity per run: those lists are never changed once a plan left
them, :mod:`merkat.core.draft`, so their mappings are the ones it gave) before the check of
every mapping's identity, which then runs only when a list is another (issue 28,
twenty-second session: fig5 0.3 gives the same answer both ways at all 1,158 calls with the
same runs); False: every mapping's identity (the reference)."""


def _joined(runs: Sequence[Run]) -> tuple[tuple[list[Any], ...], list[dict[str, float]]]:
    """What :class:`Plans` compares of ``runs``: ``(application ids, rows, VM counts, VM
    ids)`` and the VMs' allocation mappings, each joined over the runs (new lists)."""
    apps: list[str] = []
    rows_of: list[list[int] | None] = []
    counts: list[int] = []
    ids: list[str] = []
    allocs: list[dict[str, float]] = []
    for nx, _, rows in runs:
        apps.append(nx.id)
        rows_of.append(rows)
        counts.append(len(nx.ids))
        ids += nx.ids
        allocs += nx.allocs
    return (apps, rows_of, counts, ids), allocs
