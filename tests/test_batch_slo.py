"""``core/batch_slo.py``'s ``decide_slo1`` and ``core/batch_vd.py``'s ``decide_vd1`` (a running
SLO or ``vertical-deadline`` application of one traded resource decided in one function) give
what their reference, ``batch.Pass`` (the lane, the form's ``one``, ``spend_cap_row``,
``alg1_row`` or Scale-One-VM's step, ``fits_one``/``pays_one``, ``draft.bidding``), gives on
the same application, bit for bit: the same kind of outcome, the same demand, the same bid
mapping (``repr``: the sign of a zero, NaN, infinities), the same next state (its fields and
columns, a kept ``App.clean`` handed out the same way) and the same controller state (its
generator's included), on random applications full of edge values: zeros of both signs, NaN
and infinite bids and allocations, metrics not reported or NaN, balances broke, rich and
beyond a float's exact integers, deadlines passed and far, a VM size of 0 (the scalar
re-split raises: both decline with the controller unmoved), several VMs with equal and
different bids, a suspended VM, an allocation estimate absent or not, every direction and
run of Scale-One-VM."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from merkat.control.batched.slo import resplit_one
from merkat.control.deadline import VerticalDeadline
from merkat.control.registry import make_policy
from merkat.control.types import AppStatus, Demand, Metrics, VMState
from merkat.core import batch
from merkat.core.batch_slo import decide_slo1, resplit1
from merkat.core.batch_vd import Vd1, decide_vd1, rests_vd1
from merkat.core.draft import draft, install
from merkat.core.isolation import WAIT
from merkat.core.model import App, AppNext, AppSpec, Observed
from merkat.core.reconcile import Decider

POLICIES = ("deadline-strict", "deadline-partial", "performance-strict", "performance-partial",
            "vertical-deadline")
NOW = 10_000.0

edge = st.sampled_from([0.0, -0.0, 1e-300, 0.01, 0.2, 0.5, 0.99, 1.0, 1.5, 2.0, 40.0, 1e308,
                        float("inf"), float("nan")])
amount = st.sampled_from([0.0, -0.0, 0.01, 0.25, 0.5, 1.0, 3.0, 1e308, float("inf"),
                          float("nan")])
reported = st.sampled_from([0.0, -0.0, 0.05, 0.5, 1.0, 2.0, 100.0, 1e308, float("inf")])
metric = st.one_of(st.none(), reported, st.just(float("nan")))
# the usual values (a running trace job), drawn half the time so that most cases reach the
# arithmetic, the budget check and the next state
usual = st.sampled_from([0.001, 0.01, 0.05, 0.3, 0.5, 1.0, 2.0])
rate = st.sampled_from([0.5, 1.0, 0.25, 0.01])


@st.composite
def cases(draw: Any) -> dict[str, Any]:
    n = draw(st.sampled_from([1, 1, 2, 3, 4, 5, 8]))
    same = draw(st.booleans())
    calm = draw(st.booleans())
    value = usual if calm else edge
    bids = [draw(value)] * n if same else [draw(value) for _ in range(n)]
    if calm:
        done = draw(st.sampled_from([0.0, 10.0, 500.0, 999.0]))
        metrics = (done, 1000.0, draw(st.one_of(rate, st.none())), draw(rate), None)
    else:
        metrics = (draw(metric), draw(st.one_of(st.none(), reported)), draw(metric),
                   draw(metric), draw(st.one_of(st.none(), st.just(1.0),
                                                st.just(float("nan")))))
    return {
        "policy": draw(st.sampled_from(POLICIES)),
        "seed": draw(st.integers(0, 2 ** 20)),
        "backoff_max": draw(st.integers(0, 3)),
        "low": draw(st.sampled_from([0.5, 0.75])),
        "high": draw(st.sampled_from([1.0, 1.2])),
        "min_fraction": draw(st.sampled_from([0.0, 0.25, 1.0])),
        "horizon": draw(st.integers(1, 3)),
        "history": draw(st.integers(-1, 1)),
        "backoff": draw(st.one_of(st.none(), st.tuples(st.integers(0, 2), st.integers(0, 2)))),
        "size": draw(st.sampled_from([0.0, 0.5, 1.0, 2.0])),
        "renewal": draw(st.sampled_from([0.0, 1.0, 1e6])),
        "deadline": NOW + draw(st.sampled_from([-100.0, 0.0, 5.0, 300.0, 3000.0, 1e5, 1e300]
                                               + [900.0, 1000.0, 1200.0, 2000.0, 4000.0] * 2 * calm)),
        "balance": draw(st.sampled_from([0, -5, 5_000, 300_000, 2_000_000, 2 ** 53 + 1,
                                         10 ** 20])),
        "bids": bids, "shared": same and draw(st.booleans()),
        "allocs": [draw(usual if calm else amount) for _ in range(n)],
        "suspended": n > 1 and draw(st.integers(0, 9)) == 0,
        "metrics": metrics,
        "price": draw(st.sampled_from([0.0, 0.37, 2.0, 1e308])),  # (finite: the prices' check)
        "floor": draw(st.sampled_from([0.0, 0.001, 0.01])),
        "clean": draw(st.booleans()),
        "vd": (draw(st.booleans()), draw(st.sampled_from([0.0, 0.05, 0.5])),
               draw(st.integers(1, 3)), draw(st.sampled_from([0.3, 0.5, 1.0])),
               draw(st.sampled_from([0.0, 0.01, 0.5])),
               draw(st.one_of(st.none(), usual if calm else amount)), draw(st.integers(0, 4))),
    }


def _build(case: dict[str, Any]) -> tuple[App, Decider, Observed]:
    """One application of ``case`` (a new controller and record each call)."""
    ctl: Any
    if case["policy"] == "vertical-deadline":
        vd = case["vd"]
        ctl = VerticalDeadline(seed=case["seed"], abort_hopeless=vd[0], t_diff=vd[1],
                               limit=vd[2], ewma_alpha=vd[3], max_alloc_tol=vd[4],
                               horizon=case["horizon"])
        if vd[5] is not None:
            ctl.alloc_est.value["cpu"] = vd[5]
        ctl.scaler.direction, ctl.scaler.run = case["history"], vd[6]
    else:
        ctl = make_policy(case["policy"], seed=case["seed"], backoff_max=case["backoff_max"],
                          low=case["low"], high=case["high"],
                          min_fraction=case["min_fraction"], horizon=case["horizon"])
        ctl.scaler.history["cpu"] = case["history"]
        if case["backoff"] is not None:
            ctl.backoff, ctl.waited = case["backoff"]
    spec = AppSpec("a", case["policy"], len(case["bids"]), {"cpu": case["size"]}, 0.0, 10.0,
                   renewal=case["renewal"], deadline=case["deadline"], trade=("cpu",))
    app = App(spec, ctl, "app:a", status=AppStatus.RUNNING)
    n = len(case["bids"])
    shared = {"cpu": case["bids"][0]}
    bids = [shared] * n if case["shared"] else [{"cpu": b} for b in case["bids"]]
    states = [VMState.RUNNING] * n
    if case["suspended"]:
        states[-1] = VMState.SUSPENDED
    app.columns = ([f"a/vm{k}" for k in range(n)], states, bids, list(range(n)), [False] * n,
                   [{"cpu": x} for x in case["allocs"]])
    if case["clean"]:  # a next state its last commit installed unchanged (App.clean)
        install(app, draft(app))
    done, total, rate, ideal, perf = case["metrics"]
    seen = Observed(Metrics(performance=perf, work_done=0.0 if done is None else done,
                            work_total=total, progress_rate=rate, ideal_rate=ideal))
    decider = Decider(300.0, {"cpu": 64.0, "memory": 65536.0},
                      {"cpu": case["floor"], "memory": 0.0}, 3)
    return app, decider, seen


def _state(app: App) -> tuple[Any, ...]:
    ctl: Any = app.controller
    rng = json.dumps(ctl.rng.bit_generator.state, sort_keys=True, default=str)
    scaler = ctl.scaler
    if isinstance(ctl, VerticalDeadline):
        return (repr(ctl.alloc_est.value), scaler.direction, scaler.run, repr(scaler.wanted),
                ctl.short, ctl.suspended_at, repr(ctl.suspend_cost), ctl.suspensions, rng)
    return (dict(scaler.history), repr(scaler.wanted), ctl.short, ctl.backoff, ctl.waited,
            rng)


def _outcome(app: App, made: Any, clean: AppNext | None) -> Any:
    if made is None:
        return None
    if isinstance(made, Demand):
        return ("demand", made.action, made.nvms, made.reason)
    if isinstance(made, dict):
        return ("bid", repr(made))
    assert isinstance(made, AppNext)
    cols = app.columns
    return ("next", made.id, made.status, made.broke_since, made.same_vms, made.moved,
            made is clean, app.clean is None, made.ids is cols[0], made.base is cols,
            [repr(b) for b in made.bids], made.bids is cols[2],
            [made.bids[k] is made.bids[0] for k in range(len(made.bids))],
            made.ids == cols[0], made.allocs is cols[5], made.hosts is cols[3])


@settings(max_examples=400, deadline=None)
@given(cases())
def test_decide_slo1_is_the_pass_bit_for_bit(case: dict[str, Any]) -> None:
    prices = {"cpu": case["price"], "memory": 0.0}
    ref, ref_decider, ref_seen = _build(case)
    ref_clean = ref.clean
    want = batch.Pass(ref_decider, NOW, prices, [prices])(ref, case["balance"], ref_seen)
    app, decider, seen = _build(case)
    ln = batch.lane(app)
    ln.fill(app, decider)
    k = ln.slo1
    if ln.single is None or ln.policy is None:  # (a VM size of 0 under every trade: none)
        assert k is None
        return
    assert k is not None
    fused = batch.Pass(decider, NOW, prices, [prices])
    fused.take(k.per, ln)
    clean = app.clean
    one = decide_slo1 if k.slo else decide_vd1
    got = one(app, k, case["balance"], seen)  # type: ignore[operator]
    assert _outcome(app, got, clean) == _outcome(ref, want, ref_clean)
    assert _state(app) == _state(ref)
    # the next periods: the same columns (row_of's kept count, mean bid and least
    # allocation, k.cols), then new allocations only (batch_slo.REALLOCATED: the count and
    # mean bid kept), new bids of other values with them (read again), then the first again
    first = app.columns
    halved = (*first[:5], [{"cpu": a["cpu"] / 2} for a in first[5]])
    rebid = (*first[:2], [{"cpu": b["cpu"] * 2} for b in first[2]], *first[3:5], halved[5])
    for cols, ref_cols in ((first, ref.columns), (halved, (*ref.columns[:5], halved[5])),
                           (rebid, (*ref.columns[:2], *rebid[2:])), (first, ref.columns)):
        app.columns, ref.columns = cols, ref_cols
        want = batch.Pass(ref_decider, NOW, prices, [prices])(ref, case["balance"], ref_seen)
        got = one(app, k, case["balance"], seen)  # type: ignore[operator]
        assert _outcome(app, got, None) == _outcome(ref, want, None)
        assert _state(app) == _state(ref)
        assert got is None or k.cols is cols


def test_a_lane_of_several_resources_has_no_one_function() -> None:
    """An SLO form of one traded resource is decided by ``decide_slo1``, ``vertical-deadline``'s
    by ``decide_vd1``; two traded resources keep the reference pass."""
    decider = Decider(300.0, {"cpu": 64.0, "memory": 65536.0}, {"cpu": 0.01, "memory": 0.0}, 3)
    for policy, trade in (("vertical-deadline", ("cpu",)),
                          ("deadline-strict", ("cpu", "memory")),
                          ("deadline-strict", ("cpu",))):
        spec = AppSpec("a", policy, 1, {"cpu": 1.0, "memory": 512.0}, 0.0, 10.0,
                       deadline=5000.0, trade=trade)
        app = App(spec, make_policy(policy, seed=1), "app:a", status=AppStatus.RUNNING)
        ln = batch.lane(app)
        ln.fill(app, decider)
        assert (ln.slo1 is not None) is (len(trade) == 1)
        assert ln.slo1 is None or ln.slo1.slo is (policy == "deadline-strict")


suspended_at = st.one_of(st.none(), st.sampled_from([0.0, NOW - 600.0, NOW - 300.0, NOW,
                                                     NOW + 1.0, float("nan")]))


@settings(max_examples=500, deadline=None)
@given(cases(), st.one_of(suspended_at, st.just("edge")), st.integers(0, 20),
       st.integers(0, 4),
       st.sampled_from([0.0, -0.0, 0.3, 0.74, 1.0, 2.0, float("inf"), float("nan"), "edge",
                        "edge"]),
       st.booleans(), st.sampled_from([0.0, 0.25, 0.37, 1.0]))
def test_rests_vd1_is_the_pass_s_resting_check_bit_for_bit(
        case: dict[str, Any], since: Any, suspensions: int, wait: int, cost: Any,
        every: bool, price: float) -> None:
    """A suspended ``vertical-deadline`` application (every VM suspended, or not): the
    period's one function answers "still waits" exactly when ``Pass`` does (its resting
    check), and neither moves the controller; "edge" draws the resume wait ending now and
    a VM's cost equal to the suspension's."""
    if since == "edge":  # (the resume wait ends exactly now)
        since = NOW - wait * 2 ** min(suspensions - 1, 16) * 300.0
    if cost == "edge":  # (a VM costs what it did at the suspension)
        cost = 0 + price * case["size"]
    case = {**case, "policy": "vertical-deadline", "suspended": False, "price": price}
    prices = {"cpu": price, "memory": 0.0}
    pair = []
    for _ in range(2):
        app, decider, seen = _build(case)
        ctl: Any = app.controller
        ctl.suspended_at, ctl.suspensions, ctl.suspend_cost = since, suspensions, cost
        ctl.resume_wait = wait
        n = len(app.columns[0])
        states = [VMState.SUSPENDED] * n
        if not every:
            states[0] = VMState.RUNNING
        app.columns = (app.columns[0], states, *app.columns[2:])
        app.status = AppStatus.SUSPENDED
        pair.append((app, decider, seen))
    (ref, ref_decider, ref_seen), (app, decider, seen) = pair
    want = batch.Pass(ref_decider, NOW, prices, [prices])(ref, case["balance"], ref_seen)
    ln = batch.lane(app)
    ln.fill(app, decider)
    k = ln.slo1
    if k is None:  # (a VM size of 0: no one-resource lane)
        return
    assert isinstance(k, Vd1) and ln.rest is not None
    batch.Pass(decider, NOW, prices, [prices]).take(k.per, ln)
    got = rests_vd1(app, k, seen)
    assert want in (WAIT, None)
    assert got is (want is WAIT)
    assert _state(app) == _state(ref)


@settings(max_examples=600, deadline=None)
@given(edge, edge, edge, st.sampled_from([0.0, -0.0, 0.5, 1.0, 4.0, float("inf"),
                                          float("nan")]), edge, st.booleans())
def test_resplit1_is_the_scalar_resplit_bit_for_bit(w: float, cap: float, a: float,
                                                    size: float, floor: float,
                                                    neg: bool) -> None:
    """``batch_slo.resplit1`` (one resource, no mappings) against ``resplit_one`` (the
    scalar helpers): the same float by ``repr`` (zeros' signs, NaN, infinities) or the
    same exception, over edge values of each argument, negated or not."""
    if neg:
        w, a = -w, -a
    try:
        want: Any = repr(resplit_one(("cpu",), [w], cap, [a], [size], [floor])[0])
    except ZeroDivisionError as e:
        want = type(e)
    try:
        got: Any = repr(resplit1(w, cap, a, size, floor))
    except ZeroDivisionError as e:
        got = type(e)
    assert got == want
