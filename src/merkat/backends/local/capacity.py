"""This machine, its logical nodes and what of it the market may sell (reserved capacity, as
Kubernetes' node allocatable).

:class:`Node` is a logical node (a cpuset and a share of the memory), :func:`split_machine`
splits the machine into ``n`` of them.

Kubernetes sells a node's *allocatable* capacity (capacity − kube-reserved − system-reserved)
and caps the pods' cgroup tree (``kubepods``) at it, with a CPU weight of the allocatable
cores; Slurm's core specialization keeps cores for the system the same way. The local backend
does the same for merkat itself (the server, its CLI, the machine's own processes):

- :func:`machine` is the *capacity*: the CPUs this process may run on (its affinity) and the
  physical memory;
- :class:`Reserve` is what is kept back (``backend.reserve_cpu`` cores and
  ``backend.reserve_memory`` MiB); :meth:`Reserve.check` refuses a reserve that leaves the VMs
  nothing;
- the VMs together are capped at ``capacity − reserve`` (:meth:`Allocatable.limits`: a CFS
  quota and a memory limit on the VM tree's top group, written by the backend), and the tree
  weighs its allocatable cores (1024 shares or ``cpu.weight`` 100 per core, as ``kubepods``);
- :func:`reserve_nodes` takes the reserve out of the logical nodes the market sells: when the
  nodes span more than the allocatable capacity, each node keeps back a share proportional to
  its size (``Node.reserved_cores`` / ``reserved_memory``); nodes that leave CPUs or memory of
  the machine out of the market (explicit ``backend.nodes``) already leave the reserve free
  and are sold whole.

Pure arithmetic except :func:`machine`, which asks the OS.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace

from merkat.backends.local.cgroups import Limits


@dataclass(frozen=True)
class Node:
    """A logical node: ``cpus`` a cpuset list ("0-1"), ``cores`` how many, ``memory`` MiB;
    ``reserved_*`` what of it is kept for merkat and the system (:mod:`.capacity`): the
    market sells the ``allocatable_*`` rest."""

    name: str
    cpus: str
    cores: float
    memory: float
    reserved_cores: float = 0.0
    reserved_memory: float = 0.0

    @property
    def allocatable_cores(self) -> float:
        return max(0.0, self.cores - self.reserved_cores)

    @property
    def allocatable_memory(self) -> float:
        return max(0.0, self.memory - self.reserved_memory)


def split_machine(n: int = 1, memory: float | None = None) -> list[Node]:
    """``n`` logical nodes splitting this machine's CPUs (round-robin) and ``memory`` MiB
    (default: the machine's physical memory) evenly."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(
        range(os.cpu_count() or 1))
    if memory is None:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20
    n = max(1, min(n, len(cpus)))
    return [Node(f"node{k}", ",".join(str(c) for c in cpus[k::n]), float(len(cpus[k::n])),
                 float(memory) / n) for k in range(n)]


def machine() -> tuple[float, float]:
    """This machine's capacity: (cores this process may run on, physical memory MiB)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20
    return float(cores), float(memory)


@dataclass(frozen=True)
class Allocatable:
    """The machine's capacity, the reserve and what is left for the VMs (cores, MiB)."""

    cpu: float
    memory: float
    reserve_cpu: float = 0.0
    reserve_memory: float = 0.0
    weight: float | None = None  # cores the VM tree weighs (None: its allocatable cores)

    @property
    def allocatable_cpu(self) -> float:
        return max(0.0, self.cpu - self.reserve_cpu)

    @property
    def allocatable_memory(self) -> float:
        return max(0.0, self.memory - self.reserve_memory)

    def limits(self) -> Limits:
        """The VM tree's top group's limits: the allocatable CPU and memory."""
        return Limits(cpu=self.allocatable_cpu, memory=self.allocatable_memory)

    def as_dict(self) -> dict[str, dict[str, float]]:
        """What the API shows (``GET /nodes``'s ``machine``)."""
        return {"capacity": {"cpu": self.cpu, "memory": round(self.memory, 1)},
                "reserved": {"cpu": self.reserve_cpu, "memory": round(self.reserve_memory, 1)},
                "allocatable": {"cpu": round(self.allocatable_cpu, 6),
                                "memory": round(self.allocatable_memory, 1)}}


@dataclass(frozen=True)
class Reserve:
    """What the VMs may not use: ``cpu`` cores and ``memory`` MiB (``backend.reserve_*``)."""

    cpu: float = 0.0
    memory: float = 0.0
    weight: float | None = None
    """The CPU weight of the VMs together against the machine's other processes, in cores
    (``backend.tree_weight``); None: their allocatable cores, as Kubernetes' ``kubepods``."""

    def check(self, capacity: tuple[float, float] | None = None) -> Allocatable:
        """The allocatable capacity of this machine (or of ``capacity``: cores, MiB) under
        this reserve. Raises ``ValueError`` naming the field when the reserve leaves the VMs
        nothing (it must be under the capacity)."""
        cpu, memory = capacity if capacity is not None else machine()
        if not 0 <= self.cpu < cpu:
            raise ValueError(f"backend.reserve_cpu: {self.cpu:g} core(s) leaves nothing for the "
                             f"VMs of this {cpu:g}-core machine (0 <= reserve_cpu < {cpu:g})")
        if not 0 <= self.memory < memory:
            raise ValueError(f"backend.reserve_memory: {self.memory:g} MiB leaves nothing for "
                             f"the VMs of this machine ({memory:.0f} MiB)")
        return Allocatable(cpu, memory, self.cpu, self.memory, self.weight)


def reserve_nodes(nodes: Sequence[Node], alloc: Allocatable) -> list[Node]:
    """``nodes`` with the reserve taken out (module doc): when the nodes' cores (memory) sum
    to more than the allocatable, each keeps back the same fraction of its own."""

    def fraction(total: float, allocatable: float) -> float:
        return 0.0 if total <= allocatable or total <= 0 else 1.0 - allocatable / total

    f_cpu = fraction(sum(n.cores for n in nodes), alloc.allocatable_cpu)
    f_mem = fraction(sum(n.memory for n in nodes), alloc.allocatable_memory)
    return [replace(n, reserved_cores=round(n.cores * f_cpu, 6),
                    reserved_memory=round(n.memory * f_mem, 3)) for n in nodes]
