"""A period's runs read once (issue 28, nineteenth session): the per-run lists that the
plan (:class:`~merkat.core.plan.Plans`, :func:`~merkat.core.plan._plan`) and the bills
(:class:`~merkat.core.bills.Bills`, :func:`~merkat.core.bills.bills_of`) each read of every
:data:`~merkat.core.market_input.Run` — application ids, row lists, VM counts, traded
columns, VM ids — taken by one :class:`RunTable` per period, in one loop over the runs.

What it replaces: six loops over the same runs every period, each building its own lists
(``Plans``' ``_joined``, ``_plan``'s row starts, ``_one_column``'s check, the bills' key and
``bills_of``'s counts, ids and columns; ~42 runs a period on the 150,000-job window):
−441 M instructions (−1.4 %) on that window's whole run (cachegrind, single-threaded BLAS).
What it keeps: each reader's arithmetic and its order. C-speed ``map(attrgetter(...))`` and
``chain.from_iterable`` instead of the loops were measured and dropped: CPython 3.11's
specialised attribute reads in a loop cost as much as ``attrgetter``'s generic ones, and
the joined allocation mappings by ``chain``/``attrgetter`` made the whole run +78 M (+0.3 %)
instead of −1.4 % (docs/benchmarks.md, nineteenth session). The reference is every reader
without a table (``table=None``: the per-run loops, kept as they were), and :data:`FAST` off
makes the period pass none; ``tests/test_run_table.py`` checks both give the same plans,
bills and next states at every period of random runs.

Read by the period after its decide loop (the runs are complete then) and before its plan:
the VMs' allocation mappings are read when :meth:`RunTable.allocs` is called (the plan
writes them), everything else the plan never changes (a VM's id, its run's rows)."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate
from typing import Any

from merkat.core.market_input import Run
from merkat.core.model import AppNext

FAST = True
"""Whether the period reads its runs once into a :class:`RunTable` (False: the readers'
per-run loops, the reference)."""


class RunTable:
    """The runs' per-run columns, in run order (new lists; none to be changed by a reader):
    ``apps`` the application ids, ``rows_of`` each run's rows (None: all its VMs),
    ``sizes`` its next state's VM count (``len(nx.ids)``), ``counts`` its market rows
    (``sizes`` itself when every run holds all its VMs), ``columns`` its traded columns
    (``const.columns``), ``ids`` the next states' VM ids joined, and ``whole``: whether every
    run holds all its application's VMs (no row list)."""

    __slots__ = ("apps", "columns", "counts", "ids", "nxs", "rows_of", "sizes", "whole")

    def __init__(self, runs: Sequence[Run]) -> None:
        nxs: list[AppNext] = []
        apps: list[str] = []
        rows_of: list[list[int] | None] = []
        sizes: list[int] = []
        ids: list[str] = []
        columns: list[Any] = []
        for nx, const, rows in runs:
            nxs.append(nx)
            apps.append(nx.id)
            rows_of.append(rows)
            vids = nx.ids
            sizes.append(len(vids))
            ids += vids
            columns.append(const.columns)
        self.nxs, self.apps, self.rows_of, self.sizes, self.ids = nxs, apps, rows_of, sizes, ids
        self.columns = columns
        self.whole = rows_of.count(None) == len(rows_of)
        self.counts: list[int] = sizes if self.whole else [
            s if r is None else len(r) for s, r in zip(sizes, rows_of, strict=True)]

    def allocs(self) -> list[dict[str, float]]:
        """The next states' allocation mappings joined, as they are now (a new list)."""
        out: list[dict[str, float]] = []
        for nx in self.nxs:  # (a loop: see the module docstring)
            out += nx.allocs
        return out

    def starts(self) -> list[int]:
        """Each run's first market row."""
        return list(accumulate(self.counts[:-1], initial=0)) if self.counts else []

    def one_column(self) -> tuple[str, int] | None:
        """:func:`~merkat.core.plan._one_column` of the runs: ``(resource, market column)``
        when every run holds all its VMs and trades that one resource, in the market."""
        columns = self.columns
        if not columns:
            return None
        first = columns[0]
        if len(first) != 1 or first[0][1] < 0:
            return None
        if not self.whole or columns.count(first) != len(columns):
            return None
        one: tuple[str, int] = first[0]
        return one
