"""Generic policies: Scale-One-VM, Scale-Multi-VMs (Themis Fig. 3), Merkat Alg. 1-2."""

from __future__ import annotations

import pytest

from merkat.control import (
    Action,
    Budget,
    MerkatVerticalScaler,
    Metrics,
    Observation,
    ScaleMultiVMs,
    ScaleOneVM,
    Sense,
    VMState,
    VMView,
    make_policy,
)

LOWER, HIGHER = Sense.LOWER_IS_BETTER, Sense.HIGHER_IS_BETTER


def vm(i: int, alloc: dict[str, float], bid: dict[str, float], busy: bool = True,
       state: VMState = VMState.RUNNING) -> VMView:
    return VMView(f"vm{i}", state, alloc, bid, busy)


def ob(**kw: object) -> Observation:
    base: dict[str, object] = dict(time=0.0, period=300.0, prices={"cpu": 1.0},
                                   capacity={"cpu": 100.0}, vm_size={"cpu": 1.0},
                                   budget=Budget(100.0), bid_min={"cpu": 0.1})
    base.update(kw)
    return Observation(**base)  # type: ignore[arg-type]


# --- Scale-One-VM ----------------------------------------------------------------------------


def test_scale_one_vm_increases_by_one_plus_gap_then_doubles_at_limit() -> None:
    s = ScaleOneVM(t_diff=0.05, limit=3)
    lo, hi = {"cpu": 1.0}, 100.0
    bid = s.step({"cpu": 10.0}, 0.8, 1.0, HIGHER, lo, hi)  # progress 20 % short
    assert bid == pytest.approx({"cpu": 12.0})  # factor 1 + T = 1.2
    bid = s.step(bid, 0.8, 1.0, HIGHER, lo, hi)
    assert bid == pytest.approx({"cpu": 14.4})  # second period: still 1 + T
    bid = s.step(bid, 0.8, 1.0, HIGHER, lo, hi)
    assert bid == pytest.approx({"cpu": 28.8})  # third period in a row: aggressive 2
    bid = s.step(bid, 0.8, 1.0, HIGHER, lo, hi)
    assert bid == pytest.approx({"cpu": 57.6})
    bid = s.step(bid, 0.8, 1.0, HIGHER, lo, hi)
    assert bid == pytest.approx({"cpu": 100.0})  # bounded by bid_max
    assert s.wanted == pytest.approx(115.2)


def test_scale_one_vm_flip_restarts_the_run() -> None:
    s = ScaleOneVM()
    lo = {"cpu": 1.0}
    for _ in range(3):
        s.step({"cpu": 10.0}, 0.8, 1.0, HIGHER, lo, 100.0)
    bid = s.step({"cpu": 30.0}, 1.5, 1.0, HIGHER, lo, 100.0)  # ahead by 50 %: down, run 1
    assert bid == pytest.approx({"cpu": 20.0})
    assert (s.direction, s.run) == (-1, 1)


def test_scale_one_vm_holds_under_t_diff_and_caps_the_factor_at_two() -> None:
    s = ScaleOneVM()
    assert s.step({"cpu": 10.0}, 0.97, 1.0, HIGHER, {}, 100.0) == {"cpu": 10.0}
    s = ScaleOneVM()
    assert s.step({"cpu": 10.0}, 3.0, 1.0, HIGHER, {}, 100.0) == {"cpu": 5.0}  # T = 2: /2
    s = ScaleOneVM()
    assert s.step({"cpu": 1.5}, 3.0, 1.0, HIGHER, {"cpu": 1.0}, 100.0) == {"cpu": 1.0}  # bid_min


def test_scale_one_vm_lower_is_better_metric() -> None:
    s = ScaleOneVM()
    # an iteration time 20 % above the reference asks for more
    assert s.step({"cpu": 10.0}, 1.2, 1.0, LOWER, {}, 100.0) == pytest.approx({"cpu": 12.0})


def test_scale_one_vm_bounds_the_sum_of_several_resources() -> None:
    s = ScaleOneVM()
    bid = s.step({"cpu": 10.0, "memory": 5.0}, 0.5, 1.0, HIGHER, {}, 20.0)  # factor 1.5
    assert bid == pytest.approx({"cpu": 20 * 2 / 3, "memory": 20 / 3})


def test_scale_one_vm_controller_on_the_generic_metric() -> None:
    c = make_policy("scale-one-vm")
    o = ob(vms=(vm(0, {"cpu": 0.5}, {"cpu": 2.0}), vm(1, {"cpu": 0.5}, {"cpu": 2.0})),
           metrics=Metrics(performance=1.3, reference=1.0, sense=LOWER))
    d = c.decide(o)
    assert d.action is Action.NONE
    assert d.nvms == 2
    assert d.bids == {"vm0": pytest.approx({"cpu": 2.6}), "vm1": pytest.approx({"cpu": 2.6})}
    # no metric: nothing changes
    d = make_policy("scale-one-vm").decide(ob(vms=o.vms))
    assert d.bids["vm0"] == {"cpu": 2.0}


# --- Scale-Multi-VMs -------------------------------------------------------------------------


def test_scale_multi_vms_additive_then_doubling_steps() -> None:
    s = ScaleMultiVMs(limit=3, low=0.75, high=1.0)
    args = ({"cpu": 2.0}, {"cpu": 1.0}, {"cpu": 0.1}, 1000.0, 1000)
    n = 1
    seen = []
    for _ in range(4):
        n, bid = s.step(n, 2.0, 1.0, LOWER, *args)  # twice too slow: more VMs
        seen.append(n)
    assert seen == [2, 4, 8, 16]  # +1, +2, then doubling: +4, +8
    assert bid == {"cpu": 2.0}  # alloc_ref · P
    n, _ = s.step(n, 0.9, 1.0, LOWER, *args)  # between the thresholds: hold
    assert n == 16
    seen = []
    for _ in range(5):
        n, _ = s.step(n, 0.5, 1.0, LOWER, *args)  # well ahead: fewer VMs
        seen.append(n)
    assert seen == [15, 13, 9, 1, 1]


def test_scale_multi_vms_is_capped_by_what_the_budget_buys() -> None:
    s = ScaleMultiVMs()
    # each VM costs alloc_ref·P = 2: a budget of 10 buys 5
    n, _ = s.step(4, 2.0, 1.0, LOWER, {"cpu": 2.0}, {"cpu": 1.0}, {}, 10.0, 1000)
    assert n == 5
    n, _ = s.step(4, 2.0, 1.0, LOWER, {"cpu": 2.0}, {"cpu": 1.0}, {}, 1000.0, 3)  # T_nvms
    assert n == 3
    n, bid = s.step(4, 2.0, 1.0, LOWER, {"cpu": 2.0}, {"cpu": 1.0}, {}, 1.0, 1000)
    assert (n, bid) == (1, {"cpu": 1.0})  # not even one: one VM within the budget


def test_scale_multi_vms_controller_releases_idle_vms_first() -> None:
    c = make_policy("scale-multi-vms")
    vms = (vm(0, {"cpu": 1}, {"cpu": 1}), vm(1, {"cpu": 1}, {"cpu": 1}, busy=False),
           vm(2, {"cpu": 1}, {"cpu": 1}))
    d = c.decide(ob(vms=vms, metrics=Metrics(performance=0.1, reference=1.0, sense=LOWER)))
    assert d.nvms == 2
    assert d.release == ("vm1",)
    assert set(d.bids) == {"vm0", "vm2"}


# --- Merkat Alg. 1 ---------------------------------------------------------------------------

SIZE = {"cpu": 2.0, "memory": 1024.0}
PRICES = {"cpu": 1.0, "memory": 0.01}
FLOORS = {"cpu": 0.1, "memory": 0.1}
NOMIN = {"cpu": 0.0, "memory": 0.0}


def test_alg1_increase_by_one_plus_gap_on_each_resource_below_max() -> None:
    s = MerkatVerticalScaler()
    bid = s.step({"cpu": 1.0, "memory": 5.0}, +1, 0.3, {"cpu": 1.0, "memory": 500.0}, NOMIN,
                 SIZE, PRICES, FLOORS, 100.0)
    assert bid == pytest.approx({"cpu": 1.3, "memory": 6.5})
    assert s.history == {"cpu": 1, "memory": 1}


def test_alg1_does_not_increase_a_resource_at_its_maximum() -> None:
    s = MerkatVerticalScaler()
    bid = s.step({"cpu": 1.0, "memory": 5.0}, +1, 0.3, {"cpu": 2.0, "memory": 500.0}, NOMIN,
                 SIZE, PRICES, FLOORS, 100.0)
    assert bid == pytest.approx({"cpu": 1.0, "memory": 6.5})


def test_alg1_damps_a_change_that_reverses_the_last_one() -> None:
    s = MerkatVerticalScaler()
    alloc = {"cpu": 1.0, "memory": 500.0}
    bid = s.step({"cpu": 1.0, "memory": 5.0}, +1, 0.3, alloc, NOMIN, SIZE, PRICES, FLOORS, 100.0)
    bid = s.step(bid, -1, 0.3, alloc, NOMIN, SIZE, PRICES, FLOORS, 100.0)  # flip: 1 + 0.3/2
    assert bid == pytest.approx({"cpu": 1.3 / 1.15, "memory": 6.5 / 1.15})
    bid2 = s.step(bid, -1, 0.3, alloc, NOMIN, SIZE, PRICES, FLOORS, 100.0)  # same way: full
    assert bid2 == pytest.approx({"cpu": bid["cpu"] / 1.3, "memory": bid["memory"] / 1.3})


def test_alg1_decreases_an_overpaying_resource_even_on_target() -> None:
    s = MerkatVerticalScaler()
    # cpu bid 6 at price 1 buys 6 cores uncapped, the VM can use 2: decrease by min(2, 6/2)
    bid = s.step({"cpu": 6.0, "memory": 5.0}, 0, 0.0, {"cpu": 2.0, "memory": 500.0}, NOMIN,
                 SIZE, PRICES, FLOORS, 100.0)
    assert bid == pytest.approx({"cpu": 3.0, "memory": 5.0})
    bid = s.step({"cpu": 2.4, "memory": 5.0}, 0, 0.0, {"cpu": 2.0, "memory": 500.0}, NOMIN,
                 SIZE, PRICES, FLOORS, 100.0)
    assert bid["cpu"] == pytest.approx(2.0)  # 2.4 / (2.4/2)


def test_alg1_better_than_target_decreases_but_not_under_alloc_min_or_bid_min() -> None:
    s = MerkatVerticalScaler()
    amin = {"cpu": 1.0, "memory": 0.0}
    bid = s.step({"cpu": 1.0, "memory": 0.15}, -1, 1.0, {"cpu": 1.0, "memory": 500.0}, amin,
                 SIZE, PRICES, FLOORS, 100.0)
    assert bid == pytest.approx({"cpu": 1.0, "memory": 0.1})  # cpu at alloc_min; mem floored
    # under alloc_min: increase, by alloc_min/alloc (capped at 2) even with no gap
    bid = s.step({"cpu": 1.0, "memory": 5.0}, 0, 0.0, {"cpu": 0.8, "memory": 500.0}, amin,
                 SIZE, PRICES, FLOORS, 100.0)
    assert bid["cpu"] == pytest.approx(1.25)


def test_alg1_resplits_the_budget_by_distance_to_max_allocation() -> None:
    s = MerkatVerticalScaler()
    alloc = {"cpu": 1.0, "memory": 500.0}
    bid = s.step({"cpu": 1.0, "memory": 5.0}, +1, 0.3, alloc, NOMIN, SIZE, PRICES, FLOORS, 4.0)
    w_cpu, w_mem = 1 - 1.0 / 2.0, 1 - 500.0 / 1024.0
    assert bid == pytest.approx({"cpu": 4 * w_cpu / (w_cpu + w_mem),
                                 "memory": 4 * w_mem / (w_cpu + w_mem)})
    assert s.wanted == pytest.approx(1.3 + 6.5)


def test_alg1_resplit_keeps_the_saturated_resource_bid() -> None:
    # memory at its maximum keeps its bid; cpu gets the rest (Alg. 1 line 22)
    out = MerkatVerticalScaler.resplit({"cpu": 5.0, "memory": 3.0}, 4.0,
                                       {"cpu": 1.0, "memory": 1024.0}, SIZE, FLOORS)
    assert out == pytest.approx({"cpu": 1.0, "memory": 3.0})
    # both saturated: scaled down together
    out = MerkatVerticalScaler.resplit({"cpu": 6.0, "memory": 2.0}, 4.0, SIZE, SIZE, FLOORS)
    assert out == pytest.approx({"cpu": 3.0, "memory": 1.0})


def test_merkat_vertical_controller_per_vm_budget() -> None:
    c = make_policy("merkat-vertical")
    o = ob(prices=PRICES, capacity={"cpu": 100.0, "memory": 1e6}, vm_size=SIZE,
           bid_min=FLOORS, budget=Budget(8.0),
           vms=tuple(vm(i, {"cpu": 1.0, "memory": 500.0}, {"cpu": 1.0, "memory": 5.0})
                     for i in range(2)),
           metrics=Metrics(performance=1.3, reference=1.0, sense=LOWER))
    d = c.decide(o)
    w_cpu, w_mem = 0.5, 1 - 500.0 / 1024.0  # 7.8 wanted > 8/2 per VM: re-split
    want = {"cpu": 4 * w_cpu / (w_cpu + w_mem), "memory": 4 * w_mem / (w_cpu + w_mem)}
    assert d.bids["vm0"] == pytest.approx(want)
    assert d.bids["vm1"] == pytest.approx(want)
    assert d.total() == pytest.approx(8.0)


# --- Merkat Alg. 2 + 3 -----------------------------------------------------------------------


def _horizontal_obs(balance: float, perf: float) -> Observation:
    vms = (vm(0, {"cpu": 1}, {"cpu": 1}), vm(1, {"cpu": 1}, {"cpu": 1}, busy=False),
           vm(2, {"cpu": 1}, {"cpu": 1}))
    return ob(budget=Budget(balance), vms=vms, bid_min={"cpu": 0.01},
              metrics=Metrics(performance=perf, reference=1.0, sense=LOWER))


def test_alg2_adds_one_vm_within_the_alg3_bound() -> None:
    d = make_policy("merkat-horizontal").decide(_horizontal_obs(20.0, 2.0))
    assert d.nvms == 4
    assert d.release == ()
    assert d.new_vm_bid == pytest.approx({"cpu": (4 / 0.96) / 4})  # Alg. 3 line 5, per VM


def test_alg2_releases_down_to_the_alg3_bound() -> None:
    # budget 3: 2/0.98 = 2.04 < 3 <= 3/0.97 = 3.09, so N = 2 even though the app wants 4
    d = make_policy("merkat-horizontal").decide(_horizontal_obs(3.0, 2.0))
    assert d.nvms == 2
    assert d.release == ("vm1",)
    assert d.bids["vm0"] == pytest.approx({"cpu": (2 / 0.98) / 2})


def test_alg2_removes_one_vm_when_ahead_and_keeps_one_when_nothing_is_affordable() -> None:
    d = make_policy("merkat-horizontal").decide(_horizontal_obs(20.0, 0.5))
    assert d.nvms == 2
    d = make_policy("merkat-horizontal").decide(_horizontal_obs(0.5, 2.0))
    assert d.nvms == 1
    assert sum(d.new_vm_bid.values()) == pytest.approx(0.5)


def test_alg1_damping_survives_a_hold_period() -> None:
    s = MerkatVerticalScaler()
    alloc = {"cpu": 1.0, "memory": 500.0}
    args = (alloc, NOMIN, SIZE, PRICES, FLOORS, 100.0)
    bid = s.step({"cpu": 1.0, "memory": 5.0}, +1, 0.4, *args)  # up by 1.4
    held = s.step(bid, 0, 0.0, *args)  # between the thresholds: no change
    assert held == pytest.approx(bid)
    down = s.step(held, -1, 0.4, *args)  # the reversal is still damped: 1 + 0.4/2
    assert down == pytest.approx({r: b / 1.2 for r, b in bid.items()})
