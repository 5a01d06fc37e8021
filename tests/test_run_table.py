"""The period's runs read once (:class:`merkat.core.run_table.RunTable`) against the readers'
own per-run loops (``table=None``, the reference): at every period of random runs (arrivals,
rebids, migrations, suspends, ends; one and two resources; failed operations, withheld
applications, admission points) the table's lists are the ones each reader built, and
``Plans`` and ``Bills`` give the same plan, bills, usage and next states with and without it,
from the same memory; whole runs with :data:`~merkat.core.run_table.FAST` on and off log the
same plans, bills and records after every commit, and end with the same digest."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

from merkat.core import run_table
from merkat.core.bills import Bills
from merkat.core.draft import copy as copy_next
from merkat.core.market_input import market_vms
from merkat.core.model import Ops
from merkat.core.period import Platform
from merkat.core.plan import Plans, _joined, _one_column
from merkat.core.run_table import RunTable
from merkat.market import NO_HOST, RESOURCES, Hosts
from test_market_support import random_run
from test_plan import _market, _Placed, _runs
from test_unchanged import _trace, mixed_run


def _check_against_the_reference(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """``Plans`` and ``Bills`` watched: every call with a table is also made without one,
    on copies of the runs' next states and of the cache's memory, and compared."""
    seen = {"plans": 0, "bills": 0, "two_columns": 0, "partial": 0, "reused": 0}
    plans_call, bills_call = Plans.__call__, Bills.__call__

    def plans(self: Plans, now: float, period: float, runs: Any, result: Any, ops: Any,
              before: Any, table: RunTable | None = None) -> Any:
        assert table is not None  # (FAST: the period passes one)
        key, allocs = _joined(runs)
        assert (table.apps, table.rows_of, table.sizes, table.ids) == key
        assert all(map(lambda a, b: a is b, table.allocs(), allocs))
        assert table.one_column() == _one_column(runs)
        starts, i = [], 0
        for nx, _, rows in runs:
            starts.append(i)
            i += len(nx.ids) if rows is None else len(rows)
        assert table.starts() == starts
        ref = copy.copy(self)  # (its memory: the same last plan; its own from here)
        fresh = [(copy_next(nx), const, rows) for nx, const, rows in runs]
        want = plans_call(ref, now, period, fresh, result, copy.deepcopy(ops), before)
        got = plans_call(self, now, period, runs, result, ops, before, table)
        assert repr(got) == repr(want) and got == want
        assert self.reused == ref.reused
        assert [(nx.allocs, nx.hosts, nx.fresh, nx.moved) for nx, _, _ in runs] == [
            (nx.allocs, nx.hosts, nx.fresh, nx.moved) for nx, _, _ in fresh]
        seen["plans"] += 1
        seen["reused"] += self.reused
        seen["two_columns"] += any(len(c) != 1 for c in table.columns)
        seen["partial"] += not table.whole
        return got

    def bills(self: Bills, runs: Any, result: Any, before: Any, bid: Any, prices: Any,
              table: RunTable | None = None) -> Any:
        assert table is not None
        assert list(zip(table.apps, table.counts, table.columns, strict=True)) == [
            (nx.id, len(nx.ids) if rows is None else len(rows), const.columns)
            for nx, const, rows in runs]
        want = bills_call(copy.copy(self), runs, result, before, bid, prices)
        got = bills_call(self, runs, result, before, bid, prices, table)
        assert got[0] == want[0] and tuple(got[1]) == tuple(want[1])
        seen["bills"] += 1
        return got

    monkeypatch.setattr(Plans, "__call__", plans)
    monkeypatch.setattr(Bills, "__call__", bills)
    return seen


@pytest.mark.parametrize("seed", range(4))
def test_every_period_s_plan_and_bills_equal_the_per_run_readers_(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _check_against_the_reference(monkeypatch)
    random_run(seed, apps=18, over=3, periods=16, work=1500.0,
               best_effort=lambda k, rng: k % 8 != 0 or seed == 0)
    assert seen["plans"] >= 12 and seen["plans"] == seen["bills"]
    assert seen["reused"] < seen["plans"]  # (new plans; seed 0, all best-effort: quiet ones)
    assert seen["reused"] > 0 or seed != 0


@pytest.mark.parametrize(("policy", "hosts"), [("vertical-deadline", 6),
                                               ("deadline-strict", 12)])
def test_a_flaky_trace_run_s_periods_equal_the_per_run_readers_(
        monkeypatch: pytest.MonkeyPatch, policy: str, hosts: int) -> None:
    """``test_cow``'s flaky trace window (one operation in four fails, one bill in nine is
    withheld; suspends and migrations), every period checked against the reference."""
    seen = _check_against_the_reference(monkeypatch)
    _trace(monkeypatch, False, policy, hosts)
    assert seen["plans"] > 80


def test_scalar_two_resource_and_batched_applications_equal_the_per_run_readers_(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two resources (no one-column plan) beside batched CPU applications, flaky and
    withheld, newcomers at admission points: ``test_unchanged``'s mixed run, every period
    checked."""
    seen = _check_against_the_reference(monkeypatch)
    mixed_run(monkeypatch)
    assert seen["plans"] >= 30 and seen["two_columns"] > 0


@pytest.mark.parametrize(("policy", "hosts"), [("deadline-strict", 12), ("deadline-strict", 40)])
def test_a_trace_run_without_the_table_is_the_same_run(
        monkeypatch: pytest.MonkeyPatch, policy: str, hosts: int) -> None:
    """The whole run with :data:`~merkat.core.run_table.FAST` on and off: the same plans
    (``repr``), bills, usage, charges and every record after every commit, the same digest."""
    logs = []
    for fast in (True, False):
        monkeypatch.setattr(run_table, "FAST", fast)
        log, _seen, digest = _trace(monkeypatch, False, policy, hosts)
        monkeypatch.undo()
        logs.append((log, digest))
    (log, digest), (ref_log, ref_digest) = logs
    assert len(log) == len(ref_log) > 100
    assert log == ref_log and digest == ref_digest


def test_the_period_reads_no_table_when_fast_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    got: list[RunTable | None] = []
    call = Plans.__call__

    def plans(self: Plans, *a: Any) -> Any:
        got.append(a[-1])
        return call(self, *a)

    monkeypatch.setattr(run_table, "FAST", False)
    monkeypatch.setattr(Plans, "__call__", plans)
    random_run(1, apps=6, over=2, periods=4, work=500.0, best_effort=lambda k, rng: True)
    assert got and all(t is None for t in got)



@pytest.mark.parametrize("seed", range(30))
def test_runs_with_row_lists_and_unplaced_vms_equal_the_per_run_readers_(seed: int) -> None:
    """``test_plan``'s random runs (one and two resources, new, resuming and placed VMs),
    some holding only some of their VMs (a row list: suspended VMs), some VMs left unplaced:
    the table's lists and the plans and bills of two successive clearings, with and without
    a table."""
    rng = np.random.default_rng(seed)
    platform = Platform(Hosts(tuple(f"h{k}" for k in range(4)), np.array([[1.0, 4096.0]] * 4)))
    market = _market(platform, _runs(rng, platform))
    market = [(nx, const, None if rng.random() < 0.6 or len(nx.ids) < 2 else
               sorted(rng.choice(len(nx.ids), int(rng.integers(1, len(nx.ids))), False)
                      .tolist())) for nx, const, _ in market]
    n = sum(len(nx.ids) if rows is None else len(rows) for nx, _, rows in market)
    vms = market_vms(market, n)
    table = RunTable(market)
    key, _ = _joined(market)
    assert (table.apps, table.rows_of, table.sizes, table.ids) == key
    assert table.one_column() == _one_column(market)
    memo, ref_memo, bills, ref_bills = Plans(), Plans(), Bills(), Bills()
    fresh = [(copy_next(nx), const, rows) for nx, const, rows in market]
    for _ in range(2):
        host = rng.integers(0, 4, n)
        host[rng.random(n) < 0.2] = NO_HOST
        placed = _Placed(host, rng.uniform(0.0, 1.0, (n, len(RESOURCES))))
        got = memo(0.0, 300.0, market, placed, Ops(), vms.host, RunTable(market))
        want = ref_memo(0.0, 300.0, fresh, placed, Ops(), vms.host)
        assert repr(got) == repr(want)
        assert [(nx.allocs, nx.hosts, nx.fresh) for nx, _, _ in market] == [
            (nx.allocs, nx.hosts, nx.fresh) for nx, _, _ in fresh]
        prices = {"cpu": float(rng.uniform(0.1, 5.0)), "memory": float(rng.uniform(0.0, 0.01))}
        b = bills(market, placed, vms.host, vms.bid, prices, RunTable(market))
        w = ref_bills(fresh, placed, vms.host, vms.bid, prices)
        assert b[0] == w[0] and tuple(b[1]) == tuple(w[1])
