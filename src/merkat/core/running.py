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
from itertools import accumulate

import numpy as np
import numpy.typing as npt

from merkat.control.types import VMState
from merkat.core.draft import kept
from merkat.core.market_input import Rows, add_bid_rows
from merkat.core.model import App, AppConst, Columns
from merkat.core.spans import Spans
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
    one outside the market not at 0): :meth:`changed` counts it as changed. ``ends``: per
    application of ``apps``, the row after its last (cumulative)."""

    apps: list[tuple[App, AppConst, list[int]]]
    vms: Rows
    current: FloatArray
    traded: npt.NDArray[np.bool_]
    odd: npt.NDArray[np.bool_]
    ends: list[int]

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


def _chunk(app: App, const: AppConst) -> _Chunk | None:
    """``app``'s running VMs' rows (None when it has none on a host)."""
    vms = app.records()
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
    """:func:`running`, remembering each application's rows between calls and reading them
    from its **VM columns** (``App.columns``: the truth; its records are a view of them)
    instead of its VM records. An application's rows are built again only when its record
    is not the one seen last time or one of its columns (VM ids, states, bid mappings,
    hosts, allocation mappings) is not equal to the one kept with its rows: the kept lists
    themselves are held (never changed once kept, :mod:`merkat.core.draft`), the same
    tuple is taken at once, and another is compared list by list in C; the applications
    built again in one call are built together (their lists joined, each mapping read by a
    C ``map``, one numpy array per column).

    **The rows are kept joined** (:class:`~merkat.core.spans.Spans`): the last call's rows
    as one array per column and each application's place in them; a call joins the kept
    applications' rows by spans (applications kept one after another in both calls are one
    slice) with the rows built again, instead of one chunk per application joined by a
    ``concatenate`` of ~50 pieces and one slice per built application (the form before:
    ~100 µs of the ~390 µs of a w150000 admission point's read, where ~6 of ~43
    applications change between two points). When nothing was built and no application
    left or moved, the last arrays are given again. Applications not in a call are
    forgotten. Not a record: a cache of a pure function (``tests/test_running.py`` compares
    it with :func:`running`, which reads the records, bit for bit, at every admission point
    of random runs)."""

    def __init__(self) -> None:
        # per application: its record, columns, running VMs' indexes (None: none) and
        # first row in the kept arrays
        self._chunks: dict[str, tuple[App, Columns, list[int] | None, int]] = {}
        n_res = len(RESOURCES)
        self._kept: tuple[list[str], FloatArray, npt.NDArray[np.bool_], IntArray] = (
            [], np.zeros((0, 4 * n_res)), np.zeros((0, n_res + 1), dtype=np.bool_),
            np.zeros(0, dtype=np.int64))

    def __call__(self, apps: Iterable[App], const_of: Callable[[App], AppConst]) -> Running:
        """``running(apps, const_of)``."""
        old = self._chunks
        chunks: dict[str, tuple[App, Columns, list[int] | None, int]] = {}
        members: list[tuple[App, AppConst, list[int]]] = []
        ends: list[int] = []
        spans = Spans()
        take = spans.take
        at = 0  # rows so far
        batch = _Batch()
        for app in apps:
            app_id = app.spec.id
            cols = kept(app)
            entry = old.get(app_id)
            const = app.const or const_of(app)
            if entry is not None and entry[0] is app:
                was = entry[1]
                # the same kept lists (never changed once kept), or equal ones: a commit
                # keeps new lists every period, most of them equal to the last ones
                if was is cols or (was[0] == cols[0] and was[1] == cols[1]
                                   and was[2] == cols[2] and was[3] == cols[3]
                                   and was[5] == cols[5]):
                    rows = entry[2]
                    if rows is None:
                        chunks[app_id] = (app, cols, None, -1)
                    else:
                        lo = entry[3]
                        take(0, lo, lo + len(rows))
                        chunks[app_id] = (app, cols, rows, at)
                        members.append((app, const, rows))
                        at += len(rows)
                        ends.append(at)
                    continue
            lo = len(batch.ids)
            rows = batch.add(const, cols[0], cols[1], cols[2], cols[3], cols[5])
            if rows is None:
                chunks[app_id] = (app, cols, None, -1)
            else:
                take(1, lo, lo + len(rows))
                chunks[app_id] = (app, cols, rows, at)
                members.append((app, const, rows))
                at += len(rows)
                ends.append(at)
        self._chunks = chunks
        kept_ids, kept_num, kept_flags, kept_hosts = last = self._kept
        if batch.ids:
            num, flags, host = batch.build()
            out = (spans.joined_list([kept_ids, batch.ids]),
                   spans.joined((kept_num, num), _NONE.num),
                   spans.joined((kept_flags, flags), _NONE.flags),
                   spans.joined((kept_hosts, host), _NONE.hosts))
        elif (len(spans.spans) == 1 and spans.spans[0][1] == 0
              and spans.spans[0][2] == len(kept_ids)):
            out = last  # the same rows: the last arrays
        else:
            out = (spans.joined_list([kept_ids]), spans.joined((kept_num,), _NONE.num),
                   spans.joined((kept_flags,), _NONE.flags),
                   spans.joined((kept_hosts,), _NONE.hosts))
        self._kept = out
        ids_out, num_out, flags_out, hosts_out = out
        n_res = len(RESOURCES)
        market = (tuple(ids_out), num_out[:, :n_res], num_out[:, n_res:2 * n_res], hosts_out,
                  num_out[:, 2 * n_res:3 * n_res])
        return Running(members, market, num_out[:, 3 * n_res:], flags_out[:, :n_res],
                       flags_out[:, n_res], ends)


class _Batch:
    """The applications whose rows one :class:`RunningRows` call builds: their running VMs'
    columns joined, then made into arrays at once (:meth:`build`), the same values
    :func:`_chunk` reads from the records."""

    def __init__(self) -> None:
        n_res = len(RESOURCES)
        self.ids: list[str] = []
        self.hosts: list[int] = []
        self.counts: list[int] = []
        self.bid_rows: list[float] = []  # one row per run of VMs sharing a bid mapping
        self.bid_counts: list[int] = []
        self.const_rows: list[float] = []  # cap row, min row, traded columns per application
        self.current: list[list[float]] = [[] for _ in range(n_res)]
        self.odd: list[bool] = []

    def add(self, const: AppConst, ids: list[str], states: list[VMState],
            bids: list[dict[str, float]], hosts: list[int],
            allocs: list[dict[str, float]]) -> list[int] | None:
        """Add an application's running VMs (those with a host, not suspended) from its
        columns: their indexes, or None when it has none (rows :meth:`build` joins in the
        order they were added)."""
        if NO_HOST in hosts or VMState.SUSPENDED in states:
            suspended = VMState.SUSPENDED
            rows = [k for k, (h, s) in enumerate(zip(hosts, states, strict=True))
                    if h != NO_HOST and s is not suspended]
            if not rows:
                return None
            ids = [ids[k] for k in rows]
            bids = [bids[k] for k in rows]
            hosts = [hosts[k] for k in rows]
            allocs = [allocs[k] for k in rows]
        else:
            if not ids:
                return None
            rows = list(range(len(ids)))
        n = len(ids)
        self.ids += ids
        self.hosts += hosts
        self.counts.append(n)
        add_bid_rows(bids, self.bid_rows, self.bid_counts)
        n_res = len(RESOURCES)
        mine = [0.0] * n_res
        nan = math.nan
        odd: list[bool] | None = None
        width = len(const.columns)
        lengths = list(map(len, allocs))
        if lengths.count(width) != n:
            odd = [k != width for k in lengths]
        current = self.current
        for r, c in const.columns:
            got = list(map(operator.methodcaller("get", r, nan), allocs))
            if c >= 0:
                mine[c] = 1.0
                current[c] += got
            else:  # outside the market: its allocation is 0
                bad = [a != 0.0 for a in got]
                if any(bad):
                    odd = bad if odd is None else [x or y for x, y in zip(odd, bad, strict=True)]
        for c in range(n_res):
            if not mine[c]:
                current[c] += [0.0] * n
        self.odd += odd if odd is not None else [False] * n
        self.const_rows += [*const.cap_row, *const.min_row, *mine]
        return rows

    def build(self) -> tuple[FloatArray, npt.NDArray[np.bool_], IntArray]:
        """The added applications' rows (at least one), as :class:`_Chunk`'s ``num``,
        ``flags`` and ``hosts`` joined."""
        n_res = len(RESOURCES)
        counts = np.array(self.counts)
        n = len(self.ids)
        num = np.empty((n, 4 * n_res))
        num[:, :n_res] = np.repeat(np.array(self.bid_rows).reshape(-1, n_res),
                                   self.bid_counts, axis=0)
        per_app = np.repeat(np.array(self.const_rows).reshape(-1, 3 * n_res), counts, axis=0)
        num[:, n_res:3 * n_res] = per_app[:, :2 * n_res]
        for c in range(n_res):
            num[:, 3 * n_res + c] = self.current[c]
        flags = np.empty((n, n_res + 1), dtype=np.bool_)
        flags[:, :n_res] = per_app[:, 2 * n_res:] != 0.0
        flags[:, n_res] = self.odd
        return num, flags, np.array(self.hosts, dtype=np.int64)


def running(apps: Iterable[App], const_of: Callable[[App], AppConst]) -> Running:
    """The running VMs of ``apps`` (those with a host, not suspended) read from their
    records, VM by VM, without drafting their next states, and their current allocations
    (an admission point re-clears the hosts and then touches only the VMs whose allocation
    changed). The reference :class:`RunningRows` is compared with."""
    members: list[tuple[App, AppConst, list[int]]] = []
    chunks: list[_Chunk] = [_NONE]
    ids: list[str] = []
    for app in apps:
        const = app.const or const_of(app)
        chunk = _chunk(app, const)
        if chunk is not None:
            members.append((app, const, chunk.rows))
            chunks.append(chunk)
            ids += chunk.ids
    return _joined(members, chunks, ids)


def _joined(members: list[tuple[App, AppConst, list[int]]], chunks: list[_Chunk],
            ids: list[str]) -> Running:
    """The :class:`Running` of ``chunks`` (in order, ``_NONE`` first), one ``concatenate``
    per array."""
    n_res = len(RESOURCES)
    num = np.concatenate([c.num for c in chunks])
    flags = np.concatenate([c.flags for c in chunks])
    market = (tuple(ids), num[:, :n_res], num[:, n_res:2 * n_res],
              np.concatenate([c.hosts for c in chunks]), num[:, 2 * n_res:3 * n_res])
    return Running(members, market, num[:, 3 * n_res:], flags[:, :n_res], flags[:, n_res],
                   list(accumulate(len(rows) for _, _, rows in members)))
