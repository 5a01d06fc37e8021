"""The four SLO policies (SLO paper Alg. 1, §3), best-effort, the decide() flow and the registry."""

from __future__ import annotations

import numpy as np
import pytest

from merkat.control import (
    POLICIES,
    Action,
    Budget,
    Demand,
    Metrics,
    Observation,
    PolicyError,
    SLOController,
    VMState,
    VMView,
    make_policy,
    policy_params,
)


def ob(**kw: object) -> Observation:
    base: dict[str, object] = dict(time=0.0, period=100.0, prices={"cpu": 1.0},
                                   capacity={"cpu": 10.0}, vm_size={"cpu": 1.0},
                                   budget=Budget(100.0), bid_min={"cpu": 0.01},
                                   deadline=1000.0,
                                   metrics=Metrics(work_total=100.0, ideal_rate=1.0))
    base.update(kw)
    return Observation(**base)  # type: ignore[arg-type]


def vms(alloc: float, bid: float, state: VMState = VMState.RUNNING) -> tuple[VMView, ...]:
    return (VMView("vm0", state, {"cpu": alloc}, {"cpu": bid}),)


def cost(fraction: float) -> float:
    """The bid that buys ``fraction`` of a 1-core VM at price 1 on 10 cores."""
    return fraction / (1 - fraction / 10)


def slo(name: str, **params: object) -> SLOController:
    c = make_policy(name, **params)
    assert isinstance(c, SLOController)
    return c


# --- start ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "fraction"), [
    ("deadline-strict", 0.75), ("performance-strict", 0.75),
    ("deadline-partial", 0.25), ("performance-partial", 0.25),
])
def test_start_when_the_price_buys_75_percent_strict_25_otherwise(name: str,
                                                                  fraction: float) -> None:
    d = make_policy(name).decide(ob())
    assert d.action is Action.START
    assert d.new_vm_bid == pytest.approx({"cpu": cost(fraction)})
    # one VM's share of bid_max just under that cost: wait
    poor = ob(budget=Budget(10 * cost(fraction) * 0.99))
    assert make_policy(name).decide(poor).action is Action.NONE


def test_deadline_strict_starts_with_what_the_deadline_needs_when_above_75_percent() -> None:
    d = make_policy("deadline-strict").decide(ob(metrics=Metrics(work_total=900.0,
                                                                 ideal_rate=1.0)))
    assert d.new_vm_bid == pytest.approx({"cpu": cost(0.9)})


def test_postponed_start_retries_after_a_seeded_random_wait() -> None:
    seed = 11
    expected = int(np.random.default_rng(seed).integers(1, 4))
    c = slo("deadline-partial", seed=seed, max_wait=3)
    assert c.decide(ob(budget=Budget(0.1))).action is Action.NONE
    assert c.next_try == pytest.approx(expected * 100.0)
    # before next_try nothing is tried, even at a good price
    assert c.decide(ob(time=expected * 100.0 - 1)).action is Action.NONE
    assert c.decide(ob(time=expected * 100.0)).action is Action.START


def test_start_aborts_strict_but_not_partial_when_the_deadline_is_out_of_reach() -> None:
    late = Metrics(work_total=1200.0, ideal_rate=1.0)  # 1200 s of work, 1000 s left
    for name in ("deadline-strict", "performance-strict"):
        d = make_policy(name).decide(ob(metrics=late))
        assert d.action is Action.STOP, name
    for name in ("deadline-partial", "performance-partial"):
        assert make_policy(name).decide(ob(metrics=late)).action is Action.START, name
        assert make_policy(name).decide(ob(time=1000.0)).action is Action.STOP, name


# --- running ---------------------------------------------------------------------------------------


def test_deadline_policy_tracks_predicted_time_against_time_left() -> None:
    c = make_policy("deadline-strict")
    # 800 units left at 0.5/s: 1600 s predicted for 1000 s left, T = 0.6
    o = ob(vms=vms(0.5, 1.0), metrics=Metrics(work_done=200.0, work_total=1000.0,
                                              ideal_rate=1.0, progress_rate=0.5),
           deadline=1000.0)
    d = c.decide(o)
    assert d.action is Action.NONE
    assert d.bids["vm0"] == pytest.approx({"cpu": 1.6})
    # well ahead (200 s predicted, under 75 % of 1000 s): decrease, damped after the increase
    o = ob(vms=vms(0.5, 1.6), metrics=Metrics(work_done=900.0, work_total=1000.0,
                                              ideal_rate=1.0, progress_rate=0.5))
    d = c.decide(o)
    assert d.bids["vm0"] == pytest.approx({"cpu": 1.6 / 1.4})  # T = 0.8: 1 + 0.8/2


def test_performance_policy_tracks_the_full_allocation() -> None:
    d = make_policy("performance-strict").decide(ob(vms=vms(0.5, 1.0)))
    assert d.bids["vm0"] == pytest.approx({"cpu": 1.5})  # allocation 0.5 of 1: T = 0.5
    d = make_policy("performance-partial").decide(ob(vms=vms(1.0, 1.0)))
    assert d.bids["vm0"] == pytest.approx({"cpu": 1.0})  # at maximum, not overpaying: hold


def _behind(balance: float = 5.0) -> Observation:
    # 800 units left at 0.3/s: far behind; Alg. 1 wants 0.5 × 2 = 1 > bid_max 0.5
    return ob(budget=Budget(balance), vms=vms(0.3, 0.5),
              metrics=Metrics(work_done=200.0, work_total=1000.0, ideal_rate=1.0,
                              progress_rate=0.3))


def _seed_with_backoff(k: int) -> int:
    return next(s for s in range(1000) if int(np.random.default_rng(s).integers(0, 4)) == k)


def test_suspend_after_a_seeded_random_backoff() -> None:
    seed = _seed_with_backoff(2)
    c = slo("deadline-strict", seed=seed, backoff_max=3)
    actions = [c.decide(_behind()).action for _ in range(3)]
    assert actions == [Action.NONE, Action.NONE, Action.SUSPEND]
    seed = _seed_with_backoff(0)
    c = slo("deadline-strict", seed=seed, backoff_max=3)
    assert c.decide(_behind()).action is Action.SUSPEND


def test_backoff_restarts_when_the_condition_clears() -> None:
    seed = _seed_with_backoff(2)
    c = slo("deadline-strict", seed=seed)
    assert c.decide(_behind()).action is Action.NONE
    assert c.waited == 1
    assert c.decide(_behind(balance=100.0)).action is Action.NONE  # affordable again
    assert (c.backoff, c.waited) == (None, 0)


def test_same_seed_same_decisions() -> None:
    def run(seed: int) -> list[Demand]:
        c = make_policy("deadline-partial", seed=seed)
        out = [c.decide(ob(time=t * 100.0, budget=Budget(0.01))) for t in range(6)]
        behind = ob(budget=Budget(0.5), vms=vms(0.1, 0.05),
                    metrics=Metrics(work_total=100.0, ideal_rate=1.0, progress_rate=0.1))
        out += [c.decide(behind) for _ in range(5)]
        return out

    assert run(3) == run(3)
    runs = {tuple((d.action, d.reason) for d in run(s)) for s in range(8)}
    assert len(runs) > 1  # the seed matters


def test_partial_and_performance_suspend_only_under_the_minimum_allocation() -> None:
    short = dict(budget=Budget(5.0),
                 metrics=Metrics(work_done=200.0, work_total=1000.0, ideal_rate=1.0,
                                 progress_rate=0.3))
    # 30 % of the VM: above the 25 % minimum, no suspension even though behind and poor
    c = slo("deadline-partial", backoff_max=0)
    assert c.decide(ob(vms=vms(0.3, 0.5), **short)).action is Action.NONE  # type: ignore[arg-type]
    for name in ("deadline-partial", "performance-strict", "performance-partial"):
        c = slo(name, backoff_max=0)
        d = c.decide(ob(vms=vms(0.2, 0.5), **short))  # type: ignore[arg-type]
        assert d.action is Action.SUSPEND, name


def test_strict_stops_when_the_deadline_is_out_of_reach_partial_at_the_deadline() -> None:
    late = dict(vms=vms(1.0, 1.0), time=500.0,
                metrics=Metrics(work_done=0.0, work_total=600.0, ideal_rate=1.0))
    for name in ("deadline-strict", "performance-strict"):
        assert make_policy(name).decide(ob(**late)).action is Action.STOP  # type: ignore[arg-type]
    for name in ("deadline-partial", "performance-partial"):
        assert make_policy(name).decide(ob(**late)).action is Action.NONE  # type: ignore[arg-type]
        d = make_policy(name).decide(ob(**{**late, "time": 1000.0}))  # type: ignore[arg-type]
        assert d.action is Action.STOP


def test_resume_when_the_price_buys_the_start_fraction() -> None:
    suspended = vms(0.0, 0.5, VMState.SUSPENDED)
    d = make_policy("performance-partial").decide(ob(vms=suspended))
    assert d.action is Action.RESUME
    assert d.bids["vm0"] == pytest.approx({"cpu": cost(0.25)})
    c = make_policy("performance-partial")
    assert c.decide(ob(vms=suspended, prices={"cpu": 50.0})).action is Action.NONE
    # suspended deadline-strict that can no longer finish: stop
    d = make_policy("deadline-strict").decide(ob(vms=suspended, time=950.0))
    assert d.action is Action.STOP


# --- best-effort ---------------------------------------------------------------------------------


def test_best_effort_starts_when_cheap_then_never_adapts() -> None:
    c = make_policy("best-effort", start_fraction=0.5)
    assert c.decide(ob(budget=Budget(0.5))).action is Action.NONE  # 0.05 per period
    d = c.decide(ob())
    assert d.action is Action.START
    assert d.new_vm_bid == pytest.approx({"cpu": cost(0.5)})
    bad = ob(budget=Budget(0.1), vms=vms(0.05, 9.0), prices={"cpu": 9.0},
             metrics=Metrics(work_total=1e6, ideal_rate=1.0, progress_rate=0.01))
    for _ in range(3):
        d = c.decide(bad)
        assert d.action is Action.NONE
        assert d.bids["vm0"] == pytest.approx({"cpu": cost(0.5)})


def test_best_effort_with_a_price_limit_suspends_above_it_and_resumes_below() -> None:
    """max_price: no start, and a suspension, above the limit; a resume once the price with
    its own bid back (price + bid/capacity) is under it; the same bid before and after."""
    c = make_policy("best-effort", max_price=1.5)
    # price 1.0 on 10 cores; its start bid cost(0.25) = 0.2564 adds 0.0256: 1.0256 <= 1.5
    d = c.decide(ob(prices={"cpu": 1.49}))  # 1.49 + 0.0256 > 1.5: wait
    assert d.action is Action.NONE and "above the limit 1.5" in d.reason
    d = c.decide(ob())
    assert d.action is Action.START
    bid = cost(0.25)
    assert d.new_vm_bid == pytest.approx({"cpu": bid})
    running = vms(0.3, bid)
    assert c.decide(ob(vms=running, prices={"cpu": 1.5})).action is Action.NONE
    d = c.decide(ob(vms=running, prices={"cpu": 1.6}))
    assert d.action is Action.SUSPEND
    assert d.reason == "suspend: cpu price 1.6 above the limit 1.5"
    suspended = vms(0.0, bid, VMState.SUSPENDED)
    # without it the price fell to 1.48, but its return would make it 1.5056: stay suspended
    d = c.decide(ob(vms=suspended, prices={"cpu": 1.48}))
    assert d.action is Action.NONE and d.reason.startswith("suspended: cpu price 1.506")
    d = c.decide(ob(vms=suspended, prices={"cpu": 1.47}))
    assert d.action is Action.RESUME
    assert d.bids["vm0"] == pytest.approx({"cpu": bid})
    # without a limit it never suspends (Merkat's best-effort)
    d = make_policy("best-effort").decide(ob(vms=running, prices={"cpu": 1e6}))
    assert d.action is Action.NONE


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), "cheap", True])
def test_best_effort_refuses_a_price_limit_that_is_not_a_positive_number(bad: object) -> None:
    with pytest.raises(PolicyError, match=r"^max_price: must be a finite number > 0"):
        make_policy("best-effort", max_price=bad)


# --- the registry --------------------------------------------------------------------------------


def test_registry_names_every_policy() -> None:
    assert set(POLICIES) == {
        "scale-one-vm", "scale-multi-vms", "merkat-vertical", "merkat-horizontal",
        "merkat-combined", "vertical-deadline", "horizontal-deadline", "deadline-strict", "deadline-partial",
        "performance-strict", "performance-partial", "best-effort", "framework-horizontal"}
    for name, cls in POLICIES.items():
        assert cls.name == name
        assert isinstance(make_policy(name), cls)


def test_registry_errors_are_clear() -> None:
    with pytest.raises(PolicyError, match=r"unknown policy 'nope'.*deadline-strict"):
        make_policy("nope")
    with pytest.raises(PolicyError, match=r"no parameter 'speed'.*t_diff"):
        make_policy("scale-one-vm", speed=3)
    with pytest.raises(PolicyError, match=r"^limit: must be an integer in \[1, 1000000\], got 0$"):
        make_policy("scale-one-vm", limit=0)
    assert policy_params("scale-one-vm")["t_diff"] == 0.05
    assert policy_params("deadline-strict")["seed"] == 0
    assert all("seed" in policy_params(name) for name in POLICIES)  # one uniform interface
