"""One application's controller error fails that application only, never the period: the
exception comes back as data (:mod:`merkat.core.isolation`), the application ends
``failed`` through the lifecycle table with the reason, its VMs destroyed and its money home,
while every other application's period goes on as it would alone."""

from __future__ import annotations

import numpy as np
from tests.test_decide import Script, keep, snapshot, start

from merkat.backends.sim import RigidApp, SimBackend
from merkat.bank.memory import MemoryLedger
from merkat.control.base import Controller
from merkat.control.types import Action, AppStatus, Demand, Metrics, Observation
from merkat.core.backend import ApplyReport
from merkat.core.model import Charged, Decision, Observed
from merkat.core.period import AppSpec, Platform
from merkat.market import Hosts
from merkat.runtime.driver import Driver
from merkat.runtime.economy import Economy


class Raises(Controller):
    """Starts, then its ``reconfigure`` divides by zero (a bug in user code)."""

    name = "raises"

    def reconfigure(self, obs: Observation) -> Demand:
        return self.keep(obs, reason=str(1 / len(obs.vms[:0])))


class StartRaises(Raises):
    def on_start(self, obs: Observation) -> Demand:
        raise RuntimeError("no start " + "x" * 300 + "\nsecond line")


def _platform(with_bad: bool) -> Platform:
    p = Platform(Hosts(("h0", "h1"), np.array([[1.0, 4096.0]] * 2)), period=60.0,
                 reserve={"cpu": 0.01}, keep_alive=2)
    if with_bad:
        p.submit(AppSpec("bad", "raises", 1, {"cpu": 1.0}, 0.0, 100.0, trade=("cpu",)),
                 Raises())
    p.submit(AppSpec("good", "script", 1, {"cpu": 1.0}, 0.0, 100.0, trade=("cpu",)),
             Script(start(1, 0.5), keep(["good/vm1"], 0.5)))  # type: ignore[arg-type]
    return p


def _period(p: Platform, now: float) -> Decision:
    before = snapshot(p)
    d = p.decide(now, {a.account: 10**8 for a in p.active.values()},
                 {i: Observed(Metrics()) for i in p.active})
    assert snapshot(p) == before  # the decision still changes no record
    p.commit(d, ApplyReport(now), Charged({}, frozenset(), 0))
    return d


def test_a_raising_reconfigure_fails_its_application_only() -> None:
    p, alone = _platform(True), _platform(False)
    _period(p, 0.0)
    _period(alone, 0.0)
    assert p.apps["bad"].status is AppStatus.RUNNING and len(p.apps["bad"].vms) == 1
    before = snapshot(p)
    d = p.decide(60.0, {a.account: 10**8 for a in p.active.values()},
                 {i: Observed(Metrics()) for i in p.active})
    assert snapshot(p) == before
    assert d.plan.destroy == ("bad/vm1",)  # its VM goes
    p.commit(d, ApplyReport(60.0), Charged({}, frozenset(), 0))
    lone_d = _period(alone, 60.0)
    bad = p.apps["bad"]
    assert (bad.status, bad.outcome, bad.end_time, bad.vms) == (
        AppStatus.FAILED, "failed", 60.0, [])
    assert bad.reason == "controller error: ZeroDivisionError: division by zero"
    assert "bad" not in p.active
    # the other one got exactly what it gets alone, and keeps going
    good, lone = p.apps["good"], alone.apps["good"]
    assert good.status is AppStatus.RUNNING
    assert [(v.id, v.host, v.alloc) for v in good.vms] == [
        (v.id, v.host, v.alloc) for v in lone.vms] == [("good/vm1", 0, {"cpu": 1.0})]
    assert p.prices == alone.prices
    assert d.bills == lone_d.bills == (("good", 500_000),)  # the bad one bills nothing
    _period(p, 120.0)
    assert p.apps["good"].status is AppStatus.RUNNING


def test_a_raising_start_at_an_admission_point_fails_it_and_returns_its_budget() -> None:
    p = Platform(Hosts(("h0", "h1"), np.array([[1.0, 4096.0]] * 2)), period=60.0,
                 reserve={"cpu": 0.01})
    ledger = MemoryLedger()
    driver = Driver(p, SimBackend(), Economy(ledger, return_budgets=True), admission=10.0)
    driver.submit(AppSpec("good", "script", 1, {"cpu": 1.0}, 0.0, 100.0, trade=("cpu",)),
                  RigidApp(vms=1, work_total=6000.0),
                  controller=Script(start(1, 0.5), keep(["good/vm1"], 0.5)))  # type: ignore[arg-type]
    driver.step(0.0)  # "good" starts
    driver.submit(AppSpec("late", "raises", 1, {"cpu": 1.0}, 5.0, 7.0, trade=("cpu",)),
                  RigidApp(vms=1, work_total=600.0), controller=StartRaises())
    assert ledger.balance("app:late") == 7_000_000
    assert driver.admission_point(10.0, 60.0) is None  # nothing started
    late = p.apps["late"]
    assert late.status is AppStatus.FAILED and "late" not in p.active
    assert late.reason.startswith("controller error: RuntimeError: no start xxx")
    assert len(late.reason) == 200 and "second line" not in late.reason
    assert ledger.balance("app:late") == 0  # its budget came home
    assert ledger.balance("users") == 7_000_000  # to its owner (good's is all spent on its app)
    rec = driver.step(60.0)  # the period goes on
    assert rec.running_apps == 1 and p.apps["good"].status is AppStatus.RUNNING


class BidsNaN(Controller):
    """Starts, then bids NaN (a bug in user code that raises nothing itself)."""

    name = "bids-nan"

    def reconfigure(self, obs: Observation) -> Demand:
        return self.uniform(obs, {"cpu": float("nan")})


class StartsAtInfinity(BidsNaN):
    """Asks to start with an infinite bid."""

    name = "bids-inf"

    def on_start(self, obs: Observation) -> Demand:
        return Demand(Action.START, nvms=2, new_vm_bid={"cpu": float("inf")})


def test_a_non_finite_bid_fails_its_application_only() -> None:
    p, alone = _platform(False), _platform(False)
    p.submit(AppSpec("nan", "bids-nan", 1, {"cpu": 1.0}, 0.0, 100.0, trade=("cpu",)),
             BidsNaN())
    _period(p, 0.0)
    _period(alone, 0.0)
    assert p.apps["nan"].status is AppStatus.RUNNING
    d = _period(p, 60.0)
    lone_d = _period(alone, 60.0)
    nan = p.apps["nan"]
    assert (nan.status, nan.outcome, nan.vms) == (AppStatus.FAILED, "failed", [])
    assert nan.reason.startswith("controller error: NonFiniteBid: policy 'bids-nan' bid "
                                 "{'cpu': nan} for VM 'nan/vm1' of application 'nan'")
    assert d.plan.destroy == ("nan/vm1",)
    good, lone = p.apps["good"], alone.apps["good"]
    assert [(v.id, v.host, v.alloc) for v in good.vms] == [
        (v.id, v.host, v.alloc) for v in lone.vms]
    assert d.bills == lone_d.bills == (("good", 500_000),)
    assert p.prices == alone.prices


def test_an_infinite_start_bid_at_an_admission_point_fails_it_and_returns_its_budget() -> None:
    p = Platform(Hosts(("h0", "h1"), np.array([[1.0, 4096.0]] * 2)), period=60.0,
                 reserve={"cpu": 0.01})
    ledger = MemoryLedger()
    driver = Driver(p, SimBackend(), Economy(ledger, return_budgets=True), admission=10.0)
    driver.submit(AppSpec("inf", "bids-inf", 1, {"cpu": 1.0}, 5.0, 7.0, trade=("cpu",)),
                  RigidApp(vms=1, work_total=600.0), controller=StartsAtInfinity())
    assert driver.admission_point(10.0, 60.0) is None  # nothing started, nothing created
    inf = p.apps["inf"]
    assert inf.status is AppStatus.FAILED and inf.vms == [] and "inf" not in p.active
    assert inf.reason.startswith("controller error: NonFiniteBid: policy 'bids-inf' bid "
                                 "{'cpu': inf} for VM 'inf/vm1'")
    assert ledger.balance("app:inf") == 0 and ledger.balance("users") == 7_000_000
    assert driver.step(60.0).running_apps == 0
