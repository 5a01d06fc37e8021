"""What an admission point keeps for the next one of the same period
(:mod:`merkat.core.admission_keep`): the full path's answer as it gave it (:class:`Full`),
a period's clearing as its commit hands it over (:class:`Handed`), the state made of either
(:class:`Kept`, :func:`kept_of`, :func:`kept_of_period`) and the check that an application's
records still give its kept rows (:func:`same_rows`)."""

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
    apps: list[App] = []
    cols: list[Columns | None] = []
    src: list[Columns | None] = []
    consts: list[AppConst] = []
    vmrows: list[list[int]] = []
    ends: list[int] = []
    i = at = 0
    records = h.records
    for nx, const, rows in h.runs:
        n = len(nx.ids) if rows is None else len(rows)
        hs = host_l[i:i + n]
        i += n
        every: list[int] = list(range(n)) if rows is None else rows
        mine = every if NO_HOST not in hs else [
            k for k, x in zip(every, hs, strict=True) if x != NO_HOST]
        if not mine:
            continue
        app = records.get(nx.id)
        if app is None:
            return None  # (forgotten: it ended)
        was = (nx.ids, nx.states, nx.bids, nx.hosts, nx.fresh, nx.allocs)
        now = app.columns
        apps.append(app)
        cols.append(now if (now[0] is was[0] and now[1] is was[1] and now[2] is was[2]
                            and now[3] is was[3] and now[5] is was[5]) else None)
        src.append(was)
        consts.append(const)
        vmrows.append(mine)
        at += len(mine)
        ends.append(at)
    ids, bid, cap, minimum, alloc = h.ids, h.bid, h.cap, h.minimum, h.alloc
    placed = host != NO_HOST
    if not placed.all():
        sel = np.flatnonzero(placed)
        if bid_on(bid[sel]) != bid_on(bid):
            return None  # (a resource only unplaced VMs bid on: cleared as traded)
        ids = tuple(ids[j] for j in sel.tolist())
        bid, cap, minimum, host, alloc = bid[sel], cap[sel], minimum[sel], host[sel], alloc[sel]
    return _kept(h.hosts, h.reserve, h.index, apps, cols, consts, vmrows, ends, list(ids),
                 bid, cap, minimum, host, alloc, src, None if h.capped is False else host,
                 cap_g, cap_rows, inv_rows)


def _kept(hosts: Hosts, reserve: FloatArray, index: int, apps: list[App],
          cols: list[Columns | None], consts: list[AppConst], vmrows: list[list[int]],
          ends: list[int], row_ids: list[str], bid: FloatArray, cap: FloatArray,
          minimum: FloatArray, host: IntArray, alloc: FloatArray, src: list[Columns | None],
          check: IntArray | None, cap_g: list[list[float]], cap_rows: list[list[float]],
          inv_rows: list[list[float]]) -> Kept | None:
    """The :class:`Kept` of these rows (every array in row order; ``check``: the rows'
    hosts when whether a VM is capped is still to prove, :func:`none_capped`), or None
    (one node, the compiled kernels, sums near overflow, a capped VM)."""
    if len(hosts) < 2 or share_kernel.enabled():
        return None
    n_res = hosts.capacity.shape[1]
    cap_t: list[list[float]] = cap.T.tolist()
    inf = math.inf
    total_bid = [float(bid[:, c].sum()) for c in range(n_res)]
    total_cap = [sum([x for x in col if x < inf]) for col in cap_t]
    if not all(t < SAFE_BOUND for t in total_bid + total_cap):
        return None
    sums = np.zeros((len(hosts), n_res))
    mins = np.zeros((len(hosts), n_res))
    any_min = bool(minimum.any())
    for c in range(n_res):  # (what node_load and worst-fit's reserved sum, in row order)
        sums[:, c] = np.bincount(host, weights=bid[:, c], minlength=len(hosts))
        if any_min:
            mins[:, c] = np.bincount(host, weights=minimum[:, c], minlength=len(hosts))
    traded = bid_on(bid)
    if check is not None and not none_capped(hosts.capacity, check, bid, cap, sums, traded):
        return None
    host_l: list[int] = host.tolist()
    on: dict[int, list[int]] = {}
    for i, h in enumerate(host_l):
        on.setdefault(h, []).append(i)
    return Kept(
        hosts, reserve, index, apps, cols, consts, vmrows, ends, set(row_ids),
        row_ids, bid.T.tolist(), cap_t, host_l, alloc.T.tolist(), alloc,
        on, sums, mins, cap_g, cap_rows, inv_rows, row_max(loads_of(hosts, sums)), total_bid,
        total_cap, traded, reserve.tolist(), src)


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
