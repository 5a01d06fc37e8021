"""The market in the simulator: trace jobs as applications under controllers, period by period.

Each job of a :class:`~merkat.sim.workload.Workload` becomes a rigid application of ``procs``
VMs (one task per VM, 1 core each up to the host's cores, the job's memory per task), with
the job's deadline. Budgets follow Themis §IV-B: ``B = B_base / x`` credits per resource unit
(core) per period for a deadline factor ``x``; the application starts with ``B · procs``
credits and is renewed with ``B · procs · renewal/B_base`` (20/60) per period, never above its
initial budget (docs/simulator-market.md). The bank is the in-memory ledger, behind the same
interface and policies as the persistent one.

The clock is virtual: the loop jumps over idle time to the next submission, runs
:meth:`~merkat.platform.period.Platform.run_period` at each period boundary and lets the
:class:`~merkat.backends.sim.SimBackend` advance the applications to the next boundary.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from merkat.backends.sim import RigidApp, SimBackend
from merkat.bank.memory import MemoryLedger
from merkat.control.utility import utility
from merkat.market import BalanceParams, Hosts
from merkat.platform.period import AppSpec, PeriodRecord, Platform
from merkat.sim.cluster import Cluster
from merkat.sim.workload import Workload

PLENTY_MIB = 1e12
"""Host memory when the cluster has no memory limit (memory is then not traded)."""


@dataclass(frozen=True)
class MarketConfig:
    """Parameters of a market simulation (defaults: Themis §IV-B / SLO paper §4)."""

    policy: str = "deadline-strict"
    period: float = 300.0
    budget_base: float = 60.0
    budget_renewal: float = 20.0
    reserve: float = 0.001
    trade_memory: bool | None = None  # None: only when hosts have a memory limit
    balance: BalanceParams = field(default_factory=BalanceParams)
    policy_params: dict[str, Any] = field(default_factory=dict)


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
    records: list[PeriodRecord]
    counts: dict[str, int]
    suspended_apps: int  # applications suspended at least once
    audit_ok: bool
    max_cores_allocated: float
    wall_s: float


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
    job (default: ``config.policy`` for all). Controllers draw from ``seed + job index``."""
    cfg = config or MarketConfig()
    # The period loop allocates millions of short-lived, acyclic records; the cyclic garbage
    # collector's passes over a heap that grows to ~2 GB on the full HPC2N trace cost ~5 % of
    # the run and free nothing (docs/benchmarks.md). Paused for the run, restored after.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _simulate(workload, cluster, cfg, policies, seed, progress)
    finally:
        if gc_was_enabled:
            gc.enable()


def _simulate(
    workload: Workload,
    cluster: Cluster,
    cfg: MarketConfig,
    policies: Sequence[str] | None,
    seed: int,
    progress: Callable[[int], None] | None,
) -> MarketOutcome:
    t_wall = time.perf_counter()
    hosts, memory_limited = _hosts(cluster)
    trade_memory = memory_limited if cfg.trade_memory is None else cfg.trade_memory
    trade = ("cpu", "memory") if trade_memory else ("cpu",)
    ledger = MemoryLedger(journal=False)
    backend = SimBackend(trade_memory=trade_memory)
    platform = Platform(
        hosts,
        ledger,
        backend,
        period=cfg.period,
        reserve={r: cfg.reserve for r in trade},
        balance=cfg.balance,
    )
    n = len(workload)
    names = tuple(policies) if policies is not None else (cfg.policy,) * n
    if len(names) != n:
        raise ValueError(f"{len(names)} policies for {n} jobs")
    P = cfg.period
    submit = workload.submit.tolist()
    ids = [str(j) for j in workload.job_id.tolist()]
    t = math.floor(submit[0] / P) * P if n else 0.0
    i = 0
    max_cores = 0.0
    while i < n or platform.active:
        if not platform.active and i < n and submit[i] > t:
            t = max(t, math.ceil(submit[i] / P) * P)  # nothing runs: jump to the next arrival
        while i < n and submit[i] <= t:
            _submit(platform, backend, workload, i, ids[i], names[i], cfg, trade)
            i += 1
            if progress:
                progress(1)
        record = platform.run_period(t)
        max_cores = max(max_cores, record.allocated["cpu"])
        backend.advance(t, t + P)
        t += P

    start = np.full(n, np.nan)
    end = np.full(n, np.nan)
    finished = np.zeros(n, dtype=np.bool_)
    met = np.zeros(n, dtype=np.bool_)
    value = np.zeros(n)
    work = np.zeros(n)
    suspended = 0
    reasons = tuple(platform.apps[ids[k]].reason for k in range(n))
    for k in range(n):
        app = platform.apps[ids[k]]
        model = backend.apps[ids[k]]
        assert isinstance(model, RigidApp)
        if app.start_time is not None:
            start[k] = app.start_time
        done = model.finish_time is not None
        finished[k] = done
        end[k] = (
            model.finish_time if done else (app.end_time if app.end_time is not None else np.nan)
        )
        met[k] = done and model.finish_time <= workload.deadline[k] + 1e-9
        work[k] = model.work_done / model.work_total if model.work_total > 0 else 1.0
        value[k] = _value(names[k], workload, k, start[k], end[k], done, work[k])
        suspended += int(app.suspensions > 0)
    audit = ledger.audit()
    return MarketOutcome(
        start,
        end,
        finished,
        met,
        value,
        work,
        names,
        reasons,
        platform.records,
        dict(backend.counts),
        suspended,
        audit.ok,
        max_cores,
        time.perf_counter() - t_wall,
    )


def _submit(
    platform: Platform,
    backend: SimBackend,
    w: Workload,
    k: int,
    app_id: str,
    policy: str,
    cfg: MarketConfig,
    trade: tuple[str, ...],
) -> None:
    procs = int(w.procs[k])
    b = float(w.budget[k])  # B_base / x, credits per core per period
    memory = float(w.memory[k])
    params = dict(cfg.policy_params)
    if policy != "best-effort":
        params.setdefault("seed", k)
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
    )
    backend.add_app(app_id, RigidApp(vms=procs, work_total=float(w.run[k]), cpu=1.0, memory=memory))
    platform.submit(spec)


def _value(
    policy: str, w: Workload, k: int, start: float, end: float, done: bool, work_fraction: float
) -> float:
    """The job's utility (SLO paper Table 1; Themis value for deadline-strict)."""
    budget = float(w.budget[k])
    submit = float(w.submit[k])
    if math.isnan(end):
        end = math.inf
    kind = (
        policy
        if policy
        in ("deadline-strict", "deadline-partial", "performance-strict", "performance-partial")
        else "deadline-strict"
    )
    return utility(
        kind,
        budget=budget,
        t_exec=(end - submit) if done else math.inf,
        t_deadline=float(w.deadline[k]) - submit,
        t_ideal=float(w.run[k]),
        work_done=work_fraction,
        work_total=1.0,
    )


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
    hours = periods * (out.records[1].time - out.records[0].time if periods > 1 else 300.0) / 3600
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
        "max_cores_allocated": out.max_cores_allocated,
        "wall_s": round(out.wall_s, 4),
    }
