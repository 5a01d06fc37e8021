"""A cloud provider and its Task Allocation Module (grid-cloud model §3.3) — no clock, no I/O.

State: physical hosts (per-CPU spare MIPS, spare memory, per-disk spare GB, VMs running), VMs
of the catalog types placed on the host already running the most VMs (§3.3.1), and one FIFO
task queue per PE. Every time is passed in by the caller (the simulator of :mod:`.run`).

The TAM (:meth:`Provider.allocations`) lists every way to run a task (§3.3.2):

- idle VMs (all PEs free): A^TIME = c / V^s;
- each PE of an active VM: A^TIME = (c_0 + Σ c_x + c) / V^s (eq. 2), the PE being busy until
  t_b; kept only if the memory and disk not used at t_b by the tasks on the VM's *other* PEs
  hold the task;
- a new VM of each catalog type that holds the task, where some host can take it:
  A^TIME = V^START + c / V^s (eq. 3);

each priced with the provider's posted prices: A^COST = P_m m + P_d d + P_c c (eq. 1), plus
V^COST for a new VM (eq. 4). :meth:`run_task` re-checks an offer (RUN_TASK, §3.2): among the
allocations no longer nor dearer than the offer it takes the best for the user's utility,
equal ones broken by the energy rules of §3.3.3 (active VM, then the idle VM idle for the
shortest time, then a new VM). Since tasks run at the PE's speed one after the other, a task's
start and end are known when it is queued; the caller schedules its completion.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from merkat.market.posted import PostedPrices
from merkat.worlds.gridcloud.model import (
    ACTIVE,
    CPU,
    DISK,
    IDLE,
    INITIAL_PRICES,
    KIND_RANK,
    MEMORY,
    NEW,
    ClusterSpec,
    Offer,
    Task,
    VMType,
)

Utility = Callable[[float, float], float]
"""u(A^COST, A^TIME): the larger the better."""

EPS = 1e-9
ACTIVE_RANK, IDLE_RANK, NEW_RANK = KIND_RANK[ACTIVE], KIND_RANK[IDLE], KIND_RANK[NEW]


@dataclass
class Host:
    """A physical host's spare capacity: per CPU (MIPS), memory (MB), per disk (GB)."""

    index: int
    speed: float
    memory: float
    cpu_free: list[float]
    memory_free: float
    disk_size: float
    disk_free: list[float]
    vms: int = 0

    def fit(self, t: VMType) -> tuple[list[int], int] | None:
        """CPUs and disk for a VM of type ``t`` (V^C distinct CPUs with ≥ V^s spare each: the
        fullest that fit; the fullest disk that fits), or None if the host cannot hold it."""
        if t.memory > self.memory_free + EPS or t.pes > len(self.cpu_free):
            return None
        cpus = sorted(
            (i for i, a in enumerate(self.cpu_free) if a + EPS >= t.speed),
            key=lambda i: (self.cpu_free[i], i),
        )
        if len(cpus) < t.pes:
            return None
        disks = [i for i, a in enumerate(self.disk_free) if a + EPS >= t.disk]
        if not disks:
            return None
        disk = min(disks, key=lambda i: (self.disk_free[i], i))
        return cpus[: t.pes], disk


@dataclass
class VM:
    """A VM: its host's CPUs and disk, when it is ready, and per PE the time it is busy until
    and its FIFO queue of (start, end, memory, disk) — the head is the running task."""

    id: int
    type: VMType
    host: int
    cpus: list[int]
    disk: int
    ready: float
    busy: list[float]
    queues: list[deque[tuple[float, float, float, float]]]
    memory_load: float = 0.0
    disk_load: float = 0.0
    last: float = 0.0  # when the last queued task ends (or the VM is ready): idle from then
    kind: int = 0  # index of its type in the provider's catalog
    stamps: list[int] = field(default_factory=list)  # per PE: its live entry in the index


    def free_at(self, pe: int, t: float) -> tuple[float, float]:
        """Memory and disk not used at ``t`` by the tasks of the VM's other PEs."""
        mem, dsk = self.type.memory, self.type.disk
        for q, queue in enumerate(self.queues):
            if q == pe:
                continue
            for start, end, m, d in queue:
                if start <= t < end:
                    mem -= m
                    dsk -= d
                    break
                if start > t:
                    break
        return mem, dsk


class Allocation(NamedTuple):
    """One way to run a task: A^TIME, A^COST, its kind (new/active/idle), the VM (or the
    catalog index for a new VM), the PE, and ``tie``: the §3.3.3 energy rank among equal
    (time, cost) — active before idle before new; among idle VMs the one idle for the
    shortest time (−idle since); then the lowest VM id and PE."""

    time: float
    cost: float
    kind: str
    vm: int
    pe: int
    tie: tuple[int, float, int, int]


@dataclass(frozen=True)
class Placed:
    """Where :meth:`Provider.run_task` put a task: VM, PE, start, end and the price paid."""

    vm: int
    pe: int
    start: float
    end: float
    cost: float
    new_vm: bool


@dataclass
class Provider:
    """One cloud: hosts of ``cluster`` (one or more clusters' hosts), the catalog, posted
    prices (eq. 5 every period, see :meth:`adapt_prices`), VMs and their PE queues."""

    cluster: Sequence[ClusterSpec]
    catalog: Sequence[VMType]
    prices: PostedPrices = field(init=False)
    hosts: list[Host] = field(init=False)
    vms: dict[int, VM] = field(default_factory=dict)
    demand: dict[str, float] = field(init=False)
    next_vm: int = 0
    initial_prices: dict[str, float] = field(default_factory=lambda: dict(INITIAL_PRICES))
    pe_offers: int | None = 4
    """Offers on active VMs' PEs per VM type: the ``pe_offers`` available the earliest
    (None: every PE, the exhaustive reference)."""
    _hosts_for: dict[str, tuple[Host, list[int], int] | None] = field(
        default_factory=dict, repr=False)
    _idle: list[dict[int, float]] = field(default_factory=list, repr=False)
    _heaps: list[list[tuple[float, int, int, int]]] = field(default_factory=list, repr=False)
    _stamp: int = 0

    def __post_init__(self) -> None:
        self.hosts = []
        for c in self.cluster:
            for _ in range(c.hosts):
                h = c.host
                self.hosts.append(
                    Host(len(self.hosts), h.speed, h.memory, [h.speed] * h.cpus, h.memory,
                         h.disk, [h.disk] * h.disks)
                )
        capacity = {
            CPU: sum(h.speed * len(h.cpu_free) for h in self.hosts),
            MEMORY: sum(h.memory for h in self.hosts),
            DISK: sum(h.disk_size * len(h.disk_free) for h in self.hosts),
        }
        self.prices = PostedPrices(dict(self.initial_prices), capacity)
        self.demand = {CPU: 0.0, MEMORY: 0.0, DISK: 0.0}
        self._idle = [{} for _ in self.catalog]  # idle VMs per type, oldest idle first
        self._heaps = [[] for _ in self.catalog]  # (busy until, VM, PE, stamp) per type

    # --- prices ---------------------------------------------------------------------------

    def price_of(self, task: Task) -> float:
        """Eq. 1: P_m m + P_d d + P_c c at the current posted prices."""
        p = self.prices.prices
        return p[MEMORY] * task.memory + p[DISK] * task.disk + p[CPU] * task.cpu

    def adapt_prices(self) -> dict[str, float]:
        """Eq. 5 on each resource with r^d = what the tasks in the provider (running and
        queued) demand: their PE's MIPS, their memory and disk."""
        return self.prices.update(self.demand)

    # --- the TAM --------------------------------------------------------------------------

    def allocations(self, task: Task, now: float) -> list[Allocation]:
        """The allocations of ``task`` at ``now`` (§3.3.2): idle VMs, PEs of active VMs (eq.
        2), new VMs (eq. 3); priced by eq. 1 / eq. 4.

        With ``pe_offers`` = K (the default) only, per VM type, the idle VM idle for the
        shortest time and the K active PEs available the earliest are listed — the others
        have the same cost and a longer or equal time, so no utility decreasing in cost and
        time prefers them, and the TAM's cost per request does not grow with the number of
        VMs. ``pe_offers`` = None lists every idle VM and every PE (the reference)."""
        base = self.price_of(task)
        c, m, d = task.cpu, task.memory, task.disk
        out: list[Allocation] = []
        k = self.pe_offers
        for j, t in enumerate(self.catalog):
            if t.memory + EPS < m or t.disk + EPS < d:
                continue
            run = c / t.speed
            idle = self._idle[j]
            if idle:
                ids = list(idle) if k is None else [next(reversed(idle))]
                for vid in ids:
                    out.append(Allocation(run, base, IDLE, vid, 0,
                                          (IDLE_RANK, -self.vms[vid].last, vid, 0)))
            for busy, vid, pe in self._earliest(j, k):
                vm = self.vms[vid]
                tb = max(busy, vm.ready, now)
                if t.pes > 1 and not (vm.memory_load + m <= t.memory + EPS
                                      and vm.disk_load + d <= t.disk + EPS):
                    fm, fd = vm.free_at(pe, tb)
                    if fm + EPS < m or fd + EPS < d:
                        continue
                out.append(Allocation(tb - now + run, base, ACTIVE, vid, pe,
                                      (ACTIVE_RANK, 0.0, vid, pe)))
            if self._host_for(t) is not None:
                out.append(Allocation(t.start_time + run, t.start_cost + base, NEW, j, 0,
                                      (NEW_RANK, 0.0, j, 0)))
        return out

    def _earliest(self, j: int, k: int | None) -> list[tuple[float, int, int]]:
        """(busy until, VM, PE) of the active VMs' PEs of type ``j``: the ``k`` earliest (by
        time, VM id, PE), or all if ``k`` is None. Stale index entries are dropped."""
        heap = self._heaps[j]
        vms = self.vms
        if k is None:
            return sorted((b, v, p) for b, v, p, st in heap
                          if v in vms and vms[v].stamps[p] == st)
        got: list[tuple[float, int, int, int]] = []
        while heap and len(got) < k:
            e = heapq.heappop(heap)
            vm = vms.get(e[1])
            if vm is not None and vm.stamps[e[2]] == e[3]:
                got.append(e)
        for e in got:
            heapq.heappush(heap, e)
        return [(b, v, p) for b, v, p, _ in got]

    def _index(self, vm: VM, pe: int) -> None:
        """(Re)enter PE ``pe`` of active VM ``vm`` in its type's index."""
        self._stamp += 1
        vm.stamps[pe] = self._stamp
        heapq.heappush(self._heaps[vm.kind], (vm.busy[pe], vm.id, pe, self._stamp))

    def offers(self, task: Task, now: float, sed: int) -> list[Offer]:
        """The OFFERS of this provider for ``task``: one per distinct (A^TIME, A^COST)."""
        seen = {(a[0], a[1]) for a in self.allocations(task, now)}
        return [Offer(t, c, sed) for t, c in sorted(seen)]

    def run_task(
        self, task: Task, offer: Offer, now: float, utility: Utility
    ) -> Placed | None:
        """RUN_TASK: run ``task`` under ``offer``'s conditions if some allocation still meets
        them (time and cost not above the offer's); the best for ``utility``, ties by the
        energy rules. None if the offer can no longer be honoured."""
        tmax = offer.time * (1 + EPS) + EPS
        cmax = offer.cost * (1 + EPS) + EPS
        best: Allocation | None = None
        best_u = 0.0
        for a in self.allocations(task, now):
            if a.time > tmax or a.cost > cmax:
                continue
            u = utility(a.cost, a.time)
            if best is None or u > best_u or (u == best_u and a.tie < best.tie):
                best, best_u = a, u
        if best is None:
            return None
        return self.assign(task, best, now)

    def assign(self, task: Task, a: Allocation, now: float) -> Placed:
        """Queue ``task`` as allocation ``a`` says (starting a new VM first if it is one)."""
        new = a.kind == NEW
        if new:
            vm = self.start_vm(self.catalog[a.vm], now)
            pe = 0
        else:
            vm, pe = self.vms[a.vm], a.pe
        if self._idle[vm.kind].pop(vm.id, None) is not None:  # idle -> active
            for q in range(vm.type.pes):
                if q != pe:
                    self._index(vm, q)
        speed = vm.type.speed
        start = max(now, vm.busy[pe], vm.ready)
        end = start + task.cpu / speed
        vm.busy[pe] = end
        if end > vm.last:
            vm.last = end
        self._index(vm, pe)
        vm.queues[pe].append((start, end, task.memory, task.disk))
        vm.memory_load += task.memory
        vm.disk_load += task.disk
        self.demand[CPU] += speed
        self.demand[MEMORY] += task.memory
        self.demand[DISK] += task.disk
        return Placed(vm.id, pe, start, end, a.cost, new)

    def complete(self, vm_id: int, pe: int) -> None:
        """The running task of PE ``pe`` of VM ``vm_id`` ended (the caller's completion event)."""
        vm = self.vms[vm_id]
        _, _, m, d = vm.queues[pe].popleft()
        vm.memory_load -= m
        vm.disk_load -= d
        self.demand[CPU] -= vm.type.speed
        self.demand[MEMORY] -= m
        self.demand[DISK] -= d
        if not any(vm.queues):  # active -> idle (its index entries become stale)
            vm.memory_load = vm.disk_load = 0.0  # exact zero (floating sums drift otherwise)
            vm.stamps = [0] * vm.type.pes
            self._idle[vm.kind][vm.id] = vm.last

    # --- VMs on hosts ---------------------------------------------------------------------

    def _host_for(self, t: VMType) -> tuple[Host, list[int], int] | None:
        """The host for a new VM of type ``t``: among those that can hold it, the one running
        the most VMs (§3.3.1; ties: lowest index)."""
        if t.name in self._hosts_for:
            return self._hosts_for[t.name]
        best: tuple[Host, list[int], int] | None = None
        for h in self.hosts:
            if best is not None and h.vms <= best[0].vms:
                continue
            fit = h.fit(t)
            if fit is not None:
                best = (h, fit[0], fit[1])
        self._hosts_for[t.name] = best
        return best

    def start_vm(self, t: VMType, now: float) -> VM:
        """Create a VM of type ``t`` (ready after V^START); raises ValueError if no host can."""
        where = self._host_for(t)
        if where is None:
            raise ValueError(f"no host can hold a {t.name} VM")
        h, cpus, disk = where
        for i in cpus:
            h.cpu_free[i] -= t.speed
        h.memory_free -= t.memory
        h.disk_free[disk] -= t.disk
        h.vms += 1
        ready = now + t.start_time
        vm = VM(self.next_vm, t, h.index, cpus, disk, ready, [ready] * t.pes,
                [deque() for _ in range(t.pes)], last=ready, kind=self.catalog.index(t),
                stamps=[0] * t.pes)
        self._idle[vm.kind][vm.id] = ready  # idle until a task is queued on it
        self._hosts_for.clear()
        self.vms[vm.id] = vm
        self.next_vm += 1
        return vm

    def stop_idle(self, now: float, threshold: float) -> list[int]:
        """Switch off the VMs idle for longer than ``threshold`` at ``now``; their ids."""
        gone = [v for idle in self._idle for v in idle if now - self.vms[v].last > threshold]
        for i in gone:
            vm = self.vms.pop(i)
            del self._idle[vm.kind][i]
            h = self.hosts[vm.host]
            for c in vm.cpus:
                h.cpu_free[c] += vm.type.speed
            h.memory_free += vm.type.memory
            h.disk_free[vm.disk] += vm.type.disk
            h.vms -= 1
        if gone:
            self._hosts_for.clear()
        return gone

    # --- what the figures show ------------------------------------------------------------

    def pe_counts(self, now: float) -> tuple[int, int, int]:
        """(allocated PEs, running PEs, tasks waiting in PE queues) at ``now``."""
        allocated = running = queued = 0
        for vm in self.vms.values():
            allocated += vm.type.pes
            for q in vm.queues:
                if q:
                    busy = 1 if q[0][0] <= now else 0
                    running += busy
                    queued += len(q) - busy
        return allocated, running, queued
