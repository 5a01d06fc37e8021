"""Batch scheduling baselines for the general engine: FCFS, EDF, EASY and conservative
backfilling, and Maui (EASY on the users' inexact estimates, :mod:`merkat.worlds.batch.maui`).

Each is a :class:`merkat.worlds.batch.engine.Scheduler`; :data:`SCHEDULERS` maps a name to a factory;
:func:`schedule` runs one by name on a workload (the fast single-pool loop when it applies).
The rules (``docs/simulator.md``):

- **fcfs**: queue order (submit, job id); start heads while they fit; a head that does not fit
  blocks the queue.
- **edf**: the same, with the queue ordered by (deadline, submit, job id); non-preemptive.
- **easy**: FCFS, plus EASY backfilling. When the head does not fit, its reservation is computed
  from the running jobs' *estimated* ends (start + requested time, or + run time when the trace
  has none); a running job past its estimate counts as ending now (it keeps running until its real
  end). Releasing running jobs in order of (estimated end, index) on a copy of the machine, the
  *shadow time* is the estimated end of the job whose release makes the head fit. A later job
  starts now if it fits now and either (a) its estimated end is ``<= shadow``, or (b) after taking
  its allocation away from the machine state at the shadow time, the head still fits there (on one
  pool: it needs ``<= extra`` cores); in case (b) the shadow state keeps that allocation.
- **conservative**: every waiting job, in queue order, gets a reservation at the earliest time
  its estimated run fits a profile of estimated free cores without delaying earlier
  reservations; jobs whose reservation is *now* start. Single pool of cores only (memory is not
  in the profile).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from merkat.registry import Registry
from merkat.workload.cluster import Cluster
from merkat.workload.jobs import Workload
from merkat.worlds.batch import fast
from merkat.worlds.batch.engine import Context, Schedule, Scheduler, simulate


class Fcfs:
    """First come, first served."""

    name = "fcfs"

    def key(self, workload: Workload, j: int) -> Any:
        return j

    def schedule(self, ctx: Context) -> None:
        for j in ctx.queue:
            if not ctx.start(j):
                return


class Edf(Fcfs):
    """Earliest deadline first, non-preemptive; the head blocks the queue."""

    name = "edf"

    def key(self, workload: Workload, j: int) -> Any:
        return (float(workload.deadline[j]), j)


class Easy(Fcfs):
    """FCFS with EASY backfilling (one reservation, for the head of the queue)."""

    name = "easy"

    def schedule(self, ctx: Context) -> None:
        queue = ctx.queue
        h = 0
        while h < len(queue) and ctx.start(queue[h]):
            h += 1
        waiting = queue[h:]
        if len(waiting) < 2:
            return
        head = waiting[0]
        now = ctx.now
        procs, mem = ctx.procs, ctx.memory
        shadow_state = ctx.machine.copy()
        shadow = now
        for est_end, j in sorted((e, j) for j, (e, _) in ctx.running.items()):
            shadow_state.release(ctx.running[j][1], mem[j])
            if shadow_state.fits(procs[head], mem[head]):
                shadow = max(est_end, now)
                break
        for j in waiting[1:]:
            alloc = ctx.machine.place(procs[j], mem[j])
            if alloc is None:
                continue
            if now + ctx.estimate[j] <= shadow:
                ctx.start(j)
                continue
            shadow_state.allocate(alloc, mem[j])
            if shadow_state.fits(procs[head], mem[head]):
                ctx.start(j)
            else:
                shadow_state.release(alloc, mem[j])


class Conservative(Fcfs):
    """Conservative backfilling on one pool of cores: a reservation for every waiting job."""

    name = "conservative"

    def schedule(self, ctx: Context) -> None:
        now = ctx.now
        # Profile of estimated free cores: times[k] -> free cores from times[k] to times[k+1].
        releases: dict[float, int] = {}
        for j, (est_end, _) in ctx.running.items():
            t = max(est_end, now)
            releases[t] = releases.get(t, 0) + ctx.procs[j]
        times = [now]
        free = [ctx.machine.total_free_cores]
        for t in sorted(releases):
            if t == now:
                free[0] += releases[t]
            else:
                times.append(t)
                free.append(free[-1] + releases[t])
        # The machine's real free cores now (jobs past estimate still hold theirs).
        actual_free_now = ctx.machine.total_free_cores
        for j in ctx.queue:
            if actual_free_now == 0 or free[0] == 0:
                # No later job can start now; the profile is rebuilt at the next pass anyway,
                # so the remaining reservations need not be computed.
                return
            p, dur = ctx.procs[j], ctx.estimate[j]
            k = _earliest_slot(times, free, p, dur)
            start = times[k]
            if start == now and p <= actual_free_now and ctx.start(j):
                actual_free_now -= p
            _reserve(times, free, k, p, start + dur)


def _earliest_slot(times: list[float], free: list[int], p: int, dur: float) -> int:
    """Index of the earliest profile step from which ``p`` cores stay free for ``dur``
    (one pass: a step without ``p`` free cores rules out every start before it)."""
    n = len(times)
    k = 0
    while k < n:
        if free[k] < p:
            k += 1
            continue
        end = times[k] + dur
        m = k + 1
        while m < n and times[m] < end and free[m] >= p:
            m += 1
        if m == n or times[m] >= end:
            return k
        k = m + 1  # free[m] < p: no start at or before step m works
    raise AssertionError("the profile always ends with the whole machine free")


def _reserve(times: list[float], free: list[int], k: int, p: int, end: float) -> None:
    """Take ``p`` cores from step ``k`` until ``end`` (splitting a step at ``end``)."""
    m = k
    while m < len(times) and times[m] < end:
        last = m + 1 == len(times)
        if (not last and times[m + 1] > end) or (last and end > times[m]):
            times.insert(m + 1, end)
            free.insert(m + 1, free[m])
        free[m] -= p
        m += 1


class Maui(Easy):
    """Maui's defaults: FCFS by queue time, EASY backfilling; run through
    :func:`schedule`, which first gives the jobs their users' inexact estimates
    (:mod:`merkat.worlds.batch.maui`). On its own it is EASY on the workload's estimates."""

    name = "maui"


SCHEDULERS: Registry[Callable[[], Scheduler]] = Registry("scheduler")
"""Scheduler factories by name (the batch ``--scheduler`` choices)."""
for _cls in (Fcfs, Edf, Easy, Conservative, Maui):
    SCHEDULERS.register(_cls.name, _cls)

FAST_SCHEDULERS = ("fcfs", "edf", "easy")


def schedule(
    workload: Workload,
    cluster: Cluster,
    scheduler: str,
    progress: Callable[[int], None] | None = None,
    use_fast: bool | None = None,
    seed: int = 0,
) -> Schedule:
    """Simulate ``workload`` on ``cluster`` under the scheduler named ``scheduler`` (a key of
    :data:`merkat.worlds.batch.baselines.SCHEDULERS`).

    ``maui`` is EASY backfilling on the users' inexact estimates: the jobs without a requested
    time get one from the estimate model of :mod:`merkat.worlds.batch.maui`, drawn from ``seed``'s
    ``estimates`` stream (the other schedulers ignore ``seed``).

    ``use_fast=None`` uses :mod:`merkat.worlds.batch.fast` when the cluster is a single pool and the
    scheduler has a fast loop; ``False`` forces the general engine (same result, slower);
    ``True`` requires the fast loop (ValueError if it does not apply). Hosts without a memory
    limit are one pool of their cores (a task needs one core, on any host: the same schedule,
    ``tests/test_sim_fast.py``), so they take the fast loop too.
    """
    SCHEDULERS.get(scheduler)  # an unknown name: the error lists the known ones
    if scheduler == "maui":
        from merkat.worlds.batch.maui import maui_workload

        workload = maui_workload(workload, seed)
        scheduler = "easy"
    can_fast = (cluster.is_single_pool or cluster.memory_per_host is None) \
        and scheduler in FAST_SCHEDULERS
    if use_fast and not can_fast:
        raise ValueError(f"no fast loop for {scheduler!r} on {cluster}")
    if use_fast is None:
        use_fast = can_fast
    if not use_fast:
        return simulate(workload, cluster, SCHEDULERS.get(scheduler)(), progress)
    if len(workload) and int(workload.procs.max()) > cluster.total_cores:
        raise ValueError("a job needs more cores than the cluster has")
    submit = workload.submit.tolist()
    run = workload.run.tolist()
    procs = workload.procs.tolist()
    cap = cluster.total_cores
    if scheduler == "fcfs":
        start = fast.fcfs_pool(submit, run, procs, cap, progress)
    elif scheduler == "edf":
        start = fast.edf_pool(submit, run, procs, workload.deadline.tolist(), cap, progress)
    else:
        start = fast.easy_pool(submit, run, workload.estimate.tolist(), procs, cap, progress)
    s = np.array(start, dtype=np.float64)
    return Schedule(start=s, end=s + workload.run)
