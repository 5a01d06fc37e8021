"""Proportional share with caps: worked numbers, degenerate cases and properties."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from merkat.market import proportional_share

REL = 1e-9


def test_plain_proportional_share_merkat_eq1() -> None:
    s = proportional_share([12, 12, 12, 30, 30], [math.inf] * 5, 300)
    assert s.price[0] == pytest.approx(96 / 300)
    assert s.allocation == pytest.approx([37.5, 37.5, 37.5, 93.75, 93.75])
    assert not s.capped.any()


def test_caps_water_filling_redistributes_the_rest() -> None:
    # 100 units, bids 10/10/80; VM 2 would get 80 but its cap is 50: the other two share 50.
    s = proportional_share([10, 10, 80], [100, 100, 50], 100)
    assert s.allocation == pytest.approx([25, 25, 50])
    assert s.capped.tolist() == [False, False, True]
    assert s.price[0] == pytest.approx(20 / 50)  # uncapped bids / capacity left to them
    assert s.uncapped_bids[0] == pytest.approx(20)
    assert s.capacity_left[0] == pytest.approx(50)


def test_cascading_caps() -> None:
    # Capping VM 0 raises the price for the others so that VM 1 must be capped too.
    s = proportional_share([50, 30, 20], [10, 35, 100], 100)
    assert s.allocation == pytest.approx([10, 35, 55])
    assert s.price[0] == pytest.approx(20 / 55)


def test_all_zero_bids_allocate_nothing_at_price_zero() -> None:
    s = proportional_share([0, 0, 0], [1, 2, 3], 10)
    assert s.allocation.tolist() == [0, 0, 0]
    assert s.price.tolist() == [0.0]


def test_zero_bid_vm_gets_nothing_others_share_all() -> None:
    s = proportional_share([0, 5, 5], [10, 10, 10], 10)
    assert s.allocation == pytest.approx([0, 5, 5])


def test_zero_capacity_allocates_nothing_and_price_is_infinite() -> None:
    s = proportional_share([1, 2], [5, 5], 0)
    assert s.allocation.tolist() == [0, 0]
    assert math.isinf(s.price[0])


def test_empty_market() -> None:
    s = proportional_share([], [], 10)
    assert s.allocation.size == 0 and s.price.tolist() == [0.0]


def test_demand_below_supply_every_vm_capped_price_zero() -> None:
    s = proportional_share([1, 2], [2, 3], 100)
    assert s.allocation == pytest.approx([2, 3])
    assert s.capped.all()
    assert s.price[0] == 0.0
    assert s.capacity_left[0] == pytest.approx(95)


def test_segmented_equals_one_call_per_group() -> None:
    rng = np.random.default_rng(1)
    n, g = 200, 7
    bids = rng.uniform(0, 5, n)
    caps = rng.choice([1.0, 2.0, 4.0, math.inf], n)
    group = rng.integers(0, g, n)
    capacity = rng.uniform(0, 20, g)
    seg = proportional_share(bids, caps, capacity, group)
    for k in range(g):
        idx = np.flatnonzero(group == k)
        one = proportional_share(bids[idx], caps[idx], capacity[k])
        assert seg.allocation[idx] == pytest.approx(one.allocation, rel=1e-9, abs=1e-12)
        assert seg.price[k] == pytest.approx(one.price[0], rel=1e-9)


markets = st.integers(min_value=1, max_value=30).flatmap(
    lambda n: st.tuples(
        st.lists(st.one_of(st.just(0.0), st.floats(0.01, 1000)), min_size=n, max_size=n),
        st.lists(st.one_of(st.floats(0.01, 100), st.just(math.inf)), min_size=n, max_size=n),
        st.floats(0.0, 500),
    )
)


@settings(max_examples=300, deadline=None)
@given(markets)
def test_properties_of_the_rule(market: tuple[list[float], list[float], float]) -> None:
    bids, caps, capacity = (np.array(x, dtype=float) for x in market)
    s = proportional_share(bids, caps, capacity)
    a, p = s.allocation, s.price[0]
    tol = 1e-9 * max(capacity, 1.0)
    # Capacity and caps are respected; allocations are non-negative.
    assert (a >= 0).all()
    assert a.sum() <= capacity + tol
    assert (a <= caps + tol).all()
    # Zero bids get nothing.
    assert (a[bids == 0] == 0).all()
    below = (bids > 0) & (a < caps - tol)
    if below.any() and capacity > 0:
        # Work conservation: someone wants more, so nothing is left idle.
        assert a.sum() == pytest.approx(capacity, rel=1e-9)
        # Proportionality among uncapped VMs: a_i = b_i / p.
        assert a[below] == pytest.approx(bids[below] / p, rel=1e-9)
        # The price is the uncapped bids over the capacity left to them.
        unc = ~s.capped & (bids > 0)
        left = capacity - caps[s.capped].sum()
        with np.errstate(over="ignore", divide="ignore"):
            assert p == pytest.approx(np.float64(bids[unc].sum()) / left, rel=1e-9)
    # A capped VM would have got at least its cap at that price.
    if p > 0 and np.isfinite(p):
        assert (bids[s.capped & (bids > 0)] / p >= caps[s.capped & (bids > 0)] * (1 - 1e-9)).all()


@settings(max_examples=200, deadline=None)
@given(markets, st.integers(0, 29), st.floats(1.0, 10.0))
def test_own_bid_rise_never_lowers_own_allocation(
    market: tuple[list[float], list[float], float], who: int, factor: float
) -> None:
    bids, caps, capacity = (np.array(x, dtype=float) for x in market)
    i = who % bids.size
    before = proportional_share(bids, caps, capacity).allocation[i]
    raised = bids.copy()
    raised[i] = max(raised[i], 0.01) * factor
    after = proportional_share(raised, caps, capacity).allocation[i]
    assert after >= before * (1 - 1e-9) - 1e-12


@settings(max_examples=300, deadline=None)
@given(markets)
def test_small_python_version_equals_vectorised(
    market: tuple[list[float], list[float], float],
) -> None:
    from merkat.market.share import proportional_share_small

    bids, caps, capacity = market
    s = proportional_share(bids, caps, capacity)
    alloc, price, ub, left = proportional_share_small(bids, caps, capacity)
    assert alloc == pytest.approx(s.allocation.tolist(), rel=1e-9, abs=1e-12)
    assert price == pytest.approx(float(s.price[0]), rel=1e-9)
    assert ub == pytest.approx(float(s.uncapped_bids[0]), rel=1e-9, abs=1e-12)
    assert left == pytest.approx(float(s.capacity_left[0]), rel=1e-9, abs=1e-9)


def _bits(x: object) -> list[int]:
    return np.asarray(x, dtype=np.float64).view(np.int64).tolist()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(
    st.lists(st.tuples(st.one_of(st.just(0.0), st.floats(1e-6, 1e3)),
                       st.one_of(st.just(0.0), st.floats(1e-3, 100), st.just(math.inf))),
             max_size=12),
    st.one_of(st.just(0.0), st.floats(1e-3, 50))), min_size=1, max_size=8))
def test_segmented_python_version_is_numpys_bit_for_bit(
    markets: list[tuple[list[tuple[float, float]], float]],
) -> None:
    """The load balancer's plain-Python segmented clearing gives numpy's bits (the prefix
    sums run across the markets), allocations, uncapped bids and capacity left included."""
    from merkat.market.share import segmented_share_small

    rows_b = [[b for b, _ in vms] for vms, _ in markets]
    rows_m = [[m for _, m in vms] for vms, _ in markets]
    capacity = [c for _, c in markets]
    group = np.repeat(np.arange(len(markets)), [len(r) for r in rows_b])
    s = proportional_share([b for r in rows_b for b in r], [m for r in rows_m for m in r],
                           capacity, group)
    alloc, uncapped, left = segmented_share_small(rows_b, rows_m, capacity)
    assert _bits([a for row in alloc for a in row]) == _bits(s.allocation)
    assert _bits(uncapped) == _bits(s.uncapped_bids)
    assert _bits(left) == _bits(s.capacity_left)


def test_segmented_python_version_worked_example() -> None:
    """Two nodes: the first as in test_caps_water_filling_redistributes_the_rest (VM 2
    capped at 50), the second with one VM alone (it gets the whole node)."""
    from merkat.market.share import segmented_share_small

    alloc, uncapped, left = segmented_share_small([[10, 10, 80], [3.0]],
                                                  [[100, 100, 50], [math.inf]], [100, 4])
    assert alloc == [[25.0, 25.0, 50.0], [4.0]]
    assert uncapped == [20.0, 3.0] and left == [50.0, 4.0]


_ROW_VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, width=64),
    st.sampled_from([0.0, -0.0, 1e-300, 5e-324, 1e308, -1e308]),
)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(min_value=0, max_value=12),
    st.integers(min_value=1, max_value=3),
    st.data(),
)
def test_row_max_and_row_sum_are_numpys_reductions_bit_for_bit(
    rows: int, cols: int, data: st.DataObject
) -> None:
    # The column-wise helpers replace a.max(axis=1) and a.sum(axis=1) on the market's hot
    # paths: the results must be the same bits (NaN where numpy gives NaN, the sign of zero).
    from merkat.market.types import row_max, row_sum

    values = data.draw(st.lists(_ROW_VALUES, min_size=rows * cols, max_size=rows * cols))
    a = np.array(values, dtype=np.float64).reshape(rows, cols)
    with np.errstate(invalid="ignore", over="ignore"):
        for mine, ref in ((row_max(a), a.max(axis=1)), (row_sum(a), a.sum(axis=1))):
            assert mine.shape == ref.shape
            assert np.array_equal(np.isnan(mine), np.isnan(ref))
            ok = ~np.isnan(ref)
            assert np.array_equal(mine[ok].view(np.int64), ref[ok].view(np.int64))


def _share_bytes(s: object) -> list[bytes]:
    return [np.ascontiguousarray(getattr(s, k)).tobytes() for k in
            ("allocation", "price", "capped", "uncapped_bids", "capacity_left")]


def _uncapped_market(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """Random markets, most with no binding cap (one-core VMs on one-core hosts, infinite
    caps, many VMs per node), some with one, zero capacities, empty groups, zero and
    subnormal bids, huge caps and bids (running sums near overflow)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    n_groups = int(rng.integers(1, 40))
    b = rng.choice([0.0, 0.001, 0.5, 1.0, 3.7], size=n) * rng.choice(
        [1.0, 1.0, 1.0, 1e-300, 1e-320], size=n)
    if seed % 3 == 0:
        b = rng.uniform(0.0, 5.0, n)
    m = rng.choice([1.0, np.inf, 1e12, 0.0, 0.25], size=n, p=[0.5, 0.3, 0.1, 0.05, 0.05])
    cap = rng.choice([1.0, 0.0, 8.0, 1e12], size=n_groups, p=[0.7, 0.1, 0.1, 0.1])
    if seed % 11 == 0:
        b = b * 1e306
    if seed % 13 == 0:
        m = np.where(m == 1.0, 1e307, m)
    if seed % 4 == 1:  # the usual market: every VM capped at 1 core on 1-core hosts
        m, cap = np.ones(n), np.ones(n_groups)
    group = None if seed % 5 == 0 else rng.integers(0, n_groups, n)
    if seed % 7 == 0:
        group = np.zeros(n, dtype=np.int64)
    if group is None:
        cap = cap[:1]
    return b, m, cap, group


def test_the_uncapped_share_is_the_reference_byte_for_byte() -> None:
    """``uncapped_share`` (the fast path when no VM is capped) gives the numpy reference's
    arrays byte for byte, signs of zeros included, or None; it answers for most markets of
    one-core VMs, and refuses whenever a cap binds (then the reference answers)."""
    from merkat.market.share import proportional_share_numpy, uncapped_share

    answered = refused = 0
    for seed in range(600):
        b, m, cap, group = _uncapped_market(seed)
        if not b.any():
            continue
        want = proportional_share_numpy(b, m, cap, group)
        got = uncapped_share(b, m, cap, group)
        if got is None:
            refused += 1
            continue
        answered += 1
        assert not want.capped.any(), seed
        assert _share_bytes(got) == _share_bytes(want), seed
        assert _share_bytes(proportional_share(b, m, cap, group)) == _share_bytes(want)
    assert answered > 120 and refused > 50, (answered, refused)


def test_the_uncapped_share_refuses_a_binding_cap_and_overflowing_sums() -> None:
    from merkat.market.share import uncapped_share

    one = np.ones(3)
    assert uncapped_share(np.array([1.0, 1.0, 5.0]), one, np.array([3.0]), None) is None
    s = uncapped_share(np.array([1.0, 1.0, 1.0]), one, np.array([3.0]), None)
    assert s is not None and s.allocation.tolist() == [1.0, 1.0, 1.0]
    big = np.array([1e308, 1e308, 1.0])
    assert uncapped_share(big, np.full(3, np.inf), np.array([1.0, 1.0]),
                          np.array([0, 0, 1])) is None
    assert uncapped_share(np.ones(3), np.full(3, 1e308), np.array([1.0, 1.0]),
                          np.array([0, 0, 1])) is None


def _capped_market(seed: int) -> tuple[np.ndarray, np.ndarray, float]:
    """One market near the all-capped bound: caps summing just under or over the capacity,
    bids of every scale, and now and then a zero bid, a zero or ``-0.0`` or infinite cap."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 200))
    m = rng.choice([1.0, 0.5, 2.0, 1.0 / 3.0], n) * (1.0 if seed % 3 else rng.random(n))
    b = rng.random(n) * 10.0 ** rng.integers(-12, 6)
    if seed % 7 == 0:
        b[rng.integers(n)] = 0.0
    if seed % 11 == 0:
        m[rng.integers(n)] = 0.0
    if seed % 13 == 0:
        m[rng.integers(n)] = -0.0
    if seed % 17 == 0:
        m[rng.integers(n)] = np.inf
    if seed % 19 == 0:
        b[rng.integers(n)] = 1e-250  # a ratio below the bound's floor
    slack = [0.0, 1e-6, 1e-3, 0.01, 0.5, -0.1][seed % 6]
    cap = float(np.sum(m[np.isfinite(m)])) * (1.0 + slack) + (seed % 5 == 0)
    return b, m, cap


def test_every_vm_capped_is_the_reference_byte_for_byte() -> None:
    """Where ``every_vm_capped`` answers True (the ideal allocation of an underloaded
    cluster, taken without the sort), the reference caps every VM: its allocation is the
    caps byte for byte and its price +0.0; it refuses zero bids, ``-0.0`` and infinite caps,
    tiny ratios and a capacity within 0.1 % of the caps' sum, and answers most others."""
    from merkat.market.share import proportional_share_numpy
    from merkat.market.share_capped import every_vm_capped

    answered = refused = 0
    for seed in range(900):
        b, m, cap = _capped_market(seed)
        want = proportional_share_numpy(b, m, np.array([cap]), None)
        if not every_vm_capped(b, m, cap):
            refused += 1
            continue
        answered += 1
        assert want.capped.all(), seed
        assert want.allocation.tobytes() == m.tobytes(), seed
        assert want.price.tobytes() == np.zeros(1).tobytes(), seed
        assert (b > 0).all() and np.isfinite(m).all() and not np.signbit(m).any(), seed
    assert answered > 250 and refused > 250, (answered, refused)
    one = np.ones(4)
    assert every_vm_capped(one, one, 8.0)
    assert not every_vm_capped(one, one, 4.0)  # (no capacity left over: the reference decides)
    assert not every_vm_capped(np.array([1.0, 0.0]), np.ones(2), 8.0)
    assert not every_vm_capped(np.ones(2), np.array([1.0, -0.0]), 8.0)
    assert not every_vm_capped(np.zeros(0), np.zeros(0), 8.0)


def test_the_ideal_allocation_of_an_underloaded_cluster_is_the_caps() -> None:
    """``ideal_allocation`` with the shortcut gives what the reference's per-resource
    clearing gives, byte for byte, on an underloaded cluster and on a loaded one."""
    from merkat.market import Hosts, VMs, ideal_allocation
    from merkat.market.share import proportional_share_numpy

    hosts = Hosts(("a", "b", "c"), np.array([[1.0, 1e12]] * 3))
    for n in (2, 3, 7):
        bid = np.column_stack([np.linspace(0.001, 0.005, n), np.zeros(n)])
        cap = np.column_stack([np.ones(n), np.zeros(n)])
        vms = VMs(tuple(f"v{i}" for i in range(n)), bid, cap, np.full(n, -1))
        ideal, price = ideal_allocation(hosts, vms)
        ref = proportional_share_numpy(bid[:, 0], cap[:, 0], np.array([3.0]), None)
        assert ideal[:, 0].tobytes() == ref.allocation.tobytes()
        assert price.tolist() == [ref.price[0], 0.0]
        assert (ideal[:, 0] == 1.0).all() == (n < 3)
