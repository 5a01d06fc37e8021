"""The end rule in the driver (``Economy(return_budgets=True)``): the applications that end in
a period give their money back to their owners at its end, by bid and by use, themis and
closed; with it off (the simulator's runs) nothing moves."""

from __future__ import annotations

import numpy as np
import pytest

from merkat.backends.sim import RigidApp, SimBackend
from merkat.bank.memory import MemoryLedger
from merkat.core.period import AppSpec, Platform
from merkat.market import Hosts
from merkat.runtime.arrivals import Arrival, ListArrivals
from merkat.runtime.driver import Driver
from merkat.runtime.economy import Economy

M = 1_000_000


def spec(app_id: str, owner: str, budget: float, start: float = 0.0) -> AppSpec:
    return AppSpec(id=app_id, policy="best-effort", size=1, vm_size={"cpu": 1.0},
                   submit_time=start, budget=budget, trade=("cpu",), owner=owner)


@pytest.mark.parametrize(("kind", "charging"), [("themis", "bid"), ("themis", "use"),
                                                 ("closed", "bid")])
def test_every_ended_application_gives_its_money_back(kind: str, charging: str) -> None:
    ledger = MemoryLedger()
    backend = SimBackend(trade_memory=False, boot_s=0.0)
    platform = Platform(Hosts(("h0",), np.array([[2.0, 4096.0]])), period=60.0,
                        reserve={"cpu": 0.01})
    arrivals = ListArrivals([
        Arrival(0.0, spec("a", "alice", 50.0), RigidApp(vms=1, work_total=300.0)),
        Arrival(0.0, spec("b", "bob", 30.0), RigidApp(vms=1, work_total=120.0)),
        Arrival(120.0, spec("c", "alice", 20.0, 120.0), RigidApp(vms=1, work_total=200.0)),
    ])
    economy = Economy(ledger, kind=kind, charging=charging, return_budgets=True,
                      redistribute_every=1000)
    d = Driver(platform, backend, economy, arrivals)
    d.run()
    apps = platform.apps
    assert all(not a.active for a in apps.values())
    paid = {o: sum(a.spent for a in apps.values() if a.spec.owner == o) for o in ("alice", "bob")}
    assert all(p > 0 for p in paid.values())
    accounts = [a.account for a in apps.values()]
    assert set(ledger.balances(accounts).values()) == {0}
    assert ledger.balance("alice") == 70 * M - paid["alice"]
    assert ledger.balance("bob") == 30 * M - paid["bob"]
    assert economy.returned == 100 * M - paid["alice"] - paid["bob"]
    assert ledger.audit().ok


def test_without_the_rule_the_money_stays_on_the_accounts() -> None:
    ledger = MemoryLedger()
    platform = Platform(Hosts(("h0",), np.array([[2.0, 4096.0]])), period=60.0,
                        reserve={"cpu": 0.01})
    arrivals = ListArrivals([Arrival(0.0, spec("a", "alice", 50.0),
                                     RigidApp(vms=1, work_total=100.0))])
    d = Driver(platform, SimBackend(trade_memory=False, boot_s=0.0), Economy(ledger), arrivals)
    d.run()
    assert ledger.balance("app:a") == 50 * M - platform.apps["a"].spent > 0
    assert ledger.balance("alice") == 0
