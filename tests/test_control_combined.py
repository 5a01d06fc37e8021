"""Merkat §3.2's combined controller (``merkat-combined``) on hand-made observations: each
branch — vertical suffices; vertical at maximum adds a VM; the upper bound or a VM that did not
help returns to vertical steps; over-provisioned sheds VMs before lowering bids."""

from __future__ import annotations

import pytest

from merkat.control import (
    POLICIES,
    Budget,
    MerkatCombined,
    Metrics,
    Observation,
    Sense,
    VMState,
    VMView,
    make_policy,
)


def vm(i: int, alloc: float, bid: float, busy: bool = True) -> VMView:
    return VMView(f"vm{i}", VMState.RUNNING, {"cpu": alloc}, {"cpu": bid}, busy)


def ob(vms: tuple[VMView, ...], v: float, budget: float = 100.0) -> Observation:
    """A queue-like metric (lower is better) against v_ref = 1, price 1 per core, 100 cores."""
    return Observation(time=0.0, period=300.0, prices={"cpu": 1.0}, capacity={"cpu": 100.0},
                       vm_size={"cpu": 1.0}, budget=Budget(budget), bid_min={"cpu": 0.1},
                       vms=vms, metrics=Metrics(performance=v, reference=1.0,
                                                sense=Sense.LOWER_IS_BETTER))


def test_vertical_suffices_while_the_vms_are_under_their_maximum() -> None:
    c = MerkatCombined()
    d = c.decide(ob((vm(0, 0.5, 0.5),), v=2.0))  # twice the reference, VM at half its size
    assert d.nvms == 1 and d.release == ()
    assert d.bids["vm0"] == pytest.approx({"cpu": 1.0})  # Alg. 1: factor min(2, 1 + T) = 2


def test_vertical_at_maximum_adds_one_vm_with_alg3_bids() -> None:
    c = MerkatCombined()
    d = c.decide(ob((vm(0, 1.0, 1.0), vm(1, 1.0, 1.0)), v=2.0))
    assert d.nvms == 3 and d.release == ()
    # Alg. 3 for 3 full VMs at price 1 on 100 cores: 3 / (1 - 3/100) in all, a third each
    assert d.new_vm_bid == pytest.approx({"cpu": 3 / 0.97 / 3})
    assert d.reason == "at maximum allocation: one VM more"


def test_at_the_budget_upper_bound_it_stays_vertical() -> None:
    c = MerkatCombined()
    # 2.5 credits buy 2 full VMs (2/0.98) but not 3 (3/0.97): no VM more, the bids hold
    d = c.decide(ob((vm(0, 1.0, 1.0), vm(1, 1.0, 1.0)), v=2.0, budget=2.5))
    assert d.nvms == 2
    assert d.bids == {"vm0": {"cpu": 1.0}, "vm1": {"cpu": 1.0}}


def test_a_vm_that_did_not_help_stops_the_scale_out_until_the_metric_recovers() -> None:
    c = MerkatCombined()
    full2 = (vm(0, 1.0, 1.0), vm(1, 1.0, 1.0))
    full3 = (*full2, vm(2, 1.0, 1.0))
    assert c.decide(ob(full2, v=2.0)).nvms == 3
    d = c.decide(ob(full3, v=2.5))  # worse with one VM more: "the performance value drops"
    assert d.nvms == 3 and d.release == ()
    assert c.decide(ob(full3, v=2.5)).nvms == 3  # still blocked
    assert c.decide(ob(full3, v=0.9)).nvms == 3  # within the thresholds: unblocked
    assert c.decide(ob(full3, v=2.0)).nvms == 4


def test_a_vm_that_helped_lets_it_add_the_next() -> None:
    c = MerkatCombined()
    full2 = (vm(0, 1.0, 1.0), vm(1, 1.0, 1.0))
    assert c.decide(ob(full2, v=2.0)).nvms == 3
    assert c.decide(ob((*full2, vm(2, 1.0, 1.0)), v=1.5)).nvms == 4


def test_over_provisioned_sheds_vms_first_idle_ones_first_bids_unchanged() -> None:
    c = MerkatCombined()
    d = c.decide(ob((vm(0, 1.0, 0.9), vm(1, 1.0, 0.9, busy=False), vm(2, 1.0, 0.9)), v=0.5))
    assert d.nvms == 2 and d.release == ("vm1",)
    assert d.bids == {"vm0": {"cpu": 0.9}, "vm2": {"cpu": 0.9}}


def test_over_provisioned_with_one_vm_lowers_its_bid() -> None:
    c = MerkatCombined()
    d = c.decide(ob((vm(0, 1.0, 0.9),), v=0.5))
    assert d.nvms == 1 and d.release == ()
    assert d.bids["vm0"] == pytest.approx({"cpu": 0.6})  # Alg. 1 down: 0.9 / (1 + 0.5)


def test_registered_by_name_for_task_farms_and_moldable_trace_jobs() -> None:
    assert isinstance(make_policy("merkat-combined", low=0.5), MerkatCombined)
    assert POLICIES["merkat-combined"].applies_to == ("task-farm", "moldable")
    for name in ("merkat-horizontal", "scale-multi-vms"):
        assert "moldable" in POLICIES[name].applies_to
    with pytest.raises(ValueError, match="max_alloc_tol"):
        MerkatCombined(max_alloc_tol=1.0)
