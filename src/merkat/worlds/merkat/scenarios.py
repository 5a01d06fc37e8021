"""Scripted scenarios: a few applications on a small cluster, period by period, with their series.

The trace simulation (:mod:`merkat.worlds.merkat.trace`) runs thousands of identical rigid jobs and keeps
per-job outcomes; the papers' *illustrations* (Merkat Fig. 6-7, Themis Fig. 6) need the
opposite: a handful of applications of different kinds, events at scripted times (a burst of
tasks at minute 85, best-effort applications arriving during a run) and, every period, each
application's bids, VMs, allocations and metric, to plot how the controllers adapt.

Contract of :class:`Scenario`:

- it is a configuration of the runtime driver (:class:`~merkat.runtime.driver.Driver`): one
  :class:`~merkat.core.period.Platform`, one :class:`~merkat.backends.sim.SimBackend`
  (which advances a :class:`BatchQueue` through its own ``advance``), one economy on a
  :class:`~merkat.bank.memory.MemoryLedger`, a virtual clock that never skips idle periods;
- :meth:`Scenario.add` queues an application (its :class:`~merkat.core.period.AppSpec`,
  its simulated model, optionally a ready-made controller); it is submitted at the first
  period boundary at or after ``spec.submit_time``;
- :meth:`Scenario.at` queues an event (a function of the scenario) fired at the first period
  boundary at or after its time, before that period runs (e.g. ``farm.add_tasks``);
- :meth:`Scenario.run` runs the driver: at each boundary ``t`` (0, P, 2P, ...) it fires
  the events and submissions due, tells every :class:`IterativeApp` the time (a hook), runs
  the period, samples every submitted application (a hook), then advances the backend to
  ``t + P``; it stops at ``until`` or when nothing is pending and no application is active,
  whichever comes first;
- the result (:class:`ScenarioResult`) holds, per application and per period, the sample taken
  right after the period's clearing: VM count, per-VM CPU bid, total bid, CPU allocation,
  the metric the controller saw, progress, tasks/jobs queued and running (``None`` before the
  application is submitted and after it ends), plus each application's start and end.

Nothing here reads a clock or draws a random number: models bring their own (seeded) inputs,
and each controller built from its spec draws from the scenario seed's
``controllers/<application id>`` stream (:mod:`merkat.seeds`), so the same scenario and seed
give the same series.

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

from merkat import seeds
from merkat.backends.sim import RigidApp, SimBackend, TaskFarm
from merkat.bank.memory import MemoryLedger
from merkat.control.base import Controller
from merkat.control.types import Metrics, Sense, VMState
from merkat.core.backend import Backend
from merkat.core.period import ENDED, App, AppSpec, PeriodRecord, Platform
from merkat.defaults import CHARGE_BY, ECONOMY, PERIOD_S, RESERVE_PRICE
from merkat.market import RESOURCES, BalanceParams, Hosts
from merkat.runtime.arrivals import Arrival, ListArrivals
from merkat.runtime.driver import Driver, Hooks, admit_sim
from merkat.runtime.economy import Economy

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

    def advance(self, backend: SimBackend, vms: list[tuple[str, Any]], t0: float,
                t1: float) -> None:
        """Event loop over [t0, t1] (called by :meth:`SimBackend.advance`): arrivals, VMs
        becoming ready, job completions."""
        q = self
        speed = {vm_id: backend.speed(q, vm, t0, t1) for vm_id, vm in vms}
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
    and traded resource (credits per period); ``seed`` the run's seed (its controllers'
    streams).
    """

    def __init__(self, *, hosts: int, cores: float, memory: float = 1e12,
                 period: float = PERIOD_S, reserve: float = RESERVE_PRICE,
                 trade: tuple[str, ...] = ("cpu",), balance: BalanceParams | None = None,
                 economy: str = ECONOMY, charging: str = CHARGE_BY, seed: int = 0) -> None:
        if hosts < 1 or not cores > 0 or not memory > 0:
            raise ValueError("a scenario needs hosts >= 1, cores > 0 and memory > 0")
        if not set(trade) <= set(RESOURCES) or "cpu" not in trade:
            raise ValueError(f"trade must include 'cpu' and be within {RESOURCES}, got {trade}")
        cap = np.array([[float(cores), float(memory)]] * hosts)
        self.trade = tuple(trade)
        self.ledger = MemoryLedger(journal=False)
        self.backend = SimBackend(trade_memory="memory" in trade)
        # a backend standing in front of the simulated one (e.g. pods of an emulated
        # Kubernetes cluster mirroring it); the simulated world still advances
        self.world: Backend | None = None
        self.platform = Platform(
            Hosts(tuple(f"h{i}" for i in range(hosts)), cap),
            period=period, reserve={r: reserve for r in trade},
            balance=balance or BalanceParams())
        self.economy = Economy(self.ledger, kind=economy, charging=charging)
        self.period = period
        self.seed = seed
        self._pending: list[Arrival] = []
        self._events: list[Arrival] = []
        self.models: dict[str, Model] = {}

    def add(self, spec: AppSpec, model: Model, controller: Controller | None = None) -> None:
        """Queue application ``spec`` (run by ``model``), submitted at its ``submit_time``; a
        controller built from the spec draws from the ``controllers/<id>`` stream of the
        scenario's seed unless its parameters give a seed."""
        if spec.id in self.models:
            raise ValueError(f"application {spec.id!r} added twice")
        if tuple(spec.trade) != self.trade:
            spec = replace(spec, trade=self.trade)
        if controller is None and "seed" not in spec.params:
            spec = replace(spec, params={**spec.params,
                                         "seed": seeds.controller(self.seed, spec.id)})
        self.models[spec.id] = model
        self._pending.append(Arrival(spec.submit_time, spec, model, controller))

    def at(self, time: float, action: Callable[[Scenario], None]) -> None:
        """Fire ``action(self)`` at the first period boundary at or after ``time``."""
        self._events.append(Arrival(time, event=lambda _driver: action(self)))

    def run(self, until: float) -> ScenarioResult:
        """Run periods from 0 while t < ``until`` (s) and something is pending or active."""
        P = self.period
        platform, backend = self.platform, self.backend
        apps = sorted(self._pending, key=lambda a: (a.time, a.spec.id if a.spec else ""))
        arrivals = ListArrivals(sorted(self._events, key=lambda a: a.time) + apps)
        self._pending, self._events = [], []
        sampler = _Sampler(self)
        world = self.world if self.world is not None else backend
        driver = Driver(platform, world, self.economy, arrivals, hooks=sampler, skip_idle=False,
                        admit=lambda _world, a: admit_sim(backend, a))
        if world is not backend:
            sampler.advance = backend.advance
        driver.run(until, start=0.0)
        apps_out = {a: self._summary(app) for a, app in platform.apps.items()}
        return ScenarioResult(P, sampler.times, sampler.series, apps_out, sampler.prices,
                              dict(backend.counts), self.ledger.audit().ok)

    def _sample(self, app: App, m: Metrics | None) -> dict[str, Any]:
        if m is None or app.status in ENDED:  # ended before or during this period
            return {"status": app.status.value}
        running = [vm for vm in app.records() if vm.state is not VMState.SUSPENDED]
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


class _Sampler(Hooks):
    """The scenario's hooks: each model told the time, the metrics read before the period,
    every submitted application sampled after it."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.times: list[float] = []
        self.prices: list[float] = []
        self.series: dict[str, dict[str, list[Any]]] = {}
        self.metrics: dict[str, Metrics] = {}
        self.advance: Callable[[float, float], None] | None = None  # a world behind the backend

    def admitted(self, driver: Driver, arrival: Arrival, app: App | None) -> None:
        if app is not None:
            self.series[app.spec.id] = {key: [None] * len(self.times) for key in SERIES_KEYS}

    def before_period(self, driver: Driver, t: float) -> None:
        for model in self.scenario.models.values():
            if isinstance(model, IterativeApp | BatchQueue):
                model.clock = t
        self.metrics = {a: driver.backend.metrics(a) for a in driver.platform.active}

    def after_period(self, driver: Driver, t: float, record: PeriodRecord) -> None:
        self.times.append(t)
        self.prices.append(record.prices["cpu"])
        for app_id, cols in self.series.items():
            sample = self.scenario._sample(driver.platform.apps[app_id], self.metrics.get(app_id))
            for key in SERIES_KEYS:
                cols[key].append(sample.get(key))
        if self.advance is not None:  # the simulated world behind the platform's backend
            self.advance(t, t + driver.period)


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
