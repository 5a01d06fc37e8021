"""What an admission point keeps for the next one of the same period
(:mod:`merkat.core.admission_keep`): the full path's answer as it gave it (:class:`Full`),
a period's clearing as its commit hands it over (:class:`Handed`), the state made of either
(:class:`Kept`, :func:`kept_of`, :func:`kept_of_period`; built the lean way, or the
reference's with :data:`LEAN` off) and the check that an application's records still give
its kept rows (:func:`same_rows`)."""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from merkat.control.types import VMState
from merkat.core.market_input import Run
from merkat.core.model import App, AppConst, AppNext, Columns
from merkat.core.running import Running
from merkat.market import NO_HOST, RESOURCES, Hosts, share_kernel
from merkat.market.host_shares import SAFE_BOUND, none_capped
from merkat.market.placement import loads_of
from merkat.market.share import FloatArray, IntArray
from merkat.market.types import bid_on, row_max

LEAN = True
"""Build the kept state the lean way (issue 28, twenty-second session): a period's runs read
without per-run slices when the clearing placed every row (:func:`_runs`' ``every``),
each node's rows by one dict comprehension with the nodes of several rows fixed after
(:func:`_rows_on`), and the bounds of the bids and finite caps with ``traded`` from one
matrix-vector product each (:func:`_bounds`). False: the reference build (the twenty-first
session's: each run's hosts sliced, :func:`_rows_on_ref`, :func:`_bounds_ref`);
``tests/test_admission_kept.py`` builds both at every point of random runs that reads a
state and compares them."""

_RANGES: tuple[list[int], ...] = tuple(list(range(n)) for n in range(65))
"""``list(range(n))`` for small ``n``, shared by every kept state as the row list of an
application whose VMs all bid (``Kept.vmrows``' lists are never changed in place)."""


@dataclass(frozen=True)
class Full:
    """The full path's answer as it gave it (:meth:`AdmissionKeep.record`): made into a
    :class:`Kept` only when a next point of the same period reads it."""

    hosts: Hosts
    reserve: FloatArray
    index: int
    here: Running
    cols: list[Columns]  # the running applications' columns when read
    touched: list[int]  # the rows whose allocation it changed
    fits: list[Run]
    fit_apps: list[App]
    bid: FloatArray
    cap: FloatArray
    minimum: FloatArray
    host: IntArray
    alloc: FloatArray
    capped: bool  # some VM of some node capped (enforceable_capped)


@dataclass
class Kept:
    """The rows after an admission point, as the next point of the same period reads them,
    in plain Python lists (a point reads and writes a few of them). Per application
    (``apps``, the running ones in row order): its VM columns when checked (None: to check
    by value, :func:`same_rows`), constant parts, running VMs' indexes and
    end row. Per row: id, host, and per resource (one flat list each, ``bid[c][row]``) its
    bid, cap and allocation (also as one array, ``alloc``, for its sum); per node: its rows (``on``), its bids and minimums summed in row order
    (``sums``, ``mins``: the arrays worst-fit's loads are computed from); per resource:
    whether it is traded and running totals of the bids and finite caps (only bounds).
    ``src``: per application, the columns its kept rows were last read from or checked
    against (record columns, never changed in place: a list still there is not read
    again). ``drafted``: per application (index), the next state the last point drafted for
    it (a newcomer, or one whose VMs it touched): after that point's plan its lists hold the
    kept rows, so they are its ``src`` at the next point (:meth:`~merkat.core.
    admission_keep.AdmissionKeep.valid` reads them then: the commit installs them as they
    are, and a writer after it replaces a list, never changes one in place)."""

    hosts: Hosts
    reserve: FloatArray
    index: int
    apps: list[App]
    cols: list[Columns | None]
    consts: list[AppConst]
    vmrows: list[list[int]]
    ends: list[int]
    ids: set[str]
    row_ids: list[str]
    bid: list[list[float]]
    cap: list[list[float]]
    host: list[int]
    alloc_c: list[list[float]]
    alloc: FloatArray
    on: dict[int, list[int]]
    sums: FloatArray
    mins: FloatArray
    cap_g: list[list[float]]  # per resource, each node's capacity
    cap_rows: list[list[float]]  # per node, its capacity per resource
    inv_rows: list[list[float]]  # per node, 1 / capacity per resource
    key: FloatArray  # per node, its worst-resource bid load (row_max(loads_of(sums)))
    total_bid: list[float]
    total_cap: list[float]
    traded: list[bool]
    reserve_l: list[float]
    src: list[Columns | None]
    drafted: dict[int, AppNext] = field(default_factory=dict)


def kept_of(full: Full, cap_g: list[list[float]], cap_rows: list[list[float]],
            inv_rows: list[list[float]]) -> Kept | None:
    """The :class:`Kept` of the full path's answer (``cap_g``: each node's capacity per
    resource; ``cap_rows``, ``inv_rows``: per node, its capacity and inverse), or None when
    the proof cannot hold: a capped VM (the water-filling went past its first step on some
    node, so a node's shares are not its own alone), sums near overflow, one node, the
    compiled kernels."""
    if full.capped:
        return None
    here = full.here
    apps = [a for a, _, _ in here.apps]
    cols: list[Columns | None] = list(full.cols)
    consts = [c for _, c, _ in here.apps]
    vmrows = [rows for _, _, rows in here.apps]
    ends = list(here.ends)
    src: list[Columns | None] = [*full.cols, *([None] * len(full.fits))]
    for i in full.touched:  # (checked by value at the next point; its allocations too)
        a = bisect_right(ends, i)
        cols[a] = None
        was = full.cols[a]
        src[a] = (was[0], was[1], was[2], was[3], was[4], [])
    at = ends[-1] if ends else 0
    for (nx, const, _), app in zip(full.fits, full.fit_apps, strict=True):
        apps.append(app)
        cols.append(None)
        consts.append(const)
        vmrows.append(list(range(len(nx.ids))))
        at += len(nx.ids)
        ends.append(at)
    row_ids = [*here.vms[0], *(i for nx, _, _ in full.fits for i in nx.ids)]
    return _kept(full.hosts, full.reserve, full.index, apps, cols, consts, vmrows, ends,
                 row_ids, full.bid, full.cap, full.minimum, full.host, full.alloc,
                 src, None, cap_g, cap_rows, inv_rows)


@dataclass(frozen=True)
class Handed:
    """A period's clearing as its commit hands it to the first admission point after it
    (:meth:`AdmissionKeep.handed <merkat.core.admission_keep.AdmissionKeep.handed>`): the
    market's runs (in row order; their next states, installed by the commit, are not
    written after it: only a period's rebid hands an installed one out again), the records
    by id, the market's input (ids, bids, caps, minimums) and the clearing's final hosts and
    allocations. References only, taken at every period; made into a :class:`Kept`
    (:func:`kept_of_period`) only when a point with newcomers reads it."""

    hosts: Hosts
    reserve: FloatArray
    index: int
    runs: list[Run]
    records: Mapping[str, App]
    ids: tuple[str, ...]
    bid: FloatArray
    cap: FloatArray
    minimum: FloatArray
    host: IntArray
    alloc: FloatArray
    capped: bool | None = None  # the clearing's Clearing.capped (None: not known)


def kept_of_period(h: Handed, cap_g: list[list[float]], cap_rows: list[list[float]],
                   inv_rows: list[list[float]]) -> Kept | None:
    """The :class:`Kept` of a period's clearing (:class:`Handed`) as the first admission point
    after it reads the records, or None when the proof cannot hold (:func:`kept_of`'s
    cases).

    Why it is the full path's: the commit wrote the decision as decided (no withholding, no
    failed operation: :meth:`AdmissionKeep.handed`), so a running application's running VMs
    are its run's VMs the clearing placed, in the same order, and every placed row of the
    clearing is one of them; the full path's rows are then the clearing's placed rows, the
    same values in the same order, so its clearing of every node (``enforceable``: one
    market per node over the placed rows) gives the period's final allocation, bit for bit,
    and each record holds it (the plan wrote it into the next state's allocations). An
    application whose installed columns are the very lists of its next state is taken as
    checked; one whose lists were replaced since (a started VM's state, any writer) is
    checked by value at the point (:func:`same_rows`, against its next state's lists).

    Whether some VM is capped: the clearing says it (``Handed.capped``, its final
    ``enforceable_capped``'s flag, which is True whenever :func:`~merkat.market.host_shares.
    none_capped` answers False: ``tests/test_market_placement.py``); only when it does not
    know (None) is :func:`~merkat.market.host_shares.none_capped` computed."""
    if h.capped:
        return None  # (some VM capped: a node's shares are not its own alone)
    host = h.host
    host_l: list[int] = host.tolist()
    every = NO_HOST not in host_l
    got = _runs(h.runs, h.records, host_l, LEAN and every)
    if got is None:
        return None  # (an application forgotten: it ended)
    apps, cols, src, consts, vmrows, ends = got
    ids, bid, cap, minimum, alloc = h.ids, h.bid, h.cap, h.minimum, h.alloc
    if not every:
        placed = host != NO_HOST
        sel = np.flatnonzero(placed)
        if bid_on(bid[sel]) != bid_on(bid):
            return None  # (a resource only unplaced VMs bid on: cleared as traded)
        ids = tuple(ids[j] for j in sel.tolist())
        bid, cap, minimum, host, alloc = bid[sel], cap[sel], minimum[sel], host[sel], alloc[sel]
        host_l = host.tolist()
    return _kept(h.hosts, h.reserve, h.index, apps, cols, consts, vmrows, ends, list(ids),
                 bid, cap, minimum, host, alloc, src, None if h.capped is False else host,
                 cap_g, cap_rows, inv_rows, host_l)


_Runs = tuple[list[App], list[Columns | None], list[Columns | None], list[AppConst],
              list[list[int]], list[int]]


def _runs(runs: list[Run], records: Mapping[str, App], host_l: list[int],
          every: bool) -> _Runs | None:
    """Per running application of a period's ``runs`` (those with a row the clearing placed:
    ``host_l``, every row's host), its record, columns when they are its next state's very
    lists (else None), next state's lists, constant parts, placed VMs' indexes and end row;
    None when a record is gone. ``every``: the clearing placed every row (no host is
    ``NO_HOST``), so each run's rows are all its rows: no slice of the hosts is read and an
    application whose VMs all bid shares a :data:`_RANGES` list (False: each run's hosts
    sliced and its placed rows listed, the reference)."""
    apps: list[App] = []
    cols: list[Columns | None] = []
    src: list[Columns | None] = []
    consts: list[AppConst] = []
    vmrows: list[list[int]] = []
    ends: list[int] = []
    i = at = 0
    get = records.get
    ranges = _RANGES
    top = len(ranges)
    for nx, const, rows in runs:
        vids = nx.ids
        if every:
            if rows is None:
                n = len(vids)
                if not n:
                    continue
                rows = ranges[n] if n < top else list(range(n))
            elif not rows:
                continue
        else:
            n = len(vids) if rows is None else len(rows)
            hs = host_l[i:i + n]
            i += n
            all_: list[int] = list(range(n)) if rows is None else rows
            rows = all_ if NO_HOST not in hs else [
                k for k, x in zip(all_, hs, strict=True) if x != NO_HOST]
            if not rows:
                continue
        app = get(nx.id)
        if app is None:
            return None  # (forgotten: it ended)
        was = (vids, nx.states, nx.bids, nx.hosts, nx.fresh, nx.allocs)
        now = app.columns
        apps.append(app)
        cols.append(now if (now[0] is vids and now[1] is was[1] and now[2] is was[2]
                            and now[3] is was[3] and now[5] is was[5]) else None)
        src.append(was)
        consts.append(const)
        vmrows.append(rows)
        at += len(rows)
        ends.append(at)
    return apps, cols, src, consts, vmrows, ends


def _kept(hosts: Hosts, reserve: FloatArray, index: int, apps: list[App],
          cols: list[Columns | None], consts: list[AppConst], vmrows: list[list[int]],
          ends: list[int], row_ids: list[str], bid: FloatArray, cap: FloatArray,
          minimum: FloatArray, host: IntArray, alloc: FloatArray, src: list[Columns | None],
          check: IntArray | None, cap_g: list[list[float]], cap_rows: list[list[float]],
          inv_rows: list[list[float]], host_l: list[int] | None = None) -> Kept | None:
    """The :class:`Kept` of these rows (every array in row order; ``check``: the rows'
    hosts when whether a VM is capped is still to prove, :func:`none_capped`; ``host_l``:
    ``host`` as a list, when the caller has it), or None (one node, the compiled kernels,
    sums near overflow, a capped VM)."""
    if len(hosts) < 2 or share_kernel.enabled():
        return None
    n_res = hosts.capacity.shape[1]
    cap_t: list[list[float]] = cap.T.tolist()
    total_bid, total_cap, traded = (_bounds if LEAN else _bounds_ref)(bid, cap, cap_t)
    if not all(t < SAFE_BOUND for t in total_bid + total_cap):
        return None
    sums = np.zeros((len(hosts), n_res))
    mins = np.zeros((len(hosts), n_res))
    any_min = bool(minimum.any())
    for c in range(n_res):  # (what node_load and worst-fit's reserved sum, in row order)
        sums[:, c] = np.bincount(host, weights=bid[:, c], minlength=len(hosts))
        if any_min:
            mins[:, c] = np.bincount(host, weights=minimum[:, c], minlength=len(hosts))
    if check is not None and not none_capped(hosts.capacity, check, bid, cap, sums, traded):
        return None
    if host_l is None:
        host_l = host.tolist()
    on = _rows_on(host, host_l, len(hosts)) if LEAN else _rows_on_ref(host_l)
    return Kept(
        hosts, reserve, index, apps, cols, consts, vmrows, ends, set(row_ids),
        row_ids, bid.T.tolist(), cap_t, host_l, alloc.T.tolist(), alloc,
        on, sums, mins, cap_g, cap_rows, inv_rows, row_max(loads_of(hosts, sums)), total_bid,
        total_cap, traded, reserve.tolist(), src)


def _bounds_ref(bid: FloatArray, cap: FloatArray,
                cap_t: list[list[float]]) -> tuple[list[float], list[float], list[bool]]:
    """Per resource: the rows' bids summed, their finite caps summed (only compared with
    ``SAFE_BOUND``: bounds) and whether it is traded (:func:`~merkat.market.types.bid_on`).
    The reference of :func:`_bounds`."""
    inf = math.inf
    total_bid = [float(bid[:, c].sum()) for c in range(bid.shape[1])]
    total_cap = [sum([x for x in col if x < inf]) for col in cap_t]
    return total_bid, total_cap, bid_on(bid)


def _bounds(bid: FloatArray, cap: FloatArray,
            cap_t: list[list[float]]) -> tuple[list[float], list[float], list[bool]]:
    """:func:`_bounds_ref` by two matrix-vector products: the bids' column sums are
    :func:`~merkat.market.types.bid_on`'s own (so ``traded`` is its answer, the same
    operations), and the finite caps' are the caps' own when that sum is finite (then every
    cap is), else those of the caps with every other value 0. A sum of non-negative terms in
    any order is within far less than the factor 10 of ``SAFE_BOUND`` of another order's (its
    docstring), so either sum bounds the reference's; NaN and overflow fail the bound both
    ways."""
    ones = np.ones(bid.shape[0])
    total_bid: list[float] = (bid.T @ ones).tolist()
    total_cap: list[float] = (cap.T @ ones).tolist()  # (every cap finite: the usual)
    if not all(x < math.inf for x in total_cap):
        total_cap = (np.where(cap < math.inf, cap, 0.0).T @ ones).tolist()
    return total_bid, total_cap, [x != 0.0 for x in total_bid]


def _rows_on_ref(host_l: list[int]) -> dict[int, list[int]]:
    """Each node's rows (``host_l``: every row's node), ascending, nodes in order of their
    first row. The reference of :func:`_rows_on`."""
    on: dict[int, list[int]] = {}
    for i, h in enumerate(host_l):
        on.setdefault(h, []).append(i)
    return on


def _rows_on(host: IntArray, host_l: list[int], n_hosts: int) -> dict[int, list[int]]:
    """:func:`_rows_on_ref` (``host``: ``host_l`` as an array of nodes below ``n_hosts``):
    one list per row by a dict comprehension (a node keeps the place of its first row; a
    later row of the same node replaces its list), then the nodes of several rows, found by
    ``np.bincount``, given all their rows in one pass over those rows only. More rows than
    nodes (themis-fig5's many-VM runs: nearly every node holds several): the reference's one
    pass, as the comprehension would be thrown away."""
    if len(host_l) > n_hosts:
        return _rows_on_ref(host_l)
    on = {h: [i] for i, h in enumerate(host_l)}
    if len(on) != len(host_l):
        many = np.flatnonzero(np.bincount(host, minlength=n_hosts)[host] > 1)
        fix: dict[int, list[int]] = {}
        for i, h in zip(many.tolist(), host[many].tolist(), strict=True):
            fix.setdefault(h, []).append(i)
        on.update(fix)
    return on


def same_bits(x: float, y: float) -> bool:
    """``x`` and ``y`` are the same float (a zero's sign included; never NaN here)."""
    return x == y and (x != 0.0 or math.copysign(1.0, x) == math.copysign(1.0, y))


def same_rows(k: Kept, i: int, cols: Columns) -> bool:
    """Whether application ``i``'s columns give the kept rows: the same running VMs
    (placed, not suspended), ids, hosts, bids (bit for bit), allocations (equal where it
    trades, 0 where its resource is outside the market) and none odd. A column list
    that is the one the rows were last checked against (``Kept.src``) is not read (the
    allocations' included: a point that changes an application's kept allocations gives it
    the ``src`` of the next state it drafted, whose allocations its plan wrote)."""
    ids, states, bids, hosts, _, allocs = cols
    was = k.src[i]
    rows = k.vmrows[i]
    r0 = k.ends[i] - len(rows)
    if was is None or states is not was[1] or hosts is not was[3]:
        suspended = VMState.SUSPENDED
        if [j for j, (h, s) in enumerate(zip(hosts, states, strict=True))
                if h != NO_HOST and s is not suspended] != rows:
            return False
        if [hosts[j] for j in rows] != k.host[r0:r0 + len(rows)]:
            return False
    if (was is None or ids is not was[0]) and [ids[j] for j in rows] != k.row_ids[
            r0:r0 + len(rows)]:
        return False
    if was is None or bids is not was[2]:
        kb = k.bid
        for c, res in enumerate(RESOURCES):
            col = kb[c]
            for r, vm in enumerate(rows, r0):
                if not same_bits(bids[vm].get(res, 0.0), col[r]):
                    return False
    if was is not None and allocs is was[5]:
        return True
    columns = k.consts[i].columns
    width = len(columns)
    nan = math.nan
    ka = k.alloc_c
    for r, vm in enumerate(rows, r0):
        a = allocs[vm]
        if len(a) != width:
            return False
        for res, c in columns:
            v = a.get(res, nan)
            if not (v == ka[c][r] if c >= 0 else v == 0.0):
                return False
    return True
