"""Users of the grid-cloud model (§3.5, §4.3): their tasks, utility functions, strategies and
the priority of stored tasks. Pure (seeded numpy generators; no clock).

- Tasks (§4.3): exponential inter-arrival times of mean λ⁻¹ (which may change over time,
  :class:`Load`), exponential sizes of mean 10⁶ MI, urgency f uniform in {0.001, 0.01, 0.1,
  10, 100} and deadline T = t + c·f, memory uniform in {10..50} MB, disk in {10, 20, 30, 50,
  60, 100} GB; 20 % of tasks are of high importance I ~ N(100, 50), the others N(10, 5)
  (truncated at 0: an importance is never negative).
- Utility (§3.5.1): ``cost-time`` u = (A^COST · A^TIME)^-1 (eq. 6, the default), ``time``
  u = (A^TIME)^-1, ``cost`` u = (A^COST)^-1 — :data:`UTILITIES`, by name.
- Strategies (§3.5.2, §4.3): discard or retry (store the task, retried every 500 s and after
  each result), use the alternative offers before asking again; stored tasks ordered by
  importance I or by risk c · (T − t)^-1 · I (:data:`PRIORITIES`).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from merkat import seeds
from merkat.worlds.gridcloud.model import (
    HIGH_IMPORTANCE,
    HIGH_SHARE,
    LOW_IMPORTANCE,
    MEAN_TASK_MI,
    TASK_DISK,
    TASK_MEMORY,
    URGENCY,
    Task,
)


def _cost_time(cost: float, time: float) -> float:
    p = cost * time
    return 1.0 / p if p > 0 else float("inf")


def _time(cost: float, time: float) -> float:
    return 1.0 / time if time > 0 else float("inf")


def _cost(cost: float, time: float) -> float:
    return 1.0 / cost if cost > 0 else float("inf")


UTILITIES: dict[str, Callable[[float, float], float]] = {
    "cost-time": _cost_time,
    "time": _time,
    "cost": _cost,
}
"""Utility functions u(A^COST, A^TIME) by name (§3.5.1)."""


def by_importance(task: Task, now: float) -> float:
    """Priority by importance: I."""
    return task.importance


def by_risk(task: Task, now: float) -> float:
    """Priority by risk (§3.5.2): c · (T − t)^-1 · I (infinite once the deadline is reached)."""
    left = task.deadline - now
    return task.cpu * task.importance / left if left > 0 else float("inf")


PRIORITIES: dict[str, Callable[[Task, float], float]] = {
    "risk": by_risk,
    "importance": by_importance,
}


class StoredTasks:
    """A user's stored tasks in arrival order, with their deadlines, c·I and I kept in
    packed arrays beside them, so that dropping the expired ones and finding the one of
    highest priority are array operations (a user may store thousands of tasks; the queue
    is scanned after every result). :meth:`best` computes exactly what :data:`PRIORITIES`
    does, task by task, with the same floating-point operations."""

    def __init__(self, tasks: Sequence[Task] = ()) -> None:
        self.tasks: list[Task] = []
        self._deadline = array("d")
        self._risk = array("d")  # c · I
        self._importance = array("d")
        for t in tasks:
            self.append(t)

    def __len__(self) -> int:
        return len(self.tasks)

    def __iter__(self) -> Iterator[Task]:
        return iter(self.tasks)

    def append(self, task: Task) -> None:
        self.tasks.append(task)
        self._deadline.append(task.deadline)
        self._risk.append(task.cpu * task.importance)
        self._importance.append(task.importance)

    def pop(self, k: int) -> Task:
        del self._deadline[k], self._risk[k], self._importance[k]
        return self.tasks.pop(k)

    def expire(self, now: float) -> list[Task]:
        """Remove and return, in arrival order, the tasks whose deadline is ``now`` or past."""
        if not self.tasks:
            return []
        gone = np.frombuffer(self._deadline, np.float64) <= now
        if not gone.any():
            return []
        keep = np.flatnonzero(~gone).tolist()
        out = [self.tasks[i] for i in np.flatnonzero(gone).tolist()]
        self.tasks = [self.tasks[i] for i in keep]
        for name in ("_deadline", "_risk", "_importance"):
            a = np.frombuffer(getattr(self, name), np.float64)
            setattr(self, name, array("d", a[keep].tobytes()))
        return out

    def best(self, priority: str, now: float) -> int:
        """The index of the first stored task of highest ``priority`` (a :data:`PRIORITIES`
        name) at ``now``, as ``max(range(n), key=...)`` picks it."""
        if priority == "importance":
            return int(np.argmax(np.frombuffer(self._importance, np.float64)))
        if priority != "risk":
            raise ValueError(f"unknown priority {priority!r}; known: {', '.join(PRIORITIES)}")
        left = np.frombuffer(self._deadline, np.float64) - now
        w = np.frombuffer(self._risk, np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            return int(np.argmax(np.where(left > 0, w / left, np.inf)))


@dataclass(frozen=True)
class Strategy:
    """A user's strategy: ``retry`` stored tasks (else a task without a fitting offer
    fails), use ``alternatives`` before asking again, order stored tasks by ``priority``,
    choose offers by ``utility`` (names in :data:`PRIORITIES`, :data:`UTILITIES`)."""

    retry: bool = True
    alternatives: bool = True
    priority: str = "risk"
    utility: str = "cost-time"

    def __post_init__(self) -> None:
        if self.priority not in PRIORITIES:
            raise ValueError(f"priority: unknown {self.priority!r}; known: {sorted(PRIORITIES)}")
        if self.utility not in UTILITIES:
            raise ValueError(f"utility: unknown {self.utility!r}; known: {sorted(UTILITIES)}")


@dataclass(frozen=True)
class Load:
    """Mean inter-arrival time λ⁻¹ over time: ``means[k]`` from ``times[k]`` on (times[0] = 0)."""

    times: tuple[float, ...] = (0.0,)
    means: tuple[float, ...] = (30.0,)

    def __post_init__(self) -> None:
        if not self.times or len(self.times) != len(self.means) or self.times[0] != 0:
            raise ValueError("load: times and means of equal length, starting at t = 0")
        if any(m <= 0 for m in self.means) or list(self.times) != sorted(self.times):
            raise ValueError("load: positive means at increasing times")

    def mean_at(self, t: float) -> float:
        k = 0
        for i, s in enumerate(self.times):
            if s <= t:
                k = i
        return self.means[k]


def generate_tasks(
    user: int, n: int, load: Load, seed: int, first_id: int = 0
) -> list[Task]:
    """The ``n`` tasks of ``user`` (ids from ``first_id``), drawn from the seed's ``user/<user>``
    stream (:mod:`merkat.seeds`). The gap before each arrival has the mean λ⁻¹ in force at
    the previous arrival."""
    rng = seeds.stream(seed, f"user/{user}")
    gaps = rng.exponential(1.0, n)
    sizes = rng.exponential(MEAN_TASK_MI, n)
    urgency = rng.choice(np.array(URGENCY), n)
    memory = rng.choice(np.array(TASK_MEMORY), n)
    disk = rng.choice(np.array(TASK_DISK), n)
    high = rng.random(n) < HIGH_SHARE
    imp = np.where(
        high,
        rng.normal(HIGH_IMPORTANCE[0], HIGH_IMPORTANCE[1], n),
        rng.normal(LOW_IMPORTANCE[0], LOW_IMPORTANCE[1], n),
    )
    imp = np.maximum(imp, 0.0)
    tasks = []
    t = 0.0
    for k in range(n):
        t += float(gaps[k]) * load.mean_at(t)
        c = max(float(sizes[k]), 1.0)
        tasks.append(
            Task(first_id + k, user, t, c, float(memory[k]), float(disk[k]),
                 t + c * float(urgency[k]), float(imp[k]), bool(high[k]))
        )
    return tasks
