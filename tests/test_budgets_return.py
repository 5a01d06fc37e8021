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
from merkat.runtime.driver import Driver, Ending, Hooks
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


class _Flaky(Hooks):
    """The world's end record (``hooks.ending``) fails once, then is written; what the end
    rule's transactions did is kept."""

    def __init__(self) -> None:
        self.fail = True
        self.written: list[str] = []
        self.closed_with: list[tuple[str, int]] = []

    def ending(self, driver: Driver, app_id: str) -> Ending:
        def write(conn: object) -> None:
            if self.fail:
                self.fail = False
                raise RuntimeError("disk full")
            self.written.append(app_id)

        return Ending(write, f"returned: {app_id}")

    def closed(self, driver: Driver, app_id: str, returned: int) -> None:
        self.closed_with.append((app_id, returned))


def test_the_end_rule_is_one_transaction_with_the_worlds_record_and_is_retried() -> None:
    """The world's record of the end runs inside the transaction that returns the money: when
    it fails, nothing moved and the application stays queued; the next period applies it,
    once."""
    ledger = MemoryLedger()
    hooks = _Flaky()
    platform = Platform(Hosts(("h0",), np.array([[2.0, 4096.0]])), period=60.0,
                        reserve={"cpu": 0.01})
    d = Driver(platform, SimBackend(trade_memory=False, boot_s=0.0),
               Economy(ledger, return_budgets=True), hooks=hooks)
    d.submit(spec("a", "alice", 50.0), RigidApp(vms=1, work_total=1e9))
    d.step(0.0)
    d.stop("a", "stopped by the user")  # the end record fails: queued, not raised here
    assert d.closing == {"a": ("app:a", 1)} and hooks.written == []
    left = ledger.balance("app:a")
    assert left > 0 and ledger.balance("alice") == 0  # nothing moved
    d.step(60.0)  # the next period applies it
    assert d.closing == {} and hooks.written == ["a"]
    assert hooks.closed_with == [("a", left)]
    assert ledger.balance("app:a") == 0 and ledger.balance("alice") == left
    assert [(t.payer, t.amount) for t in ledger.history("alice")
            if t.reason == "returned: a"] == [("app:a", left)]
    d.step(120.0)
    assert hooks.closed_with == [("a", left)] and ledger.audit().ok  # never twice
