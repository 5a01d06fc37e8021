"""An admission point's plan and bills made straight from the kept path's placement
(:func:`~merkat.core.admission_place.place_kept`): the lists it placed the newcomers and
re-cleared their nodes with, not the :class:`~merkat.core.admission_place.Placement`
arrays read back.

The reference is :func:`~merkat.core.plan.make_plan` and :func:`~merkat.core.bills.bills_of`
over the placement's arrays (:data:`DIRECT` off, and always on the full path). At a kept
point their input has a known shape, which they find again with numpy on every call:

- the touched runs' rows (the running VMs sharing a node with a newcomer) keep their hosts
  (``host == before``, never ``NO_HOST``: :func:`plan` checks), so no running VM is created,
  resumed or moved; the newcomers' rows are all placed (only the runs that fit are kept)
  and had no host, so each is created or resumed (a fresh VM) or moved, in row order;
- no row is unplaced, so every row takes its allocation, application by application, in
  make_plan's way when each application trades one resource in the market (CPU-only
  markets: the traces', themis-fig5's; else the reference runs): the same test per VM, the
  same copy on write, the same one-column pass
  :func:`~merkat.core.plan._one_column_allocations` when no running VM is touched, the same
  ``allocations`` type;
- every newcomer's VM has a host, so each newcomer is billed the sum of its VMs' bids, each
  ``round((b0 + b1 + 0.0) * MICRO)`` (:func:`~merkat.core.bills._bills_plain`'s arithmetic,
  which its numpy path from :data:`~merkat.core.bills.MIN_ARRAY_BILLS` VMs gives too, within
  the bounds :func:`bills` checks), in application id order; the usage (read only when
  charging by use) is the reference's own, made from the arrays at its first read.

``tests/test_admission_kept.py`` makes every kept point's plan, bills and usage both ways
on twins of the drafted next states and compares them, with the next states after.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from merkat.control.types import VMState
from merkat.core.backend import Plan, VMPlacement
from merkat.core.bills import Usage, bills_of
from merkat.core.draft import own, own_allocs
from merkat.core.market_input import Run
from merkat.core.model import Ops
from merkat.core.plan import MIN_COLUMN_VMS, _one_column, _one_column_allocations
from merkat.defaults import MICRO
from merkat.market import NO_HOST, RESOURCES
from merkat.market.share import FloatArray, IntArray

DIRECT = True
"""Whether a kept point's plan and bills are made from the placement's lists (:func:`plan`);
False: :func:`~merkat.core.plan.make_plan` and :func:`~merkat.core.bills.bills_of` over its
arrays (the reference)."""

Bills = tuple[tuple[str, int], ...]

INT64 = 2**63
"""The bound of the reference's ``int64`` sums of rounded bids (numpy's path)."""


@dataclass(frozen=True)
class Rows:
    """The kept path's placement as lists (what its arrays were made of): the touched
    rows' hosts (unchanged) and new allocations (a list per row, one value per resource),
    the newcomers' rows' hosts, their allocations per resource (a list per resource, one
    value per new row) and their bids (a list per row)."""

    t_host: list[int]
    t_alloc: list[list[float]]
    new_host: list[int]
    new_alloc: list[list[float]]
    new_bid: list[list[float]]


def bills(fits: Sequence[Run], new_bid: list[list[float]]) -> Bills | None:
    """The newcomers' bills (every VM of ``fits`` placed; ``new_bid``: their rows' bids in
    order), as :func:`~merkat.core.bills.bills_of` gives them, by its plain path's
    arithmetic. From ``MIN_ARRAY_BILLS`` VMs it takes its numpy path, whose answer is the
    same numbers: ``row_sum`` is ``b0 + b1 + 0.0`` for two resources, ``np.rint`` rounds
    half to even as :func:`round`, and its ``int64`` sums of the rounded bids (never
    negative: :func:`~merkat.core.admission_place.place_kept` refused any other) are exact
    while an application's total stays under ``2**63``. None where that does not hold (two
    resources only, a bid not a finite number within ``int64``, a total from ``2**63``, a
    run without VMs, an application twice)."""
    if len(RESOURCES) != 2:
        return None
    rows: list[tuple[str, int]] = []
    q = 0
    for nx, _, _ in fits:
        n = len(nx.ids)
        if not n:
            return None
        total = 0
        for b in new_bid[q:q + n]:
            x = (b[0] + b[1] + 0.0) * MICRO
            if not -9e18 < x < 9e18:  # (NaN, infinite, beyond int64)
                return None
            total += round(x)
        if not 0 <= total < INT64:
            return None
        rows.append((nx.id, total))
        q += n
    if len({i for i, _ in rows}) != len(rows):
        return None
    rows.sort()
    return tuple(rows)


def plan(now: float, period: float, touched: Sequence[Run], fits: Sequence[Run],
         rows: Rows, ops: Ops) -> Plan | None:
    """:func:`~merkat.core.plan.make_plan` of ``touched + fits`` placed as ``rows`` say
    (see the module docstring), writing the same next states; None (nothing written) when a
    touched row has no host or a newcomer's row none, when an application does not trade
    exactly one resource in the market, or from ``MIN_COLUMN_VMS`` newcomers' VMs and no
    running one touched (the reference's column then carried)."""
    new_host = rows.new_host
    if NO_HOST in rows.t_host or NO_HOST in new_host:
        return None
    runs = [*touched, *fits]
    for _, const, _ in runs:
        columns = const.columns
        if len(columns) != 1 or columns[0][1] < 0:
            return None  # (not one traded resource: the reference's per-resource mappings)
    one = None if touched else _one_column(runs)
    if one is not None and len(new_host) >= MIN_COLUMN_VMS:
        return None
    create: list[VMPlacement] = []
    resume: list[VMPlacement] = []
    migrate: list[tuple[str, int, int]] = []
    resuming = VMState.RESUMING
    q = 0
    for nx, _, _ in fits:  # every row placed, none had a host: each VM's host changes
        own(nx)  # (hosts and fresh written in place: copy on write)
        ids, fresh, hosts, app = nx.ids, nx.fresh, nx.hosts, nx.id
        for k in range(len(ids)):
            h = new_host[q]
            q += 1
            if fresh[k]:
                (resume if nx.states[k] is resuming else create).append(
                    VMPlacement(ids[k], app, h))
                fresh[k] = False
            else:
                migrate.append((ids[k], hosts[k], h))
            hosts[k] = h
        nx.moved = True
    if one is not None:  # the usual market: newcomers only, one resource, one column
        r0, c = one
        allocations = _one_column_allocations(
            runs, r0, np.array(rows.new_alloc[c], dtype=np.float64)).allocations
    else:
        allocations = _allocations(runs, rows)
    return Plan(time=now, period=period, destroy=tuple(ops.destroy),
                suspend=tuple(ops.suspend), create=tuple(create), resume=tuple(resume),
                migrate=tuple(migrate), allocations=allocations)


def _allocations(runs: Sequence[Run], rows: Rows) -> dict[str, dict[str, float]]:
    """make_plan's per-application allocations of ``runs`` (every row placed, each
    application trading one resource in the market): each VM's mapping ``{r0: a}``, the
    one it holds kept when equal (the same test, the same copy on write)."""
    cols = [[a[c] for a in rows.t_alloc] + rows.new_alloc[c] for c in range(len(rows.new_alloc))]
    allocations: dict[str, dict[str, float]] = {}
    i = 0
    for nx, const, mine in runs:
        (r0, c), = const.columns
        ids, allocs = nx.ids, nx.allocs
        j = i + (len(ids) if mine is None else len(mine))
        for k, a0 in zip(range(j - i) if mine is None else mine, cols[c][i:j], strict=True):
            old = allocs[k]  # (each VM once: a write goes to the list own_allocs gives)
            if old.get(r0) != a0 or len(old) != 1:
                old = own_allocs(nx)[k] = {r0: a0}
            allocations[ids[k]] = old
        i = j
    return allocations


def usage(fits: Sequence[Run], arrays: Callable[[], tuple[IntArray, IntArray, FloatArray,
                                                         FloatArray]],
          start: int, prices: Mapping[str, float]) -> Usage:
    """The newcomers' usage as :func:`~merkat.core.bills.bills_of` gives it from the
    placement's arrays (``arrays()``: its hosts, hosts before, allocations and bids; the
    newcomers' rows from ``start``), computed at the first read (``arrays`` called then: a
    kept point makes them only when read, :class:`~merkat.core.admission_place.
    KeptPlacement`); the runs' row counts and ids taken now (the arrays are never written
    once made)."""
    counts = [(nx, const, len(nx.ids)) for nx, const, _ in fits]
    prices = dict(prices)

    def make() -> Bills:
        runs: list[Run] = [(nx, const, list(range(n))) for nx, const, n in counts]
        host, before, alloc, bid = arrays()
        return tuple(bills_of(runs, host, before, alloc, bid, prices, start=start)[1])

    return Usage(make)
