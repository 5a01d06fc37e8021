"""The clearing of a period: the papers' worked examples, placement, load balancing."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from merkat.market import (
    NO_HOST,
    BalanceParams,
    Hosts,
    MarketError,
    VMs,
    balance,
    clear,
    enforceable,
    ideal_allocation,
    vm_errors,
    worst_fit_decreasing,
)
from merkat.market.generate import random_market
from merkat.market.types import bid_on


def cpu_only(bids: list[float], cap: float, host: list[int]) -> VMs:
    """VMs whose memory bids mirror their CPU bids (so both errors are the same)."""
    b = np.array([[x, x] for x in bids], dtype=float)
    return VMs(
        ids=tuple(f"vm{i}" for i in range(len(bids))),
        bid=b,
        cap=np.full((len(bids), 2), cap),
        host=np.array(host),
    )


def uniform_hosts(n: int, cpu: float = 100, memory: float = 100) -> Hosts:
    return Hosts(tuple(f"h{i}" for i in range(n)), np.array([[cpu, memory]] * n, dtype=float))


def test_merkat_3_nodes_worked_example() -> None:
    # Merkat §3.1: 3 nodes x 100 CPU, bids 12, 12, 12, 30, 30, the small VMs on one node.
    result = clear(uniform_hosts(3), cpu_only([12, 12, 12, 30, 30], 100, [0, 0, 0, 1, 2]))
    assert result.ideal[:, 0] == pytest.approx([37.5, 37.5, 37.5, 93.75, 93.75])
    assert result.allocation[:, 0] == pytest.approx([100 / 3] * 3 + [100, 100])
    assert result.error == pytest.approx([0.125] * 3 + [0.0625] * 2)
    # Some error exceeds 10 %, so balancing runs, but it finds no better mapping.
    assert result.balance.ran
    assert result.migrations == ()
    assert result.host.tolist() == [0, 0, 0, 1, 2]
    assert result.price[0] == pytest.approx(0.32)


def test_merkat_example_placed_from_scratch_gives_the_same_mapping() -> None:
    result = clear(uniform_hosts(3), cpu_only([12, 12, 12, 30, 30], 100, [NO_HOST] * 5))
    small = set(result.host[:3].tolist())
    assert len(small) == 1 and small.isdisjoint(result.host[3:].tolist())
    assert result.allocation[:, 0] == pytest.approx([100 / 3] * 3 + [100, 100])


def test_themis_2_hosts_worked_example() -> None:
    # Themis §III-B: 2 hosts x 100 CPU, three equal bids, cap 100: ideal 66.6, enforced 50/50/100.
    result = clear(uniform_hosts(2), cpu_only([10, 10, 10], 100, [NO_HOST] * 3))
    assert result.ideal[:, 0] == pytest.approx([200 / 3] * 3)
    assert sorted(result.allocation[:, 0].tolist()) == pytest.approx([50, 50, 100])
    assert result.migrations == ()


def test_worst_fit_decreasing_order_and_ties() -> None:
    # Sorted by bid: 30 (vm1) -> h0, 20 (vm2) -> h1, 10 (vm0) -> h1 (load 0.2 < 0.3).
    host = worst_fit_decreasing(uniform_hosts(2), cpu_only([10, 30, 20], 100, [NO_HOST] * 3))
    assert host.tolist() == [1, 0, 1]


def test_placement_respects_memory_minimum() -> None:
    hosts = Hosts(("big", "small"), np.array([[100.0, 4096.0], [100.0, 512.0]]))
    vms = VMs(
        ids=("a", "b", "c"),
        bid=np.array([[5.0, 5.0], [4.0, 4.0], [3.0, 3.0]]),
        cap=np.full((3, 2), math.inf),
        host=np.full(3, NO_HOST),
        minimum=np.array([[0.0, 1024.0], [0.0, 1024.0], [0.0, 4096.0]]),
    )
    host = worst_fit_decreasing(hosts, vms)
    # Nothing fits on "small"; c (4 GiB) no longer fits on "big" once a and b are there.
    assert host.tolist() == [0, 0, NO_HOST]
    result = clear(hosts, vms)
    assert result.allocation[2].tolist() == [0.0, 0.0]
    assert math.isnan(result.error[2])


def test_balancing_spreads_a_crowded_node_within_budget() -> None:
    # 4 equal VMs all on h0 of 2 hosts: ideal 50 each, enforced 25 each (error 100 %).
    vms = cpu_only([1, 1, 1, 1], 100, [0, 0, 0, 0])
    unbounded = clear(uniform_hosts(2), vms)
    assert len(unbounded.migrations) == 2
    assert unbounded.allocation[:, 0] == pytest.approx([50] * 4)
    assert unbounded.error == pytest.approx([0] * 4)
    one = clear(uniform_hosts(2), vms, params=BalanceParams(max_migrations=1))
    assert len(one.migrations) == 1
    assert sorted(one.allocation[:, 0].tolist()) == pytest.approx([100 / 3] * 3 + [100])
    none = clear(uniform_hosts(2), vms, params=BalanceParams(max_migrations=0))
    assert none.migrations == () and none.host.tolist() == [0, 0, 0, 0]


def test_balancing_does_not_run_under_the_threshold() -> None:
    # One VM per host, bids 10 and 11: ideal 95.2 and 104.8 (capped at 200), enforced 100
    # each: errors 4.8 % < 10 %, so no search and no migration.
    result = clear(uniform_hosts(2), cpu_only([10, 11], 200, [0, 1]))
    assert result.error == pytest.approx([1 - 200 * 10 / 21 / 100, 200 * 11 / 21 / 100 - 1])
    assert not result.balance.ran and result.balance.iterations == 0
    # With a 1 % threshold the search runs, and finds nothing better than one VM per host.
    strict = clear(
        uniform_hosts(2),
        cpu_only([10, 11], 200, [0, 1]),
        params=BalanceParams(error_threshold=0.01),
    )
    assert strict.balance.ran and strict.migrations == ()


def test_reserve_price_refusal_names_the_vm() -> None:
    vms = cpu_only([5, 0.5], 100, [NO_HOST, NO_HOST])
    with pytest.raises(MarketError, match=r"vms\[1\]\.bid\.cpu.*'vm1'.*reserve price 1"):
        clear(uniform_hosts(1), vms, reserve_price=np.array([1.0, 0.0]))


def test_unknown_host_index_is_refused() -> None:
    with pytest.raises(MarketError, match=r"vms\[0\]\.host"):
        clear(uniform_hosts(1), cpu_only([1], 10, [3]))


def test_negative_bid_is_refused() -> None:
    with pytest.raises(MarketError, match=r"vms\[0\]\.bid\.cpu"):
        cpu_only([-1], 10, [NO_HOST])


def test_empty_cluster_places_nothing() -> None:
    hosts = Hosts((), np.zeros((0, 2)))
    result = clear(hosts, cpu_only([1, 2], 10, [NO_HOST, NO_HOST]))
    assert result.host.tolist() == [NO_HOST, NO_HOST]
    assert result.allocation.sum() == 0
    assert all(math.isinf(p) for p in result.price)


def test_no_vms() -> None:
    result = clear(uniform_hosts(2), cpu_only([], 10, []))
    assert result.price.tolist() == [0.0, 0.0] and result.allocation.shape == (0, 2)


clusters = st.tuples(
    st.integers(1, 6),  # hosts
    st.integers(0, 25),  # vms
    st.integers(0, 2**31 - 1),  # seed
    st.floats(0.0, 1.0),  # placed fraction
    st.integers(0, 5),  # migration budget
)


@settings(max_examples=150, deadline=None)
@given(clusters)
def test_clear_properties(cluster: tuple[int, int, int, float, int]) -> None:
    n_hosts, n_vms, seed, placed, budget = cluster
    hosts, vms = random_market(n_vms, n_hosts, seed, placed)
    params = BalanceParams(max_migrations=budget)
    result = clear(hosts, vms, params=params)
    cap = hosts.capacity
    # Capacity per node and per cluster, caps per VM.
    for r in range(2):
        per_node = np.bincount(
            result.host[result.host >= 0],
            weights=result.allocation[result.host >= 0, r],
            minlength=n_hosts,
        )
        assert (per_node <= cap[:, r] * (1 + 1e-9)).all()
        assert result.ideal[:, r].sum() <= cap[:, r].sum() * (1 + 1e-9)
    assert (result.allocation <= vms.cap * (1 + 1e-9)).all()
    assert (result.ideal <= vms.cap * (1 + 1e-9)).all()
    # Every VM is placed (no minimums here) and no migration beyond the budget.
    assert (result.host >= 0).all()
    assert len(result.migrations) <= budget
    assert all(vms.host[m.vm] == m.src and result.host[m.vm] == m.dst for m in result.migrations)
    # Balancing never returns a mapping worse than the one it started from.
    start = worst_fit_decreasing(hosts, vms)
    before = vm_errors(enforceable(hosts, vms, start)[0], result.ideal)
    after = result.error
    rms = lambda e: float(np.sqrt(np.mean(e**2))) if e.size else 0.0  # noqa: E731
    assert rms(after) <= rms(before) * (1 + 1e-9) + 1e-12


def test_balance_result_matches_recomputed_errors() -> None:
    hosts, vms = random_market(400, 40, seed=7, placed_fraction=0.8)
    ideal, _ = ideal_allocation(hosts, vms)
    start = worst_fit_decreasing(hosts, vms)
    res = balance(hosts, vms, start, ideal, BalanceParams(max_migrations=10))
    final = vm_errors(enforceable(hosts, vms, res.host)[0], ideal)
    assert res.rms_after == pytest.approx(float(np.sqrt(np.mean(final**2))), rel=1e-9)
    assert res.rms_after < res.rms_before
    moved = (vms.host >= 0) & (res.host != vms.host)
    assert int(moved.sum()) <= 10


def test_clear_is_deterministic() -> None:
    hosts, vms = random_market(2000, 100, seed=3)
    a, b = clear(hosts, vms), clear(hosts, vms)
    assert np.array_equal(a.host, b.host) and np.array_equal(a.allocation, b.allocation)


@pytest.mark.parametrize("seed", range(12))
def test_enforceable_skips_only_a_resource_nobody_bids_on(seed: int) -> None:
    """enforceable leaves an unbid resource's allocations and prices at 0 without clearing
    it: the same bytes as a proportional share of every resource."""
    from merkat.market.share import proportional_share

    rng = np.random.default_rng(seed)
    n_hosts, n = int(rng.integers(1, 10)), int(rng.integers(1, 40))
    cap = np.column_stack([rng.choice([1.0, 2.0], n_hosts), np.full(n_hosts, 4096.0)])
    bid = np.zeros((n, 2))
    bid[:, 0] = rng.choice([0.0, 0.1, 1.0], n)
    if seed % 3 == 0:
        bid[:, 1] = rng.choice([0.0, -0.0], n)
    elif seed % 3 == 1:
        bid[:, 1] = rng.choice([0.0, 0.01], n)
    host = rng.integers(-1, n_hosts, n)
    hosts = Hosts(tuple(f"h{i}" for i in range(n_hosts)), cap)
    vms = VMs(tuple(f"v{i}" for i in range(n)), bid, rng.choice([0.5, 1.0, np.inf], (n, 2)),
              host)
    alloc, prices = enforceable(hosts, vms, host)
    want_a, want_p = np.zeros((n, 2)), np.zeros((n_hosts, 2))
    placed = np.flatnonzero(host >= 0)
    if placed.size:
        for r in range(2):
            s = proportional_share(bid[placed, r], vms.cap[placed, r], cap[:, r], host[placed])
            want_a[placed, r], want_p[:, r] = s.allocation, s.price
    assert alloc.tobytes() == want_a.tobytes() and prices.tobytes() == want_p.tobytes()


def test_errors_of_the_columns_that_count_are_all_columns_errors() -> None:
    """``vm_errors(a, i, columns)`` (the other columns 0 in both) equals ``vm_errors(a, i)``
    byte for byte: shares and ideals of every kind (zeros of both signs, subnormals, errors
    beyond the limit, inf and NaN), in either column."""
    rng = np.random.default_rng(11)
    pool = np.array([0.0, -0.0, 5e-324, 1e-300, 1e-6, 0.3, 1.0, 2.5, 1e3, 1e300, np.inf,
                     np.nan])
    for trial in range(200):
        n = int(rng.integers(0, 40))
        k = trial % 2
        a, i = np.zeros((n, 2)), np.zeros((n, 2))
        a[:, k] = rng.choice(pool, n) if trial % 3 else rng.uniform(0, 2, n)
        i[:, k] = rng.choice(pool, n) if trial % 4 else rng.uniform(0, 2, n)
        with np.errstate(invalid="ignore", over="ignore"):
            want = vm_errors(a, i)
            got = vm_errors(a, i, [k])
        assert got.tobytes() == want.tobytes(), trial
        assert vm_errors(np.zeros((n, 2)), np.zeros((n, 2)), []).tobytes() == vm_errors(
            np.zeros((n, 2)), np.zeros((n, 2))).tobytes()


@pytest.mark.parametrize("seed", range(8))
def test_a_kept_mapping_gives_the_fresh_clearing_and_errors(seed: int) -> None:
    """When the search keeps the starting mapping (no search, or none better), the clearing's
    allocation, node prices and errors come from the search's start (its node clearings
    and their errors): the same bytes as enforceable and vm_errors on the final mapping."""
    hosts, vms = random_market(60 + 40 * seed, 6 + seed, seed=seed, placed_fraction=0.9)
    kept = 0
    for threshold in (1e4, 0.1, 0.0):  # 1e4: no search; 0: a search on every error
        got = clear(hosts, vms, params=BalanceParams(error_threshold=threshold,
                                                     max_migrations=seed % 3))
        alloc, price = enforceable(hosts, vms, got.host)
        error = np.where(got.host >= 0, vm_errors(alloc, got.ideal), np.nan)
        assert got.allocation.tobytes() == alloc.tobytes()
        assert got.node_price.tobytes() == price.tobytes()
        assert got.error.tobytes() == error.tobytes()
        kept += bool(np.array_equal(got.host, worst_fit_decreasing(hosts, vms)))
    assert kept >= 1


def test_bid_on_is_any_nonzero_on_bids_of_every_kind() -> None:
    """``bid_on`` (the columns' sums by one product) answers ``bid.any(axis=0)`` on bids
    ``>= 0``: zeros of both signs, subnormals, huge values that overflow the sum, NaN."""
    from merkat.market.types import bid_on

    rng = np.random.default_rng(5)
    kinds = [0.0, -0.0, 5e-324, 1e-300, 1.0, 1e308, np.nan]
    for n in (1, 2, 3, 17, 300):
        for _ in range(60):
            bid = rng.choice(kinds, size=(n, 2), p=[0.4, 0.3, 0.06, 0.06, 0.1, 0.06, 0.02])
            want = [bool(x) for x in bid.any(axis=0).tolist()]
            assert bid_on(bid) == want, bid
    assert bid_on(np.zeros((0, 2))) == [False, False]
    assert bid_on(np.array([[0.0, -0.0], [-0.0, 0.0]])) == [False, False]


def test_hosts_derived_terms_are_the_direct_ones() -> None:
    """``Hosts.inv_capacity`` and ``all_have_capacity`` (kept per cluster for worst-fit)."""
    hosts = Hosts(("a", "b"), np.array([[2.0, 0.0], [0.5, 1e12]]))
    assert hosts.inv_capacity.tolist() == [[0.5, math.inf], [2.0, 1e-12]]
    assert not hosts.all_have_capacity
    assert Hosts(("a",), np.array([[1.0, 3.0]])).all_have_capacity


def test_the_clusters_kept_terms_are_the_fresh_ones() -> None:
    """``Hosts.total``, ``capacity_lists``, ``has_capacity`` and ``everywhere`` (kept on the
    cluster, whose capacity is never written) equal what the clearing computed each time
    before: the same bits, a node without memory, and a cluster without nodes."""
    cap = np.array([[1.0, 8192.0], [4.0, 0.0], [0.1, 3e-320]])
    hosts = Hosts(("a", "b", "c"), cap)
    assert hosts.total.tobytes() == cap.sum(axis=0).tobytes()
    assert hosts.capacity_lists == cap.T.tolist()
    assert hosts.has_capacity.tolist() == (cap > 0).tolist()
    assert hosts.everywhere == [True, False]
    assert hosts.total is hosts.total  # (computed once)
    empty = Hosts((), np.zeros((0, 2)))
    assert empty.total.tolist() == [0.0, 0.0] and empty.capacity_lists == [[], []]
    assert empty.everywhere == [True, True]


@settings(max_examples=120, deadline=None)
@given(clusters, st.sampled_from([None, 0, 1]), st.floats(0.0, 0.5))
def test_the_clearings_shortcuts_give_the_reference(
    cluster: tuple[int, int, int, float, int], untraded: int | None, threshold: float
) -> None:
    """``clear``'s shortcuts (issue 28, twenty-third session) against what they replace, byte
    for byte: the ideal allocation told which resources are traded (an untraded one left at
    0 without its market) against the one that clears every resource; a search that did not
    run moves no VM (no migration computed) and keeps its start's clearing."""
    n_hosts, n_vms, seed, placed, budget = cluster
    hosts, vms = random_market(n_vms, n_hosts, seed, placed)
    if untraded is not None:  # (a resource nobody bids on: memory in the trace runs)
        bid = vms.bid.copy()
        bid[:, untraded] = 0.0
        vms = VMs(vms.ids, bid, vms.cap, vms.host)
    ideal, price = ideal_allocation(hosts, vms)
    told = ideal_allocation(hosts, vms, bid_on(vms.bid))
    assert ideal.tobytes() == told[0].tobytes() and price.tobytes() == told[1].tobytes()
    params = BalanceParams(max_migrations=budget, error_threshold=threshold)
    result = clear(hosts, vms, params=params)
    assert result.ideal.tobytes() == ideal.tobytes() and result.price.tobytes() == price.tobytes()
    moved = np.flatnonzero((vms.host != NO_HOST) & (result.host != vms.host))
    assert [(m.vm, m.src, m.dst) for m in result.migrations] == [
        (i, int(vms.host[i]), int(result.host[i])) for i in moved.tolist()]
    alloc, node_price = enforceable(hosts, vms, result.host)
    assert result.allocation.tobytes() == alloc.tobytes()
    assert result.node_price.tobytes() == node_price.tobytes()
    if not result.balance.ran:
        assert result.host.tobytes() == worst_fit_decreasing(hosts, vms).tobytes()
        assert result.migrations == ()
