"""One simulation run, end to end: trace -> workload -> schedule -> ``jobs.csv`` + ``summary.json``.

:func:`schedule` is the entry point for code (it picks the fast single-pool loop when the rules
allow it); :func:`run_trace` is what ``merkat sim run`` calls.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from merkat.outputs import json_safe
from merkat.sim.batch import fast
from merkat.sim.batch.baselines import SCHEDULERS
from merkat.sim.batch.engine import Schedule, simulate
from merkat.sim.cluster import Cluster
from merkat.sim.metrics import write_jobs_csv
from merkat.sim.workload.jobs import SloConfig, Workload, build_workload
from merkat.sim.workload.swf import SwfError, read_swf

FAST_SCHEDULERS = ("fcfs", "edf", "easy")


def schedule(
    workload: Workload,
    cluster: Cluster,
    scheduler: str,
    progress: Callable[[int], None] | None = None,
    use_fast: bool | None = None,
    seed: int = 0,
) -> Schedule:
    """Simulate ``workload`` on ``cluster`` under the scheduler named ``scheduler`` (a key of
    :data:`merkat.sim.batch.baselines.SCHEDULERS`).

    ``maui`` is EASY backfilling on the users' inexact estimates: the jobs without a requested
    time get one from the estimate model of :mod:`merkat.sim.batch.maui`, drawn from ``seed``'s
    ``estimates`` stream (the other schedulers ignore ``seed``).

    ``use_fast=None`` uses :mod:`merkat.sim.batch.fast` when the cluster is a single pool and the
    scheduler has a fast loop; ``False`` forces the general engine (same result, slower);
    ``True`` requires the fast loop (ValueError if it does not apply).
    """
    if scheduler not in SCHEDULERS:
        raise ValueError(f"unknown scheduler {scheduler!r}; choose from {', '.join(SCHEDULERS)}")
    if scheduler == "maui":
        from merkat.sim.batch.maui import maui_workload

        workload = maui_workload(workload, seed)
        scheduler = "easy"
    can_fast = cluster.is_single_pool and scheduler in FAST_SCHEDULERS
    if use_fast and not can_fast:
        raise ValueError(f"no fast loop for {scheduler!r} on {cluster}")
    if use_fast is None:
        use_fast = can_fast
    if not use_fast:
        return simulate(workload, cluster, SCHEDULERS[scheduler](), progress)
    if len(workload) and int(workload.procs.max()) > cluster.total_cores:
        raise ValueError("a job needs more cores than the cluster has")
    submit = workload.submit.tolist()
    run = workload.run.tolist()
    procs = workload.procs.tolist()
    cap = cluster.total_cores
    if scheduler == "fcfs":
        start = fast.fcfs_pool(submit, run, procs, cap, progress)
    elif scheduler == "edf":
        start = fast.edf_pool(submit, run, procs, workload.deadline.tolist(), cap, progress)
    else:
        start = fast.easy_pool(submit, run, workload.estimate.tolist(), procs, cap, progress)
    s = np.array(start, dtype=np.float64)
    return Schedule(start=s, end=s + workload.run)


@dataclass(frozen=True)
class RunOptions:
    """The options of ``merkat sim run`` (see :func:`run_trace`)."""

    trace: Path
    scheduler: str
    out: Path
    jobs: int | None = None
    skip: int = 0
    hosts: int | None = None
    cores_per_host: int | None = None
    memory_per_host: float | None = None
    interarrival_factor: float = 1.0
    seed: int = 0
    strict: bool = False
    slo: SloConfig = field(default_factory=SloConfig)
    policy: str = "deadline-strict"  # the market's controllers (scheduler "market")
    period: float = 300.0  # the market's scheduling period, seconds
    workers: int = 1  # the market's run on this many processes (merkat.sim.parallel)
    economy: str = "themis"  # the market's economy: themis | closed (merkat.runtime.economy)
    charging: str = "bid"  # bid | use
    policy_params: dict[str, Any] = field(default_factory=dict)  # passed to every controller
    market: str = "proportional-share"  # the market mechanism (merkat.market.mechanisms)
    admission: float | None = 10.0  # seconds between admission points (None: periods only)
    balancer: str = "merkat"  # the market's load balancer: merkat | themis (market.balance)


def cluster_for(opts: RunOptions, max_procs: int | None) -> Cluster:
    """The cluster of a run: the host flags, or the trace's MaxProcs as one pool of cores."""
    if opts.hosts is None and opts.cores_per_host is None:
        if max_procs is None or max_procs <= 0:
            raise ValueError(
                "the trace header has no MaxProcs (or MaxNodes): give --hosts and --cores-per-host"
            )
        if opts.memory_per_host is not None:
            return Cluster(1, max_procs, opts.memory_per_host)
        return Cluster.pool(max_procs)
    return Cluster(opts.hosts or 1, opts.cores_per_host or 1, opts.memory_per_host)


def run_trace(
    opts: RunOptions, progress_factory: Callable[[int], Callable[[int], None]] | None = None
) -> dict[str, Any]:
    """Read the trace, build the workload, simulate, write ``jobs.csv`` and ``summary.json`` in
    ``opts.out``; return the summary. ``progress_factory(total_jobs)`` may return a progress
    callback. Raises :class:`merkat.sim.workload.swf.SwfError` / ValueError on bad input."""
    t0 = time.perf_counter()
    trace = read_swf(opts.trace, strict=opts.strict)
    if len(trace) == 0:
        raise SwfError(f"{opts.trace}: no job records: nothing to simulate")
    max_procs = trace.machine_size()
    cluster = cluster_for(opts, max_procs)
    workload = build_workload(
        trace,
        cluster,
        skip=opts.skip,
        jobs=opts.jobs,
        interarrival_factor=opts.interarrival_factor,
        seed=opts.seed,
        slo=opts.slo,
    )
    t1 = time.perf_counter()
    progress = progress_factory(len(workload)) if progress_factory else None
    from merkat.sim.schedulers import get

    outcome = get(opts.scheduler).run(workload, cluster, opts, progress)
    t2 = time.perf_counter()
    opts.out.mkdir(parents=True, exist_ok=True)
    write_jobs_csv(opts.out / "jobs.csv", workload, outcome.schedule, **outcome.columns)
    summary = outcome.summary
    sim_s = t2 - t1
    summary.update(
        {
            "wall_s": round(time.perf_counter() - t0, 4),
            "jobs_per_s": round(len(workload) / sim_s, 1) if sim_s > 0 else None,
            "simulate_s": round(sim_s, 4),
            "dropped_by_reason": workload.dropped,
            "skipped_lines": trace.skipped,
            "bad_lines": trace.bad_lines[:5],
            "scheduler": opts.scheduler,
            "trace": str(Path(opts.trace).resolve()),
            "trace_sha256": _sha256(Path(opts.trace)),
            "cluster": cluster.describe(),
            "skip": opts.skip,
            "jobs_limit": opts.jobs,
            "interarrival_factor": opts.interarrival_factor,
            "seed": opts.seed,
        }
    )
    summary = dict(json_safe(summary))
    (opts.out / "summary.json").write_text(json.dumps(summary, indent=2, allow_nan=False) + "\n")
    return summary


def _sha256(path: Path) -> str:
    """The SHA-256 of a file (the trace a run read, as it was on disk)."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()
