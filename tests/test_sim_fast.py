"""Property tests: the single-pool fast loops give exactly the general engine's schedule."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from merkat.workload.cluster import Cluster
from merkat.workload.jobs import Workload
from merkat.worlds.batch.baselines import schedule


@st.composite
def workloads(draw: st.DrawFn) -> tuple[Workload, int]:
    """Small random workloads with many ties (integer times), zero run times, estimates both
    above and below the run time, and jobs up to the machine size."""
    cap = draw(st.integers(1, 8))
    n = draw(st.integers(1, 40))
    submit = draw(st.lists(st.integers(0, 60), min_size=n, max_size=n))
    run = draw(st.lists(st.integers(0, 30), min_size=n, max_size=n))
    est = draw(st.lists(st.integers(0, 40), min_size=n, max_size=n))
    procs = draw(st.lists(st.integers(1, cap), min_size=n, max_size=n))
    factor = draw(st.lists(st.sampled_from([1.2, 2.0, 3.5, 10.0]), min_size=n, max_size=n))
    wl = Workload.from_arrays(
        submit=submit, run=run, procs=procs, estimate=est, deadline_factor=factor
    )
    return wl, cap


@settings(max_examples=300, deadline=None)
@given(workloads())
def test_fast_loops_match_the_general_engine(case: tuple[Workload, int]) -> None:
    wl, cap = case
    cluster = Cluster.pool(cap)
    for s in ("fcfs", "edf", "easy"):
        fast = schedule(wl, cluster, s, use_fast=True)
        general = schedule(wl, cluster, s, use_fast=False)
        assert fast.start.tolist() == general.start.tolist(), s


@settings(max_examples=100, deadline=None)
@given(workloads(), st.integers(1, 4))
def test_hosts_without_memory_limit_behave_as_one_pool(
    case: tuple[Workload, int], hosts: int
) -> None:
    # Tasks may spread over hosts, so H hosts of C cores with no memory limit = a pool of H*C
    # (which is why schedule() gives such a cluster the pool's fast loop).
    wl, cap = case
    multi = Cluster(hosts, cap, None)
    pool = Cluster.pool(hosts * cap)
    for s in ("fcfs", "edf", "easy"):
        a = schedule(wl, multi, s, use_fast=False).start
        b = schedule(wl, pool, s, use_fast=False).start
        assert np.array_equal(a, b), s
        assert np.array_equal(schedule(wl, multi, s).start, b), s


@settings(max_examples=150, deadline=None)
@given(workloads())
def test_schedules_are_valid(case: tuple[Workload, int]) -> None:
    # Every job starts after its submission, and the cores in use never exceed the machine.
    wl, cap = case
    for s in ("fcfs", "edf", "easy", "conservative"):
        sc = schedule(wl, Cluster.pool(cap), s)
        assert (sc.start >= wl.submit).all(), s
        for t in np.unique(sc.start):
            running = (sc.start <= t) & (sc.end > t)
            assert wl.procs[running].sum() <= cap, s
