"""The period's plan and bills over whole runs: every period's plan and bills a fresh
computation's, the usage computed only when read (split from tests/test_plan.py)."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import numpy as np
import pytest

from merkat.core.market_input import market_vms
from merkat.core.model import AppSpec, Ops
from merkat.core.period import Platform
from merkat.core.plan import Bills, Plans, bills_of, make_plan
from merkat.market import RESOURCES, Hosts
from test_plan import _market, _Placed, _reference_bills, _runs


@pytest.mark.parametrize("seed", range(3))
def test_every_period_s_plan_and_bills_are_a_fresh_computation_s(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Random runs (arrivals, rebids, migrations, suspends, ends): at every period the
    platform's ``Plans`` (a quiet period's reuse, a new clearing against the last column, or
    the full plan) and ``Bills`` give what ``make_plan`` and ``bills_of`` give on copies of
    the same runs, each VM left the same mappings, and the clearing is reused in some
    periods."""
    from tests.test_market_support import random_run

    from merkat.core.draft import copy

    seen = {"calls": 0, "quiet": 0}
    plans_call, bills_call = Plans.__call__, Bills.__call__

    def plans(self, now, period, runs, result, ops, before, table=None):  # type: ignore[no-untyped-def]
        fresh = [(copy(nx), const, rows) for nx, const, rows in runs]
        want = make_plan(now, period, fresh, result, Ops(list(ops.destroy),
                                                         list(ops.suspend)), before)
        seen["quiet"] += self._last is not None and self._last[0] is result
        got = plans_call(self, now, period, runs, result, ops, before, table)
        assert got == want
        assert [nx.allocs for nx, _, _ in runs] == [nx.allocs for nx, _, _ in fresh]
        seen["calls"] += 1
        return got

    def bills(self, runs, result, before, bid, prices, table=None):  # type: ignore[no-untyped-def]
        got = bills_call(self, runs, result, before, bid, prices, table)
        assert got == bills_of(runs, result.host, before, result.allocation, bid, prices)
        return got

    monkeypatch.setattr(Plans, "__call__", plans)
    monkeypatch.setattr(Bills, "__call__", bills)
    random_run(seed, apps=16, over=3, periods=14, work=1500.0,
               best_effort=lambda k, rng: k % 8 != 0 or seed == 0)
    assert seen["calls"] >= 10 and 0 < seen["quiet"] < seen["calls"]


def test_the_usage_is_computed_only_when_first_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """From ``MIN_ARRAY_BILLS`` VMs ``bills_of``'s usage is a ``Usage``: nothing computed
    until it is read, then the per-VM definition's rows (``==`` to their tuple), kept."""
    from merkat.core import bills as bills_mod
    from merkat.core.bills import Usage

    monkeypatch.setattr(bills_mod, "MIN_ARRAY_BILLS", 0)
    rng = np.random.default_rng(5)
    platform = Platform(Hosts(tuple(f"h{k}" for k in range(4)), np.array([[1.0, 4096.0]] * 4)))
    runs = _runs(rng, platform)
    market = _market(platform, runs)
    n = sum(len(vms) for _, vms in runs)
    vms = market_vms(market, n)
    host = rng.integers(0, 4, n)
    allocation = rng.uniform(0.0, 1.0, (n, len(RESOURCES)))
    make_plan(0.0, 300.0, market, _Placed(host, allocation), Ops([], []), vms.host)
    for _, v in runs:  # as the commit writes them, for the reference below
        for vm in v:
            vm.alloc = {r: 0.0 for r in vm.bid}
    flat = [vm for _, v in runs for vm in v]
    for i, vm in enumerate(flat):
        vm.host, vm.alloc = int(host[i]), {r: float(allocation[i, RESOURCES.index(r)])
                                           for r in vm.bid}
    prices = {"cpu": 1.25, "memory": 0.001}
    bills, usage = bills_of(market, host, vms.host, allocation, vms.bid, prices)
    assert isinstance(usage, Usage) and usage._rows is None  # not computed yet
    prices["cpu"] = 99.0  # (the mapping read at the call: a later change does not count)
    want_bills, want_usage = _reference_bills(runs, {"cpu": 1.25, "memory": 0.001})
    assert dict(bills) == want_bills
    assert usage == tuple(sorted(want_usage.items())) and usage._rows is not None
    assert dict(usage) == want_usage and len(usage) == len(want_usage)
    assert usage[0] == usage.rows[0] and list(usage) == list(usage.rows)
    assert usage == Usage(lambda: usage.rows) and usage != tuple(want_usage.items())[:-1]
    fresh = bills_of(market, host, vms.host, allocation, vms.bid, {"cpu": 1.25, "memory": 0.001})
    loaded = pickle.loads(pickle.dumps(fresh[1]))  # (computed when pickled)
    assert isinstance(loaded, Usage) and loaded == usage and copy.deepcopy(fresh[1]) == usage


def _charged_run(charging: str) -> tuple[list[Any], dict[str, int]]:
    """A small run charging by ``charging`` with admission points; its records and books."""
    from merkat.backends.sim import RigidApp, SimBackend
    from merkat.bank.memory import MemoryLedger
    from merkat.runtime.arrivals import Arrival, ListArrivals
    from merkat.runtime.driver import Driver
    from merkat.runtime.economy import Economy

    rng = np.random.default_rng(3)
    items = []
    for k, t in enumerate(sorted(rng.uniform(0.0, 180.0, 30))):
        size = int(rng.integers(1, 4))
        spec = AppSpec(f"a{k}", "deadline-strict", size, {"cpu": 1.0}, float(t),
                       float(rng.uniform(2.0, 60.0)), deadline=float(t + rng.uniform(60, 900)),
                       trade=("cpu",), owner="alice")
        items.append(Arrival(spec.submit_time, spec,
                             RigidApp(vms=size, work_total=float(rng.uniform(30, 1500)))))
    platform = Platform(Hosts(tuple(f"h{k}" for k in range(6)), np.array([[2.0, 4096.0]] * 6)),
                        period=60.0, reserve={"cpu": 0.01})
    ledger = MemoryLedger()
    economy = Economy(ledger, charging=charging)
    driver = Driver(platform, SimBackend(trade_memory=False, boot_s=0.0), economy,
                    ListArrivals(items), admission=10.0)
    driver.run(until=12 * 60.0)
    names = sorted({a.account for a in platform.apps.values()} | {"alice", economy.provider})
    return list(platform.records), dict(ledger.balances(names))


def test_charging_by_use_reads_the_usage_charging_by_bid_never(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Charging by use: the same records and books whether the usage is computed when read
    or at once (the eager computation it replaced); charging by bid computes none."""
    from merkat.core import bills as bills_mod
    from merkat.core.bills import Usage

    monkeypatch.setattr(bills_mod, "MIN_ARRAY_BILLS", 0)  # (every bill in numpy: a Usage)
    made = {"usage": 0}
    rows = Usage.rows.fget

    def counted(self: Usage) -> Any:
        made["usage"] += self._rows is None
        return rows(self)  # type: ignore[misc]

    monkeypatch.setattr(Usage, "rows", property(counted))
    lazy = _charged_run("use")
    assert made["usage"] > 10
    made["usage"] = 0
    _charged_run("bid")
    assert made["usage"] == 0  # never read
    init = Usage.__init__

    def eager(self: Usage, make: Any) -> None:
        init(self, make)
        self.rows  # noqa: B018  (computed at once, as before)

    monkeypatch.setattr(Usage, "__init__", eager)
    assert _charged_run("use") == lazy
