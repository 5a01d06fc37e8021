"""The bills of a decision (:mod:`merkat.core.period`, :mod:`merkat.core.admission`): per
application, what its VMs bid for the period (charging by bid) and what they use at the
clearing's prices (charging by use), from the market's input and the clearing.

:func:`bills_of` is the definition (numpy, or plain Python for a few VMs); :class:`Bills` is
the period's, which gives the last answer again while the clearing and the runs are the same
(a quiet period). The usage is read only by charging by use and by metering, so from
:data:`MIN_ARRAY_BILLS` VMs it is a :class:`Usage`, computed when first read (issue 28,
seventeenth session). A market whose every VM is placed (every trace period) is billed
without the hosted mask (:data:`PLACED`; issue 28, twenty-third session).
``tests/test_plan.py`` compares each against the per-VM sums.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import compress
from typing import Any, overload

import numpy as np

from merkat.core.market_input import Run
from merkat.core.run_table import RunTable
from merkat.defaults import MICRO
from merkat.market import NO_HOST, RESOURCES
from merkat.market.share import FloatArray, IntArray
from merkat.market.types import row_sum

Rows = tuple[tuple[str, int], ...]


class Usage(Sequence[tuple[str, int]]):
    """A decision's usage (:attr:`Decision.usage <merkat.core.model.Decision.usage>`),
    ``(application id, micro-credits)`` rows computed by ``make()`` at the first read, then
    kept (``make`` is dropped); ``==`` to the tuple of the same rows. ``make`` reads only
    values not written after it was made (the clearing's arrays, which nobody writes once
    made, and what it captured). Charging by bid, every trace run's and experiment's, never
    reads it: the numpy operations of the usage were half of :func:`bills_of`'s."""

    __slots__ = ("_make", "_rows")

    def __init__(self, make: Callable[[], Rows]) -> None:
        self._make: Callable[[], Rows] | None = make
        self._rows: Rows | None = None

    @property
    def rows(self) -> Rows:
        """The rows, computed at the first read."""
        rows = self._rows
        if rows is None:
            assert self._make is not None
            rows = self._rows = self._make()
            self._make = None
        return rows

    def __len__(self) -> int:
        return len(self.rows)

    @overload
    def __getitem__(self, k: int) -> tuple[str, int]: ...

    @overload
    def __getitem__(self, k: slice) -> Rows: ...

    def __getitem__(self, k: int | slice) -> tuple[str, int] | Rows:
        return self.rows[k]

    def __iter__(self) -> Iterator[tuple[str, int]]:
        return iter(self.rows)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Usage):
            return self.rows == other.rows
        if isinstance(other, tuple):
            return self.rows == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Usage({self.rows!r})"

    def __reduce__(self) -> tuple[Any, tuple[Rows]]:
        """Pickled as its rows (computed then: the function it holds is not pickled)."""
        return _computed, (self.rows,)


def _computed(rows: Rows) -> Usage:
    """A :class:`Usage` of ``rows``, already computed (what a pickled one loads as)."""
    usage = Usage(tuple)
    usage._rows, usage._make = rows, None
    return usage


def bills_of(
    runs: Sequence[Run], host: IntArray, before: IntArray, alloc: FloatArray, bid: FloatArray,
    prices: Mapping[str, float], start: int = 0, table: RunTable | None = None,
) -> tuple[tuple[tuple[str, int], ...], Sequence[tuple[str, int]]]:
    """Per application (id order): the bids of its VMs that have a host (micro-credits,
    rounded per VM) and what they use at ``prices`` (allocation x price over the resources it
    trades, rounded per VM, at most the VM's bid). ``runs`` are rows ``start`` on of the
    market's input (``bid``, hosts ``before``) and of the placement (``host``, ``alloc``), as
    :func:`make_plan` took them into the next states: a VM the clearing did not place keeps
    the host it had (and is billed its bid, as it was VM by VM) and uses nothing.

    Vectorised over the VMs (numpy) with the arithmetic of the per-VM sums it replaces: a
    VM's bid holds its traded resources only, so its row sum is ``sum(vm.bid.values())``
    (two resources: addition commutes), and a VM's usage adds its traded columns' ``a * p``
    in trade order; ``np.rint`` rounds half to even as :func:`round` does. From
    :data:`MIN_ARRAY_BILLS` VMs the usage is a :class:`~merkat.core.usage.Usage`, computed
    when first read (charging by bid never reads it). ``table``: the runs read once
    (:class:`~merkat.core.run_table.RunTable`: their ids, row counts and traded columns),
    or None (the reference: read here)."""
    if table is None:
        counts = [len(nx.ids) if rows is None else len(rows) for nx, _, rows in runs]
    else:
        counts = table.counts
    n = sum(counts)
    if not n:
        return (), ()
    ids = [nx.id for nx, _, _ in runs] if table is None else table.apps
    kinds = [const.columns for _, const, _ in runs] if table is None else table.columns
    if n < MIN_ARRAY_BILLS and len(RESOURCES) == 2 and 0 not in counts:
        plain = _bills_plain(ids, kinds, counts, host, before, alloc, bid, prices, start, n)
        if plain is not None:
            return plain
    return _bills_numpy(ids, counts, kinds, host, before, alloc, bid,
                        [prices[r] for r in RESOURCES], start)


def _bills_numpy(ids: list[str], counts: list[int], kinds: list[tuple[tuple[str, int], ...]],
                 host: IntArray, before: IntArray, alloc: FloatArray, bid: FloatArray,
                 price: list[float], start: int
                 ) -> tuple[tuple[tuple[str, int], ...], Usage]:
    """:func:`bills_of` in numpy, of the runs given as their application ids, row counts
    and traded columns (none empty in all), at the prices ``price`` (in ``RESOURCES``
    order); the usage is computed when first read."""
    n = sum(counts)
    span = slice(start, start + n)
    placed = host[span] != NO_HOST
    x = np.rint(row_sum(bid[span]) * MICRO).astype(np.int64)
    starts = np.cumsum([0, *counts[:-1]])
    every = PLACED and bool(placed.all())
    if every:  # (every trace period's) each VM hosted: no mask, each run holds one
        hosted = placed
        totals = np.add.reduceat(x, starts).tolist()
        any_hosted = [True] * len(ids)
    else:
        hosted = placed | (before[span] != NO_HOST)  # the VMs' hosts after make_plan
        totals = np.add.reduceat(np.where(hosted, x, 0), starts).tolist()
        any_hosted = np.logical_or.reduceat(hosted, starts).tolist()
    a = alloc[span]

    def usage() -> tuple[tuple[str, int], ...]:  # (read only by charging by use: lazily)
        used, p = np.zeros(n), np.array(price)
        if kinds.count(kinds[0]) == len(kinds):  # (usual) every application trades the same
            columns, counts_of = [{k for _, k in kinds[0]}], [n]
        else:
            columns, counts_of = [{k for _, k in c} for c in kinds], counts
        for k in range(len(RESOURCES)):  # column k, for the VMs whose applications trade it
            traded = [k in c for c in columns]
            if any(traded):
                term = a[:, k] * p[k]
                if not all(traded):
                    term = np.where(np.repeat(traded, counts_of), term, 0.0)
                used = used + term
        u = np.where(placed, np.minimum(np.rint(used * MICRO).astype(np.int64), x), 0)
        uses = np.add.reduceat(np.where(hosted, u, 0), starts).tolist()
        return _per_application(ids, any_hosted, totals, uses)[1]

    if every and len(set(ids)) == len(ids):  # (_per_application's bills, alone)
        return tuple(sorted(zip(ids, totals, strict=True))), Usage(usage)
    return _per_application(ids, any_hosted, totals, [0] * len(ids))[0], Usage(usage)


PLACED = True
"""Whether :func:`_bills_numpy` bills a market whose every VM the clearing placed (every
period of the trace windows) without the hosted mask: each VM is then hosted and each run
holds one, so the totals are the bids' sums per run (no ``np.where``, no
``logical_or.reduceat``), and the bills, one run per application, are the ids and totals
sorted (the ids are unique: the sort of ``(id, total, usage)`` is the sort by id), without
:func:`_per_application`'s usage rows (the usage is computed when read, as before). False:
the mask and :func:`_per_application` every time (the reference). ``tests/test_new_clearing.py``
compares both ways (issue 28, twenty-third session: −37 µs of a captured call's 78 µs)."""


MIN_ARRAY_BILLS = 24
"""The fewest VMs :func:`bills_of` bills with numpy (~20 operations: ~45 µs whatever the
size on a loaded machine); fewer (an admission point's newcomers, ~15 VMs on the
150,000-job window) take :func:`_bills_plain`, ~20 µs and ~1-2 µs per VM (captured w150000
calls, both ways: 0-7 VMs 59 → 24 µs, 8-15 60 → 30, 16-23 49 → 36, 24-31 45 → 46)."""


def _bills_plain(ids: list[str], columns: list[tuple[tuple[str, int], ...]], counts: list[int],
                 host: IntArray, before: IntArray,
                 alloc: FloatArray, bid: FloatArray, prices: Mapping[str, float], start: int,
                 n: int) -> tuple[tuple[tuple[str, int], ...], tuple[tuple[str, int], ...]] | None:
    """:func:`bills_of` VM by VM in plain Python, with its numpy arithmetic written out
    (two resources, no empty run): a bid's row sum ``b0 + b1 + 0.0`` (``row_sum``), a
    usage ``0.0 + t0 + t1`` over the columns some application trades (a column its own
    application does not trade adds ``0.0``), each times ``MICRO`` and rounded half to even
    (:func:`round` as ``np.rint``), the usage at most the bid, per application the sums of
    its hosted VMs'. None when a product is not a finite number within ``int64`` (the
    numpy path's answer then stands). ``ids``, ``columns``: the runs' application ids and
    traded columns. ``tests/test_plan.py`` runs the bills both ways."""
    span = slice(start, start + n)
    hs: list[int] = host[span].tolist()
    was: list[int] = before[span].tolist()
    bids: list[list[float]] = bid[span].tolist()
    allocs: list[list[float]] = alloc[span].tolist()
    price = np.array([prices[r] for r in RESOURCES]).tolist()
    kinds = [{k for _, k in c} for c in columns]
    some = [any(k in c for c in kinds) for k in range(2)]
    totals: list[int] = []
    uses: list[int] = []
    any_hosted: list[bool] = []
    i = 0
    for count, cols in zip(counts, kinds, strict=True):
        total = use = 0
        hosted = False
        t0, t1 = some[0] and 0 in cols, some[1] and 1 in cols
        for m in range(i, i + count):
            if hs[m] == NO_HOST and was[m] == NO_HOST:
                continue
            hosted = True
            b = bids[m]
            x = (b[0] + b[1] + 0.0) * MICRO
            if not -9e18 < x < 9e18:  # (NaN, infinite, beyond int64)
                return None
            bill = round(x)
            total += bill
            if hs[m] != NO_HOST:
                a = allocs[m]
                used = 0.0
                if some[0]:
                    used = used + (a[0] * price[0] if t0 else 0.0)
                if some[1]:
                    used = used + (a[1] * price[1] if t1 else 0.0)
                u = used * MICRO
                if not -9e18 < u < 9e18:
                    return None
                use += min(round(u), bill)
        totals.append(total)
        uses.append(use)
        any_hosted.append(hosted)
        i += count
    return _per_application(ids, any_hosted, totals, uses)


def _per_application(ids: list[str], any_hosted: list[bool], totals: list[int],
                     uses: list[int]
                     ) -> tuple[tuple[tuple[str, int], ...], tuple[tuple[str, int], ...]]:
    """The bills and usage of the runs ``ids`` with a hosted VM, summed per application,
    in application id order."""
    if len(set(ids)) == len(ids):  # (usual) one run per application: no sums, one sort
        rows_of = sorted(zip(compress(ids, any_hosted), compress(totals, any_hosted),
                             compress(uses, any_hosted), strict=True))
        return tuple((i, t) for i, t, _ in rows_of), tuple((i, v) for i, _, v in rows_of)
    bills: dict[str, int] = {}
    usage: dict[str, int] = {}
    for i, p, t, v in zip(ids, any_hosted, totals, uses, strict=True):
        if p:
            bills[i] = bills.get(i, 0) + t
            usage[i] = usage.get(i, 0) + v
    names = sorted(bills)
    return tuple((i, bills[i]) for i in names), tuple((i, usage[i]) for i in names)


class Bills:
    """:func:`bills_of` for a period, remembering the last answer: a quiet period reuses
    the last clearing (the same object, for the same bids and hosts:
    :meth:`Platform._clear <merkat.core.period.Platform._clear>`), and its bills are then
    those of the last period when the same applications hold the same rows (ids, row
    counts, traded columns) at the same prices. Not a record: a cache of a pure function,
    checked by identity of the clearing and equality of everything else it reads."""

    def __init__(self) -> None:
        self._last: tuple[Any, ...] | None = None

    def __call__(self, runs: Sequence[Run], result: Any, before: IntArray, bid: FloatArray,
                 prices: Mapping[str, float], table: RunTable | None = None
                 ) -> tuple[tuple[tuple[str, int], ...], Sequence[tuple[str, int]]]:
        """``bills_of(runs, result.host, before, result.allocation, bid, prices)``;
        ``table``: the runs read once (:class:`~merkat.core.run_table.RunTable`), or None."""
        key: object
        if table is None:
            key = [(nx.id, len(nx.ids) if rows is None else len(rows), const.columns)
                   for nx, const, rows in runs]
        else:
            key = (table.apps, table.counts, table.columns)  # (its lists: no tuple a run)
        last = self._last
        if (last is not None and last[0] is result and last[1] == key and last[2] == prices
                and (last[3] is before or np.array_equal(last[3], before))
                and (last[4] is bid or np.array_equal(last[4], bid))):
            out: tuple[tuple[tuple[str, int], ...], Sequence[tuple[str, int]]] = last[5]
            return out
        out = bills_of(runs, result.host, before, result.allocation, bid, prices, table=table)
        self._last = (result, key, dict(prices), before, bid, out)
        return out
