"""The decision is data (issue 27): ``Platform.decide`` on hand-made states computes a
``Decision`` (ids and values) and changes no record; ``withhold`` changes none either; only
``commit`` writes the records, with the backend's report."""

from __future__ import annotations

import copy
from collections.abc import Collection, Iterable, Mapping

import numpy as np
import pytest

from merkat.control.types import Action, AppStatus, Demand, Metrics, Observation, VMState
from merkat.core.backend import ApplyReport, OpReport
from merkat.core.model import Charged, Decision, Observed, PeriodRecord
from merkat.core.period import AppSpec, Platform
from merkat.market import NO_HOST, Hosts


class Script:
    """A controller that plays back its demands (the last one forever) and keeps what it
    saw: a controller's own memory, which a decision may move."""

    name = "script"
    reads_price_history = False
    price_history_periods = 0

    def __init__(self, *demands: Demand) -> None:
        self.demands = list(demands)
        self.seen: list[Observation] = []

    def decide(self, obs: Observation) -> Demand:
        self.seen.append(obs)
        return self.demands.pop(0) if len(self.demands) > 1 else self.demands[0]


def start(n: int = 1, bid: float = 0.5) -> Demand:
    return Demand(Action.START, nvms=n, new_vm_bid={"cpu": bid})


def keep(ids: Iterable[str], bid: float = 0.5) -> Demand:
    ids = list(ids)
    return Demand(Action.NONE, nvms=len(ids), bids={i: {"cpu": bid} for i in ids},
                  new_vm_bid={"cpu": bid})


def platform(*apps: tuple[str, Script], budget: float = 100.0, size: int = 1) -> Platform:
    p = Platform(Hosts(("h0", "h1"), np.array([[1.0, 4096.0]] * 2)), period=60.0,
                 reserve={"cpu": 0.01}, keep_alive=2)
    for app_id, ctl in apps:
        p.submit(AppSpec(app_id, "script", size, {"cpu": 1.0}, 0.0, budget, trade=("cpu",)),
                 ctl)  # type: ignore[arg-type]
    return p


def snapshot(p: Platform) -> object:
    """Every record the platform keeps (by value, deeply copied)."""
    apps = {
        i: (a.status, a.start_time, a.end_time, a.reason, a.outcome, a.suspensions, a.resumes,
            a.vm_count, a.spent, a.broke_since,
            [(v.id, v.app, v.state, v.host, dict(v.bid), dict(v.alloc), v.new) for v in a.vms])
        for i, a in p.apps.items()
    }
    return copy.deepcopy((apps, list(p.active), list(p.queue), dict(p.prices),
                          [dict(x) for x in p.price_history], p.index, len(p.records),
                          (list(p._retry.destroy), list(p._retry.suspend))))


def decide(p: Platform, now: float, balance: int = 100_000_000) -> Decision:
    """``p.decide`` on every active application (one balance for all), asserting that no
    record changed."""
    before = snapshot(p)
    d = p.decide(now, {a.account: balance for a in p.active.values()},
                 {i: Observed(Metrics()) for i in p.active})
    assert snapshot(p) == before
    return d


def commit(p: Platform, d: Decision, *ops: OpReport, unpaid: frozenset[str] = frozenset(),
           paid: dict[str, int] | None = None) -> PeriodRecord:
    return p.commit(d, ApplyReport(d.time, ops), Charged(paid or {}, unpaid, 0))


def vms(p: Platform, app_id: str) -> list[tuple[str, VMState, int, bool]]:
    return [(v.id, v.state, v.host, v.new) for v in p.apps[app_id].vms]


def test_a_start_is_decided_as_values_and_written_only_by_the_commit() -> None:
    ctl = Script(start(2), keep(["a/vm1", "a/vm2"]))
    p = platform(("a", ctl))
    d = decide(p, 0.0)
    nx = d.apps["a"]
    assert (nx.status, nx.ids, nx.start_time) == (AppStatus.RUNNING, ["a/vm1", "a/vm2"], 0.0)
    assert {(c.vm, c.host) for c in d.plan.create} == {("a/vm1", 0), ("a/vm2", 1)}
    assert d.taken == ("a",) and d.bills == (("a", 1_000_000),) and d.bidding == 2
    assert p.apps["a"].vms == [] and p.queue == ["a"] and p.prices == {"cpu": 0.0, "memory": 0.0}
    rec = commit(p, d, paid={"a": 1_000_000})
    assert vms(p, "a") == [("a/vm1", VMState.RUNNING, 0, False),
                           ("a/vm2", VMState.RUNNING, 1, False)]
    assert [v.alloc for v in p.apps["a"].vms] == [{"cpu": 1.0}, {"cpu": 1.0}]
    assert p.apps["a"].status is AppStatus.RUNNING and p.apps["a"].spent == 1_000_000
    assert p.queue == [] and p.prices["cpu"] == 0.5 and p.price_history == [p.prices]
    assert (rec.index, rec.created, rec.running_apps, p.index) == (0, 2, 1, 1)
    assert len(ctl.seen) == 1  # the controller was asked once (its memory is its own)


def test_a_refused_transition_changes_nothing_and_is_recorded() -> None:
    p = platform(("a", Script(start(), start())))
    commit(p, decide(p, 0.0))
    d = decide(p, 60.0)  # start while running: refused, treated as none
    assert d.refused == ("a: start refused while running",)
    assert d.apps["a"].ids == ["a/vm1"] and d.plan.create == ()
    rec = commit(p, d)
    assert rec.refused == ("a: start refused while running",) and rec.created == 0
    assert vms(p, "a") == [("a/vm1", VMState.RUNNING, 0, False)]


def test_a_suspension_is_decided_then_committed() -> None:
    p = platform(("a", Script(start(2), Demand(Action.SUSPEND),
                              Demand(Action.RESUME, nvms=2, new_vm_bid={"cpu": 0.5}),
                              keep(["a/vm1", "a/vm2"]))))
    commit(p, decide(p, 0.0))
    d = decide(p, 60.0)
    assert d.plan.suspend == ("a/vm1", "a/vm2") and d.apps["a"].status is AppStatus.SUSPENDED
    assert d.bidding == 0 and d.bills == ()
    commit(p, d)
    a = p.apps["a"]
    assert (a.status, a.suspensions) == (AppStatus.SUSPENDED, 1)
    assert [v.state for v in a.vms] == [VMState.SUSPENDED] * 2
    d = decide(p, 120.0)  # resumed: placed again, as new
    assert {r.vm for r in d.plan.resume} == {"a/vm1", "a/vm2"} and d.plan.create == ()
    commit(p, d)
    assert (a.status, a.resumes) == (AppStatus.RUNNING, 1)
    assert sorted((v.state, v.host, v.new) for v in a.vms) == [
        (VMState.RUNNING, 0, False), (VMState.RUNNING, 1, False)]


def test_an_unpaid_application_is_withheld_without_touching_the_records() -> None:
    p = platform(("rich", Script(start(), keep(["rich/vm1"]))),
                 ("poor", Script(start(), keep(["poor/vm1"]))))
    commit(p, decide(p, 0.0))
    assert vms(p, "poor")[0][1] is VMState.RUNNING
    d = decide(p, 60.0)
    before = snapshot(p)
    w = p.withhold(d, {"poor"})
    assert snapshot(p) == before and d.apps["poor"].status is AppStatus.RUNNING  # both kept
    assert w.plan.suspend == ("poor/vm1",) and "poor/vm1" not in w.plan.allocations
    assert [b for b, _ in w.bills] == ["rich"]
    commit(p, w, unpaid=frozenset({"poor"}))
    poor = p.apps["poor"]
    assert (poor.status, poor.suspensions) == (AppStatus.SUSPENDED, 1)
    assert vms(p, "poor") == [("poor/vm1", VMState.SUSPENDED, NO_HOST, False)]
    assert poor.vms[0].alloc == {} and p.apps["rich"].status is AppStatus.RUNNING


def test_an_unpaid_start_goes_back_to_waiting() -> None:
    p = platform(("a", Script(start(), keep(["a/vm1"]))))
    d = p.withhold(decide(p, 0.0), {"a"})
    assert d.plan.create == () and d.apps["a"].status is AppStatus.WAITING
    commit(p, d, unpaid=frozenset({"a"}))
    a = p.apps["a"]
    assert (a.status, a.vms, a.start_time, a.vm_count) == (AppStatus.WAITING, [], None, 1)


def test_a_broke_application_is_stopped_for_budget_by_the_commit() -> None:
    p = platform(("a", Script(start(), keep(["a/vm1"]))))
    commit(p, decide(p, 0.0))
    d = decide(p, 60.0, balance=0)  # cannot pay the reserve: counted from now
    assert d.apps["a"].broke_since == 60.0 and d.apps["a"].status is AppStatus.RUNNING
    commit(p, d)
    assert p.apps["a"].broke_since == 60.0
    d = decide(p, 180.0, balance=0)  # keep_alive=2 periods later: stopped
    nx = d.apps["a"]
    assert (nx.status, nx.outcome, nx.ids) == (AppStatus.STOPPED, "stopped-budget", [])
    assert d.plan.destroy == ("a/vm1",) and "a" in p.active
    commit(p, d)
    a = p.apps["a"]
    assert (a.status, a.outcome, a.end_time, a.vms) == (AppStatus.STOPPED, "stopped-budget",
                                                        180.0, [])
    assert "a" not in p.active


def test_failed_operations_are_written_as_not_done_and_retried() -> None:
    p = platform(("a", Script(start(2), keep(["a/vm1"]))))
    rec = commit(p, decide(p, 0.0), OpReport("create", "a/vm2", False, "no image"))
    assert rec.failed == ("create a/vm2: no image",)
    assert vms(p, "a") == [("a/vm1", VMState.RUNNING, 0, False),
                           ("a/vm2", VMState.BOOTING, NO_HOST, True)]
    d = decide(p, 60.0)  # releases vm2 (keep vm1 only): its destroy fails, re-issued
    assert d.plan.destroy == ("a/vm2",)
    commit(p, d, OpReport("destroy", "a/vm2", False, "busy"))
    assert vms(p, "a") == [("a/vm1", VMState.RUNNING, 0, False)]
    assert decide(p, 120.0).plan.destroy == ("a/vm2",)


def test_a_non_finite_bid_fails_its_application_in_the_decision_only() -> None:
    p = platform(("a", Script(start(), keep(["a/vm1", "a/vm2"], bid=float("nan")))))
    commit(p, decide(p, 0.0))
    d = decide(p, 60.0)  # (no record changed: asserted by decide)
    nx = d.apps["a"]
    assert (nx.status, nx.outcome, nx.ids) == (AppStatus.FAILED, "failed", [])
    assert nx.reason.startswith("controller error: NonFiniteBid: policy 'script' bid "
                                "{'cpu': nan} for VM 'a/vm1' of application 'a'")
    assert d.plan.destroy == ("a/vm1",) and not d.plan.create  # the demand's vm2: never made
    assert d.bills == ()


class Checked(Platform):
    """A platform that checks, at every decision of a whole run, that no record changed."""

    decisions = 0

    def decide(self, now: float, balances: Mapping[str, int],
               observed: Mapping[str, Observed]) -> Decision:
        before = snapshot(self)
        d = super().decide(now, balances, observed)
        assert snapshot(self) == before
        Checked.decisions += 1
        return d

    def admit(self, now: float, until: float, balances: Mapping[str, int],
              observed: Mapping[str, Observed]) -> Decision:
        before = snapshot(self)
        d = super().admit(now, until, balances, observed)
        assert snapshot(self) == before
        Checked.decisions += 1
        return d

    def withhold(self, decision: Decision, unpaid: Collection[str]) -> Decision:
        before = snapshot(self)
        d = super().withhold(decision, unpaid)
        assert snapshot(self) == before
        return d


def test_no_decision_of_a_whole_market_run_changes_a_record(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A small trace run (admissions between periods, migrations, deadlines missed) with every
    decision checked; the same outcome as the plain platform's."""
    from merkat.workload.cluster import Cluster
    from merkat.workload.jobs import Workload
    from merkat.worlds.merkat import trace

    w = Workload.from_arrays(submit=[0, 100, 200, 900, 1000, 4000, 4010, 4020],
                             run=[900, 600, 1200, 300, 2000, 600, 900, 1500],
                             procs=[2, 1, 3, 1, 2, 1, 4, 2],
                             deadline_factor=[1.5, 3.0, 2.0, 1.2, 5.0, 2.5, 1.1, 3.0])
    config = trace.MarketConfig(period=300.0, admission=10.0)
    plain = trace.simulate_market(w, Cluster(2, 2, None), config)
    monkeypatch.setattr(trace, "Platform", Checked)
    Checked.decisions = 0
    checked = trace.simulate_market(w, Cluster(2, 2, None), config)
    assert Checked.decisions > 10
    assert [r.prices for r in checked.records] == [r.prices for r in plain.records]
    assert (checked.outcomes, list(checked.end)) == (plain.outcomes, list(plain.end))
