"""A suspended application's answer found without asking its controller
(:meth:`merkat.core.batch.Pass.resting`, ``VerticalDeadline.still_suspended``): whenever the
shortcut says "still suspended", :meth:`Controller.decide` on the observation it stands for
answers Action.NONE and leaves the controller as it was; the shortcut says so in the usual
cases (the resume wait, a price that has not dropped); and a period takes it only for a
suspended application of that exact type."""

from __future__ import annotations

import copy
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from merkat.control import Action, Budget, Metrics, Observation, VerticalDeadline, VMState, VMView
from merkat.control.deadline import VerticalDeadline as VD
from merkat.control.types import new_observation_unchecked

edge = st.sampled_from([0.0, -0.0, math.inf, -math.inf, math.nan, 1e-300, 1.0, 3.0])
num = st.one_of(st.floats(-1e4, 1e4), edge)
maybe = st.one_of(st.none(), num)


def _state(c: VerticalDeadline) -> dict[str, object]:
    """Everything of ``c`` a decision may write (its generator's state included)."""
    out = {k: repr(v) for k, v in vars(c).items() if k not in ("rng", "scaler", "alloc_est",
                                                              "forecaster")}
    out["scaler"] = repr(sorted(vars(c.scaler).items()))
    out["est"] = repr(sorted(c.alloc_est.value.items()))
    out["rng"] = repr(c.rng.bit_generator.state)
    return out


def _observation(time: float, period: float, deadline: float | None, metrics: Metrics,
                 price: float, size: float, nvms: int) -> Observation:
    vms = tuple(VMView(f"vm{i}", VMState.SUSPENDED, {"cpu": 0.0}, {"cpu": 0.5})
                for i in range(nvms))
    # (unchecked, as the period builds it: its parts were checked once)
    return new_observation_unchecked(
        time=time, period=period, prices={"cpu": price}, capacity={"cpu": 10.0},
        vm_size={"cpu": size}, budget=Budget(50.0), bid_min={"cpu": 0.01}, deadline=deadline,
        metrics=metrics, vms=vms)


@settings(max_examples=400, deadline=None)
@given(time=st.floats(0, 1e5), period=st.sampled_from([1.0, 30.0, 100.0]),
       deadline=st.one_of(st.none(), st.floats(-1e3, 2e5)),
       done=maybe, total=maybe, ideal=maybe,
       price=st.one_of(st.floats(0, 100), st.sampled_from([0.0, -0.0, math.inf])),
       size=st.sampled_from([1.0, 2.0, 0.0]),
       since=st.one_of(st.none(), st.floats(0, 1e5)), suspensions=st.integers(0, 20),
       cost=st.one_of(st.floats(0, 100), st.sampled_from([math.inf, math.nan, -0.0])),
       wait=st.integers(0, 4), nvms=st.integers(1, 3))
def test_still_suspended_means_decide_answers_none_and_changes_nothing(
        time: float, period: float, deadline: float | None, done: float | None,
        total: float | None, ideal: float | None, price: float, size: float,
        since: float | None, suspensions: int, cost: float, wait: int, nvms: int) -> None:
    c = VerticalDeadline(resume_wait=wait)
    c.suspended_at, c.suspensions, c.suspend_cost = since, suspensions, cost
    metrics = Metrics(work_done=0.0 if done is None else done, work_total=total,
                      ideal_rate=ideal)
    obs = _observation(time, period, deadline, metrics, price, size, nvms)
    rest = c.still_suspended(time, period, deadline, metrics, obs.prices, obs.vm_size)
    before = _state(c)
    try:
        demand = c.decide(obs)
    except Exception:  # (the scalar path fails the application: the shortcut never said so)
        assert not rest
        return
    if rest:
        assert demand.action is Action.NONE
        assert _state(c) == before


def test_the_usual_waits_are_found_and_the_rest_asked() -> None:
    metrics = Metrics(work_done=10.0, work_total=500.0, ideal_rate=1.0)
    c = VerticalDeadline(resume_wait=2)
    c.suspended_at, c.suspensions, c.suspend_cost = 1000.0, 1, 1.0
    prices, size = {"cpu": 2.0}, {"cpu": 1.0}
    # the resume wait (2 periods of 100 s) not over: still suspended
    assert c.still_suspended(1100.0, 100.0, 5000.0, metrics, prices, size)
    # over, but a VM costs 2.0 >= 1.0 at the suspension: the price has not dropped
    assert c.still_suspended(1200.0, 100.0, 5000.0, metrics, prices, size)
    # the price dropped: a resume to try, the controller is asked
    assert not c.still_suspended(1200.0, 100.0, 5000.0, metrics, {"cpu": 0.5}, size)
    # a stop: finished, hopeless (needs 490 s of 300 s left), the deadline passed
    done = Metrics(work_done=500.0, work_total=500.0, ideal_rate=1.0)
    assert not c.still_suspended(1100.0, 100.0, 5000.0, done, prices, size)
    assert not c.still_suspended(1100.0, 100.0, 1400.0, metrics, prices, size)
    assert not c.still_suspended(1100.0, 100.0, 1100.0, Metrics(work_done=1.0), prices, size)
    # the live service's steer="share" always asks
    shared = VerticalDeadline(steer="share")
    shared.suspended_at, shared.suspensions = 1000.0, 1
    assert not shared.still_suspended(1100.0, 100.0, 5000.0, metrics, prices, size)
    for now in (1100.0, 1200.0):  # what decide answers in the two waits
        d = copy.deepcopy(c).decide(_observation(now, 100.0, 5000.0, metrics, 2.0, 1.0, 2))
        assert d.action is Action.NONE


def test_a_period_takes_the_shortcut_for_its_exact_type_only() -> None:
    from merkat.core import batch

    class Mine(VD):  # a subclass may answer otherwise: always asked
        pass

    assert batch._RESTING.get(Mine) is None
    assert batch._RESTING[VD] is VD.still_suspended
