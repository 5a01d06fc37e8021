"""The market in the simulator: trace jobs as applications under controllers, period by period.

Each job of a :class:`~merkat.workload.Workload` becomes a rigid application of ``procs``
VMs (one task per VM, 1 core each up to the host's cores, the job's memory per task), with
the job's deadline. Budgets follow Themis §IV-B: ``B = B_base / x`` credits per resource unit
(core) per period for a deadline factor ``x``; the application starts with ``B · procs``
credits and is renewed with ``B · procs · renewal/B_base`` (20/60) per period, never above its
initial budget (docs/simulator-market.md). The bank is the in-memory ledger, behind the same
interface and policies as the persistent one.

A run is a configuration of the runtime driver (:mod:`merkat.runtime.driver`): the clock is
virtual (the driver jumps over idle time to the next submission), the backend is the
:class:`~merkat.backends.sim.SimBackend` (advanced to the next boundary after each period),
the money is an :class:`~merkat.runtime.economy.Economy` (``themis`` or ``closed``, charging
by ``bid`` or ``use``) on the in-memory ledger. Each job's owner is its trace user.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from merkat import seeds
from merkat.backends.sim import RigidApp, SimBackend
from merkat.bank.memory import MemoryLedger
from merkat.core.period import App, AppSpec, PeriodRecord, Platform
from merkat.core.period_log import max_allocated
from merkat.defaults import PERIOD_S
from merkat.market import Hosts
from merkat.runtime.arrivals import Arrival, ListArrivals
from merkat.runtime.driver import Driver, Hooks
from merkat.runtime.economy import Economy
from merkat.workload.cluster import Cluster
from merkat.workload.jobs import Workload
from merkat.worlds.merkat.fairness import DrfGap
from merkat.worlds.merkat.moldable import MoldableApp, max_vms
from merkat.worlds.merkat.options import MarketConfig
from merkat.worlds.merkat.results import JobTable

LEDGER_REMEMBERS = 1024
"""The bank of a trace run keeps the idempotency keys of its last operations only
(:class:`~merkat.bank.memory.MemoryLedger`'s ``remember``): a run never replays one."""

PLENTY_MIB = 1e12
"""Host memory when the cluster has no memory limit (memory is then not traded)."""


@dataclass(frozen=True)
class MarketOutcome:
    """Per-job results (in workload order) and per-period records of one market run."""

    start: npt.NDArray[np.float64]  # NaN: never started
    end: npt.NDArray[np.float64]  # completion or stop time (NaN: never ended)
    finished: npt.NDArray[np.bool_]  # all work done
    met: npt.NDArray[np.bool_]
    value: npt.NDArray[np.float64]
    work_done: npt.NDArray[np.float64]
    policies: tuple[str, ...]
    reasons: tuple[str, ...]  # why each application ended (its controller's last reason)
    records: Sequence[PeriodRecord]  # a PeriodLog (merkat.core.period_log): one per period
    counts: dict[str, int]
    suspended_apps: int  # applications suspended at least once
    audit_ok: bool
    max_cores_allocated: float
    wall_s: float
    # With workers > 1, how the run was cut (merkat.worlds.merkat.parallel): per piece used, in job
    # order, {"piece", "first_job", "last_job", "wall_s"}; empty for one process.
    pieces: tuple[dict[str, Any], ...] = ()
    # How each job ended (finished, late, stopped-deadline, stopped-budget, never-started) and
    # what it paid (credits); the bank's books (merkat.runtime.economy.Economy.summary).
    outcomes: tuple[str, ...] = ()
    paid: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))
    bank: dict[str, Any] = field(default_factory=dict)
    fairness: dict[str, Any] = field(default_factory=dict)  # with MarketConfig.fairness


def _hosts(cluster: Cluster) -> tuple[Hosts, bool]:
    memory = cluster.memory_per_host
    cap = np.array(
        [[float(cluster.cores_per_host), PLENTY_MIB if memory is None else memory]] * cluster.hosts
    )
    return Hosts(tuple(f"h{i}" for i in range(cluster.hosts)), cap), memory is not None


def simulate_market(
    workload: Workload,
    cluster: Cluster,
    config: MarketConfig | None = None,
    *,
    policies: Sequence[str] | None = None,
    seed: int = 0,
    progress: Callable[[int], None] | None = None,
) -> MarketOutcome:
    """Run ``workload`` on ``cluster`` under the market; ``policies`` gives one policy name per
    job (default: ``config.policy`` for all). ``seed`` is the run's: each controller draws
    from its own stream of it, ``controllers/<job id>`` (:mod:`merkat.seeds`), so adding a job
    does not shift another's draws (the workload's own draws, made by
    :func:`~merkat.workload.build_workload`, come from the same seed's ``workload``
    stream).

    One process; the caller chooses a run on several
    (:func:`merkat.worlds.merkat.parallel.simulate_parallel`: the same outcome, byte for byte, sooner)."""
    cfg = config or MarketConfig()
    names = policy_names(workload, cfg, policies)
    t_wall = time.perf_counter()
    with paused_gc():
        seg = run_segment(workload, cluster, cfg, names, 0, progress, seed=seed)
    return seg.outcome(workload, names, time.perf_counter() - t_wall)


def policy_names(workload: Workload, cfg: MarketConfig,
                 policies: Sequence[str] | None) -> tuple[str, ...]:
    """One policy name per job: ``policies``, or ``cfg.policy`` for every job (ValueError when
    ``policies`` does not have one per job)."""
    n = len(workload)
    names = tuple(policies) if policies is not None else (cfg.policy,) * n
    if len(names) != n:
        raise ValueError(f"{len(names)} policies for {n} jobs")
    return names


@contextmanager
def paused_gc() -> Iterator[None]:
    """The cyclic garbage collector paused, and restored after (also on an error).

    The period loop allocates millions of short-lived, acyclic records; the collector's passes
    over a heap that grows to ~2 GB on the full HPC2N trace cost ~5 % of the run and free
    nothing (docs/benchmarks.md)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class Handoff(Protocol):
    """How a run that is one piece of a cut trace meets its successors
    (:mod:`merkat.worlds.merkat.parallel`)."""

    def idle(self, i: int) -> int | None:
        """The cluster is empty, in the state a fresh platform has, before job ``i``: the
        segment to hand the rest of the run to, or None to go on."""

    def passed(self, i: int) -> None:
        """Every job before ``i`` is submitted: whether the run was idle before any of them is
        settled."""


@dataclass
class Segment:
    """One market run from job ``start`` (the whole run when ``start`` is 0 and nothing handed
    it over): its platform, backend and bank as they ended, and where it stopped.

    Each application is summarised into ``table`` (its job's row) when it ends, and the
    platform, backend and economy forget it (:meth:`Driver.forget
    <merkat.runtime.driver.Driver.forget>`): the run's memory follows the active
    applications, not the jobs it ran (docs/benchmarks.md, "Memory at trace scale")."""

    platform: Platform
    backend: SimBackend
    economy: Economy
    ids: list[str]
    start: int
    table: JobTable
    stop: int = 0  # first job not run here (every job from ``start`` when it is len(workload))
    handoff: int | None = None  # the segment that runs the jobs from ``stop`` on
    # Per idle point i (the cluster empty before job i, as a fresh platform): the number of
    # period records and the backend's operation counts then.
    at_idle: dict[int, tuple[int, dict[str, int], dict[str, int]]] = field(default_factory=dict)
    drf: DrfGap | None = None  # the distance to DRF, with MarketConfig.fairness
    running: dict[str, int] = field(default_factory=dict)  # admitted, not yet summarised: job

    def retire(self, apps: Sequence[App]) -> None:
        """Summarise ended ``apps`` into their jobs' rows (:meth:`JobTable.put`)."""
        models = self.backend.apps
        for app in apps:
            k = self.running.pop(app.spec.id)
            self.table.put(k, app, models[app.spec.id])

    def jobs(self, lo: int, hi: int) -> dict[str, Any]:
        """Per-job results of jobs ``lo`` to ``hi`` (ran here), as :class:`MarketOutcome`'s
        fields ``start`` … ``reasons``, plus ``suspended`` (bool per job). An application
        not summarised yet (still active where the run stopped) is summarised now, as it
        stands."""
        apps, models = self.platform.apps, self.backend.apps
        for app_id, k in sorted(self.running.items(), key=lambda x: x[1]):
            if lo <= k < hi:
                self.table.put(k, apps[app_id], models[app_id])
        return self.table.rows(lo, hi)

    def outcome(self, workload: Workload, names: tuple[str, ...], wall_s: float) -> MarketOutcome:
        """The :class:`MarketOutcome` of a run that did every job itself."""
        j = self.jobs(0, len(workload))
        records = self.platform.records
        return MarketOutcome(
            j["start"], j["end"], j["finished"], j["met"], j["value"], j["work_done"], names,
            j["reasons"], records, dict(self.backend.counts), int(j["suspended"].sum()),
            self.economy.ledger.audit().ok, max_cpu(records), wall_s,
            outcomes=j["outcomes"], paid=j["paid"], bank=self.economy.summary(),
            fairness=self.drf.summary() if self.drf is not None else {},
        )


def max_cpu(records: Sequence[PeriodRecord]) -> float:
    """The most CPU allocated in any period (0 without periods)."""
    return max_allocated(records, "cpu")


def run_segment(
    workload: Workload,
    cluster: Cluster,
    cfg: MarketConfig,
    names: tuple[str, ...],
    start: int,
    progress: Callable[[int], None] | None,
    handoff: Handoff | None = None,
    seed: int = 0,
) -> Segment:
    """The jobs from ``start`` on, from a fresh platform, as a configuration of the runtime
    driver (:class:`~merkat.runtime.driver.Driver`): a virtual clock that jumps over idle
    time, the simulated backend, an economy on the in-memory ledger, the trace's jobs as
    arrivals (each admitted at the first admission point at or after its submission, or at
    the next period boundary without ``cfg.admission``). With
    ``handoff``, the driver's idle hook asks it at every idle point whether to stop there."""
    hosts, memory_limited = _hosts(cluster)
    trade_memory = memory_limited if cfg.trade_memory is None else cfg.trade_memory
    trade = ("cpu", "memory") if trade_memory else ("cpu",)
    ledger = MemoryLedger(journal=False, remember=LEDGER_REMEMBERS)
    economy = Economy(ledger, kind=cfg.economy, charging=cfg.charging,
                      redistribute_every=cfg.redistribute_every)
    backend = SimBackend(trade_memory=trade_memory, boot_s=cfg.boot_s, resume_s=cfg.resume_s,
                         migration_overhead=cfg.migration_overhead)
    platform = Platform(
        hosts,
        period=cfg.period,
        reserve={r: cfg.reserve for r in trade},
        balance=cfg.balance,
        keep_alive=cfg.keep_alive,
        market=cfg.market,
    )
    ids = [str(j) for j in workload.job_id.tolist()]
    seg = Segment(platform, backend, economy, ids, start, JobTable(workload, names, start),
                  drf=DrfGap() if cfg.fairness else None)
    arrivals = _TraceArrivals(workload, start, ids, names, cfg, trade, seed)
    hooks = _TraceHooks(seg, arrivals, _state(platform), handoff, progress)
    driver = Driver(platform, backend, economy, arrivals, hooks=hooks, admission=cfg.admission)
    driver.run()
    if seg.handoff is None:
        seg.stop = len(workload)
    return seg


class _TraceArrivals(ListArrivals):
    """The trace's jobs from ``start`` on, built lazily (one :class:`Arrival` per job when it
    is due: a 200,000-job trace is not materialised up front)."""

    def __init__(self, w: Workload, start: int, ids: list[str], names: tuple[str, ...],
                 cfg: MarketConfig, trade: tuple[str, ...], seed: int) -> None:
        super().__init__()
        self.w, self.i, self.ids, self.names, self.cfg, self.trade = w, start, ids, names, cfg, \
            trade
        self.seed = seed
        self.submit = w.submit.tolist()
        self.n = len(self.submit)

    @property
    def position(self) -> int:
        return self.i

    def next_time(self) -> float | None:
        return self.submit[self.i] if self.i < self.n else None

    def due(self, t: float) -> list[Arrival]:
        out = []
        submit = self.submit
        while self.i < self.n and submit[self.i] <= t:
            k = self.i
            spec, model = _job(self.w, k, self.ids[k], self.names[k], self.cfg, self.trade,
                               self.seed)
            out.append(Arrival(submit[k], spec, model, index=k))
            self.i += 1
        return out


class _TraceHooks(Hooks):
    """Progress per admitted job; the cut points of ``--workers`` (:mod:`merkat.worlds.merkat.parallel`)
    at every idle point where the platform is as fresh as a new one."""

    def __init__(self, seg: Segment, arrivals: _TraceArrivals, fresh: tuple[str, ...],
                 handoff: Handoff | None, progress: Callable[[int], None] | None) -> None:
        self.seg, self.arrivals, self.fresh = seg, arrivals, fresh
        self.handoff, self.progress = handoff, progress

    def admitted(self, driver: Driver, arrival: Arrival, app: App | None) -> None:
        if app is not None:
            self.seg.running[app.spec.id] = arrival.index
        if self.progress:
            self.progress(1)

    def ended(self, driver: Driver, apps: list[App]) -> None:
        self.seg.retire(apps)
        driver.forget(apps)

    def before_period(self, driver: Driver, t: float) -> None:
        if self.handoff is not None:
            self.handoff.passed(self.arrivals.i)

    def after_period(self, driver: Driver, t: float, record: PeriodRecord) -> None:
        if self.seg.drf is not None:
            self.seg.drf.observe(driver.platform, record)

    def idle(self, driver: Driver, t: float) -> bool:
        seg, i = self.seg, self.arrivals.i
        if self.handoff is None or _state(driver.platform) != self.fresh:
            return False
        seg.at_idle[i] = (len(driver.platform.records), dict(seg.backend.counts),
                          seg.economy.totals())
        to = self.handoff.idle(i)
        if to is None:
            return False
        seg.stop, seg.handoff = i, to
        return True


def _state(platform: Platform) -> tuple[str, ...]:
    """What an empty platform carries into the next period that a controller can see: the
    last prices, bit for bit (sign of zero included; docs/simulator-market.md)."""
    return tuple(float.hex(platform.prices[r]) for r in sorted(platform.prices))


def _job(
    w: Workload, k: int, app_id: str, policy: str, cfg: MarketConfig, trade: tuple[str, ...],
    seed: int,
) -> tuple[AppSpec, RigidApp | MoldableApp]:
    """Job ``k`` as an application (its owner: the trace's user, else one user per job) and
    its simulated model; its controller draws from the run's ``controllers/<app_id>``
    stream unless the policy parameters give a seed."""
    procs = int(w.procs[k])
    b = float(w.budget[k])  # B_base / x, credits per core per period
    memory = float(w.memory[k])
    params = dict(cfg.policy_params)
    if "seed" not in params:
        params["seed"] = seeds.controller_stream(seed, app_id)  # (made on its first draw)
    user = int(w.user[k]) if w.user is not None else -1
    spec = AppSpec(
        id=app_id,
        policy=policy,
        size=procs,
        vm_size={"cpu": 1.0, "memory": memory},
        submit_time=float(w.submit[k]),
        budget=b * procs,
        renewal=b * procs * cfg.budget_renewal / cfg.budget_base,
        deadline=float(w.deadline[k]),
        params=params,
        trade=trade,
        owner=f"user:{user}" if user >= 0 else f"user:job{app_id}",
    )
    if cfg.moldable:  # it may use 1 to MOLD_MAX x procs VMs
        return (replace(spec, nvms_max=max_vms(procs)),
                MoldableApp(procs, float(w.run[k]), cfg.serial_fraction, 1.0, memory))
    return spec, RigidApp(vms=procs, work_total=float(w.run[k]), cpu=1.0, memory=memory)


def summarize_market(w: Workload, out: MarketOutcome, cluster: Cluster) -> dict[str, Any]:
    """The same keys as a baseline's ``summary.json`` plus the market's own figures."""
    n = len(w)
    started = ~np.isnan(out.start)
    wait = out.start[started] - w.submit[started]
    run_time = w.run[started]
    elapsed = (
        np.where(np.isnan(out.end[started]), out.start[started], out.end[started])
        - w.submit[started]
    )
    bsd = np.maximum(elapsed / np.maximum(run_time, 10.0), 1.0)
    ends = out.end[~np.isnan(out.end)]
    makespan = float(ends.max() - w.submit.min()) if ends.size and n else 0.0
    work = float((w.procs * w.run * out.work_done).sum())
    periods = len(out.records)
    hours = periods * (out.records[1].time - out.records[0].time if periods > 1 else PERIOD_S) / 3600
    return {
        "jobs": n,
        "dropped": w.dropped_total,
        "avg_wait_s": float(wait.mean()) if wait.size else 0.0,
        "avg_bounded_slowdown": float(bsd.mean()) if bsd.size else 0.0,
        "utilization": work / (cluster.total_cores * makespan) if makespan > 0 else 0.0,
        "makespan_s": makespan,
        "met_deadlines": int(out.met.sum()),
        "total_value": float(out.value.sum()),
        "started": int(started.sum()),
        "finished": int(out.finished.sum()),
        "aborted": int(n - out.finished.sum()),
        "periods": periods,
        "migrations": out.counts.get("migration", 0),
        "suspends": out.counts.get("suspend", 0),
        "resumes": out.counts.get("resume", 0),
        "boots": out.counts.get("boot", 0),
        "migrations_per_hour": out.counts.get("migration", 0) / hours if hours else 0.0,
        "suspend_resume_per_hour": (out.counts.get("suspend", 0) + out.counts.get("resume", 0))
        / hours
        if hours
        else 0.0,
        "apps_suspended": out.suspended_apps,
        "ledger_audit_ok": out.audit_ok,
        "bank": out.bank,
        "outcomes": {o: out.outcomes.count(o) for o in sorted(set(out.outcomes))},
        "max_cores_allocated": out.max_cores_allocated,
        "wall_s": round(out.wall_s, 4),
    }
