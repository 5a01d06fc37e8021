"""Eq. 5 of the grid-cloud paper (market/posted.py) on hand-computed cases."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from merkat.market.posted import PostedPrices, adapt


def test_first_case_demand_above_total_with_exponent() -> None:
    # r = 100, r^d(t) = 100, r^d(t') = 150: 100 * (1 + 50/100) ** (150/100) = 100 * 1.5**1.5
    assert adapt(100.0, 100.0, 150.0, 100.0) == pytest.approx(183.71173070873837)


def test_first_case_demand_below_total() -> None:
    # r = 200, r^d(t) = 50, r^d(t') = 100: 10 * (1 - 100/200) ** 2 = 2.5
    assert adapt(10.0, 50.0, 100.0, 200.0) == pytest.approx(2.5)


def test_second_case_no_previous_demand() -> None:
    # r^d(t) = 0: 10 * (1 + (300 - 100)/100) = 30
    assert adapt(10.0, 0.0, 300.0, 100.0) == pytest.approx(30.0)


def test_third_case_no_demand_halves() -> None:
    assert adapt(8.0, 5.0, 0.0, 100.0) == 4.0
    assert adapt(8.0, 0.0, 0.0, 100.0) == 4.0


def test_demand_equal_to_total_keeps_the_price() -> None:
    assert adapt(42.0, 70.0, 100.0, 100.0) == pytest.approx(42.0)


@pytest.mark.parametrize(
    "args", [(-1.0, 1.0, 1.0, 1.0), (1.0, -1.0, 1.0, 1.0), (1.0, 1.0, math.nan, 1.0),
             (1.0, 1.0, 1.0, 0.0), (math.inf, 1.0, 1.0, 1.0)])
def test_bad_input_is_refused(args: tuple[float, float, float, float]) -> None:
    with pytest.raises(ValueError):
        adapt(*args)


@given(st.floats(0.01, 1e6), st.floats(0, 1e4), st.floats(0, 1e4), st.floats(1, 1e4))
def test_direction_follows_demand(p: float, prev: float, now: float, cap: float) -> None:
    new = adapt(p, prev, now, cap)
    if now == 0 or now < cap:
        assert new <= p
    elif now > cap:
        assert new >= p


def test_posted_prices_floor_and_memory_of_demand() -> None:
    pp = PostedPrices({"cpu": 100.0}, {"cpu": 1000.0})
    assert pp.update({"cpu": 2000.0}) == {"cpu": pytest.approx(200.0)}  # 2nd case
    assert pp.update({"cpu": 1000.0})["cpu"] == pytest.approx(200.0)  # ratio 1
    for _ in range(200):
        pp.update({"cpu": 0.0})
    assert pp.prices["cpu"] == pytest.approx(100.0 * 1e-9)  # the floor, not 0
    assert pp.update({"cpu": 3000.0})["cpu"] > 100.0 * 1e-9  # it can recover
    pp.update({"cpu": 1e-300})
    assert pp.update({"cpu": 1e4})["cpu"] == 100.0 * 1e12  # overflow: the ceiling


def test_overflow_is_inf() -> None:
    assert adapt(1.0, 1e-300, 10.0, 1.0) == math.inf
