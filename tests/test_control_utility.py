"""Utilities (SLO paper Table 1), Merkat's satisfaction, Themis' value and efficiency."""

from __future__ import annotations

import math

import pytest

from merkat.control import (
    SLOKind,
    deadline_partial,
    deadline_strict,
    efficiency,
    merkat_satisfaction,
    performance_partial,
    performance_strict,
    themis_value,
    utility,
)


def test_deadline_strict() -> None:
    assert deadline_strict(10.0, 100.0, 100.0) == 10.0
    assert deadline_strict(10.0, 100.1, 100.0) == 0.0


def test_deadline_partial() -> None:
    assert deadline_partial(10.0, 90.0, 100.0, 3.0, 4.0) == 10.0
    assert deadline_partial(10.0, 120.0, 100.0, 3.0, 4.0) == pytest.approx(7.5)
    assert deadline_partial(10.0, math.inf, 100.0, 0.0, 4.0) == 0.0


def test_performance_strict() -> None:
    # t_ideal 40, deadline 100: value falls linearly from B at 40 to 0 at 100
    assert performance_strict(10.0, 40.0, 100.0, 40.0) == pytest.approx(10.0)
    assert performance_strict(10.0, 70.0, 100.0, 40.0) == pytest.approx(5.0)
    assert performance_strict(10.0, 130.0, 100.0, 40.0) == 0.0
    assert performance_strict(10.0, math.inf, 100.0, 40.0) == 0.0
    assert performance_strict(10.0, 40.0, 40.0, 40.0) == 10.0  # no slack at all


def test_performance_partial_is_the_mean_of_deadline_partial_and_performance_strict() -> None:
    assert performance_partial(10.0, 70.0, 100.0, 40.0, 4.0, 4.0) == pytest.approx(
        (10.0 + 5.0) / 2)
    assert performance_partial(10.0, 130.0, 100.0, 40.0, 1.0, 4.0) == pytest.approx(
        (2.5 + 0.0) / 2)


def test_utility_dispatches_by_kind() -> None:
    args = (10.0, 70.0, 100.0, 40.0, 1.0, 4.0)
    assert utility("deadline-strict", *args) == 10.0
    assert utility(SLOKind.DEADLINE_PARTIAL, *args) == 10.0
    assert utility("performance-strict", *args) == pytest.approx(5.0)
    assert utility("performance-partial", *args) == pytest.approx(7.5)
    with pytest.raises(ValueError):
        utility("nope", *args)


def test_satisfaction_value_and_efficiency() -> None:
    assert merkat_satisfaction(3.0, True) == 3.0
    assert merkat_satisfaction(3.0, False) == -3.0
    assert themis_value(3.0, True) == 3.0
    assert themis_value(3.0, False) == 0.0
    assert efficiency(30.0, 15.0) == 2.0
    assert efficiency(0.0, 0.0) == 1.0
    assert efficiency(5.0, 0.0) == math.inf
