"""One simulation run, end to end: trace -> workload -> schedule -> ``jobs.csv`` + ``summary.json``.

:func:`run_trace` is what ``merkat sim run`` calls: it runs the scheduler the options name
(:mod:`merkat.sim.schedulers`). Its options are :class:`merkat.worlds.merkat.options.RunOptions`; a batch
baseline alone on a workload is :func:`merkat.worlds.batch.baselines.schedule`.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from merkat.outputs import json_safe
from merkat.sim.metrics import write_jobs_csv
from merkat.sim.schedulers import SCHEDULERS
from merkat.workload.cluster import Cluster
from merkat.workload.jobs import build_workload
from merkat.workload.swf import SwfError, read_swf
from merkat.worlds.merkat.options import RunOptions


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
    callback. Raises :class:`merkat.workload.swf.SwfError` / ValueError on bad input."""
    t0 = time.perf_counter()
    trace = read_swf(opts.trace, strict=opts.strict)
    if len(trace) == 0:
        raise SwfError(f"{opts.trace}: no job records: nothing to simulate")
    if opts.skip >= len(trace):
        raise ValueError(f"--skip {opts.skip}: {opts.trace} has {len(trace)} job records, "
                         f"nothing is left to simulate (use --skip < {len(trace)})")
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
    outcome = SCHEDULERS.get(opts.scheduler).run(workload, cluster, opts, progress)
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
