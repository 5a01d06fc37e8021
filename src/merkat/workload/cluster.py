"""The simulated machine: hosts with cores and memory, and the task placement rule.

A job is ``procs`` tasks; each task needs one core and ``memory`` MiB on the host it runs on
(SWF memory is per processor). Tasks of one job may spread over several hosts.

Placement rule (first fit by host index): walk the hosts in index order and put on each as many
of the job's remaining tasks as its free cores and free memory allow. A job *fits* iff this
places all its tasks, i.e. iff ``sum_h min(free_cores_h, floor(free_mem_h / memory)) >= procs``.
With memory unconstrained (``memory_per_host=None``) and one host, the machine is a single pool of
cores and a job fits iff ``procs <= free cores`` (the fast path of :mod:`merkat.worlds.batch.fast`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

Allocation = tuple[tuple[int, int], ...]
"""Where a job runs: ``((host, tasks), ...)``."""


@dataclass(frozen=True)
class Cluster:
    """``hosts`` identical hosts of ``cores_per_host`` cores and ``memory_per_host`` MiB
    (None: memory is not a constraint)."""

    hosts: int
    cores_per_host: int
    memory_per_host: float | None = None

    def __post_init__(self) -> None:
        if self.hosts < 1:
            raise ValueError(f"hosts must be >= 1, got {self.hosts}")
        if self.cores_per_host < 1:
            raise ValueError(f"cores-per-host must be >= 1, got {self.cores_per_host}")
        if self.memory_per_host is not None and not self.memory_per_host > 0:
            raise ValueError(f"memory-per-host must be > 0 MiB, got {self.memory_per_host}")

    @classmethod
    def pool(cls, cores: int) -> Cluster:
        """One pool of ``cores`` cores, memory unconstrained."""
        return cls(hosts=1, cores_per_host=cores, memory_per_host=None)

    @property
    def total_cores(self) -> int:
        return self.hosts * self.cores_per_host

    @property
    def is_single_pool(self) -> bool:
        return self.hosts == 1 and self.memory_per_host is None

    def max_tasks(self, memory_kib: int) -> int:
        """How many tasks of ``memory_kib`` KiB each fit on the empty machine."""
        return self.hosts * _tasks_on_host(self.cores_per_host, self.memory_kib(), memory_kib)

    def memory_kib(self) -> float:
        """Memory per host in KiB (an integer), or ``inf`` when unconstrained."""
        return math.inf if self.memory_per_host is None else round(self.memory_per_host * 1024)

    def describe(self) -> dict[str, object]:
        return {
            "hosts": self.hosts,
            "cores_per_host": self.cores_per_host,
            "memory_per_host_mib": self.memory_per_host,
            "total_cores": self.total_cores,
        }


def _tasks_on_host(free_cores: int, free_mem: float, memory: int) -> int:
    if memory <= 0 or math.isinf(free_mem):
        return free_cores
    return min(free_cores, int(free_mem // memory))


class Machine:
    """The mutable free resources of a :class:`Cluster` during a simulation.

    Memory is counted in integer KiB so that allocating and
    releasing never drifts; ``inf`` when the cluster's memory is unconstrained.
    """

    __slots__ = ("free_cores", "free_mem", "total_free_cores")

    def __init__(self, cluster: Cluster) -> None:
        self.free_cores = [cluster.cores_per_host] * cluster.hosts
        self.free_mem = [cluster.memory_kib()] * cluster.hosts
        self.total_free_cores = cluster.total_cores

    def copy(self) -> Machine:
        m = Machine.__new__(Machine)
        m.free_cores = list(self.free_cores)
        m.free_mem = list(self.free_mem)
        m.total_free_cores = self.total_free_cores
        return m

    def place(self, procs: int, memory: int) -> Allocation | None:
        """The first-fit allocation of ``procs`` tasks of ``memory`` KiB, or None if they do not
        fit now. Does not change the machine."""
        if procs > self.total_free_cores:
            return None
        left = procs
        alloc: list[tuple[int, int]] = []
        for h, cores in enumerate(self.free_cores):
            if not cores:
                continue
            k = _tasks_on_host(cores, self.free_mem[h], memory)
            if k <= 0:
                continue
            k = min(k, left)
            alloc.append((h, k))
            left -= k
            if not left:
                return tuple(alloc)
        return None

    def fits(self, procs: int, memory: int) -> bool:
        return self.place(procs, memory) is not None

    def allocate(self, alloc: Allocation, memory: int) -> None:
        for h, k in alloc:
            self.free_cores[h] -= k
            self.free_mem[h] -= k * memory
            self.total_free_cores -= k

    def release(self, alloc: Allocation, memory: int) -> None:
        for h, k in alloc:
            self.free_cores[h] += k
            self.free_mem[h] += k * memory
            self.total_free_cores += k
