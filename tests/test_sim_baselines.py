"""Hand-computed schedules for each baseline, on the fast loops and on the general engine."""

from __future__ import annotations

import numpy as np
import pytest

from merkat.workload.cluster import Cluster
from merkat.workload.jobs import Workload
from merkat.worlds.batch.baselines import schedule


def starts(wl: Workload, cluster: Cluster, scheduler: str) -> list[float]:
    """Start times from the general engine; the fast loop (when it applies) must agree."""
    general = schedule(wl, cluster, scheduler, use_fast=False).start.tolist()
    if cluster.is_single_pool and scheduler != "conservative":
        assert schedule(wl, cluster, scheduler, use_fast=True).start.tolist() == general
    return general


def test_fcfs_head_blocks_the_queue() -> None:
    # A(0, 10 s, 2 cores) runs; B needs all 4 cores, so it waits for A; C and D wait behind B
    # even though they would fit earlier.
    wl = Workload.from_arrays(submit=[0, 1, 2, 3], run=[10, 5, 3, 1], procs=[2, 4, 1, 2])
    assert starts(wl, Cluster.pool(4), "fcfs") == [0, 10, 15, 15]


def test_edf_orders_the_queue_by_deadline() -> None:
    # Deadlines: A 100, B 50, C 20, D 30. C (deadline 20) jumps ahead of B at t=2; D at t=5
    # when C ends; B only when A ends at 10.
    wl = Workload.from_arrays(
        submit=[0, 1, 2, 3], run=[10, 5, 3, 1], procs=[2, 4, 1, 2], deadline_factor=[10, 9.8, 6, 27]
    )
    assert wl.deadline.tolist() == pytest.approx([100, 50, 20, 30])
    assert starts(wl, Cluster.pool(4), "edf") == [0, 10, 2, 5]


def test_edf_is_non_preemptive_and_head_blocks() -> None:
    # A long job with a late deadline runs; an urgent job that does not fit waits for it.
    wl = Workload.from_arrays(
        submit=[0, 1, 1], run=[10, 1, 1], procs=[3, 4, 1], deadline_factor=[100, 2, 50]
    )
    # Queue at t=1 by deadline: job 2 (deadline 3) needs 4 cores -> blocks job 3 (deadline 51).
    assert starts(wl, Cluster.pool(4), "edf") == [0, 10, 11]


def test_easy_backfill_must_not_delay_the_head() -> None:
    # A (3 of 4 cores) ends at 10; B needs 4: reservation at shadow 10, extra 0.
    # C (1 core, 20 s) fits now but would end at 22 > 10 and extra is 0: it must not start.
    # D (1 core, 5 s) ends at 8 <= 10: it backfills at 3.
    wl = Workload.from_arrays(submit=[0, 1, 2, 3], run=[10, 5, 20, 5], procs=[3, 4, 1, 1])
    assert starts(wl, Cluster.pool(4), "easy") == [0, 10, 15, 3]
    assert starts(wl, Cluster.pool(4), "fcfs") == [0, 10, 15, 15]


def test_easy_backfill_may_use_spare_processors() -> None:
    # A (4 of 6) ends at 10; B needs 4: at the shadow time 10, 6 cores are free, extra = 2.
    # C (2 cores, 100 s) ends long after 10 but needs only the 2 spare cores: starts at 2.
    # D (1 core) then finds neither free cores nor extra: it waits for B to end at 15.
    wl = Workload.from_arrays(submit=[0, 1, 2, 3], run=[10, 5, 100, 100], procs=[4, 4, 2, 1])
    assert starts(wl, Cluster.pool(6), "easy") == [0, 10, 2, 15]


def test_easy_uses_estimates_and_counts_an_overrunning_job_as_ending_now() -> None:
    # A (3 of 4 cores) asks for 5 s but runs 20 s. B (4 cores) is the blocked head.
    # t=2: shadow = A's estimated end 5; C (2 s, ends 4 <= 5) backfills.
    # t=6: A is past its estimate: it counts as ending now (shadow 6, extra 0), so D (1 core,
    # 3 s) may not start although A really ends at 20. B starts at 20, D when B ends at 25.
    wl = Workload.from_arrays(
        submit=[0, 1, 2, 6], run=[20, 5, 2, 3], estimate=[5, 5, 2, 3], procs=[3, 4, 1, 1]
    )
    assert starts(wl, Cluster.pool(4), "easy") == [0, 20, 2, 25]


def test_easy_backfilled_job_overrunning_its_estimate_keeps_running() -> None:
    # C backfills on its estimate (ends 4 <= shadow 10) but really runs 30 s: the head B waits
    # for it (EASY trusts estimates; the delay is the user's fault, as in real systems).
    wl = Workload.from_arrays(
        submit=[0, 1, 2], run=[10, 5, 30], estimate=[10, 5, 2], procs=[3, 4, 1]
    )
    assert starts(wl, Cluster.pool(4), "easy") == [0, 32, 2]


def test_conservative_protects_every_reservation() -> None:
    # 5 cores. A (4) until 10. B (4, 2 s) is the head: shadow 10, extra 1 (B runs 10-12).
    # C (5 cores, 10 s) is reserved at 12. D (1 core, 100 s) at t=3:
    # EASY lets it use the spare core (it delays C to 103); conservative does not (C keeps 12,
    # D starts at 22).
    wl = Workload.from_arrays(submit=[0, 1, 2, 3], run=[10, 2, 10, 100], procs=[4, 4, 5, 1])
    assert starts(wl, Cluster.pool(5), "easy") == [0, 10, 103, 3]
    assert starts(wl, Cluster.pool(5), "conservative") == [0, 10, 12, 22]


def test_conservative_backfills_a_job_that_fits_the_hole() -> None:
    wl = Workload.from_arrays(submit=[0, 1, 2, 3], run=[10, 5, 20, 5], procs=[3, 4, 1, 1])
    assert starts(wl, Cluster.pool(4), "conservative") == [0, 10, 15, 3]


def test_equal_times_completions_before_arrivals() -> None:
    # A ends at 10 exactly when B arrives: B starts at 10 (completions are handled first).
    wl = Workload.from_arrays(submit=[0, 10], run=[10, 1], procs=[4, 4])
    for s in ("fcfs", "edf", "easy", "conservative"):
        assert starts(wl, Cluster.pool(4), s) == [0, 10]


def test_zero_run_time_jobs_and_queue_order_ties() -> None:
    # Same submit time: queue order is by job id (1, 2, 3). Job 1 lasts 0 s and frees its
    # cores at once, so job 2 (4 s) also starts at 5; job 3 waits for it.
    wl = Workload.from_arrays(submit=[5, 5, 5], run=[0, 0, 4], procs=[4, 4, 4], job_id=[3, 1, 2])
    assert wl.job_id.tolist() == [1, 2, 3]  # queue order (submit, id)
    assert wl.run.tolist() == [0, 4, 0]
    for s in ("fcfs", "easy", "conservative"):
        assert starts(wl, Cluster.pool(4), s) == [5, 5, 9]
    # EDF (deadline = submit + run): job 3 (deadline 5) goes before job 2 (deadline 9), and
    # being 0 s long it frees the cores at once: all three start at 5.
    assert starts(wl, Cluster.pool(4), "edf") == [5, 5, 5]


def test_multi_host_placement_respects_memory() -> None:
    # 2 hosts x 2 cores x 1024 MiB. A: 2 tasks x 600 MiB -> one task per host (first fit).
    # B: 2 tasks x 500 MiB: neither host has 500 MiB left -> waits for A, unlike on a pool.
    wl = Workload.from_arrays(submit=[0, 1], run=[10, 5], procs=[2, 2], memory=[600, 500])
    assert starts(wl, Cluster(2, 2, 1024), "fcfs") == [0, 10]
    assert starts(wl, Cluster(2, 2, None), "fcfs") == [0, 1]
    assert starts(wl, Cluster(2, 2, 1024), "easy") == [0, 10]


def test_multi_host_easy_reservation_uses_the_shadow_state() -> None:
    # 2 hosts x 2 cores, 1000 MiB each. A: 2 tasks of 400 MiB on host 0 until 10.
    # B (head): 4 tasks of 400 MiB -> needs both hosts -> shadow 10.
    # C: 1 task of 900 MiB, 100 s: fits host 1 now, but would leave host 1 without room for
    # B's tasks at 10 -> not started. D: 1 task, 5 s -> ends before 10 -> backfilled.
    wl = Workload.from_arrays(
        submit=[0, 1, 2, 3], run=[10, 5, 100, 5], procs=[2, 4, 1, 1], memory=[400, 400, 900, 400]
    )
    assert starts(wl, Cluster(2, 2, 1000), "easy") == [0, 10, 15, 3]


def test_job_that_can_never_fit_is_refused() -> None:
    wl = Workload.from_arrays(submit=[0], run=[1], procs=[5])
    with pytest.raises(ValueError):
        schedule(wl, Cluster.pool(4), "fcfs")
    with pytest.raises(ValueError):
        schedule(wl, Cluster.pool(4), "fcfs", use_fast=False)


def test_unknown_scheduler() -> None:
    wl = Workload.from_arrays(submit=[0], run=[1], procs=[1])
    with pytest.raises(ValueError, match="unknown scheduler"):
        schedule(wl, Cluster.pool(4), "sjf")


def test_end_is_start_plus_run() -> None:
    wl = Workload.from_arrays(submit=[0, 1], run=[10, 5], procs=[4, 4])
    sc = schedule(wl, Cluster.pool(4), "fcfs")
    assert np.array_equal(sc.end, sc.start + wl.run)
