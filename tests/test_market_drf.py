"""Dominant Resource Fairness (Ghodsi et al., NSDI 2011) and the DRF-aware market ``drf``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from merkat.cli import app
from merkat.market import NO_HOST, BalanceParams, Hosts, VMs
from merkat.market.drf import bundle_share, progressive_filling, progressive_filling_tasks
from merkat.market.mechanisms import make_mechanism

runner = CliRunner()


def test_ghodsi_worked_example_a_gets_three_tasks_b_two() -> None:
    """Ghodsi et al. §4: 9 CPUs, 18 GB; A's tasks <1 CPU, 4 GB>, B's <3 CPUs, 1 GB>."""
    tasks = progressive_filling_tasks([9.0, 18.0], [[1.0, 4.0], [3.0, 1.0]])
    assert tasks.tolist() == [3, 2]
    # both end with the same dominant share: A 12/18 of memory, B 6/9 of CPU
    assert tasks[0] * 4 / 18 == pytest.approx(tasks[1] * 3 / 9) == pytest.approx(2 / 3)
    # with a bound on A's tasks, B takes what A leaves: A 1 task, B 2 (CPU 7, then 3 don't fit)
    assert progressive_filling_tasks([9.0, 18.0], [[1.0, 4.0], [3.0, 1.0]], [1, 5]).tolist() \
        == [1, 2]


def test_continuous_drf_equalises_dominant_shares_of_the_example() -> None:
    # A demands 9 tasks' worth and B 3: neither is satisfied; DRF gives x A-tasks and y B-tasks
    # with 4x/18 = 3y/9 and x + 3y = 9 (CPU exhausted): x = 3, y = 2.
    frac = progressive_filling([9.0, 18.0], [[9.0, 36.0], [9.0, 3.0]])
    assert frac[0] * 9 == pytest.approx(3.0)
    assert frac[1] * 3 == pytest.approx(2.0)


def test_continuous_drf_gives_a_small_demand_all_it_asks() -> None:
    frac = progressive_filling([10.0, 10.0], [[1.0, 1.0], [20.0, 5.0], [0.0, 0.0]])
    assert frac[0] == pytest.approx(1.0) and frac[2] == 1.0
    assert frac[1] * 20 == pytest.approx(9.0)  # the CPU left


def test_bundle_share_two_vms_one_price_per_dominant_share() -> None:
    # capacity 4 cores, 8 GB; VM a bundle <4, 2> (CPU-dominant, d=1), b <1, 8> (memory, d=1).
    x, p = bundle_share([3.0, 1.0], [[4.0, 2.0], [1.0, 8.0]], [4.0, 8.0])
    # both bundles have dominant share 1, so x_i = b_i / p; CPU: 4x_a + x_b <= 4 needs
    # p >= 3.25, memory: 2x_a + 8x_b <= 8 needs p >= 1.75: CPU binds, p = 3.25.
    assert p == pytest.approx(3.25)
    assert x.tolist() == pytest.approx([3 / 3.25, 1 / 3.25])


def test_bundle_share_below_capacity_is_free_and_whole() -> None:
    x, p = bundle_share([1.0, 1.0], [[1.0, 1.0], [1.0, 1.0]], [4.0, 4.0])
    assert p == 0.0 and x.tolist() == [1.0, 1.0]


bundles = st.lists(
    st.tuples(st.floats(0.01, 100.0), st.floats(0.0, 4.0), st.floats(0.0, 4096.0)),
    min_size=1, max_size=12,
)


@settings(max_examples=80, deadline=None)
@given(bundles, st.floats(0.5, 16.0), st.floats(256.0, 16384.0))
def test_bundle_share_properties(vms: list[tuple[float, float, float]], cpu: float,
                                 mem: float) -> None:
    bid = np.array([v[0] for v in vms])
    bundle = np.array([[v[1], v[2]] for v in vms])
    cap = np.array([cpu, mem])
    x, p = bundle_share(bid, bundle, cap)
    a = np.minimum(bundle, cap)
    alloc = x[:, None] * a
    # capacity conserved per resource
    assert (alloc.sum(axis=0) <= cap * (1 + 1e-9)).all()
    # bundles in proportion: x in [0, 1] of the VM's own bundle on every resource
    assert ((x >= 0) & (x <= 1 + 1e-12)).all()
    # money: nobody pays more than its bid; a VM short of its bundle pays exactly its bid;
    # what is paid is the price times the dominant shares sold
    dom = (a / cap).max(axis=1)
    paid = p * x * dom
    assert (paid <= bid * (1 + 1e-9)).all()
    short = (x < 1 - 1e-9) & (dom > 1e-12)
    assert paid[short] == pytest.approx(bid[short], rel=1e-6)
    assert paid.sum() == pytest.approx(p * float((x * dom).sum()))
    # work conserving: either every bundle is whole or some resource is (nearly) full
    if short.any():  # (an empty bundle gets nothing, and counts for nothing)
        assert (alloc.sum(axis=0) >= cap * (1 - 1e-6)).any()


def _vms(bids: list[list[float]], caps: list[list[float]]) -> VMs:
    n = len(bids)
    return VMs(tuple(f"v{i}" for i in range(n)), np.array(bids), np.array(caps),
               np.full(n, NO_HOST))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0.01, 10.0), st.floats(0.01, 10.0), st.floats(0.1, 2.0),
                          st.floats(16.0, 2048.0)), min_size=1, max_size=10),
       st.integers(1, 4))
def test_drf_mechanism_keeps_proportions_and_node_capacity(
        vms: list[tuple[float, float, float, float]], nhosts: int) -> None:
    hosts = Hosts(tuple(f"h{i}" for i in range(nhosts)), np.array([[2.0, 2048.0]] * nhosts))
    v = _vms([[a, b] for a, b, _, _ in vms], [[c, m] for _, _, c, m in vms])
    c = make_mechanism("drf").clear(hosts, v, reserve_price=np.zeros(2), params=BalanceParams())
    placed = c.host >= 0
    assert placed.all() and not c.migrations
    ratio = c.allocation / v.cap
    assert ratio[:, 0] == pytest.approx(ratio[:, 1])  # the VM's proportions
    for h in range(nhosts):
        on = c.host == h
        assert (c.allocation[on].sum(axis=0) <= hosts.capacity[h] * (1 + 1e-9)).all()
    assert (c.ideal.sum(axis=0) <= hosts.capacity.sum(axis=0) * (1 + 1e-9)).all()


def test_sim_run_with_the_drf_market(tmp_path: Path) -> None:
    r = runner.invoke(app, ["sim", "run", "--trace", "HPC2N-2002-2.2-cln", "--jobs", "30",
                            "--scheduler", "market", "--market", "drf", "--hosts", "120",
                            "--cores-per-host", "2", "--memory-per-host", "2048",
                            "--out", str(tmp_path / "o"), "-o", "json"])
    assert r.exit_code == 0, r.stderr
    s = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert s["market"] == "drf" and s["ledger_audit_ok"] and s["bank"]["audit_ok"]
    assert s["finished"] > 0 and s["migrations"] == 0
    assert s["max_cores_allocated"] <= 240 * (1 + 1e-9)
