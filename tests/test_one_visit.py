"""One visit per application per period (issue 28, seventeenth session): the period's loop
(``Platform.decide``) makes the market's runs as it decides each application
(``market_input.run_of``) instead of a second pass over the next states
(``market_input.bidding``, the reference), and the market input takes the applications
kept whole one after another as one span (``MarketInput``'s pending range). At every
period of flaky runs (suspends, resumes, moves, failed operations, withholdings, admission
points; ``vertical-deadline``, ``deadline-strict`` and a scalar controller of two resources
mixed with batched ones), the loop's runs are the reference's, element by element (the same
next state and constant parts by identity, the same rows), their VM count is ``size``'s, and
the market input is ``market_vms``' bytes; the run's outcome is the one before
(``tests/test_cow.py``'s and ``tests/test_lazy_records.py``' digests)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from merkat.backends.sim import RigidApp, SimBackend
from merkat.bank.memory import MemoryLedger
from merkat.control.registry import make_policy
from merkat.control.types import Action, AppStatus, Demand, Metrics, VMState
from merkat.core import reconcile
from merkat.core.draft import draft, writing
from merkat.core.lifecycle import TransitionRefused, vm_transition
from merkat.core.market_input import MarketInput, bidding, market_vms, size
from merkat.core.model import App, AppNext, AppSpec, Observed, Ops
from merkat.core.period import Platform
from merkat.market import Hosts, VMs
from merkat.runtime.driver import Driver
from merkat.runtime.economy import Economy
from merkat.workload.cluster import Cluster
from merkat.worlds.merkat.options import MarketConfig
from merkat.worlds.merkat.trace import simulate_market
from test_cow import Uneven
from test_lazy_records import _flaky, jobs


def _values(nx: AppNext) -> tuple[Any, ...]:
    """A next state's fields and columns, by value."""
    return (nx.id, nx.status, nx.start_time, nx.end_time, nx.reason, nx.outcome,
            nx.suspensions, nx.resumes, nx.vm_count, nx.broke_since, nx.ids, nx.states,
            nx.bids, nx.hosts, nx.fresh, nx.allocs)


def _same(a: VMs, b: VMs) -> None:
    assert a.ids == b.ids
    for x, y in ((a.bid, b.bid), (a.cap, b.cap), (a.host, b.host), (a.minimum, b.minimum)):
        assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


def _watch(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Check every period's runs and market input against the reference; returns counts."""
    seen = {"periods": 0, "vms": 0, "partial": 0, "kept": 0}
    call, decide = MarketInput.__call__, Platform.decide
    last: list[Any] = []

    def inputs(self: MarketInput, runs: Any, n: int) -> VMs:
        assert n == size(runs)
        want = market_vms(runs, n)  # (before the plan moves the next states' hosts)
        got = call(self, runs, n)
        _same(got, want)
        seen["kept"] += self.kept
        last[:] = [list(runs)]
        return got

    def deciding(self: Platform, *a: Any, **k: Any) -> Any:
        order = list(self.active.values())
        decision = decide(self, *a, **k)
        # every decided application's next state: an absent one is unchanged, its record
        # (the clean next state the loop handed out, when it bids: draft.rebid_columns)
        nexts = []
        for app in order:
            nx = decision.apps.get(app.spec.id)
            if nx is None:
                nx = app.clean if app.status is AppStatus.RUNNING else draft(app)
                assert nx is not None and _values(nx) == _values(draft(app))
            nexts.append(nx)
        ref = bidding(nexts, self.apps, self.decider.const)
        (runs,) = last
        assert len(runs) == len(ref)
        for (nx, const, rows), (rnx, rconst, rrows) in zip(runs, ref, strict=True):
            assert nx is rnx and const is rconst and rows == rrows
            seen["partial"] += rows is not None
        seen["periods"] += 1
        seen["vms"] += decision.bidding
        return decision

    monkeypatch.setattr(MarketInput, "__call__", inputs)
    monkeypatch.setattr(Platform, "decide", deciding)
    monkeypatch.setattr(SimBackend, "apply", _flaky(SimBackend.apply))
    return seen


@pytest.mark.parametrize(("policy", "hosts"), [("vertical-deadline", 6), ("deadline-strict", 12)])
def test_the_loop_s_runs_are_the_second_pass_s_at_every_period(
        monkeypatch: pytest.MonkeyPatch, policy: str, hosts: int) -> None:
    seen = _watch(monkeypatch)
    out = simulate_market(jobs(), Cluster(hosts, 1, None),
                          MarketConfig(period=300.0, policy=policy))
    monkeypatch.undo()
    assert seen["periods"] > 50 and seen["vms"] > 100 and seen["kept"] > 0
    assert sum(r.suspended for r in out.records) > 0
    assert sum(r.resumed for r in out.records) > 0


def mixed() -> tuple[Platform, Driver]:
    """Four scalar :class:`~test_cow.Uneven` applications of two resources beside four
    batched ``deadline-strict`` ones of CPU, on four hosts, submitted to a driver."""
    platform = Platform(Hosts(("n0", "n1", "n2", "n3"), np.array([[4.0, 8192.0]] * 4)),
                        period=60.0, reserve={"cpu": 0.01, "memory": 0.001})
    d = Driver(platform, SimBackend(boot_s=0.0), Economy(MemoryLedger()))
    for k in range(4):
        spec = AppSpec(f"u{k}", "uneven", 3, {"cpu": 1.0, "memory": 512.0}, 0.0, 1e4,
                       renewal=50.0)
        d.submit(spec, RigidApp(vms=3, work_total=1e12), Uneven(k))  # type: ignore[arg-type]
        spec = AppSpec(f"d{k}", "deadline-strict", 1 + k % 2, {"cpu": 1.0}, 0.0, 500.0,
                       renewal=5.0, deadline=1800.0 + 300 * k, trade=("cpu",))
        d.submit(spec, RigidApp(vms=1 + k % 2, work_total=600.0 + 200 * k))
    return platform, d


def test_scalar_controllers_mixed_with_batched_ones_give_the_reference_runs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Four scalar applications of two resources going round every writer (suspends,
    resumes, VMs added and released, uneven bids) beside four batched ``deadline-strict``
    ones, 30 periods; twice a VM of a running application is written suspended (a run
    of some of its VMs)."""
    seen = _watch(monkeypatch)
    platform, d = mixed()
    for t in range(30):
        if t in (10, 20):  # one VM of a running two-VM application written suspended
            with writing(platform.apps["d1"]) as vms:  # (as the live service's writers
                vms[-1].state = VMState.SUSPENDED  # do): a run of its other VM only
        d.step(60.0 * t)
    monkeypatch.undo()
    assert seen["periods"] == 30 and seen["partial"] > 0 and seen["kept"] > 0


@pytest.mark.parametrize("to", [VMState.SUSPENDED, VMState.RESUMING])
def test_a_suspension_or_resumption_checks_the_table_as_each_vm_would(to: VMState) -> None:
    """``reconcile._allowed`` (a whole application's VMs to one state, checked at once) is
    True exactly when ``vm_transition`` allows every VM, on every list of up to two states;
    and a refused one still raises the table's error from ``reconcile``."""
    every = list(VMState)
    for a in every:
        for b in every:
            for states in ([a], [a, b]):
                try:
                    for s in states:
                        vm_transition(s, to)
                    want = True
                except TransitionRefused:
                    want = False
                into = (reconcile._INTO_SUSPENDED if to is VMState.SUSPENDED
                        else reconcile._INTO_RESUMING)
                assert reconcile._allowed(states, to, into) is want
    app = App(AppSpec("a", "best-effort", 2, {"cpu": 1.0}, 0.0, 10.0, trade=("cpu",)),
              make_policy("best-effort"), "app:a", status=AppStatus.SUSPENDED
              if to is VMState.RESUMING else AppStatus.RUNNING)
    bad = VMState.RUNNING if to is VMState.RESUMING else VMState.MIGRATING
    app.columns = (["a/vm0", "a/vm1"], [bad, bad], [{"cpu": 0.1}] * 2, [0, 0],
                   [False] * 2, [{}] * 2)
    decider = reconcile.Decider(60.0, {"cpu": 4.0}, {"cpu": 0.01}, 3)
    action = Action.SUSPEND if to is VMState.SUSPENDED else Action.RESUME
    with pytest.raises(TransitionRefused, match=f"{bad.value} -> {to.value}"):
        decider.reconcile(app, draft(app), Demand(action, nvms=2), 0.0, 10 ** 9,
                          Observed(Metrics()), Ops(), [])
