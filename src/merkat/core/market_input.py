"""The market's input from the applications' next states (pure functions of values): which
VMs bid, one row per VM, and whether two inputs are the same (the clearing cache).

A :data:`Run` is one application's VMs that bid, as the market sees them: its next state
(:class:`~merkat.core.model.AppNext`), its constant parts and the rows of its VM columns
that bid (``None``: all of them, the usual case)."""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Sequence
from typing import Any

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


def market_rows(runs: Sequence[Run], n: int) -> Rows:
    """:func:`market_vms`'s columns (to join them with others before one check)."""
    n_res = len(RESOURCES)
    ids: list[str] = []
    hosts: list[int] = []
    bids: list[float] = []
    caps: list[list[float]] = []  # one row per application
    mins: list[list[float]] = []
    counts: list[int] = []
    for nx, const, rows in runs:
        if rows is None:
            ids += nx.ids
            hosts += nx.hosts
            vbids = nx.bids
        else:
            ids += [nx.ids[k] for k in rows]
            hosts += [nx.hosts[k] for k in rows]
            vbids = [nx.bids[k] for k in rows]
        first = vbids[0]
        row = [first.get(r, 0.0) for r in RESOURCES]
        shared = True
        for b in vbids:
            if b is not first:
                shared = False
                break
        if shared:
            bids += row * len(vbids)
        else:
            last_bid = first
            for b in vbids:
                if b is not last_bid:
                    last_bid = b
                    row = [last_bid.get(r, 0.0) for r in RESOURCES]
                bids += row
        caps.append(const.cap_row)
        mins.append(const.min_row)
        counts.append(len(vbids))
    shape = (n, n_res)
    return (
        tuple(ids),
        np.array(bids, dtype=np.float64).reshape(shape),
        np.repeat(np.array(caps, dtype=np.float64).reshape(-1, n_res), counts, axis=0),
        np.array(hosts, dtype=np.int64),
        np.repeat(np.array(mins, dtype=np.float64).reshape(-1, n_res), counts, axis=0),
    )


class MarketInput:
    """:func:`market_vms` for a period, remembering the last input: when the same
    applications bid with the same VMs (ids), on the same hosts, with the same bid mappings
    (identity: a mapping is replaced, never changed, and an equal bid keeps its mapping,
    :func:`~merkat.core.bids.set_uniform`) and the same constant rows, the input is the last
    one, and the last :class:`~merkat.market.VMs` is returned (the same object: no array
    built or checked again, and the platform's clearing cache sees it at once). Checked per
    application with list comparisons in C instead of the rows' per-VM reads; a quiet
    period (no arrival, no rebid, no move) is most periods of a long run. Not a record: a
    cache of a pure function (``tests/test_market_input.py`` compares both)."""

    def __init__(self) -> None:
        self._last: tuple[list[tuple[Any, ...]], VMs] | None = None

    def __call__(self, runs: Sequence[Run], n: int) -> VMs:
        """``market_vms(runs, n)``."""
        last = self._last
        if (last is not None and len(last[0]) == len(runs)
                and all(nx.id == i and const is c and rows == r and nx.ids == ids
                        and nx.hosts == hosts and all(map(operator.is_, nx.bids, bids))
                        for (nx, const, rows), (i, c, r, ids, hosts, bids)
                        in zip(runs, last[0], strict=True))):
            return last[1]
        vms = market_vms(runs, n)
        self._last = ([(nx.id, const, None if rows is None else list(rows), list(nx.ids),
                        list(nx.hosts), list(nx.bids)) for nx, const, rows in runs], vms)
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
