"""The shared formulas of merkat.control: sense, gap, costs, spend limit, split, Alg. 3, makespan."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from merkat.control import (
    Budget,
    Observation,
    Sense,
    gap,
    judge,
    makespan_bound,
    share_cost,
    spend_limit,
    split_budget,
    start_bid,
    vm_upper_bound,
)
from merkat.control.formulas import least_alloc

LOWER, HIGHER = Sense.LOWER_IS_BETTER, Sense.HIGHER_IS_BETTER


def ob(**kw: object) -> Observation:
    base: dict[str, object] = dict(time=0.0, period=300.0, prices={"cpu": 2.0, "memory": 0.01},
                                   capacity={"cpu": 100.0, "memory": 204800.0},
                                   vm_size={"cpu": 1.0, "memory": 1024.0},
                                   budget=Budget(100.0))
    base.update(kw)
    return Observation(**base)  # type: ignore[arg-type]


# --- sense and gap ---------------------------------------------------------------------------


def test_judge_lower_is_better_uses_high_and_low_fractions_of_the_reference() -> None:
    assert judge(1.1, 1.0, LOWER, 0.75, 1.0) == 1  # slower than the reference: more
    assert judge(0.7, 1.0, LOWER, 0.75, 1.0) == -1  # under 75 % of it: less
    assert judge(0.8, 1.0, LOWER, 0.75, 1.0) == 0  # in between: hold
    assert judge(1.0, 1.0, LOWER) == 0


def test_judge_higher_is_better_mirrors_the_thresholds() -> None:
    assert judge(0.9, 1.0, HIGHER, 0.75, 1.0) == 1  # progress under the reference: more
    assert judge(1.4, 1.0, HIGHER, 0.75, 1.0) == -1  # over 1/0.75 of it: less
    assert judge(1.2, 1.0, HIGHER, 0.75, 1.0) == 0
    # a rate is the reciprocal of a time: the two senses agree
    for t in (0.5, 0.7, 0.8, 1.0, 1.2, 3.0):
        assert judge(t, 1.0, LOWER, 0.75, 1.0) == judge(1 / t, 1.0, HIGHER, 0.75, 1.0)


def test_judge_rejects_bad_thresholds() -> None:
    with pytest.raises(ValueError, match="low <= high"):
        judge(1.0, 1.0, LOWER, 1.2, 1.0)
    with pytest.raises(ValueError):
        judge(1.0, 1.0, LOWER, 0.0, 1.0)


def test_gap_is_relative_to_the_reference() -> None:
    assert gap(0.8, 1.0) == pytest.approx(0.2)
    assert gap(1.5, 1.0) == pytest.approx(0.5)
    assert gap(3.0, 2.0) == pytest.approx(0.5)  # |2-3|/2, not |2-3|/3
    assert gap(0.0, 0.0) == 0.0
    assert gap(1.0, 0.0) == math.inf


# --- costs -----------------------------------------------------------------------------------


def test_share_cost_inverts_proportional_share() -> None:
    x = share_cost(2.0, 25.0, 100.0)
    assert x == pytest.approx(2.0 * 25.0 / 0.75)
    others = 2.0 * 100.0  # the bids of the others total P·C
    assert x / (x + others) * 100.0 == pytest.approx(25.0)
    assert share_cost(2.0, 0.0, 100.0) == 0.0
    assert share_cost(2.0, 100.0, 100.0) == math.inf


def test_start_bid_buys_the_fraction_on_every_resource_per_vm() -> None:
    bid = start_bid(ob(), 0.75, 2)
    cpu_total = 2.0 * 1.5 / (1 - 1.5 / 100.0)
    mem_total = 0.01 * 1536.0 / (1 - 1536.0 / 204800.0)
    assert bid == pytest.approx({"cpu": cpu_total / 2, "memory": mem_total / 2})


def test_start_bid_never_under_the_reserve() -> None:
    bid = start_bid(ob(prices={"cpu": 0.0, "memory": 0.0}, bid_min={"cpu": 0.5, "memory": 0.1}),
                    0.75, 1)
    assert bid == {"cpu": 0.5, "memory": 0.1}


def test_start_bid_cpu_only_market() -> None:
    o = ob(prices={"cpu": 1.0}, capacity={"cpu": 10.0}, vm_size={"cpu": 1.0})
    assert start_bid(o, 0.5, 1) == pytest.approx({"cpu": 0.5 / 0.95})


# --- spend limit -----------------------------------------------------------------------------


def test_spend_limit_spreads_balance_and_future_renewals_over_the_periods_left() -> None:
    o = ob(budget=Budget(100.0, renewal=10.0), deadline=1200.0)  # 4 periods of 300 s left
    assert spend_limit(o) == pytest.approx((100.0 + 3 * 10.0) / 4)
    o = ob(budget=Budget(100.0, renewal=10.0), deadline=1000.0)  # 3.33 periods: 4
    assert spend_limit(o) == pytest.approx(130.0 / 4)


def test_spend_limit_never_above_the_balance() -> None:
    o = ob(budget=Budget(5.0, renewal=10.0), deadline=1200.0)
    assert spend_limit(o) == 5.0


def test_spend_limit_without_deadline_uses_the_horizon() -> None:
    o = ob(budget=Budget(100.0, renewal=10.0))
    assert spend_limit(o) == 100.0
    assert spend_limit(o, horizon=5) == pytest.approx((100.0 + 40.0) / 5)
    assert spend_limit(ob(budget=Budget(100.0), time=2000.0, deadline=1000.0), 2) == 50.0
    with pytest.raises(ValueError):
        spend_limit(o, horizon=0)


# --- budget split ----------------------------------------------------------------------------


def test_split_budget_is_proportional_to_the_weights() -> None:
    out = split_budget(10.0, {"cpu": 0.5, "memory": 0.25}, {})
    assert out == pytest.approx({"cpu": 10 * 0.5 / 0.75, "memory": 10 * 0.25 / 0.75})


def test_split_budget_respects_floors() -> None:
    out = split_budget(10.0, {"cpu": 0.5, "memory": 0.25}, {"memory": 4.0})
    assert out == pytest.approx({"cpu": 6.0, "memory": 4.0})
    # the floors do not fit: every resource gets its floor
    assert split_budget(3.0, {"cpu": 1, "memory": 1}, {"cpu": 2, "memory": 2}) == {
        "cpu": 2, "memory": 2}


@given(total=st.floats(0, 1e6), w=st.lists(st.floats(0, 10), min_size=1, max_size=4),
       floor=st.floats(0, 100))
def test_split_budget_sums_to_total_when_floors_fit(total: float, w: list[float],
                                                    floor: float) -> None:
    weights = {f"r{i}": x for i, x in enumerate(w)}
    floors = {r: floor for r in weights}
    out = split_budget(total, weights, floors)
    assert all(out[r] >= floors[r] - 1e-9 for r in weights)
    if total > floor * len(w):
        assert sum(out.values()) == pytest.approx(total, rel=1e-9, abs=1e-9)


# --- Merkat Alg. 3 ---------------------------------------------------------------------------


def test_vm_upper_bound_hand_example() -> None:
    # cost(N) = 1·1·N / (1 - N/100): 16/0.84 = 19.05 < 20 <= 17/0.83 = 20.48
    n, total = vm_upper_bound({"cpu": 1.0}, {"cpu": 1.0}, {"cpu": 100.0}, 20.0, 50)
    assert n == 16
    assert total == pytest.approx({"cpu": 16 / 0.84})
    # capped by nvms_max
    assert vm_upper_bound({"cpu": 1.0}, {"cpu": 1.0}, {"cpu": 100.0}, 20.0, 5)[0] == 5
    # not even one VM
    assert vm_upper_bound({"cpu": 1.0}, {"cpu": 1.0}, {"cpu": 100.0}, 1.0, 5) == (0, {})


def test_vm_upper_bound_sums_both_resources() -> None:
    prices, amax, cap = {"cpu": 1.0, "memory": 0.001}, {"cpu": 1.0, "memory": 1024.0}, {
        "cpu": 100.0, "memory": 102400.0}
    n, total = vm_upper_bound(prices, amax, cap, 20.0, 50)
    cost = [k / (1 - k / 100) + 0.001 * 1024 * k / (1 - 1024 * k / 102400) for k in (n, n + 1)]
    assert cost[0] < 20.0 <= cost[1]
    assert sum(total.values()) == pytest.approx(cost[0])


@settings(max_examples=300)
@given(p_cpu=st.floats(0, 50), p_mem=st.floats(0, 1), a_cpu=st.floats(0.1, 8),
       a_mem=st.floats(0, 4096), c_cpu=st.floats(1, 500), c_mem=st.floats(1024, 1e6),
       bid_max=st.floats(0, 1e4), nvms_max=st.integers(0, 300))
def test_vm_upper_bound_matches_brute_force(p_cpu: float, p_mem: float, a_cpu: float,
                                            a_mem: float, c_cpu: float, c_mem: float,
                                            bid_max: float, nvms_max: int) -> None:
    prices = {"cpu": p_cpu, "memory": p_mem}
    amax = {"cpu": a_cpu, "memory": a_mem}
    cap = {"cpu": c_cpu, "memory": c_mem}

    def cost(n: int) -> float:  # written out again from the paper, independent of the code
        out = 0.0
        for r in ("cpu", "memory"):
            need = amax[r] * n
            if need <= 0:
                continue
            if need >= cap[r]:
                return math.inf
            out += prices[r] * need / (1 - need / cap[r])
        return out

    brute = max((n for n in range(1, nvms_max + 1) if cost(n) < bid_max), default=0)
    n, _ = vm_upper_bound(prices, amax, cap, bid_max, nvms_max)
    assert n == brute


# --- Themis Fig. 4 ---------------------------------------------------------------------------


def test_makespan_bound() -> None:
    assert makespan_bound(10, 60.0, 100.0, 4) == 135 + 100  # ceil(9·60/4) + T_max
    assert makespan_bound(3, 10.0, 12.0, 3) == 7 + 12  # ceil(20/3) = 7
    assert makespan_bound(1, 10.0, 12.0, 3) == 12.0
    assert makespan_bound(0, 10.0, 12.0, 3) == 0.0
    assert makespan_bound(5, 10.0, 12.0, 0) == math.inf


def test_observation_validates() -> None:
    with pytest.raises(ValueError, match="period"):
        ob(period=0.0)
    with pytest.raises(ValueError, match="prices"):
        ob(prices={"cpu": -1.0})
    with pytest.raises(ValueError, match="size"):
        ob(size=0)


def test_scale_to_an_unbuyable_share_spends_the_limit_not_nan() -> None:
    # A VM as large as the cluster: its start bid is infinite (no bid buys the whole resource).
    from merkat.control.formulas import scale_to

    out = scale_to({"cpu": math.inf, "memory": 2.0}, 10.0, {"cpu": 0.1, "memory": 0.5})
    assert out == {"cpu": pytest.approx(9.5), "memory": 0.5}
    assert all(math.isfinite(x) for x in out.values())


@given(st.lists(st.dictionaries(st.sampled_from(["cpu", "memory"]),
                                st.sampled_from([0.0, -0.0, 0.5, 1.0, 2.0, float("inf"),
                                                 float("nan")]), max_size=2),
                min_size=1, max_size=6))
def test_least_alloc_is_the_smallest_read_in_order(allocs: list[dict[str, float]]) -> None:
    """``least_alloc``'s fast read (``itemgetter``) and its fallback give the reference's
    value, as ``repr`` (a zero's sign, NaN's place in the order), mappings lacking a resource
    counted as 0."""
    for res in (("cpu",), ("cpu", "memory")):
        want = {r: min([a.get(r, 0.0) for a in allocs]) for r in res}
        assert repr(least_alloc(allocs, res)) == repr(want)
        full = [{r: a.get(r, 0.0) for r in res} for a in allocs]  # (the fast read's case)
        assert repr(least_alloc(full, res)) == repr(want)
