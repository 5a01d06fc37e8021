"""The VMs that run on a host now, read from the records (an admission point's view of the
cluster, :mod:`merkat.core.admission`), and the cache that keeps each application's rows
from one admission point to the next while its records do not change.

:func:`running` reads every running application's VMs in one pass; :class:`RunningRows` gives
the same answer, bit for bit, but reads an application's rows again only when one of its VM
records changed since the last call (a commit, an admission's settle, or any other write: the
key is the records' values themselves, not a stamp a writer must remember to bump).
Bid and allocation mappings are compared with ``==`` (they are replaced, never mutated:
:class:`~merkat.core.model.VMRecord`); a mapping replaced by an equal one gives equal rows,
and the platform itself keeps an equal bid's old mapping (:func:`~merkat.core.bids.set_uniform`).
``tests/test_running.py`` compares both at every admission point of random runs and after
each kind of write."""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from merkat.control.types import VMState
from merkat.core.market_input import Rows
from merkat.core.model import App, AppConst
from merkat.market import NO_HOST, RESOURCES
from merkat.market.types import FloatArray, IntArray


@dataclass(frozen=True)
class Running:
    """The VMs that run on a host now, read from the records (nothing drafted): per
    application its record, constant parts and the indexes of those VMs (``apps``, in
    market order), their market rows (``vms``: unchecked columns) and their current
    allocations in the market's columns (``current``; NaN where the record has none;
    ``traded`` marks the columns each row's application trades). ``odd`` marks a row whose
    allocation mapping is not of its application's shape (a resource missing or extra, or
    one outside the market not at 0): :meth:`changed` counts it as changed."""

    apps: list[tuple[App, AppConst, list[int]]]
    vms: Rows
    current: FloatArray
    traded: npt.NDArray[np.bool_]
    odd: npt.NDArray[np.bool_]

    def changed(self, allocation: FloatArray) -> npt.NDArray[np.bool_]:
        """Per row, whether its allocation in ``allocation`` (market columns) is not the one
        its record holds: exactly the VMs :func:`~merkat.core.plan.make_plan` gives a new
        allocation mapping (a mapping is kept when equal)."""
        differs = (allocation[: len(self.odd)] != self.current) & self.traded
        out: npt.NDArray[np.bool_] = self.odd | differs.any(axis=1)
        return out


@dataclass(frozen=True)
class _Chunk:
    """One application's part of :class:`Running`: the indexes of its running VMs, their
    ids, and per VM one row of ``num`` (its bid, cap, minimum and current allocation in the
    market's columns: 0 where it does not trade; ``len(RESOURCES)`` values each), of
    ``flags`` (the columns it trades, then whether its allocation is odd) and its host."""

    rows: list[int]
    ids: list[str]
    num: FloatArray
    flags: npt.NDArray[np.bool_]
    hosts: IntArray


_key = operator.attrgetter("id", "host", "state", "bid", "alloc")
"""What a VM's rows are made of (a tuple made and compared in C)."""


def _chunk(app: App, const: AppConst) -> _Chunk | None:
    """``app``'s running VMs' rows (None when it has none on a host)."""
    vms = app.vms
    suspended = VMState.SUSPENDED
    rows = [k for k, vm in enumerate(vms) if vm.host != NO_HOST and vm.state is not suspended]
    if not rows:
        return None
    n_res = len(RESOURCES)
    nan = math.nan
    columns = const.columns
    width = len(columns)
    mine = [False] * n_res
    for _, c in columns:
        if c >= 0:
            mine[c] = True
    mine_vms = vms if len(rows) == len(vms) else [vms[k] for k in rows]
    n = len(mine_vms)
    num = np.zeros((n, 4 * n_res))
    first = mine_vms[0].bid
    if all(vm.bid is first for vm in mine_vms):  # one shared bid mapping: one row
        num[:, :n_res] = [first.get(r, 0.0) for r in RESOURCES]
    else:
        num[:, :n_res] = [[vm.bid.get(r, 0.0) for r in RESOURCES] for vm in mine_vms]
    num[:, n_res:2 * n_res] = const.cap_row
    num[:, 2 * n_res:3 * n_res] = const.min_row
    allocs = [vm.alloc for vm in mine_vms]
    flags = np.zeros((n, n_res + 1), dtype=np.bool_)
    flags[:, :n_res] = mine
    odd = [len(a) != width for a in allocs]
    for r, c in columns:
        got = [a.get(r, nan) for a in allocs]
        if c >= 0:
            num[:, 3 * n_res + c] = got
        else:  # outside the market: its allocation is 0
            for k, a in enumerate(got):
                if a != 0.0:
                    odd[k] = True
    flags[:, n_res] = odd
    return _Chunk(rows, [vm.id for vm in mine_vms], num, flags,
                  np.array([vm.host for vm in mine_vms], dtype=np.int64))


_NONE = _Chunk([], [], np.zeros((0, 4 * len(RESOURCES))),
               np.zeros((0, len(RESOURCES) + 1), dtype=np.bool_), np.zeros(0, dtype=np.int64))
"""No row (what :class:`RunningRows` joins when no application runs a VM on a host)."""


class RunningRows:
    """:func:`running`, remembering each application's rows between calls: an
    application's chunk is read again only when its record is not the one seen last time or
    one of its VM records' ids, hosts, states, bid or allocation mappings changed (checked
    with one key per VM, a tuple made and compared in C, instead of the rows' per-VM reads
    and lookups), and the chunks' arrays are joined (one ``concatenate`` per array) instead
    of built from lists of every VM's values; ~2x less per call at the admission points of
    ``bench period`` (docs/benchmarks.md, issue 28, twelfth session). Applications not in a
    call are forgotten. Not a record: a cache of a pure function (``tests/test_running.py``
    compares it with a fresh one, bit for bit)."""

    def __init__(self) -> None:
        self._chunks: dict[str, tuple[App, list[tuple[Any, ...]], _Chunk | None]] = {}

    def __call__(self, apps: Iterable[App], const_of: Callable[[App], AppConst]) -> Running:
        """``running(apps, const_of)``."""
        old = self._chunks
        kept: dict[str, tuple[App, list[tuple[Any, ...]], _Chunk | None]] = {}
        members: list[tuple[App, AppConst, list[int]]] = []
        chunks: list[_Chunk] = [_NONE]
        ids: list[str] = []
        for app in apps:
            app_id = app.spec.id
            key = list(map(_key, app.vms))
            entry = old.get(app_id)
            const = app.const or const_of(app)
            if entry is not None and entry[0] is app and entry[1] == key:
                chunk = entry[2]
            else:
                chunk = _chunk(app, const)
            kept[app_id] = (app, key, chunk)
            if chunk is not None:
                members.append((app, const, chunk.rows))
                chunks.append(chunk)
                ids += chunk.ids
        self._chunks = kept
        n_res = len(RESOURCES)
        num = np.concatenate([c.num for c in chunks])
        flags = np.concatenate([c.flags for c in chunks])
        market = (tuple(ids), num[:, :n_res], num[:, n_res:2 * n_res],
                  np.concatenate([c.hosts for c in chunks]), num[:, 2 * n_res:3 * n_res])
        return Running(members, market, num[:, 3 * n_res:], flags[:, :n_res], flags[:, n_res])


def running(apps: Iterable[App], const_of: Callable[[App], AppConst]) -> Running:
    """The running VMs of ``apps`` (those with a host, not suspended) read from their
    records in one pass, without drafting their next states, and their current allocations
    (an admission point re-clears the hosts and then touches only the VMs whose allocation
    changed). The reference :class:`RunningRows` is compared with."""
    return RunningRows()(apps, const_of)
