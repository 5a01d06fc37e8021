"""The simulated backend's application models (:mod:`merkat.backends.sim`, which exports
them): :class:`RigidApp`, :class:`TaskFarm`, and :class:`AppModel`, what the backend needs of
any other model (a scenario's own, :mod:`merkat.worlds.merkat.scenarios`).

- :class:`RigidApp` — an iterative application with one task per VM that progresses in
  lock-step: the slowest VM sets the pace, and it progresses only when all its VMs run. Work is
  counted in seconds at full size (its ideal run time).
- :class:`TaskFarm` — a master-worker bag of tasks; each worker (VM) takes the next task and
  runs it at its speed.

The backend advances them (``SimBackend.advance``); their records of progress are read
through ``metrics()``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from merkat.control.types import Metrics, new_metrics
from merkat.core.model import Observed


@dataclass
class RigidApp:
    """``vms`` tasks in lock-step; ``work_total`` seconds of work at full size.

    ``cpu`` and ``memory`` are one VM's full size (cores, MiB); speed is the smallest of its
    VMs' ``alloc_cpu / cpu`` times ``min(1, alloc_memory / memory)`` when memory counts.
    """

    vms: int
    work_total: float
    cpu: float = 1.0
    memory: float = 0.0
    work_done: float = 0.0
    finish_time: float | None = None
    last_rate: float | None = None
    _metrics: Metrics | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._metrics = None

    def metrics(self) -> Metrics:
        m = self._metrics  # unchanged while the app waits or is suspended: reuse it
        if (
            m is None
            or m.work_done is not self.work_done
            or m.work_total is not self.work_total
            or m.progress_rate is not self.last_rate
        ):
            m = self._metrics = _rigid_metrics(self.work_done, self.work_total, self.last_rate)
        return m


_RIGID_METRICS = vars(new_metrics(ideal_rate=1.0)).copy()
_new, _set = object.__new__, object.__setattr__
_NO_VMS: frozenset[str] = frozenset()


def _observed(metrics: Metrics, finished: bool) -> Observed:
    """``Observed(metrics, frozenset(), finished)`` without the frozen dataclass's
    ``__init__`` (its three ``object.__setattr__``)."""
    o: Observed = _new(Observed)
    _set(o, "__dict__", {"metrics": metrics, "idle": _NO_VMS, "finished": finished})
    return o


def _rigid_metrics(work_done: float, work_total: float, rate: float | None) -> Metrics:
    """``new_metrics(work_done=, work_total=, progress_rate=rate, ideal_rate=1.0)``, made by
    copying that record's fields (in their declared order) and setting the three that vary:
    the same record for less (a rigid application's metrics change every period it runs).
    ``tests/test_sim_observe.py`` compares the two."""
    m: Metrics = _new(Metrics)  # (the three set by one dict(): keys keep their places)
    _set(m, "__dict__", dict(_RIGID_METRICS, work_done=work_done, work_total=work_total,
                             progress_rate=rate))
    return m


@dataclass
class TaskFarm:
    """A bag of tasks (durations in seconds at full speed) served by its VMs (workers)."""

    tasks: Sequence[float]
    cpu: float = 1.0
    memory: float = 0.0
    queue: deque[float] = field(default_factory=deque)
    running: dict[str, list[float]] = field(default_factory=dict)  # vm -> [remaining, total]
    done: int = 0
    finish_time: float | None = None
    last_rate: float | None = None

    def __post_init__(self) -> None:
        self.queue = deque(self.tasks)
        self.total_time = float(sum(self.tasks))

    def add_tasks(self, tasks: Sequence[float]) -> None:
        self.queue.extend(tasks)
        self.total_time += float(sum(tasks))
        self.finish_time = None

    @property
    def tasks_left(self) -> int:
        return len(self.queue) + len(self.running)

    def metrics(self) -> Metrics:
        times = list(self.queue) + [t for _, t in self.running.values()]
        avg = sum(times) / len(times) if times else 0.0
        total = self.done + self.tasks_left
        return Metrics(
            work_done=float(self.done),
            work_total=float(total),
            progress_rate=self.last_rate,
            tasks_left=self.tasks_left,
            task_time_avg=avg,
            task_time_max=max(times, default=0.0),
        )


class AppModel(Protocol):
    """What :class:`SimBackend` needs of an application model: :class:`RigidApp`,
    :class:`TaskFarm`, or one of a scenario's own (:mod:`merkat.worlds.merkat.scenarios`).

    A model of another kind progresses itself: it has ``advance(backend, vms, t0, t1)``
    (``vms``: its ``(id, VM)`` pairs in id order; ``backend.speed(model, vm, t0, t1)`` gives a
    VM's speed), ``busy_vms()`` (the VMs running work; the others are idle) and
    ``interrupt(vm_id)`` (a VM is released under its work)."""

    cpu: float
    memory: float
    finish_time: float | None
    last_rate: float | None

    def metrics(self) -> Metrics: ...
