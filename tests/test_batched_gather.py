"""The batch's shortcuts (issue 28, ``core/batch.py``, ``core/draft.py``) are exact: the
constant row kept per application (``Lane``) is what the batched form reads of the
controller, the next states a batch makes directly (``ready``) are those the period's
``draft`` + ``Decider.rebid`` make, balances at the edge of what the bids cost included."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from merkat.control.batched import BATCHED
from merkat.control.registry import make_policy
from merkat.control.types import AppStatus, Metrics, VMState
from merkat.core import batch
from merkat.core.bids import set_uniform
from merkat.core.draft import bidding, draft
from merkat.core.model import App, AppSpec, Observed, VMRecord, to_micro
from merkat.core.reconcile import Decider

POLICIES = ("deadline-strict", "deadline-partial", "performance-strict",
            "performance-partial", "vertical-deadline", "merkat-vertical")


def _apps(policy: str, trade: tuple[str, ...], n: int, seed: int
          ) -> list[tuple[App, int, Observed]]:
    """Running applications of 1 to 40 VMs bidding alike, on track, with balances around
    what their next bids cost (so that some must be scaled down, some not)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        ctl = make_policy(policy, seed=i)
        spec = AppSpec(f"a{i}", policy, 1, {"cpu": 1.0, "memory": 512.0}, 0.0, 100.0,
                       deadline=20_000.0, trade=trade)
        app = App(spec, ctl, f"app:a{i}", AppStatus.RUNNING)
        bid = {r: float(rng.choice([0.05, 0.3, 1.7])) for r in trade}
        for k in range(int(rng.choice([1, 2, 3, 4, 5, 6, 9, 40]))):
            app.vms.append(VMRecord(f"a{i}/vm{k}", spec.id, VMState.RUNNING, host=0, bid=bid,
                                    alloc={r: 0.5 * spec.vm_size[r] for r in trade},
                                    new=False))
        cost = sum(bid.values()) * len(app.vms)
        balance = max(0, to_micro(cost * float(rng.choice([0.001, 0.02, 0.5, 1.0, 3.0]))))
        metrics = Metrics(work_done=float(rng.choice([10.0, 500.0])), work_total=1000.0,
                          progress_rate=float(rng.choice([0.05, 0.5, 2.0])), ideal_rate=1.0)
        rows.append((app, int(balance), Observed(metrics)))
    return rows


def test_fitting_is_within_budget_changing_nothing() -> None:
    """``fits`` (and ``fits_one``) at the edge: balances one micro-credit either side of the
    bids' total (as ``within_budget`` sums and rounds it), NaN and infinite bids, 1 to 6
    VMs."""
    rng = np.random.default_rng(4)
    decider = Decider(300.0, {"cpu": 1.0, "memory": 1.0}, {"cpu": 0.01, "memory": 0.001}, 3)
    spec = AppSpec("a", "deadline-strict", 1, {"cpu": 1.0, "memory": 1.0}, 0.0, 10.0)
    checked = {True: 0, False: 0}
    for trade, at in ((("cpu",), [0]), (("cpu", "memory"), [0, 1]),
                      (("memory", "cpu"), [1, 0])):
        n = 400
        new = rng.choice([0.1, 0.3, 1 / 3, 0.7, 1e-7, 2.5], size=(2, n)) * rng.uniform(
            0.5, 2, size=(2, n))
        new[0, :5] = [np.nan, np.inf, -np.inf, 0.0, 1e300]
        nvms = rng.integers(1, 7, size=n).astype(float)
        balances = []
        for i in range(n):
            bid = {r: float(new[k, i]) for r, k in zip(trade, at, strict=True)}
            total = 0.0
            for _ in range(int(nvms[i])):
                total += sum(bid.values())
            micro = to_micro(total) if np.isfinite(total) and total < 1e15 else 0
            balances.append(max(0, micro + int(rng.integers(-1, 2))))
        got = []
        for i in range(n):
            values = [float(new[k, i]) for k in at]
            count = int(nvms[i])
            ok = batch.fits(values, count, balances[i])
            if len(values) == 1:  # the one-resource form: the same
                assert batch.fits_one(values[0], count, balances[i]) is ok
            got.append(ok)
        for i in range(n):
            bid = {r: float(new[k, i]) for r, k in zip(trade, at, strict=True)}
            app = App(spec, make_policy("deadline-strict"), "app:a", AppStatus.RUNNING)
            app.vms = [VMRecord(f"a/vm{k}", "a", VMState.RUNNING, bid={}) for k in
                       range(int(nvms[i]))]
            nx = draft(app)
            try:
                decider.rebid(app, nx, bid, balances[i])
                same = all(b is bid for b in nx.bids)
            except RuntimeError:  # a bid that is not a finite number (NonFiniteBid)
                same = False
            if got[i]:
                assert same, (i, bid, nvms[i], balances[i])
            else:
                assert not same or nvms[i] > batch._FITS_VMS
            checked[same] += 1
    assert min(checked.values()) > 100, checked


@pytest.mark.parametrize("trade", [("cpu",), ("cpu", "memory"), ("memory", "cpu")])
@pytest.mark.parametrize("policy", POLICIES)
def test_the_next_states_a_batch_makes_are_the_periods(policy: str,
                                                       trade: tuple[str, ...]) -> None:
    rows = _apps(policy, trade, 200, seed=POLICIES.index(policy) + 7 * len(trade))
    decider = Decider(300.0, {"cpu": 64.0, "memory": 65536.0}, {"cpu": 0.01, "memory": 0.001},
                      3)
    prices = {"cpu": 0.2, "memory": 0.0001}
    ready: dict = {}
    out = batch.decide(decider, rows, 20.0, prices, [prices], ready)
    bids = {i: o for i, o in out.items() if isinstance(o, dict)}
    assert set(ready) <= set(bids)
    scaled = 0
    for app, balance, _ in rows:
        if app.spec.id not in bids:
            continue
        want = draft(app)
        decider.rebid(app, want, bids[app.spec.id], balance)
        got = ready.get(app.spec.id)
        kept = want.bids[0] is bids[app.spec.id] or want.bids[0] is app.vms[0].bid
        if got is None:  # the balance does not pay the bids as they are
            scaled += 1
            assert not kept
            continue
        assert got == want
        assert [id(b) for b in got.bids] == [id(b) for b in want.bids]  # shared alike
        assert [list(b) for b in got.bids] == [list(trade)] * len(app.vms)
    assert len(ready) > 20 and scaled > 5, (len(ready), scaled)


def test_pays_is_within_budget_changing_nothing() -> None:
    """Many VMs (beyond ``_FITS_VMS``): ``pays`` against ``draft`` + ``Decider.rebid`` with
    balances one micro-credit either side of the total as ``within_budget`` sums it, NaN and
    infinite bids, one and two traded resources."""
    rng = np.random.default_rng(11)
    decider = Decider(300.0, {"cpu": 1.0, "memory": 1.0}, {"cpu": 0.01, "memory": 0.001}, 3)
    spec = AppSpec("a", "deadline-strict", 1, {"cpu": 1.0, "memory": 1.0}, 0.0, 10.0)
    checked = {True: 0, False: 0}
    for trade in (("cpu",), ("cpu", "memory"), ("memory", "cpu")):
        for i in range(300):
            values = rng.choice([0.1, 0.3, 1 / 3, 0.7, 1e-7, 2.5], size=2) * rng.uniform(0.5, 2)
            if i < 4:
                values[0] = [np.nan, np.inf, 0.0, 1e300][i]
            bid = {r: float(v) for r, v in zip(trade, values, strict=False)}
            nvms = int(rng.integers(5, 200))
            total = 0.0
            for _ in range(nvms):
                total += sum(bid.values())
            micro = to_micro(total) if np.isfinite(total) and total < 1e15 else 0
            balance = max(0, micro + int(rng.integers(-1, 2)))
            app = App(spec, make_policy("deadline-strict"), "app:a", AppStatus.RUNNING)
            app.vms = [VMRecord(f"a/vm{k}", "a", VMState.RUNNING, bid={}) for k in range(nvms)]
            nx = draft(app)
            try:
                decider.rebid(app, nx, bid, balance)
                same = all(b is bid for b in nx.bids)
            except RuntimeError:  # a bid that is not a finite number (NonFiniteBid)
                same = False
            assert batch.pays(bid, nvms, balance) is same, (bid, nvms, balance)
            checked[same] += 1
    assert min(checked.values()) > 200, checked


def test_bidding_is_draft_then_set_uniform() -> None:
    spec = AppSpec("a", "deadline-strict", 1, {"cpu": 1.0}, 0.0, 10.0, trade=("cpu",))
    for n in (0, 1, 3):
        app = App(spec, make_policy("deadline-strict"), "app:a", AppStatus.RUNNING)
        old = {"cpu": 0.5}
        app.vms = [VMRecord(f"a/vm{k}", "a", VMState.RUNNING, host=k, bid=old,
                            alloc={"cpu": 0.25 * k}, new=False) for k in range(n)]
        for bid in ({"cpu": 0.5}, {"cpu": 0.75}):
            want = draft(app)
            set_uniform(want, bid)
            got = bidding(app, bid)
            assert got == want
            assert all(b is (old if n and bid == old else bid) for b in got.bids)


@pytest.mark.parametrize("policy", POLICIES)
def test_a_lane_keeps_the_parameters_and_reads_the_moving_state(policy: str) -> None:
    """``fixed`` leading entries of a form's state never change; ``live`` is the rest."""
    form = BATCHED.get(policy)
    ctl = make_policy(policy, seed=3)
    res = ("cpu", "memory")
    assert form.state(ctl, res) == form.state(ctl, res)[:form.fixed] + form.live([ctl], res)[0]
    spec = AppSpec("a", policy, 1, {"cpu": 1.0, "memory": 64.0}, 0.0, 10.0, deadline=900.0)
    app = App(spec, ctl, "app:a", AppStatus.RUNNING)
    app.vms.append(VMRecord("a/vm1", "a", VMState.RUNNING, host=0, new=False))
    decider = Decider(300.0, {"cpu": 8.0, "memory": 512.0}, {"cpu": 0.01}, 3)
    assert batch.batchable(app) is form
    lane = app.lane
    assert lane is not None and lane.fixed == []
    lane.fill(app, decider)
    assert lane.fixed == [0.0, 900.0, 1.0, 64.0, *form.state(ctl, res)[:form.fixed]]
    app.spec = replace(spec, deadline=1200.0)  # a new spec: a new lane
    assert batch.batchable(app) is form and app.lane is not lane
    lane = app.lane
    lane.fill(app, decider)
    assert lane.fixed[1] == 1200.0
    twin = copy.deepcopy(ctl)  # a new controller: a new lane
    app.controller = twin
    assert batch.batchable(app) is form and app.lane is not lane
    app.controller = make_policy("best-effort")
    assert batch.batchable(app) is None


def test_a_spec_a_batch_cannot_read_takes_the_scalar_path() -> None:
    """No deadline, an infinite one, or a resource outside the market: no batch, from the
    lane (checked once per application)."""
    decider = Decider(300.0, {"cpu": 8.0, "memory": 512.0, "gpu": 1.0}, {"cpu": 0.01}, 3)
    seen = Observed(Metrics(work_done=1.0, work_total=10.0, progress_rate=0.1, ideal_rate=1.0))
    for deadline, trade in ((None, ("cpu",)), (float("inf"), ("cpu",)), (900.0, ("gpu",)),
                            (900.0, ("cpu",))):
        spec = AppSpec("a", "deadline-strict", 1, {"cpu": 1.0, "gpu": 1.0}, 0.0, 10.0,
                       deadline=deadline, trade=trade)
        app = App(spec, make_policy("deadline-strict"), "app:a", AppStatus.RUNNING)
        app.vms.append(VMRecord("a/vm1", "a", VMState.RUNNING, host=0, bid={trade[0]: 0.1},
                                alloc={trade[0]: 0.5}, new=False))
        out = batch.decide(decider, [(app, 10_000_000, seen)], 0.0,
                           {"cpu": 0.1, "memory": 0.0, "gpu": 0.1}, [])
        assert (out != {}) == (deadline == 900.0 and trade == ("cpu",))


@settings(max_examples=600, deadline=None)
@given(x=st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                   st.floats(1e-9, 1e3), st.sampled_from([0.0, -0.0, 0.1, 1 / 3, 1e300])),
       nvms=st.integers(1, 5000), offset=st.one_of(st.integers(-3, 3),
                                                   st.integers(-10**9, 10**9)),
       scale=st.sampled_from([0.0, 1.0, 1 + 1e-12, 1 - 1e-12, 2.0]))
def test_pays_answers_as_the_sum_does(x: float, nvms: int, offset: int, scale: float) -> None:
    """``pays``' O(1) answer (a product clear of the balance) against the VM after VM sum
    (``pays_summed``, what ``within_budget`` adds), balances at and far from the total."""
    near = nvms * x * 1e6 * scale
    balance = max(0, (int(near) if near - near == 0 and abs(near) < 1e18 else 0) + offset)
    assert _answer(batch.pays, {"cpu": x}, nvms, balance) == _answer(batch.pays_summed, x,
                                                                      nvms, balance)


def _answer(f: Any, *args: Any) -> object:
    """``f(*args)``, or the type of what it raised (a total beyond ``to_micro``'s range)."""
    try:
        return f(*args)
    except OverflowError as e:
        return type(e)


def _lane_values(ln: batch.Lane) -> tuple[Any, ...]:
    one = ln.one
    return (ln.policy, ln.ok, None if one is None else (one.__self__, one.__func__), ln.res,
            ln.single, ln.key, ln.at, [repr(x) for x in ln.fixed], ln.rest, ln.controller,
            ln.spec)


@pytest.mark.parametrize("policy", ["deadline-strict", "vertical-deadline"])
def test_a_kept_lane_is_a_fresh_one_after_every_period_of_a_flaky_run(
        policy: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the period's pass keeps per application between periods (``App.lane``: its form,
    its constant row, its resting check) equals a lane read afresh from the application,
    before every period of a run of many-VM jobs with flaky operations (failed starts,
    resumes, moves and suspends), suspensions and resumptions; and the run decides most
    application-periods through the pass."""
    from tests.test_lazy_records import _flaky

    from merkat.backends.sim import SimBackend
    from merkat.core import period
    from merkat.core.period import Platform
    from merkat.workload.cluster import Cluster
    from merkat.workload.jobs import Workload
    from merkat.worlds.merkat.options import MarketConfig
    from merkat.worlds.merkat.trace import simulate_market

    monkeypatch.setattr(SimBackend, "apply", _flaky(SimBackend.apply))
    seen = {"lanes": 0, "passed": 0, "suspended": 0}
    decide, call = Platform.decide, batch.Pass.__call__
    slo1, vd1 = period.decide_slo1, period.decide_vd1

    def deciding(self: Platform, *a: Any) -> Any:
        for app in self.active.values():
            if app.lane is None:
                continue
            kept = _lane_values(app.lane)
            fresh = batch.Lane(app)
            if kept[7]:  # (filled on its first batch)
                fresh.fill(app, self.decider)
            assert kept == _lane_values(fresh), app.spec.id
            seen["lanes"] += 1
            seen["suspended"] += app.status is AppStatus.SUSPENDED
        return decide(self, *a)

    def passing(self: batch.Pass, *a: Any) -> Any:
        out = call(self, *a)
        seen["passed"] += out is not None
        return out

    def passing_slo1(*a: Any) -> Any:
        out = slo1(*a)
        seen["passed"] += out is not None
        return out

    def passing_vd1(*a: Any) -> Any:
        out = vd1(*a)
        seen["passed"] += out is not None
        return out

    monkeypatch.setattr(Platform, "decide", deciding)
    monkeypatch.setattr(batch.Pass, "__call__", passing)
    monkeypatch.setattr(period, "decide_slo1", passing_slo1)
    monkeypatch.setattr(period, "decide_vd1", passing_vd1)
    rng = np.random.default_rng(3)
    n = 40
    w = Workload.from_arrays(submit=np.sort(rng.integers(0, 20_000, n)).tolist(),
                             run=rng.integers(600, 6_000, n).tolist(),
                             procs=rng.integers(1, 7, n).tolist(),
                             deadline_factor=rng.uniform(1.2, 4.0, n).tolist())
    out = simulate_market(w, Cluster(6, 1, None), MarketConfig(period=300.0, policy=policy))
    assert seen["lanes"] > 300 and seen["passed"] > 200, seen
    if policy == "vertical-deadline":
        assert seen["suspended"] > 20 and sum(r.resumed for r in out.records) > 0, seen
