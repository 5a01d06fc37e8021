"""Moldable trace jobs (``merkat sim run --moldable``): a job that may run on fewer or more
processes than it asked for, so that the horizontal policies run on traces.

A trace records one size per job (``procs``) and its run time at that size. Moldable, the job
runs on any number n of VMs (one process each) from 1 to :data:`MOLD_MAX` × ``procs``, and the
number may change from one period to the next (Feitelson's taxonomy would call a job that
changes size while it runs *malleable*; the option keeps the issue's word). Its speed follows
**Amdahl's law** with a serial fraction σ (``serial``, default :data:`SERIAL_FRACTION`):

    S(n) = 1 / (σ + (1 − σ) / n),      rate(n) = S(n) / S(procs) × s

where s is the slowest running VM's speed (its CPU fraction, memory and migration as for a
rigid job, :meth:`SimBackend.speed <merkat.backends.sim.SimBackend.speed>`): the processes
still work in lock-step. Work is counted as for a rigid job, in seconds at full speed on the
requested ``procs`` VMs (``work_total`` = the trace's run time, ``ideal_rate`` 1), so every
deadline, budget and value of the trace experiments means what it meant: on ``procs`` VMs a
moldable job runs exactly as its rigid self (but for booting VMs, below). A VM that is booting
or resuming does not hold the others back: over a period, the job progresses on the VMs
that are ready, n counting those. Decisions in docs/simulator-market.md, "Moldable trace jobs".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from merkat.control.types import Metrics, new_metrics

SERIAL_FRACTION = 0.05
"""Amdahl's serial fraction σ by default: 5 % (a speed-up of 20 at most)."""

MOLD_MAX = 2
"""A moldable job runs on at most this many times the processes it asked for."""


def check_serial(serial: float) -> float:
    """``serial`` if it is a fraction in [0, 1), else ValueError naming it."""
    if not (isinstance(serial, (int, float)) and 0 <= serial < 1):
        raise ValueError(f"serial fraction must be in [0, 1), got {serial!r}")
    return float(serial)


def amdahl(n: float, serial: float) -> float:
    """Amdahl's speed-up on ``n`` processes: 1 / (σ + (1 − σ)/n); 0 for n <= 0."""
    if n <= 0:
        return 0.0
    return 1.0 / (serial + (1.0 - serial) / n)


def relative_rate(n: int, procs: int, serial: float) -> float:
    """The rate on ``n`` processes of a job measured on ``procs``: S(n) / S(procs)."""
    return amdahl(n, serial) / amdahl(procs, serial)


def max_vms(procs: int) -> int:
    """The most VMs a moldable job of ``procs`` processes may use: :data:`MOLD_MAX` × procs."""
    return MOLD_MAX * procs


@dataclass
class MoldableApp:
    """A trace job of ``procs`` requested processes and ``work_total`` seconds of work on them,
    runnable on 1 to ``max_vms(procs)`` VMs at Amdahl's speed-up (module docstring). A model
    that progresses itself (:class:`~merkat.backends.sim.AppModel`)."""

    procs: int
    work_total: float
    serial: float = SERIAL_FRACTION
    cpu: float = 1.0
    memory: float = 0.0
    work_done: float = 0.0
    finish_time: float | None = None
    last_rate: float | None = None
    _rates: dict[int, float] = field(default_factory=dict, init=False, repr=False)

    def metrics(self) -> Metrics:
        return new_metrics(work_done=self.work_done, work_total=self.work_total,
                           progress_rate=self.last_rate, ideal_rate=1.0)

    def rate(self, n: int) -> float:
        """S(n) / S(procs), cached per n."""
        r = self._rates.get(n)
        if r is None:
            r = self._rates[n] = relative_rate(n, self.procs, self.serial)
        return r

    def advance(self, backend: Any, vms: Sequence[tuple[str, Any]], t0: float,
                t1: float) -> None:
        """Progress over [t0, t1]: piecewise between the VMs' ready times, on the VMs ready,
        at rate(n) × the slowest ready VM's speed over the period."""
        if not vms:
            self.last_rate = None
            return
        speed = {vm_id: backend.speed(self, vm, t0, t1) for vm_id, vm in vms}
        ready = sorted((max(t0, vm.ready_at), vm_id) for vm_id, vm in vms)
        done_before = self.work_done
        for k, (begin, _) in enumerate(ready):
            if begin >= t1:
                break
            end = ready[k + 1][0] if k + 1 < len(ready) else t1
            end = min(end, t1)
            if end <= begin:
                continue
            slowest = min(speed[v] for _, v in ready[:k + 1])
            rate = self.rate(k + 1) * slowest
            left = self.work_total - self.work_done
            if rate > 0 and rate * (end - begin) >= left:
                self.finish_time = begin + left / rate
                self.work_done = self.work_total
                break
            self.work_done += rate * (end - begin)
        self.last_rate = (self.work_done - done_before) / (t1 - t0)

    def interrupt(self, vm_id: str) -> None:
        """A VM released: the others go on (the job reshapes; no work is lost). Its VMs are
        never idle (no ``busy_vms``: the simulated backend reports none idle)."""

