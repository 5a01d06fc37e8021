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
        if not k:
            continue
        first = vbids[start]
        if k == 1 or vbids[start:start + k].count(first) == k:
            bids += [first.get(r, 0.0) for r in RESOURCES]
            runs.append(k)
        else:
            last: dict[str, float] | None = None
            row: list[float] = []
            for b in vbids[start:start + k]:
                if b is not last:
                    last = b
                    row = [b.get(r, 0.0) for r in RESOURCES]
                bids += row
            runs += [1] * k
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
            if (flat[0] == shape and flat[1] == ids and flat[2] == hosts
                    and all(map(operator.is_, flat[3], bids))):
                return last[1]
        vms = VMs(*_rows(flat, n))
        self._last = (flat, vms)
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
