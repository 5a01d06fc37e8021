"""The period's plan and bills remembered between periods (:class:`Plans`, :class:`Bills`):
caches of :func:`~merkat.core.plan.make_plan` and :func:`~merkat.core.plan.bills_of`, pure
functions, for the quiet periods that reuse the last clearing
(:meth:`Platform._clear <merkat.core.period.Platform._clear>`) and the new clearings of the
same VMs. ``tests/test_plan.py`` compares both with the functions at every period of
random runs."""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from merkat.core.backend import Plan
from merkat.core.market_input import Run
from merkat.core.model import Ops
from merkat.core.plan import Column, _plan, bills_of
from merkat.market.share import FloatArray, IntArray


class Plans:
    """:func:`make_plan` for a period, remembering the last plan: when the clearing is the
    last one (the same object: a quiet period, :meth:`Platform._clear
    <merkat.core.period.Platform._clear>`), no VM changes host, and the same applications
    hold the same VMs whose allocation mappings are the ones the last plan gave them
    (identity: a mapping is kept while its values do not change), every VM keeps its
    allocation and the plan's ``allocations`` are the last plan's (the same mapping, shared:
    plans are read, never changed); only the destroys and suspends are new. Checked with
    list comparisons over the runs joined (the applications, their rows and VM counts, the
    VM ids; the mappings by identity) instead of a visit per VM or per application. Not a
    record: a cache of a pure function (``tests/test_plan.py`` compares both)."""

    def __init__(self) -> None:
        self._last: tuple[Any, ...] | None = None
        # per run of the last plan: its application's id, rows, constant parts, VM ids' and
        # allocation mappings' lists as the plan left them (held: never changed in place
        # after the plan, copy on write, :mod:`merkat.core.draft`)
        self._lists: list[tuple[str, list[int] | None, Any, list[str],
                                list[dict[str, float]]]] = []
        self.same = False  # the last call's runs were the plan's before, by identity

    def __call__(self, now: float, period: float, runs: Sequence[Run], result: Any, ops: Ops,
                 before: IntArray) -> Plan:
        """``make_plan(now, period, runs, result, ops, before)``; for the same runs holding
        the last plan's mappings and a new clearing, its one-column allocations compared
        with the last ones (:func:`_one_column_allocations`' ``prior``).

        **The quiet period by identity** (copy on write): when the clearing is the last one
        and every run's VM ids' and allocation mappings' lists are the very lists the last
        plan left (with the same application, rows and constant parts, in order), the runs
        are the last plan's, each VM holding the mapping that plan gave it: the plan is the
        last one's without joining the runs (what it replaces: :func:`_joined`'s join of
        every run's VM ids and mappings, ~1 µs an application-period). ``same`` tells the
        period's :class:`Bills` so. ``tests/test_plan.py`` compares it with the join."""
        last = self._last
        lists = self._lists
        same = False
        if last is not None and last[0] is result and len(lists) == len(runs):
            for (nx, const, rows), held in zip(runs, lists, strict=True):
                if (nx.ids is not held[3] or nx.allocs is not held[4] or const is not held[2]
                        or rows != held[1] or nx.id != held[0]):
                    break
            else:
                same = True
        self.same = same
        if same and last is not None and not (result.host != before).any():
            return Plan(time=now, period=period, destroy=tuple(ops.destroy),
                        suspend=tuple(ops.suspend), allocations=last[3].allocations)
        key, allocs = _joined(runs)
        prior: Column | None = None
        if last is not None and key == last[1] and all(map(operator.is_, allocs, last[2])):
            if last[0] is result and not (result.host != before).any():
                self._lists = _lists(runs)
                return Plan(time=now, period=period, destroy=tuple(ops.destroy),
                            suspend=tuple(ops.suspend), allocations=last[3].allocations)
            prior = last[4]
        plan, column = _plan(now, period, runs, result, ops, before, prior, (key[3], allocs))
        self._last = (result, key, _joined(runs)[1] if column is None else column.allocs,
                      plan, column)
        self._lists = _lists(runs)
        return plan


def _lists(runs: Sequence[Run]) -> list[tuple[str, list[int] | None, Any, list[str],
                                              list[dict[str, float]]]]:
    """What :class:`Plans` holds of ``runs`` to know them again by identity."""
    return [(nx.id, rows, const, nx.ids, nx.allocs) for nx, const, rows in runs]


def _joined(runs: Sequence[Run]) -> tuple[tuple[list[Any], ...], list[dict[str, float]]]:
    """What :class:`Plans` compares of ``runs``: ``(application ids, rows, VM counts, VM
    ids)`` and the VMs' allocation mappings, each joined over the runs (new lists)."""
    apps: list[str] = []
    rows_of: list[list[int] | None] = []
    counts: list[int] = []
    ids: list[str] = []
    allocs: list[dict[str, float]] = []
    for nx, _, rows in runs:
        apps.append(nx.id)
        rows_of.append(rows)
        counts.append(len(nx.ids))
        ids += nx.ids
        allocs += nx.allocs
    return (apps, rows_of, counts, ids), allocs


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
                 prices: Mapping[str, float], same: bool = False
                 ) -> tuple[tuple[tuple[str, int], ...], tuple[tuple[str, int], ...]]:
        """``bills_of(runs, result.host, before, result.allocation, bid, prices)``;
        ``same``: the runs are those of this memory's last call (the same applications,
        rows, VM ids and constant parts, :attr:`Plans.same` for the period's plan), so the
        key is not read again."""
        last = self._last
        if same and last is not None:
            key = last[1]
        else:
            key = [(nx.id, len(nx.ids) if rows is None else len(rows), const.columns)
                   for nx, const, rows in runs]
        if (last is not None and last[0] is result and last[1] == key and last[2] == prices
                and (last[3] is before or np.array_equal(last[3], before))
                and (last[4] is bid or np.array_equal(last[4], bid))):
            out: tuple[tuple[tuple[str, int], ...], tuple[tuple[str, int], ...]] = last[5]
            return out
        out = bills_of(runs, result.host, before, result.allocation, bid, prices)
        self._last = (result, key, dict(prices), before, bid, out)
        return out
