"""Specialised single-pool schedulers: the same rules as :mod:`merkat.worlds.batch.engine`, faster.

When the machine is one pool of cores with no memory constraint (the default for a trace: the
header's MaxProcs), a job fits iff ``procs <= free cores``, so the general engine's placement,
event objects and scheduler protocol can be replaced by tight loops over Python lists. Each
function here takes the jobs in queue order (submit time, then job id) and returns their start
times; ``tests/test_sim_fast.py`` checks with hypothesis that they give exactly the general
engine's start times on many random workloads.

Rules, shared with the engine (see ``docs/simulator.md``):

- events at the same time: all completions, then all arrivals, then one scheduling pass;
- FCFS: start queue heads in order while they fit; the head blocks the queue;
- EDF: the same with the queue ordered by (deadline, submit, job id);
- EASY: FCFS, and when the head does not fit, a reservation for it at the *shadow time* — the
  earliest time at which, releasing running jobs in order of estimated end (a job past its
  estimate counts as ending now), enough cores are free; ``extra`` = cores free at the shadow
  time beyond the head's need. A later job (queue order) starts now if it fits and either its
  estimated end is ``<= shadow`` or it needs ``<= extra`` cores (then ``extra`` shrinks).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Sequence
from heapq import heappop, heappush

INF = float("inf")

Progress = Callable[[int], None] | None
"""Optional callback receiving the number of jobs started since its previous call."""

_TICK = 8192


def _check(procs: Sequence[int], capacity: int) -> None:
    if procs and (max(procs) > capacity or min(procs) < 0):
        raise ValueError(f"every job needs between 0 and {capacity} cores")


def fcfs_pool(
    submit: Sequence[float],
    run: Sequence[float],
    procs: Sequence[int],
    capacity: int,
    progress: Progress = None,
) -> list[float]:
    """FCFS on one pool of ``capacity`` cores; every ``procs[i]`` must be in ``[0, capacity]``
    (ValueError otherwise).

    Start times are non-decreasing in queue order, so each job starts at the first time, not
    before its submit time nor the previous start, at which enough cores are free.
    """
    _check(procs, capacity)
    n = len(submit)
    start = [0.0] * n
    ends: list[tuple[float, int]] = []  # heap of (end time, procs) of running jobs
    free = capacity
    t = 0.0
    for i in range(n):
        s = submit[i]
        if s > t:
            t = s
        p = procs[i]
        while ends and ends[0][0] <= t:
            free += heappop(ends)[1]
        while free < p:
            e, q = heappop(ends)
            free += q
            t = e  # e > t here: everything ending by t was already released
        start[i] = t
        free -= p
        heappush(ends, (t + run[i], p))
        if progress is not None and i % _TICK == _TICK - 1:
            progress(_TICK)
    return start


def edf_pool(
    submit: Sequence[float],
    run: Sequence[float],
    procs: Sequence[int],
    deadline: Sequence[float],
    capacity: int,
    progress: Progress = None,
) -> list[float]:
    """Non-preemptive EDF on one pool: the queue is ordered by (deadline, submit, job id)
    (ties after the deadline follow queue order, i.e. the index) and its head blocks it."""
    _check(procs, capacity)
    n = len(submit)
    start = [0.0] * n
    ends: list[tuple[float, int]] = []
    queue: list[tuple[float, int]] = []  # heap of (deadline, index)
    free = capacity
    i = 0
    started = 0
    while i < n or queue:
        if queue:
            t = ends[0][0] if ends else INF
            if i < n and submit[i] < t:
                t = submit[i]
        else:
            t = submit[i]
        while ends and ends[0][0] <= t:
            free += procs[heappop(ends)[1]]
        while i < n and submit[i] <= t:
            heappush(queue, (deadline[i], i))
            i += 1
        while queue and procs[queue[0][1]] <= free:
            j = heappop(queue)[1]
            start[j] = t
            free -= procs[j]
            heappush(ends, (t + run[j], j))
            started += 1
            if progress is not None and started == _TICK:
                progress(started)
                started = 0
    return start


def easy_pool(
    submit: Sequence[float],
    run: Sequence[float],
    estimate: Sequence[float],
    procs: Sequence[int],
    capacity: int,
    progress: Progress = None,
) -> list[float]:
    """EASY backfilling on one pool (rules in the module docstring)."""
    _check(procs, capacity)
    n = len(submit)
    start = [0.0] * n
    ends: list[tuple[float, int]] = []  # heap of (real end, index)
    by_est: list[tuple[float, int]] = []  # running jobs sorted by (estimated end, index)
    est_end = [0.0] * n
    queue: list[int] = []  # indices in queue order
    free = capacity
    i = 0
    started = 0
    while i < n or queue:
        if queue:
            t = ends[0][0] if ends else INF
            if i < n and submit[i] < t:
                t = submit[i]
        else:
            t = submit[i]
        while ends and ends[0][0] <= t:
            j = heappop(ends)[1]
            free += procs[j]
            del by_est[bisect_left(by_est, (est_end[j], j))]
        while i < n and submit[i] <= t:
            queue.append(i)
            i += 1
        # Start heads while they fit.
        h = 0
        nq = len(queue)
        while h < nq and procs[queue[h]] <= free:
            j = queue[h]
            h += 1
            start[j] = t
            free -= procs[j]
            heappush(ends, (t + run[j], j))
            ee = t + estimate[j]
            est_end[j] = ee
            insort(by_est, (ee, j))
        started += h
        if h:
            del queue[:h]
            nq -= h
        if nq > 1 and free > 0:
            # Reservation for the blocked head.
            need = procs[queue[0]]
            avail = free
            shadow = t
            for ee, j in by_est:
                avail += procs[j]
                if avail >= need:
                    shadow = ee if ee > t else t
                    break
            extra = avail - need
            kept = [queue[0]]
            for k in range(1, nq):
                j = queue[k]
                p = procs[j]
                if p <= free:
                    ee = t + estimate[j]
                    if ee <= shadow or p <= extra:
                        if ee > shadow:
                            extra -= p
                        start[j] = t
                        free -= p
                        heappush(ends, (t + run[j], j))
                        est_end[j] = ee
                        insort(by_est, (ee, j))
                        started += 1
                        if not free:
                            kept.extend(queue[k + 1 :])
                            break
                        continue
                kept.append(j)
            queue = kept
        if progress is not None and started >= _TICK:
            progress(started)
            started = 0
    return start
