"""The simulated backend's VMs and their speed (:mod:`merkat.backends.sim`): a VM's state
(:class:`_VM`: application, host, allocation mapping, ready and migration times) and the
per-application progress over an interval, :class:`SimTime`, which
:class:`~merkat.backends.sim.SimBackend` inherits (split out of ``sim.py`` by
responsibility: the backend's operations and bookkeeping there, the speeds and progress of
its applications here).

- a VM's speed (:meth:`SimTime.speed`): its CPU fraction, times its memory fraction when
  memory is traded, less the migration overhead while it migrates;
- a rigid application advances at its slowest VM's speed from the latest of its VMs' ready
  times (:meth:`SimTime._advance_rigid`; :meth:`SimTime._rigid_pace`, the same arithmetic
  inlined in one pass, with the kept least CPU allocation of a quiet application:
  :mod:`merkat.backends.sim_pace`);
- a task farm's workers take tasks in queue order (:meth:`SimTime._advance_farm`).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping
from dataclasses import dataclass

from merkat.backends.sim_models import AppModel, RigidApp, TaskFarm
from merkat.backends.sim_pace import quiet_rate


@dataclass
class _VM:
    app: str
    host: int
    alloc: Mapping[str, float]
    ready_at: float
    migrating_until: float = -math.inf


class SimTime:
    """The speeds and per-application progress of :class:`~merkat.backends.sim.SimBackend`
    (a mixin: the backend's fields below are its dataclass fields and private state)."""

    trade_memory: bool
    migration_overhead: float
    _pace: dict[str, float]
    _quiet: dict[str, float]
    _lows: dict[str, float]

    def speed(self, model: AppModel, vm: _VM, t0: float, t1: float) -> float:
        """A VM's speed over ``[t0, t1]``: its CPU fraction (times its memory fraction when
        memory counts), less the migration overhead while it migrates."""
        return self._speed(model, vm, t0, t1)

    def _speed(self, model: AppModel, vm: _VM, t0: float, t1: float) -> float:
        cpu = vm.alloc.get("cpu", 0.0) / model.cpu if model.cpu > 0 else 1.0
        speed = min(1.0, cpu)
        if self.trade_memory and model.memory > 0:
            speed *= min(1.0, vm.alloc.get("memory", 0.0) / model.memory)
        if vm.migrating_until > t0:
            frac = (min(vm.migrating_until, t1) - t0) / (t1 - t0)
            speed *= 1.0 - self.migration_overhead * frac
        return speed

    def _advance_rigid(self, model: RigidApp, vms: list[_VM], t0: float, t1: float) -> None:
        if len(vms) < model.vms:
            model.last_rate = 0.0 if vms else None
            return
        keep = False
        if vms and type(self)._speed is SimTime._speed:
            rate, begin, settled = self._rigid_pace(model, vms, t0, t1)
            # the same at any later t0 while nothing changes (a NaN is never kept)
            keep = settled and begin <= t0 and rate >= 0.0
        else:
            rate = min(self._speed(model, vm, t0, t1) for vm in vms)
            begin = max([t0] + [vm.ready_at for vm in vms])
        usable = max(0.0, t1 - begin)
        left = model.work_total - model.work_done
        if rate > 0 and rate * usable >= left:
            model.finish_time = begin + left / rate
            model.work_done = model.work_total
        else:
            model.work_done += rate * usable
        model.last_rate = rate * usable / (t1 - t0)
        if keep and model.finish_time is None:
            self._pace[vms[0].app] = rate

    def _rigid_pace(self, model: RigidApp, vms: list[_VM], t0: float, t1: float
                    ) -> tuple[float, float, bool]:
        """The slowest VM's :meth:`_speed`, the latest of ``t0`` and the VMs' ready times,
        and whether no VM migrates after ``t0`` (``all(vm.migrating_until <= t0)``), in one
        pass (the same arithmetic, inlined)."""
        full_cpu, memory = model.cpu, model.memory
        use_memory = self.trade_memory and memory > 0
        app_id = vms[0].app
        # every VM ready and none migrating: the loop below gives this rate and ``t0``
        quick = quiet_rate(model, vms, app_id, self._quiet, self._lows, self.trade_memory, t0)
        if quick is not None:
            return quick, t0, True
        overhead = self.migration_overhead
        rate = math.inf
        begin = t0
        settled = True
        for vm in vms:
            alloc = vm.alloc
            cpu = alloc.get("cpu", 0.0) / full_cpu if full_cpu > 0 else 1.0
            speed = cpu if cpu < 1.0 else 1.0  # min(1.0, cpu)
            if use_memory:
                mem = alloc.get("memory", 0.0) / memory
                speed *= mem if mem < 1.0 else 1.0
            until = vm.migrating_until
            if not until <= t0:  # (a NaN is not settled, and slows nothing)
                settled = False
                if until > t0:
                    frac = (min(until, t1) - t0) / (t1 - t0)
                    speed *= 1.0 - overhead * frac
            if speed < rate:
                rate = speed
            if vm.ready_at > begin:
                begin = vm.ready_at
        if settled and begin <= t0:  # (not NaN) every VM ready, none migrating after t0
            self._quiet[app_id] = t0
        return rate, begin, settled

    def _advance_farm(
        self, model: TaskFarm, vms: list[tuple[str, _VM]], t0: float, t1: float
    ) -> None:
        """Workers take tasks in queue order; events (a worker free, a task done) in time
        order, ties by VM id, so the result does not depend on dict order."""
        done_before = model.done
        speed = {vm_id: self._speed(model, vm, t0, t1) for vm_id, vm in vms}
        events: list[tuple[float, str]] = []
        for vm_id, vm in vms:
            if speed[vm_id] <= 0:
                continue
            begin = max(t0, vm.ready_at)
            task = model.running.get(vm_id)
            at = begin + task[0] / speed[vm_id] if task else begin
            heapq.heappush(events, (at, vm_id))
        seg_start = {vm_id: max(t0, vm.ready_at) for vm_id, vm in vms}
        while events and events[0][0] <= t1:
            now, vm_id = heapq.heappop(events)
            if vm_id in model.running:  # its task is done
                del model.running[vm_id]
                model.done += 1
                if not model.queue and not model.running:
                    model.finish_time = now
            if model.queue:
                d = model.queue.popleft()
                model.running[vm_id] = [d, d]
                seg_start[vm_id] = now
                heapq.heappush(events, (now + d / speed[vm_id], vm_id))
        for vm_id, task in model.running.items():  # partly done at the end of the period
            if speed.get(vm_id, 0.0) > 0 and seg_start[vm_id] < t1:
                task[0] = max(0.0, task[0] - (t1 - seg_start[vm_id]) * speed[vm_id])
        model.last_rate = (model.done - done_before) / (t1 - t0)
