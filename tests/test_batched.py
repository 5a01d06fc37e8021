"""The batched controllers (issue 28, ``control/batched.py``, ``core/batch.py``) decide
exactly as the scalar path: the same demands bit for bit and the same controller state, on
random observations that reach every branch, in one period of a platform mixing batched and
scalar controllers, and over whole short runs."""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

import numpy as np
import pytest

from merkat.control.base import Controller
from merkat.control.batched import BATCHED, SUSPEND
from merkat.control.deadline import VerticalDeadline
from merkat.control.generic import MerkatVertical
from merkat.control.registry import make_policy
from merkat.control.slo import DeadlineStrict
from merkat.control.types import Action, AppStatus, Metrics, VMState
from merkat.core import batch, period
from merkat.core.draft import next_of
from merkat.core.model import App, AppSpec, Observed, VMRecord
from merkat.core.period import Platform
from merkat.core.reconcile import Decider
from merkat.market import Hosts
from merkat.workload.cluster import Cluster
from merkat.workload.jobs import Workload
from merkat.worlds.merkat.options import MarketConfig
from merkat.worlds.merkat.trace import simulate_market

SLO = ("deadline-strict", "deadline-partial", "performance-strict", "performance-partial")
POLICIES = (*SLO, "vertical-deadline", "merkat-vertical")


def counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The applications the period's batched pass decides (``Pass.__call__`` or, for an SLO
    application of one traded resource, ``decide_slo1``, a ``vertical-deadline`` one
    ``decide_vd1``, not None), one entry each."""
    calls: list[int] = []
    real, slo1, vd1 = batch.Pass.__call__, period.decide_slo1, period.decide_vd1

    def counted(self: batch.Pass, *a: Any) -> Any:
        out = real(self, *a)
        if out is not None:
            calls.append(1)
        return out

    def counted_slo1(*a: Any) -> Any:
        out = slo1(*a)
        if out is not None:
            calls.append(1)
        return out

    def counted_vd1(*a: Any) -> Any:
        out = vd1(*a)
        if out is not None:
            calls.append(1)
        return out

    monkeypatch.setattr(batch.Pass, "__call__", counted)
    monkeypatch.setattr(period, "decide_slo1", counted_slo1)
    monkeypatch.setattr(period, "decide_vd1", counted_vd1)
    return calls


def _state(ctl: Any) -> tuple[Any, ...]:
    """Everything a policy keeps between periods (its generator's state included)."""
    scaler = ctl.scaler
    rng = json.dumps(ctl.rng.bit_generator.state, sort_keys=True, default=str)
    if isinstance(ctl, VerticalDeadline):
        return (repr(ctl.alloc_est.value), scaler.direction, scaler.run, repr(scaler.wanted),
                ctl.short, ctl.suspended_at, ctl.suspend_cost, ctl.suspensions, ctl.next_try,
                rng)
    return (dict(scaler.history), repr(scaler.wanted), getattr(ctl, "short", None),
            getattr(ctl, "backoff", None), getattr(ctl, "waited", None),
            getattr(ctl, "next_try", None), rng)


def _controller(policy: str, rng: np.random.Generator, trade: tuple[str, ...]) -> Controller:
    """A controller of ``policy`` with random parameters and a random past."""
    seed = int(rng.integers(1 << 30))
    if policy == "vertical-deadline":
        vd = VerticalDeadline(seed=seed, abort_hopeless=bool(rng.random() < 0.5),
                              t_diff=float(rng.choice([0.0, 0.05, 0.5])),
                              limit=int(rng.integers(1, 4)),
                              ewma_alpha=float(rng.choice([0.3, 0.5, 1.0])))
        for r in trade:
            if rng.random() < 0.8:
                vd.alloc_est.value[r] = float(rng.choice([0.0, 0.3, 0.99, 1.0, 2.0]))
        vd.scaler.direction = int(rng.integers(-1, 2))
        vd.scaler.run = int(rng.integers(0, 4))
        return vd
    low, high = float(rng.choice([0.5, 0.75])), float(rng.choice([1.0, 1.2]))
    if policy == "merkat-vertical":
        ctl = make_policy(policy, seed=seed, low=low, high=high,
                          alloc_min=float(rng.choice([0.0, 0.25])))
        for r in trade:
            ctl.scaler.history[r] = int(rng.integers(-1, 2))  # type: ignore[attr-defined]
        return ctl
    ctl = make_policy(policy, seed=seed, backoff_max=int(rng.integers(0, 4)), low=low,
                      high=high)
    for r in trade:
        ctl.scaler.history[r] = int(rng.integers(-1, 2))  # type: ignore[attr-defined]
    if rng.random() < 0.3:
        ctl.backoff, ctl.waited = int(rng.integers(0, 3)), int(rng.integers(0, 3))  # type: ignore[attr-defined]
    return ctl


def _random_apps(policy: str, trade: tuple[str, ...], n: int, seed: int
                 ) -> tuple[list[tuple[App, int, Observed]], float]:
    """``n`` running applications of ``policy`` in random states: finished, hopeless, late,
    short of budget (Alg. 1's re-split), on or off track, VMs bidding alike or not, with or
    without a measured rate, controllers with a direction history and a pending back-off."""
    rng = np.random.default_rng(seed)
    now = 10_000.0
    rows = []
    for i in range(n):
        size = {"cpu": float(rng.choice([0.5, 1.0, 2.0])),
                "memory": float(rng.choice([0.0, 512.0, 1024.0]))}
        ctl = _controller(policy, rng, trade)
        spec = AppSpec(f"a{i}", policy, 1, size, 0.0, 100.0,
                       renewal=float(rng.choice([0.0, 1.0])),
                       deadline=now + float(rng.choice([-100.0, 5.0, 300.0, 3000.0, 1e5])),
                       trade=trade)
        app = App(spec, ctl, f"app:a{i}", AppStatus.RUNNING)
        nvms = int(rng.integers(1, 5))
        same = {r: float(rng.choice([0.01, 0.2, 1.5, 40.0])) for r in trade}
        for k in range(nvms):
            bid = same if rng.random() < 0.7 else {r: float(rng.uniform(0.01, 3)) for r in trade}
            alloc = {r: float(rng.choice([0.0, 0.1, 0.5, 1.0, 3.0])) * max(size[r], 1.0)
                     for r in trade}
            app.vms.append(VMRecord(f"a{i}/vm{k}", app.spec.id, VMState.RUNNING, host=0,
                                    bid=bid, alloc=alloc, new=False))
        total = float(rng.choice([100.0, 1000.0]))
        done = float(rng.choice([0.0, 0.5, 0.99, 1.0])) * total
        metrics = Metrics(performance=float(rng.random()) if rng.random() < 0.1 else None,
                          reference=1.0, work_done=done, work_total=total,
                          progress_rate=None if rng.random() < 0.3 else float(
                              rng.choice([0.0, 0.05, 0.5, 2.0])),
                          ideal_rate=None if rng.random() < 0.1 else float(
                              rng.choice([0.0, 0.2, 1.0])))
        balance = int(rng.choice([0, 5_000, 300_000, 2_000_000, 1_000_000_000]))
        rows.append((app, balance, Observed(metrics)))
    return rows, now


@pytest.mark.parametrize("trade", [("cpu",), ("cpu", "memory")])
@pytest.mark.parametrize("policy", POLICIES)
def test_a_batch_decides_as_each_controller_would(policy: str, trade: tuple[str, ...]) -> None:
    rows, now = _random_apps(policy, trade, 300, seed=len(trade) * 10 + POLICIES.index(policy))
    decider = Decider(300.0, {"cpu": 64.0, "memory": 65536.0}, {"cpu": 0.01, "memory": 0.001},
                      3)
    prices = {"cpu": 0.37, "memory": 0.0}  # a free resource: share = inf or 0
    scalar = copy.deepcopy(rows)
    assert all(batch.batchable(app) is BATCHED.get(policy) for app, _, _ in rows)
    got = batch.decide(decider, rows, now, prices, [prices])
    # every one decided by the batch, but those without a rate (the scalar path's)
    # the rest: a metric of its own or past the deadline with work left (merkat-vertical)
    def declined(app: App, seen: Observed) -> bool:
        m, left = seen.metrics, (app.spec.deadline or 0.0) - now
        return policy == "merkat-vertical" and m.work_left != 0 and (
            m.performance is not None or left <= 0)

    assert set(got) == {a.spec.id for a, _, seen in rows
                        if (seen.metrics.progress_rate is not None
                            or seen.metrics.ideal_rate is not None)
                        and not declined(a, seen)} != set()
    kinds = {"stop": 0, "suspend": 0, "bid": 0, "short": 0}
    for (app, _, _), (twin, balance, seen) in zip(rows, scalar, strict=True):
        obs = decider.observe(twin, now, balance, seen, prices, [prices])
        want = twin.controller.decide(obs)
        if app.spec.id not in got:
            continue
        mine = got[app.spec.id]
        if isinstance(mine, dict):
            assert want.action is Action.NONE and len(want.bids) == len(app.vms)
            assert [repr(mine[r]) for r in trade] == [repr(want.new_vm_bid[r]) for r in trade]
            kinds["bid"] += 1
            kinds["short"] += getattr(twin.controller, "short", True)
        else:
            assert (mine.action, mine.reason, mine.nvms) == (want.action, want.reason,
                                                             want.nvms)
            kinds["stop" if mine.action is Action.STOP else "suspend"] += 1
            if mine.action is Action.SUSPEND:
                assert mine.reason == SUSPEND
        assert _state(app.controller) == _state(twin.controller)
    if policy == "merkat-vertical":  # it never suspends
        kinds["suspend"] += 1
    assert min(kinds.values()) > 0, kinds  # every branch was reached


class Custom(DeadlineStrict):
    """A plugin's policy: a subclass of a batched one keeps the scalar path."""

    name = "custom-strict"


def _platform(batched: bool) -> Platform:
    hosts = Hosts(tuple(f"h{k}" for k in range(4)), np.array([[2.0, 4096.0]] * 4))
    p = Platform(hosts, period=300.0, batched=batched)
    for i, ctl in enumerate([make_policy("deadline-strict", seed=1), Custom(seed=2),
                             make_policy("deadline-strict", seed=3, steer="share"),
                             make_policy("performance-partial", seed=4),
                             make_policy("best-effort", seed=5),
                             make_policy("vertical-deadline", seed=6),
                             make_policy("merkat-vertical", seed=7)]):
        p.submit(AppSpec(f"j{i}", ctl.name, 2, {"cpu": 1.0, "memory": 256.0}, 0.0, 50.0,
                         deadline=3000.0 + 600 * i), ctl)
    return p


def _period(p: Platform, now: float, done: dict[str, float],
            poor: frozenset[str] = frozenset()) -> Any:
    """One decided and committed period (everything paid, every operation done); the
    decision, by value. The applications ``poor`` names hold one micro-credit (less than
    the reserve price of their VMs)."""
    from merkat.core.backend import ApplyReport
    from merkat.core.model import Charged

    observed = {i: Observed(Metrics(work_done=done.get(i, 0.0), work_total=900.0,
                                    progress_rate=0.4 if i in done else None, ideal_rate=1.0))
                for i in p.active}
    d = p.decide(now, {a.account: 1 if i in poor else 20_000_000
                       for i, a in p.active.items()}, observed)
    # every decided application's next state (Decision.apps holds only the changed ones)
    nexts = {i: next_of(d.apps, a) for i, a in p.active.items()}
    p.commit(d, ApplyReport(now), Charged(dict(d.bills), frozenset(), 0))
    return (d.plan, d.bills, d.usage, d.prices, d.refused,
            {i: (nx.status, nx.ids, nx.bids, nx.hosts, nx.allocs, nx.reason, nx.outcome,
                 nx.broke_since)
             for i, nx in nexts.items()})


def test_one_period_mixing_batched_and_scalar_controllers_is_the_all_scalar_period(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls = counting(monkeypatch)
    mixed, scalar = _platform(True), _platform(False)
    for k in range(8):
        now = 300.0 * k
        done = {i: 80.0 * k for i in mixed.active}
        assert _period(mixed, now, done) == _period(scalar, now, done), f"period {k}"
    assert sum(calls) >= 4 * 5  # the four batched applications, every running period
    for i, a in mixed.apps.items():
        b = scalar.apps[i]
        assert (a.status, a.outcome, a.reason) == (b.status, b.outcome, b.reason)
        if isinstance(a.controller, DeadlineStrict | VerticalDeadline | MerkatVertical) and \
                a.controller.share is None:
            assert _state(a.controller) == _state(b.controller)


def test_applications_that_cannot_pay_the_reserve_are_decided_as_the_scalar_path() -> None:
    """The decide loop's record of the applications that cannot pay the reserve price of
    their VMs (``poor``, ``core/period.py``): counted from the period they first cannot, the
    batch still deciding for them until ``keep_alive`` periods have passed, then stopped for
    budget: the batched platform's decisions are the reference's (``batched=False``) every
    period, ``broke_since`` included."""
    mixed, scalar = _platform(True), _platform(False)
    poor = frozenset({"j0", "j3", "j5"})
    stopped: set[str] = set()
    for k in range(8):
        now = 300.0 * k
        done = {i: 80.0 * k for i in mixed.active}
        short = poor if k >= 3 else frozenset()
        got = _period(mixed, now, done, short)
        assert got == _period(scalar, now, done, short), f"period {k}"
        for i, (_, _, _, _, _, _, outcome, since) in got[5].items():
            assert since == (900.0 if i in short else None)  # from the first period it cannot
            if outcome == "stopped-budget":
                stopped.add(i)
    assert stopped == poor  # keep_alive periods later


def _run_digest(policy: str, monkeypatch: pytest.MonkeyPatch, batched: bool) -> str:
    if not batched:  # every application asked (the resting ones too)
        monkeypatch.setattr(batch.Pass, "__call__", lambda self, *a: None)
        monkeypatch.setattr(period, "decide_slo1", lambda *a: None)
        monkeypatch.setattr(period, "decide_vd1", lambda *a: None)
    w = Workload.from_arrays(submit=[0, 100, 200, 900, 1000, 4000, 4100, 4200],
                             run=[900, 600, 1200, 300, 2000, 600, 3000, 450],
                             procs=[2, 1, 3, 1, 2, 1, 4, 2],
                             deadline_factor=[1.5, 3.0, 2.0, 1.2, 5.0, 2.5, 1.3, 4.0])
    out = simulate_market(w, Cluster(3, 2, None), MarketConfig(period=300.0, policy=policy))
    monkeypatch.undo()
    h = hashlib.sha256()
    for a in (out.start, out.end, out.value, out.paid):
        h.update(np.ascontiguousarray(a).tobytes())
    h.update(repr([(r.prices, r.allocated, r.vms, r.migrations, r.charged)
                   for r in out.records]).encode())
    h.update(json.dumps([out.outcomes, out.bank, out.reasons], sort_keys=True).encode())
    return h.hexdigest()


@pytest.mark.parametrize("policy", POLICIES)
def test_a_short_run_batched_is_the_scalar_run_bit_for_bit(
        policy: str, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = counting(monkeypatch)
    batched = _run_digest(policy, monkeypatch, True)
    assert sum(calls) > 20  # the batch decided most application-periods
    assert batched == _run_digest(policy, monkeypatch, False)


def test_a_row_that_raises_leaves_its_application_to_the_scalar_path(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A batched form's bug (or the scalar re-split's error) on one application sends it alone
    to the scalar path, its controller not moved; the others are decided."""
    policy = BATCHED.get("deadline-strict")
    real = type(policy).one
    rows, now = _random_apps("deadline-strict", ("cpu",), 6, seed=1)
    rows = [(a, b, s) for a, b, s in rows if s.metrics.progress_rate is not None
            or s.metrics.ideal_rate is not None]
    bad = rows[0][0].controller

    def broken(self: Any, c: Any, *a: Any) -> Any:
        if c is bad:
            raise RuntimeError("a bug")
        return real(self, c, *a)

    monkeypatch.setattr(type(policy), "one", broken)
    decider = Decider(300.0, {"cpu": 8.0, "memory": 0.0}, {"cpu": 0.01}, 3)
    before = _state(bad)
    out = batch.decide(decider, rows, now, {"cpu": 0.1, "memory": 0.0}, [])
    assert set(out) == {a.spec.id for a, _, _ in rows[1:]}
    assert _state(bad) == before


def test_a_lone_application_is_batched() -> None:
    """No group needs a size: one running application of a batched policy is decided by its
    form (the scalar path only for what a form declines)."""
    rows, now = _random_apps("deadline-strict", ("cpu",), 8, seed=2)
    rows = [(a, b, s) for a, b, s in rows if s.metrics.progress_rate is not None
            or s.metrics.ideal_rate is not None]
    decider = Decider(300.0, {"cpu": 8.0, "memory": 0.0}, {"cpu": 0.01}, 3)
    for row in rows:
        got = batch.decide(decider, [row], now, {"cpu": 0.1, "memory": 0.0}, [])
        assert set(got) == {row[0].spec.id}


def test_a_nan_metric_takes_the_scalar_path() -> None:
    """A world (or a user) reporting NaN is decided as the scalar path decides (a batch reads
    NaN as a value not reported)."""
    rows, now = _random_apps("deadline-strict", ("cpu",), 4, seed=5)
    nan = float("nan")
    rows = [(a, b, Observed(Metrics(work_done=1.0, work_total=10.0, progress_rate=nan,
                                    ideal_rate=1.0))) for a, b, _ in rows]
    decider = Decider(300.0, {"cpu": 8.0, "memory": 0.0}, {"cpu": 0.01}, 3)
    assert batch.decide(decider, rows, now, {"cpu": 0.1, "memory": 0.0}, []) == {}


def test_only_the_exact_policy_with_the_parameters_the_batch_covers_is_batched() -> None:
    def app(ctl: Controller, status: AppStatus = AppStatus.RUNNING) -> App:
        a = App(AppSpec("x", ctl.name, 1, {"cpu": 1.0}, 0.0, 1.0), ctl, "app:x", status)
        a.vms.append(VMRecord("x/vm1", "x", VMState.RUNNING))
        return a

    assert batch.batchable(app(make_policy("deadline-strict"))) is BATCHED.get("deadline-strict")
    assert batch.batchable(app(Custom())) is None
    assert batch.batchable(app(make_policy("deadline-strict", steer="share"))) is None
    assert batch.batchable(app(make_policy("best-effort"))) is None
    assert batch.batchable(app(make_policy("deadline-strict"), AppStatus.SUSPENDED)) is None
