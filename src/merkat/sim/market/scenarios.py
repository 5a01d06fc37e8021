"""Scripted scenarios: a few applications on a small cluster, period by period, with their series.

The trace simulation (:mod:`merkat.sim.market.trace`) runs thousands of identical rigid jobs and keeps
per-job outcomes; the papers' *illustrations* (Merkat Fig. 6-7, Themis Fig. 6) need the
opposite: a handful of applications of different kinds, events at scripted times (a burst of
tasks at minute 85, best-effort applications arriving during a run) and, every period, each
application's bids, VMs, allocations and metric, to plot how the controllers adapt.

Contract of :class:`Scenario`:

- it owns one :class:`ScenarioPlatform` (the real :class:`~merkat.platform.period.Platform`
  with one small addition, below), one :class:`ScenarioBackend` (the real
  :class:`~merkat.backends.sim.SimBackend` plus a parallel-job queue) and one
  :class:`~merkat.bank.memory.MemoryLedger`;
- :meth:`Scenario.add` queues an application (its :class:`~merkat.platform.period.AppSpec`,
  its simulated model, optionally a ready-made controller); it is submitted at the first
  period boundary at or after ``spec.submit_time``;
- :meth:`Scenario.at` queues an event (a function of the scenario) fired at the first period
  boundary at or after its time, before that period runs (e.g. ``farm.add_tasks``);
- :meth:`Scenario.run` runs the virtual clock: at each boundary ``t`` (0, P, 2P, ...) it fires
  the events and submissions due, tells every :class:`IterativeApp` the time, calls
  ``platform.run_period(t)``, samples every submitted application, then
  ``backend.advance(t, t + P)``; it stops at ``until`` or when nothing is pending and no
  application is active, whichever comes first;
- the result (:class:`ScenarioResult`) holds, per application and per period, the sample taken
  right after the period's clearing: VM count, per-VM CPU bid, total bid, CPU allocation,
  the metric the controller saw, progress, tasks/jobs queued and running (``None`` before the
  application is submitted and after it ends), plus each application's start and end.

Nothing here reads a clock or draws a random number: models bring their own (seeded) inputs,
so the same scenario gives the same series.

Models added here (the simulated backend's :class:`RigidApp` and :class:`TaskFarm` are reused):

- :class:`IterativeApp` — a :class:`RigidApp` reporting Merkat §5.3.1's metric: the iteration
  time (ideal iteration time / measured speed over the last period) against the reference
  "remaining time to deadline distributed over the remaining number of iterations";
- :class:`QueueFarm` — a :class:`TaskFarm` (Condor) reporting its number of queued tasks
  against a threshold (Merkat §5.3.2);
- :class:`BatchQueue` — a Torque-like framework: rigid parallel jobs arriving over time,
  started first-come-first-served on the framework's VMs (one process per VM), progressing in
  lock-step; its metric is the total wait time of its queued jobs against a threshold.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from merkat.backends.sim import _VM, RigidApp, SimBackend, TaskFarm
from merkat.bank.memory import MemoryLedger
from merkat.control.base import Controller
from merkat.control.types import Metrics, Observation, Sense, VMState
from merkat.market import RESOURCES, BalanceParams, Hosts
from merkat.platform.period import ENDED, App, AppSpec, Platform

# --- application models -----------------------------------------------------------------------


@dataclass
class IterativeApp(RigidApp):
    """A lock-step iterative solver (Zephyr, Merkat §5.3.1) whose metric is its iteration time.

    ``iteration``: seconds per iteration at full VM size (so ``work_total / iteration``
    iterations). ``deadline``: absolute time (s). ``clock``: the current time, set by the
    scenario before each period. Metric (lower is better): v = ``iteration / rate`` with rate
    the speed measured over the last period (work seconds per second; ``inf`` when it made no
    progress), v_ref = (deadline - clock) / iterations left (0 once the deadline has passed).
    Before the first period both are ``None`` (the controller holds).
    """

    iteration: float = 30.0
    deadline: float | None = None
    clock: float = 0.0

    @property
    def iterations_left(self) -> float:
        return max(0.0, self.work_total - self.work_done) / self.iteration

    def iteration_time(self) -> float | None:
        """The iteration time measured over the last period, or None before the first."""
        if self.last_rate is None:
            return None
        return self.iteration / self.last_rate if self.last_rate > 0 else math.inf

    def reference(self) -> float | None:
        """Remaining time to deadline over remaining iterations (Merkat §5.3.1)."""
        if self.deadline is None:
            return None
        left = self.iterations_left
        if left <= 0:
            return None
        return max(0.0, self.deadline - self.clock) / left

    def metrics(self) -> Metrics:
        base = super().metrics()
        v, ref = self.iteration_time(), self.reference()
        if v is None or ref is None:
            return base
        return replace(base, performance=v, reference=ref, sense=Sense.LOWER_IS_BETTER)


@dataclass
class QueueFarm(TaskFarm):
    """A Condor-like bag of tasks whose metric is its number of queued (not running) tasks
    against ``threshold`` (Merkat §5.3.2: "the number of queued Condor tasks is below a
    threshold"); lower is better."""

    threshold: float = 10.0

    def metrics(self) -> Metrics:
        return replace(super().metrics(), performance=float(len(self.queue)),
                       reference=self.threshold, sense=Sense.LOWER_IS_BETTER)


@dataclass
class _Job:
    index: int
    submit: float
    procs: int
    run: float
    left: float = 0.0
    vms: tuple[str, ...] = ()
    start: float | None = None
    end: float | None = None
    restarts: int = 0


@dataclass
class BatchQueue:
    """A Torque-like framework: rigid parallel jobs on the framework's VMs (workers).

    ``submit``/``procs``/``run``: one entry per job (absolute submit time s, processes, run
    time s at full speed). A job starts, first-come-first-served (no backfilling: Torque's
    default FIFO scheduler), when ``procs`` of the framework's VMs are ready and idle; it
    progresses at the speed of its slowest VM and frees them when done. A job that loses a VM
    (released by the controller) restarts from the beginning, at the head of the queue.
    Metric (lower is better): the total wait time so far of the queued jobs (s) against
    ``threshold`` (Merkat §5.3.2: "the total wait time of Torque tasks"). ``work_total`` counts
    every job, arrived or not, so the framework is done only when the last job has run.
    """

    submit: Sequence[float]
    procs: Sequence[int]
    run: Sequence[float]
    threshold: float = 600.0
    cpu: float = 1.0
    memory: float = 0.0
    clock: float = 0.0
    finish_time: float | None = None
    last_rate: float | None = None
    jobs: list[_Job] = field(default_factory=list)
    queue: list[int] = field(default_factory=list)  # arrived, waiting (job indices, FCFS)
    running: dict[int, _Job] = field(default_factory=dict)
    arrived: int = 0

    def __post_init__(self) -> None:
        if not len(self.submit) == len(self.procs) == len(self.run):
            raise ValueError("submit, procs and run must have the same length")
        order = sorted(range(len(self.submit)), key=lambda k: (self.submit[k], k))
        self.jobs = [_Job(k, float(self.submit[k]), int(self.procs[k]), float(self.run[k]),
                          float(self.run[k])) for k in order]

    @property
    def done(self) -> int:
        return sum(1 for j in self.jobs if j.end is not None)

    def busy_vms(self) -> set[str]:
        return {vm for j in self.running.values() for vm in j.vms}

    def queued_procs(self) -> int:
        return sum(self.jobs[k].procs for k in self.queue)

    def total_wait(self, now: float) -> float:
        return sum(max(0.0, now - self.jobs[k].submit) for k in self.queue)

    def metrics(self) -> Metrics:
        n = len(self.jobs)
        return Metrics(performance=self.total_wait(self.clock), reference=self.threshold,
                       sense=Sense.LOWER_IS_BETTER, work_done=float(self.done),
                       work_total=float(n), progress_rate=self.last_rate,
                       tasks_left=n - self.done)

    def interrupt(self, vm_id: str) -> None:
        """``vm_id`` is gone: its job (if any) restarts from scratch at the head of the queue."""
        for k, job in list(self.running.items()):
            if vm_id in job.vms:
                del self.running[k]
                job.vms, job.left, job.start = (), job.run, None
                job.restarts += 1
                self.queue.insert(0, k)


# --- backend and platform ------------------------------------------------------------------------


@dataclass
class ScenarioBackend(SimBackend):
    """:class:`SimBackend` plus :class:`BatchQueue` frameworks (kept in :attr:`batches`)."""

    batches: dict[str, BatchQueue] = field(default_factory=dict)

    def add_batch(self, app_id: str, model: BatchQueue) -> None:
        self.batches[app_id] = model
        # also in ``apps``: the base class looks a VM's model up there (migration time)
        self.apps[app_id] = model

    def metrics(self, app: str) -> Metrics:
        if app in self.batches:
            return self.batches[app].metrics()
        return super().metrics(app)

    def finished(self, app: str) -> bool:
        if app in self.batches:
            return self.batches[app].finish_time is not None
        return super().finished(app)

    def is_busy(self, app: str, vm_id: str) -> bool:
        """Whether ``vm_id`` runs a task or job (rigid applications: always)."""
        if app in self.batches:
            return vm_id in self.batches[app].busy_vms()
        model = self.apps.get(app)
        if isinstance(model, TaskFarm):
            return vm_id in model.running
        return True

    def _release(self, vm_id: str) -> None:
        vm = self.vms.get(vm_id)
        if vm is not None and vm.app in self.batches:
            self.vms.pop(vm_id)
            self.batches[vm.app].interrupt(vm_id)
            return
        super()._release(vm_id)

    def advance(self, t0: float, t1: float) -> None:
        """:meth:`SimBackend.advance`, with :class:`BatchQueue` models advanced here."""
        by_app: dict[str, list[tuple[str, _VM]]] = {}
        for vm_id, vm in self.vms.items():
            by_app.setdefault(vm.app, []).append((vm_id, vm))
        for app_id, model in self.apps.items():
            if model.finish_time is not None:
                continue
            vms = by_app.get(app_id, [])
            if app_id in self.batches:
                self._advance_batch(self.batches[app_id], sorted(vms), t0, t1)
            elif isinstance(model, RigidApp):
                self._advance_rigid(model, vms, t0, t1)
            elif isinstance(model, TaskFarm):
                self._advance_farm(model, vms, t0, t1)

    def _advance_batch(self, q: BatchQueue, vms: list[tuple[str, _VM]], t0: float,
                       t1: float) -> None:
        """Event loop over [t0, t1]: arrivals, VMs becoming ready, job completions."""
        speed = {vm_id: self._speed(q, vm, t0, t1) for vm_id, vm in vms}
        ready = {vm_id: max(t0, vm.ready_at) for vm_id, vm in vms}
        work_before = sum(j.run - j.left for j in q.jobs)
        now = t0
        while True:
            while q.arrived < len(q.jobs) and q.jobs[q.arrived].submit <= now:
                q.queue.append(q.arrived)
                q.arrived += 1
            busy = q.busy_vms()
            while q.queue:  # FCFS: only the head may start
                job = q.jobs[q.queue[0]]
                idle = [v for v in speed if v not in busy and ready[v] <= now and speed[v] > 0]
                if len(idle) < job.procs:
                    break
                job.vms, job.start = tuple(idle[: job.procs]), now
                busy.update(job.vms)
                q.running[job.index] = job
                q.queue.pop(0)
            if q.arrived == len(q.jobs) and not q.queue and not q.running:
                q.finish_time = now
                break
            rate = {k: min(speed[v] for v in j.vms) for k, j in q.running.items()}
            nxt = [now + j.left / rate[k] for k, j in q.running.items() if rate[k] > 0]
            if q.arrived < len(q.jobs):
                nxt.append(q.jobs[q.arrived].submit)
            nxt += [r for r in ready.values() if r > now]
            step_to = min([t1, *nxt])
            if step_to <= now:  # float noise: a completion due now
                step_to = min(t1, now + 1e-6)
            for k, j in q.running.items():
                j.left = max(0.0, j.left - (step_to - now) * rate[k])
            now = step_to
            for k in [k for k, j in q.running.items() if j.left <= 1e-9 * max(1.0, j.run)]:
                q.running.pop(k).end = now
            if now >= t1:
                break
        q.last_rate = (sum(j.run - j.left for j in q.jobs) - work_before) / (t1 - t0)


class ScenarioPlatform(Platform):
    """The platform, with each VM's ``busy`` flag filled from the backend.

    :meth:`Platform.observe` builds every :class:`~merkat.control.types.VMView` with the
    default ``busy=True``, so a horizontal policy cannot release idle workers first (Merkat
    Alg. 2 line 9, ``release_order``); this subclass asks the backend instead.
    """

    def observe(self, app: App, now: float, balance: int) -> Observation:
        obs = super().observe(app, now, balance)
        backend = self.backend
        if not isinstance(backend, ScenarioBackend) or not obs.vms:
            return obs
        vms = tuple(replace(v, busy=backend.is_busy(app.spec.id, v.id)) for v in obs.vms)
        return replace(obs, vms=vms)


# --- the scenario ----------------------------------------------------------------------------------

Model = RigidApp | TaskFarm | BatchQueue

SERIES_KEYS = ("status", "vms", "bid_cpu", "bid_total", "alloc_cpu", "metric", "reference",
               "work_done", "work_total", "queued", "running")


@dataclass
class ScenarioResult:
    """Per-period series of a scenario. ``time_s[k]`` is the k-th period boundary; every list
    in ``series[app]`` has one entry per period (``None`` when the application was not there);
    ``apps[app]`` gives its submit, start and end times, status and controller's last reason."""

    period: float
    time_s: list[float]
    series: dict[str, dict[str, list[Any]]]
    apps: dict[str, dict[str, Any]]
    prices: list[float]
    counts: dict[str, int]
    audit_ok: bool


class Scenario:
    """A cluster of identical hosts, a period, a reserve price and scripted arrivals/events.

    ``hosts`` hosts of ``cores`` cores and ``memory`` MiB each; ``trade`` the resources the
    applications bid on (``("cpu",)``: memory is not traded); ``reserve`` the minimum bid per VM
    and traded resource (credits per period).
    """

    def __init__(self, *, hosts: int, cores: float, memory: float = 1e12, period: float = 300.0,
                 reserve: float = 0.001, trade: tuple[str, ...] = ("cpu",),
                 balance: BalanceParams | None = None) -> None:
        if hosts < 1 or not cores > 0 or not memory > 0:
            raise ValueError("a scenario needs hosts >= 1, cores > 0 and memory > 0")
        if not set(trade) <= set(RESOURCES) or "cpu" not in trade:
            raise ValueError(f"trade must include 'cpu' and be within {RESOURCES}, got {trade}")
        cap = np.array([[float(cores), float(memory)]] * hosts)
        self.trade = tuple(trade)
        self.ledger = MemoryLedger(journal=False)
        self.backend = ScenarioBackend(trade_memory="memory" in trade)
        self.platform = ScenarioPlatform(
            Hosts(tuple(f"h{i}" for i in range(hosts)), cap), self.ledger, self.backend,
            period=period, reserve={r: reserve for r in trade},
            balance=balance or BalanceParams())
        self.period = period
        self._pending: list[tuple[AppSpec, Model, Controller | None]] = []
        self._events: list[tuple[float, int, Callable[[Scenario], None]]] = []
        self.models: dict[str, Model] = {}

    def add(self, spec: AppSpec, model: Model, controller: Controller | None = None) -> None:
        """Queue application ``spec`` (run by ``model``), submitted at its ``submit_time``."""
        if spec.id in self.models:
            raise ValueError(f"application {spec.id!r} added twice")
        if tuple(spec.trade) != self.trade:
            spec = replace(spec, trade=self.trade)
        self.models[spec.id] = model
        self._pending.append((spec, model, controller))
        self._pending.sort(key=lambda p: (p[0].submit_time, p[0].id))

    def at(self, time: float, action: Callable[[Scenario], None]) -> None:
        """Fire ``action(self)`` at the first period boundary at or after ``time``."""
        self._events.append((time, len(self._events), action))
        self._events.sort(key=lambda e: (e[0], e[1]))

    def _submit(self, spec: AppSpec, model: Model, controller: Controller | None) -> None:
        if isinstance(model, BatchQueue):
            self.backend.add_batch(spec.id, model)
        else:
            self.backend.add_app(spec.id, model)
        self.platform.submit(spec, controller)

    def run(self, until: float) -> ScenarioResult:
        """Run periods from 0 while t < ``until`` (s) and something is pending or active."""
        P = self.period
        platform, backend = self.platform, self.backend
        times: list[float] = []
        prices: list[float] = []
        series: dict[str, dict[str, list[Any]]] = {}
        t = 0.0
        k = 0
        while t < until and (self._pending or self._events or platform.active):
            while self._events and self._events[0][0] <= t:
                self._events.pop(0)[2](self)
            while self._pending and self._pending[0][0].submit_time <= t:
                spec, model, ctl = self._pending.pop(0)
                self._submit(spec, model, ctl)
                series[spec.id] = {key: [None] * k for key in SERIES_KEYS}
            for model in self.models.values():
                if isinstance(model, IterativeApp | BatchQueue):
                    model.clock = t
            metrics = {a: backend.metrics(a) for a in platform.active}
            record = platform.run_period(t)
            times.append(t)
            prices.append(record.prices["cpu"])
            for app_id, cols in series.items():
                sample = self._sample(platform.apps[app_id], metrics.get(app_id))
                for key in SERIES_KEYS:
                    cols[key].append(sample.get(key))
            backend.advance(t, t + P)
            k += 1
            t = k * P
        apps = {a: self._summary(app) for a, app in platform.apps.items()}
        return ScenarioResult(P, times, series, apps, prices, dict(backend.counts),
                              self.ledger.audit().ok)

    def _sample(self, app: App, m: Metrics | None) -> dict[str, Any]:
        if m is None or app.status in ENDED:  # ended before or during this period
            return {"status": app.status.value}
        running = [vm for vm in app.vms if vm.state is not VMState.SUSPENDED]
        model = self.models[app.spec.id]
        queued: int | None = None
        busy: int | None = None
        if isinstance(model, TaskFarm):
            queued, busy = len(model.queue), len(model.running)
        elif isinstance(model, BatchQueue):
            queued, busy = model.queued_procs(), sum(j.procs for j in model.running.values())
        return {
            "status": app.status.value,
            "vms": len(running),
            "bid_cpu": (sum(vm.bid.get("cpu", 0.0) for vm in running) / len(running)
                        if running else 0.0),
            "bid_total": sum(sum(vm.bid.values()) for vm in running),
            "alloc_cpu": sum(vm.alloc.get("cpu", 0.0) for vm in running),
            "metric": _finite(m.performance),
            "reference": _finite(m.reference),
            "work_done": m.work_done,
            "work_total": m.work_total,
            "queued": queued,
            "running": busy,
        }

    def _summary(self, app: App) -> dict[str, Any]:
        model = self.models[app.spec.id]
        return {
            "submit_s": app.spec.submit_time,
            "start_s": app.start_time,
            "end_s": app.end_time,
            "finish_s": None if model.finish_time is None else float(model.finish_time),
            "status": app.status.value,
            "ended": app.status in ENDED,
            "reason": app.reason,
            "suspensions": app.suspensions,
            "spent": app.spent / 1_000_000,
        }


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def column(result: ScenarioResult, app: str, key: str) -> list[Any]:
    """One series of one application (``None`` where it was absent)."""
    return result.series[app][key]


def spec(app_id: str, policy: str, *, size: int = 1, cpu: float = 1.0, memory: float = 0.0,
         submit: float = 0.0, budget: float, renewal: float = 0.0, deadline: float | None = None,
         params: Mapping[str, Any] | None = None, nvms_max: int = 1_000_000) -> AppSpec:
    """A shorthand for :class:`AppSpec` with a CPU (and memory) VM template."""
    return AppSpec(id=app_id, policy=policy, size=size, vm_size={"cpu": cpu, "memory": memory},
                   submit_time=submit, budget=budget, renewal=renewal, deadline=deadline,
                   params=dict(params or {}), nvms_max=nvms_max,
                   vm_min={"memory": memory} if memory > 0 else {})
