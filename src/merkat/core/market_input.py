"""The market's input from the applications' next states (pure functions of values): which
VMs bid, one row per VM, and whether two inputs are the same (the clearing cache).

A :data:`Run` is one application's VMs that bid, as the market sees them: its next state
(:class:`~merkat.core.model.AppNext`), its constant parts and the rows of its VM columns
that bid (``None``: all of them, the usual case)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np

from merkat.control.types import AppStatus, VMState
from merkat.core.model import App, AppConst, AppNext
from merkat.market import NO_HOST, RESOURCES, VMs
from merkat.market.types import FloatArray, IntArray

Run = tuple[AppNext, AppConst, "list[int] | None"]


def bidding(nexts: Iterable[AppNext], apps: dict[str, App],
            const_of: Callable[[App], AppConst]) -> list[Run]:
    """The VMs that bid this period, in runs of one application each (in the order of
    ``nexts``): a waiting app has no VM, a suspended one only suspended VMs."""
    runs: list[Run] = []
    suspended = VMState.SUSPENDED
    for nx in nexts:
        if nx.status is AppStatus.RUNNING and nx.ids:
            rows: list[int] | None = None
            if suspended in nx.states:
                rows = [k for k, s in enumerate(nx.states) if s is not suspended]
                if not rows:
                    continue
            app = apps[nx.id]
            runs.append((nx, app.const or const_of(app), rows))
    return runs


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


class MarketInput:
    """:func:`market_vms` for a period, remembering the last input: when the same
    applications (ids, constant parts, row counts) bid with the same VMs (ids), on the same
    hosts, with the same bid mappings (identity: a mapping is replaced, never changed, and
    an equal bid keeps its mapping, :func:`~merkat.core.bids.set_uniform`), the input is the
    last one, and the last :class:`~merkat.market.VMs` is returned (the same object: no array
    built or checked again, and the platform's clearing cache sees it at once). The runs are
    flattened once (lists joined in C, no per-VM read) and compared as whole lists; a
    different input is built from the same flat lists. A quiet period (no arrival, no
    rebid, no move) is most periods of a long run. Not a record: a cache of a pure function
    (``tests/test_market_input.py`` compares both)."""

    def __init__(self) -> None:
        self._last: tuple[Flat, VMs] | None = None

    def __call__(self, runs: Sequence[Run], n: int) -> VMs:
        """``market_vms(runs, n)``."""
        flat = _flat(runs)
        last = self._last
        if last is not None:
            shape, ids, hosts, bids = last[0]
            if flat[0] == shape and flat[1] == ids:
                same_hosts = flat[2] == hosts
                vbids = flat[3]
                changed = [m for m, (a, b) in enumerate(zip(vbids, bids, strict=True))
                           if a is not b]
                if same_hosts and not changed:
                    return last[1]
                patched = _patched(last[1], flat, changed, same_hosts)
                if patched is not None:
                    self._last = (flat, patched)
                    return patched
        vms = VMs(*_rows(flat, n))
        self._last = (flat, vms)
        return vms


def _patched(old: VMs, flat: Flat, changed: list[int], same_hosts: bool) -> VMs | None:
    """The market input of ``flat`` from ``old``, the last one, for the same applications
    (ids, constant parts, row counts) and VMs (ids) in the same order: ``old``'s arrays
    with the bid rows of the VMs ``changed`` (whose bid mapping is another object) read
    again and the hosts read again unless ``same_hosts`` — what :func:`_rows` gives (a row
    repeated for an application's VMs that share a mapping holds the values each VM's own
    row would), without reading every row again nor checking the rows kept: they, the caps,
    minimums and ids (unique) were checked when ``old`` was made (:class:`~merkat.market.VMs`),
    and the new bid rows are checked here. None when a new row fails the check (the caller
    then builds the input in full, and :class:`~merkat.market.VMs` names the offending
    entry). ``tests/test_market_input.py`` compares it with :func:`market_vms`."""
    bid = old.bid
    if changed:
        vbids = flat[3]
        rows = np.array([[vbids[m].get(r, 0.0) for r in RESOURCES] for m in changed],
                        dtype=np.float64)
        if not ((rows >= 0).all() and np.isfinite(rows).all()):
            return None
        bid = bid.copy()
        bid[changed] = rows
    host = old.host if same_hosts else np.array(flat[2], dtype=np.int64)
    vms: VMs = object.__new__(VMs)  # (the frozen dataclass's fields, checked above)
    for name, value in (("ids", old.ids), ("bid", bid), ("cap", old.cap), ("host", host),
                        ("minimum", old.minimum)):
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
