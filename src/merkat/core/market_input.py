"""The market's input from the applications' next states (pure functions of values): which
VMs bid, one row per VM, and whether two inputs are the same (the clearing cache).

A :data:`Run` is one application's VMs that bid, as the market sees them: its next state
(:class:`~merkat.core.model.AppNext`), its constant parts and the rows of its VM columns
that bid (``None``: all of them, the usual case)."""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from merkat.control.types import AppStatus, VMState
from merkat.core.model import App, AppConst, AppNext
from merkat.core.spans import Spans
from merkat.market import NO_HOST, RESOURCES, VMs
from merkat.market.types import FloatArray, IntArray

Run = tuple[AppNext, AppConst, "list[int] | None"]


def bidding(nexts: Iterable[AppNext], apps: dict[str, App],
            const_of: Callable[[App], AppConst]) -> list[Run]:
    """The VMs that bid this period, in runs of one application each (in the order of
    ``nexts``): a waiting app has no VM, a suspended one only suspended VMs
    (:func:`run_of` each)."""
    runs: list[Run] = []
    for nx in nexts:
        if nx.status is _RUNNING and nx.ids:
            app = apps[nx.id]
            run_of(nx, app.const or const_of(app), runs)
    return runs


_RUNNING, _SUSPENDED = AppStatus.RUNNING, VMState.SUSPENDED


def run_of(nx: AppNext, const: AppConst, runs: list[Run]) -> int:
    """``nx``'s VMs that bid (its :data:`Run`, with ``const`` its application's constant
    parts) appended to ``runs``; returns how many (0: none, nothing appended). The rule of
    :func:`bidding`, for one next state: the period's loop calls it as it decides each
    application (:meth:`Platform.decide <merkat.core.period.Platform.decide>`: one visit per
    application, no second pass over the next states)."""
    ids = nx.ids
    if nx.status is not _RUNNING or not ids:
        return 0
    states = nx.states
    if _SUSPENDED in states:
        rows = [k for k, s in enumerate(states) if s is not _SUSPENDED]
        if rows:
            runs.append((nx, const, rows))
        return len(rows)
    runs.append((nx, const, None))
    return len(ids)


def placed(nexts: Iterable[AppNext], apps: dict[str, App],
           const_of: Callable[[App], AppConst]) -> list[Run]:
    """The VMs that run on a host now (placed by the last clearing or an admission since):
    :func:`bidding` restricted to the VMs with a host."""
    runs: list[Run] = []
    for nx, const, rows in bidding(nexts, apps, const_of):
        hosts = nx.hosts
        mine = [k for k in (range(len(hosts)) if rows is None else rows) if hosts[k] != NO_HOST]
        if mine:
            runs.append((nx, const, mine))
    return runs


def size(runs: Sequence[Run]) -> int:
    """The number of VMs in ``runs``."""
    return sum(len(nx.ids) if rows is None else len(rows) for nx, _, rows in runs)


def market_vms(runs: Sequence[Run], n: int) -> VMs:
    """The market's input: one row per bidding VM, application by application. VMs that
    share one bid mapping (the usual case) share its row."""
    return VMs(*market_rows(runs, n))


Rows = tuple[tuple[str, ...], FloatArray, FloatArray, IntArray, FloatArray]
"""A market input's columns, not yet checked: ids, bids, caps, hosts, minimums (the
arguments of :class:`~merkat.market.VMs`)."""


Flat = tuple[list[tuple[str, AppConst, int]], list[str], list[int], list[dict[str, float]]]
"""``runs`` flattened in the market's order: per application its id, constant parts and
number of rows, then per row its VM's id, host and bid mapping (new lists)."""


def _flat(runs: Sequence[Run]) -> Flat:
    shape: list[tuple[str, AppConst, int]] = []
    ids: list[str] = []
    hosts: list[int] = []
    bids: list[dict[str, float]] = []
    for nx, const, rows in runs:
        if rows is None:
            ids += nx.ids
            hosts += nx.hosts
            bids += nx.bids
            shape.append((nx.id, const, len(nx.ids)))
        else:
            ids += [nx.ids[k] for k in rows]
            hosts += [nx.hosts[k] for k in rows]
            bids += [nx.bids[k] for k in rows]
            shape.append((nx.id, const, len(rows)))
    return shape, ids, hosts, bids


def add_bid_rows(bids: list[dict[str, float]], rows: list[float], counts: list[int]) -> None:
    """One application's VMs' bid rows (``RESOURCES`` order, flat) added to ``rows``, and to
    ``counts`` how many VMs each row stands for (to repeat it by): one row when its VMs
    share one bid mapping (or equal ones: the usual case), else a row per VM (a mapping's
    row read once for the VMs after one another that hold it). ``bids``: not empty."""
    n = len(bids)
    first = bids[0]
    if n == 1 or bids.count(first) == n:
        rows += [first.get(r, 0.0) for r in RESOURCES]
        counts.append(n)
        return
    last: dict[str, float] | None = None
    row: list[float] = []
    for b in bids:
        if b is not last:
            last = b
            row = [b.get(r, 0.0) for r in RESOURCES]
        rows += row
    counts += [1] * n


def _rows(flat: Flat, n: int) -> Rows:
    """The market's columns of ``flat``: an application whose VMs share one bid mapping (or
    equal ones: the usual case) gives one bid row, repeated by numpy, instead of one row per
    VM; the others a row per VM."""
    shape, ids, hosts, vbids = flat
    n_res = len(RESOURCES)
    bids: list[float] = []
    runs: list[int] = []
    start = 0
    for _, _, k in shape:
        if k:
            add_bid_rows(vbids[start:start + k], bids, runs)
            start += k
    counts = [k for _, _, k in shape]
    return (
        tuple(ids),
        np.repeat(np.array(bids, dtype=np.float64).reshape((-1, n_res)), runs, axis=0)
        .reshape((n, n_res)),
        np.repeat(np.array([c.cap_row for _, c, _ in shape], dtype=np.float64)
                  .reshape(-1, n_res), counts, axis=0),
        np.array(hosts, dtype=np.int64),
        np.repeat(np.array([c.min_row for _, c, _ in shape], dtype=np.float64)
                  .reshape(-1, n_res), counts, axis=0),
    )


def market_rows(runs: Sequence[Run], n: int) -> Rows:
    """:func:`market_vms`'s columns (to join them with others before one check)."""
    return _rows(_flat(runs), n)


_Kept = tuple[AppConst, list[dict[str, float]], int, "list[str] | None", "list[int] | None"]
"""What :class:`MarketInput` keeps of an application: its constant parts, its run's bid
mappings (the record's list itself, else a copy), its first row in the last input, its VM
ids and hosts when they are its record's lists (else None). Only a record's lists are held
as they are: they are never changed in place (copy on write, :mod:`merkat.core.draft`),
while a next state's own list may still be (the plan writes its hosts after the input)."""


def _kept(nx: AppNext, const: AppConst, bids: list[dict[str, float]], at: int,
          rows: list[int] | None) -> _Kept:
    """What :class:`MarketInput` keeps of ``nx``'s run (its rows from ``at``): only its
    record's lists are held as they are (never changed in place: copy on write)."""
    if rows is not None:
        return (const, bids, at, None, None)
    base = nx.base
    return (const, bids if bids is base[2] else bids[:], at,
            nx.ids if nx.ids is base[0] else None, nx.hosts if nx.hosts is base[3] else None)


class MarketInput:
    """:func:`market_vms` for a period, keeping **each application's rows** between periods:
    an application whose run has the same constant parts (identity) and the same bid mappings
    (identity, element by element: a mapping is replaced, never changed, and an equal bid
    keeps its mapping, :func:`~merkat.core.bids.set_uniform`) has the bid, cap and minimum
    rows it had in the last input, which are taken from that input's arrays by spans
    (:class:`~merkat.core.spans.Spans`: applications kept one after another are one slice);
    only the other applications' rows are built (:func:`add_bid_rows`, one numpy array per
    column for all of them; a rebid, the same constant parts and number of VMs, only its bid
    rows: its cap and minimum rows are spans of their own, so that a period of rebids gives
    the last input's cap and minimum arrays themselves, ``tests/test_market_input.py``)
    and checked as :class:`~merkat.market.VMs` checks them (the kept
    rows were checked when first built; VM ids are checked unique over the whole input). The
    VM ids and hosts are joined per application at C speed every period. When the same rows
    come back with the same ids and hosts, the last :class:`~merkat.market.VMs` itself is
    returned (no array built: the platform's clearing cache sees it by identity).

    What it replaces: the whole-input cache (the input reused or patched only when the same
    applications bid with the same VMs in the same order), which the admission points defeat
    (they start applications between most periods of a trace window: 207 patched and ~1,400
    rebuilt of 3,914 inputs on w150000), and each rebuilt input's per-application rows
    (~190 µs an input there). Not a record: a cache of a pure function
    (``tests/test_market_input.py`` compares it with :func:`market_vms` and a VM-by-VM
    reference at every period of random runs and after each kind of change)."""

    def __init__(self) -> None:
        self._last: VMs | None = None
        # per application: its constant parts, bid mappings' list, first row in ``_last``,
        # VM ids' and hosts' lists (the lists held: never changed once read, copy on write)
        self._apps: dict[str, _Kept] = {}
        self._ids: list[str] = []  # the last input's VM ids and hosts, joined
        self._hosts: list[int] = []
        self.kept = 0  # rows the last call took from the input before it (for tests)
        self.kept_ids = 0  # of them, the rows whose ids and hosts were taken too (for tests)

    def __call__(self, runs: Sequence[Run], n: int) -> VMs:
        """``market_vms(runs, n)``."""
        old = self._apps
        apps: dict[str, _Kept] = {}
        spans = Spans()  # the bid rows: 0 the last input's, 1 built here
        limits = Spans()  # the cap and minimum rows: 0 the last input's, 1 built here
        places = Spans()  # the VM ids and hosts: 0 the last input's, 1 joined here
        ids: list[str] = []  # the ids and hosts not taken from the last input
        hosts: list[int] = []
        bid_rows: list[float] = []  # the built applications' bid rows, and VMs per row
        bid_counts: list[int] = []
        built: list[tuple[AppConst, int]] = []
        fresh = at = joined = limited = 0
        take_span, take_place, take_limit = spans.take, places.take, limits.take

        def take_kept(lo: int, hi: int) -> None:
            # rows [lo, hi) of the last input, whole: ids and hosts, bids, caps and minimums
            take_place(0, lo, hi)
            take_span(0, lo, hi)
            take_limit(0, lo, hi)

        is_ = operator.is_
        get = old.get
        # rows [plo, phi) of the last input, of applications kept whole one after another
        # (their ids, hosts, bid, cap and minimum rows): one span of each kind, taken when
        # something else comes (what it replaces: three ``take`` calls per application; the
        # spans are the same, ``take`` merging adjacent ranges)
        plo = phi = 0
        for nx, const, rows in runs:
            entry = get(nx.id)
            if rows is None:
                vids, vhosts, vbids = nx.ids, nx.hosts, nx.bids
                placed = entry is not None and entry[3] is vids and entry[4] is vhosts
                if placed and entry[1] is vbids and entry[0] is const:  # type: ignore[index]
                    # the same lists (copy on write: unchanged) and bid mappings' list:
                    # ids, hosts and rows kept, at once
                    lo = entry[2]  # type: ignore[index]
                    if lo != phi:
                        if phi > plo:
                            take_kept(plo, phi)
                        plo = lo
                    k = len(vids)
                    phi = lo + k
                    apps[nx.id] = (entry if lo == at  # type: ignore[assignment]
                                   else (const, vbids, at, vids, vhosts))
                    at += k
                    continue
            else:
                vids = [nx.ids[k] for k in rows]
                vhosts = [nx.hosts[k] for k in rows]
                vbids = [nx.bids[k] for k in rows]
                placed = False
            if phi > plo:
                take_kept(plo, phi)
                plo = phi
            k = len(vids)
            if placed:  # the same lists (copy on write: unchanged): ids, hosts kept
                take_place(0, entry[2], entry[2] + k)  # type: ignore[index]
            else:
                ids += vids
                hosts += vhosts
                take_place(1, joined, joined + k)
                joined += k
            if entry is not None and entry[0] is const and len(entry[1]) == k:
                # the same constant parts and VMs: its cap and minimum rows kept (a rebid
                # changes only its bid rows)
                take_limit(0, entry[2], entry[2] + k)
                if all(map(is_, vbids, entry[1])):
                    take_span(0, entry[2], entry[2] + k)
                    apps[nx.id] = _kept(nx, const, vbids, at, rows)
                    at += k
                    continue
            else:
                built.append((const, k))
                take_limit(1, limited, limited + k)
                limited += k
            if k:
                add_bid_rows(vbids, bid_rows, bid_counts)
            take_span(1, fresh, fresh + k)
            fresh += k
            apps[nx.id] = _kept(nx, const, vbids, at, rows)
            at += k
        if phi > plo:
            take_kept(plo, phi)
        last = self._last
        self.kept = at - fresh
        self.kept_ids = at - joined
        if last is None or at != n:
            return self._full(runs, n)
        # (every bid row the last input's, whole: so are the cap and minimum rows)
        whole = not fresh and len(spans.spans) == 1 and spans.spans[0][1:] == [0, len(last)]
        if ids:
            all_ids = places.joined_list([self._ids, ids])
            all_hosts = places.joined_list([self._hosts, hosts])
            if all_ids == self._ids:  # (unique: the last input's)
                if whole and all_hosts == self._hosts:
                    self._apps = apps
                    return last
            elif len(set(all_ids)) != n:
                return self._full(runs, n)
        else:  # (the ids taken from the last input are unique: each range taken once)
            pl = places.spans
            if whole and len(pl) == 1 and pl[0][1:] == [0, len(last)]:
                self._apps = apps  # (both one span from 0: the same rows, ids and hosts)
                return last
            all_ids = places.joined_list([self._ids])
            all_hosts = places.joined_list([self._hosts])
        n_res = len(RESOURCES)
        empty = np.zeros((0, n_res))
        bid = cap = low = empty
        if bid_rows:
            bid = np.repeat(np.array(bid_rows, dtype=np.float64).reshape((-1, n_res)),
                            bid_counts, axis=0)
            if not ((bid >= 0).all() and np.isfinite(bid).all()):
                return self._full(runs, n)  # (it names the offending entry)
        if built:
            counts = [k for _, k in built]
            cap = np.repeat(np.array([c.cap_row for c, _ in built], dtype=np.float64)
                            .reshape(-1, n_res), counts, axis=0)
            low = np.repeat(np.array([c.min_row for c, _ in built], dtype=np.float64)
                            .reshape(-1, n_res), counts, axis=0)
            if not ((cap >= 0).all() and (low >= 0).all() and np.isfinite(low).all()):
                return self._full(runs, n)
        vms = _unchecked(tuple(all_ids), spans.joined((last.bid, bid), empty),
                         limits.joined((last.cap, cap), empty),
                         np.array(all_hosts, dtype=np.int64),
                         limits.joined((last.minimum, low), empty))
        self._last, self._apps, self._ids, self._hosts = vms, apps, all_ids, all_hosts
        return vms

    def _full(self, runs: Sequence[Run], n: int) -> VMs:
        """The input built and checked in full (:func:`market_vms`; the first call, or rows
        that fail the check: :class:`~merkat.market.VMs` names the entry), kept."""
        self._last = None
        self._apps = {}
        flat = _flat(runs)
        vms = VMs(*_rows(flat, n))
        at = 0
        apps: dict[str, _Kept] = {}
        for (app_id, const, k), (nx, _, rows) in zip(flat[0], runs, strict=True):
            base = nx.base
            apps[app_id] = ((const, nx.bids if nx.bids is base[2] else nx.bids[:], at,
                             nx.ids if nx.ids is base[0] else None,
                             nx.hosts if nx.hosts is base[3] else None) if rows is None else
                            (const, [nx.bids[r] for r in rows], at, None, None))
            at += k
        self._last, self._apps, self._ids, self._hosts = vms, apps, flat[1], flat[2]
        return vms


def _unchecked(ids: tuple[str, ...], bid: FloatArray, cap: FloatArray, host: IntArray,
               minimum: FloatArray) -> VMs:
    """A :class:`~merkat.market.VMs` of rows the caller checked (its fields set as they are)."""
    vms: VMs = object.__new__(VMs)
    for name, value in (("ids", ids), ("bid", bid), ("cap", cap), ("host", host),
                        ("minimum", minimum)):
        object.__setattr__(vms, name, value)
    return vms


def same_input(a: VMs, b: VMs) -> bool:
    """Whether two market inputs are the same arrays (VM ids only name VMs in errors)."""
    return (
        len(a) == len(b)
        and np.array_equal(a.host, b.host)
        and np.array_equal(a.bid, b.bid)
        and np.array_equal(a.cap, b.cap)
        and np.array_equal(a.minimum, b.minimum)
    )
