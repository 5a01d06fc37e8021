"""A period makes next states only for the applications it changes (``Decision.apps``:
an absent application is unchanged, its record its next state; ``draft.next_of``).

Pinned against the reference, ``Platform.every_next`` (a next state for every application
the period decides, unchanged or not, as before): runs with suspends, resumes, migrations,
failed operations, withheld (unpaid) applications and admission points, batched
controllers alone and beside scalar ones trading two resources, give the same plan, bills,
charges and every record's fields and columns after every commit, and the same outcome and
books, both ways; and a handed-out unchanged next state a period wrote into without a
commit (a period that failed) is never handed out again."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

from merkat.backends.sim import RigidApp
from merkat.control.types import AppStatus, Metrics
from merkat.core import draft
from merkat.core.backend import ApplyReport
from merkat.core.model import App, AppSpec, Charged, Decision, Observed
from merkat.core.period import Platform
from merkat.market import Hosts
from test_cow import _run as cow_run
from test_cow import _watch as _flaky_and_withheld
from test_cow import values
from test_one_visit import mixed


def _fields(a: App) -> tuple[Any, ...]:
    return (a.status, a.start_time, a.end_time, a.reason, a.outcome, a.suspensions,
            a.resumes, a.vm_count, a.broke_since, a.spent, values(a.columns))


def _watch(monkeypatch: pytest.MonkeyPatch, every: bool) -> tuple[list[Any], dict[str, int]]:
    """Every commit logged (the plan, bills, charge and every record, by value);
    ``every``: the reference. Returns the log and counts (``absent``: decided running
    applications left out of a decision). The flaky operations and withheld bills are
    ``test_cow``'s (``_watch``, given after this)."""
    log: list[Any] = []
    seen = {"absent": 0, "withheld": 0}
    post, commit, settle, decide = (Platform.__post_init__, Platform.commit,
                                    Platform.settle, Platform.decide)

    def init(self: Platform) -> None:
        post(self)
        self.every_next = every

    def deciding(self: Platform, *a: Any) -> Decision:
        d = decide(self, *a)
        seen["absent"] += sum(1 for i, x in self.active.items()
                              if x.status is AppStatus.RUNNING and i not in d.apps)
        return d

    def entry(self: Platform, d: Decision, charged: Charged) -> Any:
        seen["withheld"] += len(charged.unpaid)
        return (d.time, d.admission, repr(d.plan), d.bills, tuple(d.usage), d.refused,
                sorted(charged.paid.items()), sorted(charged.unpaid),
                sorted((i, _fields(a)) for i, a in self.apps.items()))

    def committing(self: Platform, d: Decision, report: ApplyReport, charged: Charged) -> Any:
        out = commit(self, d, report, charged)
        log.append((entry(self, d, charged), out))
        return out

    def settling(self: Platform, d: Decision, report: ApplyReport, charged: Charged) -> Any:
        out = settle(self, d, report, charged)
        log.append((entry(self, d, charged), out))
        return out

    monkeypatch.setattr(Platform, "__post_init__", init)
    monkeypatch.setattr(Platform, "decide", deciding)
    monkeypatch.setattr(Platform, "commit", committing)
    monkeypatch.setattr(Platform, "settle", settling)
    return log, seen


def _trace(monkeypatch: pytest.MonkeyPatch, every: bool, policy: str, hosts: int
           ) -> tuple[list[Any], dict[str, int], str]:
    """``test_cow``'s flaky trace run (its digest: outcomes, records, books) logged."""
    log, seen = _watch(monkeypatch, every)
    return log, seen, cow_run(monkeypatch, False, policy, hosts)[0]


@pytest.mark.parametrize(("policy", "hosts"), [("vertical-deadline", 6),
                                               ("deadline-strict", 12), ("deadline-strict", 40)])
def test_a_trace_run_equals_the_every_next_state_run(
        monkeypatch: pytest.MonkeyPatch, policy: str, hosts: int) -> None:
    log, seen, digest = _trace(monkeypatch, False, policy, hosts)
    ref_log, ref_seen, ref_digest = _trace(monkeypatch, True, policy, hosts)
    # (the change exercised: few unchanged applications where one bill in nine is
    # withheld and one operation in four fails on a crowded cluster, many on a roomy one)
    assert seen["absent"] > (50 if hosts >= 40 else 1) and ref_seen["absent"] == 0
    assert seen["withheld"] > 5
    assert len(log) == len(ref_log) > 100
    for got, want in zip(log, ref_log, strict=True):
        assert got == want
    assert digest == ref_digest


def test_batched_beside_scalar_controllers_equal_the_every_next_state_run(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Four scalar applications of two resources going round every writer beside four
    batched ``deadline-strict`` ones (``test_one_visit.mixed``), 30 periods, two newcomers
    started at admission points between them; without and with ``every_next``."""
    runs = []
    for every in (False, True):
        log, seen = _watch(monkeypatch, every)
        mixed_run(monkeypatch)
        monkeypatch.undo()
        runs.append((log, seen["absent"]))
    (log, absent), (ref_log, ref_absent) = runs
    assert absent > 10 and ref_absent == 0
    assert len(log) >= 30 and any(e[0][1] for e in log)  # (admission points too)
    assert log == ref_log


def mixed_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """``test_one_visit.mixed``'s applications, flaky and withheld (``test_cow``), for 30
    periods, two newcomers started at admission points between them."""
    _flaky_and_withheld(monkeypatch, False)
    _, d = mixed()
    for t in range(30):
        d.step(60.0 * t)
        if t in (8, 16):
            spec = AppSpec(f"n{t}", "deadline-strict", 1, {"cpu": 1.0}, 60.0 * t, 500.0,
                           renewal=5.0, deadline=60.0 * t + 1200.0, trade=("cpu",))
            d.submit(spec, RigidApp(vms=1, work_total=300.0))
            d.admission_point(60.0 * t + 30.0, 60.0 * (t + 1))


def test_an_uncommitted_period_s_writes_are_not_handed_out_again() -> None:
    """A period decided and dropped (its commit never came: a failed period) after its plan
    wrote into an unchanged application's handed-out next state: the next period's next
    state of it is its record's values, not the written one."""
    hosts = Hosts(("h0", "h1"), np.array([[1.0, 4096.0], [1.0, 4096.0]]))

    def platform() -> Platform:
        p = Platform(hosts, period=300.0, reserve={"cpu": 0.01})
        p.submit(AppSpec("a", "deadline-strict", 1, {"cpu": 1.0}, 0.0, 50.0,
                         deadline=90_000.0, trade=("cpu",)))
        return p

    def period(p: Platform, now: float, commit: bool = True) -> Decision:
        seen = {i: Observed(Metrics(work_done=now / 1000, work_total=900.0,
                                    progress_rate=1.0, ideal_rate=1.0)) for i in p.active}
        d = p.decide(now, {a.account: 50_000_000 for a in p.active.values()}, seen)
        if commit:
            p.commit(d, ApplyReport(now), Charged(dict(d.bills), frozenset(), 0))
        return d

    p = platform()
    for k in range(6):
        period(p, 300.0 * k)
    app = p.apps["a"]
    clean = app.clean
    assert clean is not None  # (an unchanged application: its clean next state kept)
    d = period(p, 1800.0, commit=False)  # decided, never committed
    assert "a" not in d.apps
    clean.allocs = [{"cpu": 123.0}]  # what a plan's write would leave in it
    nx = draft.rebid_columns(app, dict(app.columns[2][0]), app.columns)
    assert nx is not clean and nx.allocs is app.columns[5]


def test_a_withheld_unchanged_application_is_withheld_from_its_record() -> None:
    """An unpaid application the decision left out (unchanged) is withheld from its
    record (``commit.withhold``'s ``records``); without them it is a ``KeyError``."""
    p = Platform(Hosts(("h0",), np.array([[2.0, 4096.0]])), period=300.0, reserve={"cpu": 0.01})
    p.submit(AppSpec("a", "deadline-strict", 1, {"cpu": 1.0}, 0.0, 50.0,
                     deadline=90_000.0, trade=("cpu",)))
    absent: list[Decision] = []
    for k in range(8):
        now = 300.0 * k
        seen = {i: Observed(Metrics(work_done=now / 1000, work_total=900.0,
                                    progress_rate=1.0, ideal_rate=1.0)) for i in p.active}
        d = p.decide(now, {a.account: 50_000_000 for a in p.active.values()}, seen)
        if "a" not in d.apps and d.bills:
            absent.append(d)
            break
        p.commit(d, ApplyReport(now), Charged(dict(d.bills), frozenset(), 0))
    assert absent
    d = absent[0]
    w = p.withhold(d, {"a"})
    assert w.apps["a"].status is AppStatus.SUSPENDED and w.plan.suspend == ("a/vm1",)
    with pytest.raises(KeyError):
        from merkat.core import commit
        commit.withhold(d, {"a"})
    assert isinstance(p.apps, Mapping)
