"""The discrete-event engine: a heap of timestamped events over a :class:`Machine`.

Contract:

- events are *completions* (a running job ends at start + run time) and *arrivals* (a job is
  submitted). At one timestamp the engine handles all completions, then all arrivals (queue
  order), then calls the scheduler once; jobs the scheduler starts with a zero run time complete
  at the same timestamp, which triggers another completion + scheduling round at that time;
- the queue holds waiting jobs sorted by the scheduler's :meth:`Scheduler.key` (FCFS/EASY: the
  queue order (submit, job id), which is the workload index; EDF: (deadline, index));
- a scheduler only decides *which* waiting jobs to start now, through :meth:`Context.start`
  (which places the job with the machine's first-fit rule, or refuses if it does not fit);
- the result is the start time of every job (:class:`Schedule`); nothing else is recorded, so
  metrics are computed afterwards from arrays (:mod:`merkat.sim.metrics`).

The same jobs on a single pool of cores give the same start times as the specialised loops of
:mod:`merkat.worlds.batch.fast` (tested with hypothesis).
"""

from __future__ import annotations

import heapq
from bisect import insort
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from merkat.workload.cluster import Allocation, Cluster, Machine
from merkat.workload.jobs import Workload

COMPLETION = 0
ARRIVAL = 1


@dataclass(frozen=True)
class Schedule:
    """Start and end time of each job of a workload (same order as the workload)."""

    start: npt.NDArray[np.float64]
    end: npt.NDArray[np.float64]


class Context:
    """What a scheduler sees and may do during one scheduling pass."""

    def __init__(self, workload: Workload, cluster: Cluster) -> None:
        self.workload = workload
        self.cluster = cluster
        self.machine = Machine(cluster)
        self.now = 0.0
        self._keys: list[tuple[Any, int]] = []  # sorted (key, job index)
        self.running: dict[int, tuple[float, Allocation]] = {}
        """Running jobs: index -> (estimated end = start + estimate, allocation)."""
        self.procs: list[int] = workload.procs.tolist()
        self.memory: list[int] = workload.memory_kib().tolist()
        self.estimate: list[float] = workload.estimate.tolist()
        self.run: list[float] = workload.run.tolist()
        self.start_time: list[float] = [float("nan")] * len(workload)
        self._events: list[tuple[float, int, int]] = []
        self.started = 0

    @property
    def queue(self) -> list[int]:
        """Waiting job indices in queue order (a fresh list: safe to iterate while starting)."""
        return [j for _, j in self._keys]

    def fits(self, j: int) -> bool:
        """Whether job ``j`` fits the machine now."""
        return self.machine.fits(self.procs[j], self.memory[j])

    def start(self, j: int) -> bool:
        """Start waiting job ``j`` now if it fits (first-fit placement); True if started."""
        alloc = self.machine.place(self.procs[j], self.memory[j])
        if alloc is None:
            return False
        self.machine.allocate(alloc, self.memory[j])
        self.running[j] = (self.now + self.estimate[j], alloc)
        self.start_time[j] = self.now
        self.started += 1
        self._keys.remove(next(kj for kj in self._keys if kj[1] == j))
        heapq.heappush(self._events, (self.now + self.run[j], COMPLETION, j))
        return True

    def drop(self, j: int) -> None:
        """Take waiting job ``j`` out of the queue for good: it never starts (start NaN)."""
        self._keys.remove(next(kj for kj in self._keys if kj[1] == j))


class Scheduler(Protocol):
    """A batch scheduling policy: a queue order and a scheduling pass."""

    name: str

    def key(self, workload: Workload, j: int) -> Any:
        """Sort key of job ``j`` in the waiting queue (smaller first)."""
        ...

    def schedule(self, ctx: Context) -> None:
        """Start some waiting jobs with ``ctx.start(j)``."""
        ...


def simulate(
    workload: Workload,
    cluster: Cluster,
    scheduler: Scheduler,
    progress: Callable[[int], None] | None = None,
) -> Schedule:
    """Run ``workload`` on ``cluster`` under ``scheduler``; ``progress(k)`` is called with the
    number of jobs started since the previous call, now and then. Every job must fit the
    empty machine (see :func:`merkat.workload.build_workload`), or this raises ValueError."""
    ctx = Context(workload, cluster)
    n = len(workload)
    empty = Machine(cluster)
    for j in range(n):
        if not empty.fits(ctx.procs[j], ctx.memory[j]):
            raise ValueError(f"job {int(workload.job_id[j])} can never fit the cluster")
    events = ctx._events
    for j, s in enumerate(workload.submit.tolist()):
        events.append((s, ARRIVAL, j))
    heapq.heapify(events)
    started_before = 0
    while events:
        now = events[0][0]
        ctx.now = now
        while events and events[0][0] == now:
            _, kind, j = heapq.heappop(events)
            if kind == COMPLETION:
                _, alloc = ctx.running.pop(j)
                ctx.machine.release(alloc, ctx.memory[j])
            else:
                insort(ctx._keys, (scheduler.key(workload, j), j))
        if ctx._keys:
            scheduler.schedule(ctx)
        if progress is not None and ctx.started - started_before >= 4096:
            progress(ctx.started - started_before)
            started_before = ctx.started
    start = np.array(ctx.start_time, dtype=np.float64)
    return Schedule(start=start, end=start + workload.run)
