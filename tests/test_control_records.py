"""The fast record builders the period loop uses: the same records as the constructors."""

from __future__ import annotations

import math

import pytest

from merkat.control.types import (
    Budget,
    Demand,
    Metrics,
    Observation,
    VMState,
    VMView,
    new_budget,
    new_demand,
    new_metrics,
    new_observation_unchecked,
    new_vm_view,
)


def test_builders_make_the_records_the_constructors_make() -> None:
    alloc, bid = {"cpu": 0.5}, {"cpu": 2.0}
    assert new_vm_view(id="v", state=VMState.RUNNING, alloc=alloc, bid=bid) == VMView(
        "v", VMState.RUNNING, alloc, bid
    )
    assert new_vm_view(id="v", state=VMState.RUNNING, alloc=alloc, bid=bid, busy=False).busy is False
    assert new_metrics(work_done=3.0, work_total=10.0) == Metrics(work_done=3.0, work_total=10.0)
    assert new_metrics(work_total=10.0, work_done=4.0).work_left == 6.0
    assert new_budget(balance=5.0) == Budget(5.0)
    d = new_demand(nvms=2, bids={"v": bid})
    assert d == Demand(nvms=2, bids={"v": bid}) and d.total() == 2.0
    # default factories give each record its own mapping
    assert new_demand().bids is not new_demand().bids
    with pytest.raises(AttributeError):  # still frozen
        d.nvms = 3  # type: ignore[misc]


def test_builders_refuse_missing_and_unknown_fields() -> None:
    with pytest.raises(TypeError, match="bid"):
        new_vm_view(id="v", state=VMState.RUNNING, alloc={})
    with pytest.raises(TypeError, match="colour"):
        new_budget(balance=1.0, colour="red")


def test_unchecked_observation_skips_only_the_checks() -> None:
    parts = dict(time=0.0, period=300.0, capacity={"cpu": 4.0}, vm_size={"cpu": 1.0},
                 budget=Budget(10.0))
    with pytest.raises(ValueError, match="prices"):
        Observation(prices={"cpu": math.nan}, **parts)  # type: ignore[arg-type]
    obs = new_observation_unchecked(prices={"cpu": 0.25}, **parts)
    assert obs == Observation(prices={"cpu": 0.25}, **parts)  # type: ignore[arg-type]
    assert obs.resources == ("cpu",) and obs.active_vms == () and obs.size == 1
