"""The lists the period keeps between periods, pinned to a fresh read after every change.

- ``Platform.roster()`` (the active applications and their accounts' names, kept while
  ``active`` holds the same applications) equals ``list(active.values())`` and their
  accounts after every submit, period, stop, withdrawal, forget and removal made elsewhere
  (the live service pops ``active`` itself);
- ``Platform.accounts`` (application id -> account) equals each known application's account;
- the decide loop's inlined first test of ``Decider.broke_since`` gives the same outcome as
  the reference: an application that cannot pay the reserve of its VMs is stopped for budget
  after ``keep_alive`` periods, counted from the first period it could not;
- the past prices' views, made when a controller first reads them, are the platform's past
  prices over its resources.
"""

from __future__ import annotations

import numpy as np

from merkat.backends.sim import RigidApp, SimBackend
from merkat.bank.memory import MemoryLedger
from merkat.control.types import Action, AppStatus, Demand, Observation
from merkat.core.model import App
from merkat.core.period import AppSpec, Platform
from merkat.market import Hosts
from merkat.runtime.driver import Driver, Hooks
from merkat.runtime.economy import Economy


def spec(app_id: str, budget: float = 10.0, size: int = 1) -> AppSpec:
    return AppSpec(id=app_id, policy="best-effort", size=size, vm_size={"cpu": 1.0},
                   submit_time=0.0, budget=budget, trade=("cpu",), owner=f"u-{app_id}")


def fresh(p: Platform) -> tuple[list[App], list[str]]:
    apps = list(p.active.values())
    return apps, [a.account for a in apps]


def same(p: Platform) -> None:
    apps, names = p.roster()
    want_apps, want_names = fresh(p)
    assert [id(a) for a in apps] == [id(a) for a in want_apps]
    assert names == want_names
    assert p.accounts == {i: a.account for i, a in p.apps.items()}


class Check(Hooks):
    def __init__(self) -> None:
        self.periods = 0

    def after_period(self, driver: Driver, t: float, record: object) -> None:
        same(driver.platform)
        self.periods += 1


def driver() -> tuple[Driver, Check]:
    platform = Platform(Hosts(("h0", "h1"), np.array([[2.0, 4096.0]] * 2)), period=60.0,
                        reserve={"cpu": 0.01})
    hooks = Check()
    return Driver(platform, SimBackend(trade_memory=False, boot_s=0.0),
                  Economy(MemoryLedger()), hooks=hooks), hooks


def test_the_roster_follows_every_change_of_the_active_set() -> None:
    d, hooks = driver()
    p = d.platform
    same(p)
    assert p.roster() == ([], [])
    d.submit(spec("a"), RigidApp(vms=1, work_total=120.0))  # ends after two periods
    d.submit(spec("b"), RigidApp(vms=1, work_total=1e9), account="acct-b")
    kept = p.roster()
    assert p.roster()[0] is kept[0]  # kept: the same lists while nothing changed
    assert kept[1] == ["app:a", "acct-b"]
    for k in range(4):
        d.step(60.0 * k)
        d.after(60.0 * k, 60.0 * (k + 1))  # (the simulated world advances)
    assert p.apps["a"].status is AppStatus.FINISHED and list(p.active) == ["b"]
    same(p)
    d.submit(spec("c"), RigidApp(vms=1, work_total=1e9))
    same(p)
    d.stop("b", "stopped by the user")
    same(p)
    assert p.roster()[1] == ["app:c"]
    p.forget(["a", "b"])
    same(p)
    app = p.submit(spec("d"))
    same(p)
    p.withdraw(app.spec.id)
    same(p)
    p.active.pop("c")  # removed elsewhere (the live service's tenancy): a shorter active
    same(p)
    d.submit(spec("e"), RigidApp(vms=1, work_total=1e9))
    d.step(240.0)
    assert hooks.periods == 5
    assert p.roster()[1] == ["app:e"]


def test_a_broke_application_stops_for_budget_after_keep_alive_periods() -> None:
    """Reserve 0.01 a period for two VMs (size 2): 0.02; a budget of 0.03 pays the first
    period's bid of ~0.03 and then cannot pay the reserve: broke from the second period,
    stopped for budget ``keep_alive`` (3) periods later, exactly."""
    d, _ = driver()
    d.submit(spec("a", budget=0.03, size=2), RigidApp(vms=2, work_total=1e9))
    d.submit(spec("rich", budget=100.0), RigidApp(vms=1, work_total=1e9))
    seen = []
    for k in range(8):
        d.step(60.0 * k)
        d.after(60.0 * k, 60.0 * (k + 1))
        a = d.platform.apps["a"]
        seen.append((a.status.value, a.broke_since))
        if not a.active:
            break
    assert d.economy.ledger.balance("app:a") < 20_000  # (the reserve of its 2 VMs)
    assert a.outcome == "stopped-budget"
    first = next(k for k, (_, since) in enumerate(seen) if since is not None)
    assert seen[first][1] == 60.0 * first
    assert len(seen) == first + 4  # stopped at the period keep_alive (3) after the first
    assert seen[-1][0] == "stopped"


class Remember:
    """A controller that reads the price history (or not) and keeps what it saw."""

    name = "remember"
    price_history_periods = 4

    def __init__(self, history: bool) -> None:
        self.reads_price_history = history
        self.seen: list[tuple[float, tuple[dict[str, float], ...]]] = []

    def decide(self, obs: Observation) -> Demand:
        self.seen.append((obs.time, obs.price_history))
        if not obs.vms:
            return Demand(Action.START, nvms=1, new_vm_bid={"cpu": 0.05 + obs.time / 6000})
        bid = {"cpu": 0.05 + obs.time / 6000}
        return Demand(Action.NONE, nvms=1, bids={v.id: bid for v in obs.vms}, new_vm_bid=bid)


def test_the_past_prices_are_made_for_the_controllers_that_read_them() -> None:
    """The past prices' views are made on first read (``Decider._past``): a controller that
    reads the history sees the platform's past prices over its resources, period after
    period; one that does not sees none."""
    d, _ = driver()
    reads, blind = Remember(True), Remember(False)
    d.submit(spec("r"), RigidApp(vms=1, work_total=1e9), controller=reads)
    d.submit(spec("b"), RigidApp(vms=1, work_total=1e9), controller=blind)
    d.submit(spec("c", size=3), RigidApp(vms=3, work_total=1e9))  # (5 VMs on 4 cores)
    want = []
    for k in range(7):
        want.append(tuple({"cpu": p["cpu"]} for p in d.platform.price_history[:-1]))
        d.step(60.0 * k)
        d.after(60.0 * k, 60.0 * (k + 1))
    assert [h for _, h in reads.seen] == want
    assert len(want[-1]) == 5 and all(p["cpu"] > 0 for p in want[-1])  # (prices of a market)
    assert [h for _, h in blind.seen] == [()] * 7
