"""The lists the period keeps between periods, pinned to a fresh read after every change.

- ``Platform.roster()`` (the active applications and their accounts' names, kept while
  ``active`` holds the same applications) equals ``list(active.values())`` and their
  accounts after every submit, period, stop, withdrawal, forget and removal made elsewhere
  (the live service pops ``active`` itself);
- ``Platform.accounts`` (application id -> account) equals each known application's account;
- the decide loop's inlined first test of ``Decider.broke_since`` gives the same outcome as
  the reference: an application that cannot pay the reserve of its VMs is stopped for budget
  after ``keep_alive`` periods, counted from the first period it could not.
"""

from __future__ import annotations

import numpy as np

from merkat.backends.sim import RigidApp, SimBackend
from merkat.bank.memory import MemoryLedger
from merkat.control.types import AppStatus
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
